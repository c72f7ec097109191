"""Parser for ``ethtool -S <netdev>`` (NIC statistics), with typed accessors for the mlx5 RoCE counters.

Format source: ethtool's do_gstats() prints ``NIC statistics:`` then ``"     %s: %llu\\n"`` per counter
(name up to ETH_GSTRING_LEN=32 bytes, value u64). Some drivers put ": " inside the name (be2net
"rxq0: rx_bytes", bnx2x "[0]: rx_bytes"), so the value is what follows the LAST ": ". The header is
optional here because captures are often grepped or stripped (e.g. isc-projects/ethq tests/mlx5_core).

Counter names (Linux Documentation/networking/device_drivers/ethernet/mellanox/mlx5/counters.rst):
  rx_prio[p]_pause / tx_prio[p]_pause (+ _duration), rx_prio[p]_pause_transition: per-priority PFC, present
      "only if PFC was enabled on priority p"
  rx_prio[p]_discards, rx_prio[p]_buf_discard, rx_prio[p]_cong_discard, rx_prio[p]_marked (ECN-marked)
  rx_discards_phy ("dropped due to lack of buffers on a physical port"), rx_out_of_buffer, rx_ecn_mark
      (the software-port sum of rx[i]_ecn_mark), rx_pause_ctrl_phy / tx_pause_ctrl_phy
np_cnp_sent / rp_cnp_handled / rp_cnp_ignored / np_ecn_marked_roce_packets are NOT ethtool counters on mlx5:
they are RDMA congestion counters (kernel drivers/infiniband/hw/mlx5/counters.c ``cong_cnts[]``) read from
/sys/class/infiniband/<dev>/ports/<port>/hw_counters/ (see roce_sysfs.hw_counter_path); the accessors here
return them only if a capture merged them in.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from clusteraccept.errors import ParseError

_LINE_RE = re.compile(r"(?P<name>\S(?:.*\S)?):\s+(?P<value>[0-9]+)$")
_U64_MAX = 2**64 - 1


class _CounterView:
    """Accessors shared by a snapshot and a delta: each returns None when the counter is absent."""

    counters: dict[str, int]

    def get(self, name: str) -> int | None:
        """Counter ``name``, None if this driver/config does not print it."""
        return self.counters.get(name)

    def rx_prio_pause(self, prio: int) -> int | None:
        """PFC pause frames received on ``prio`` (the peer paused us)."""
        return self.counters.get(f"rx_prio{prio}_pause")

    def tx_prio_pause(self, prio: int) -> int | None:
        """PFC pause frames sent on ``prio`` (we paused the peer)."""
        return self.counters.get(f"tx_prio{prio}_pause")

    def rx_prio_discards(self, prio: int) -> int | None:
        """Packets of ``prio`` discarded for lack of receive buffers."""
        return self.counters.get(f"rx_prio{prio}_discards")

    def rx_prio_buf_discard(self, prio: int) -> int | None:
        return self.counters.get(f"rx_prio{prio}_buf_discard")

    def rx_prio_cong_discard(self, prio: int) -> int | None:
        return self.counters.get(f"rx_prio{prio}_cong_discard")

    def rx_prio_marked(self, prio: int) -> int | None:
        """Packets of ``prio`` ECN-marked by the device."""
        return self.counters.get(f"rx_prio{prio}_marked")

    def rx_prio_packets(self, prio: int) -> int | None:
        return self.counters.get(f"rx_prio{prio}_packets")

    def tx_prio_packets(self, prio: int) -> int | None:
        return self.counters.get(f"tx_prio{prio}_packets")

    @property
    def rx_discards_phy(self) -> int | None:
        return self.counters.get("rx_discards_phy")

    @property
    def rx_out_of_buffer(self) -> int | None:
        return self.counters.get("rx_out_of_buffer")

    @property
    def rx_ecn_mark(self) -> int | None:
        return self.counters.get("rx_ecn_mark")

    @property
    def np_cnp_sent(self) -> int | None:
        return self.counters.get("np_cnp_sent")

    @property
    def rp_cnp_handled(self) -> int | None:
        return self.counters.get("rp_cnp_handled")

    def pause_priorities(self) -> tuple[int, ...]:
        """Priorities that have PFC pause counters (mlx5 prints them only where PFC is enabled)."""
        return tuple(p for p in range(8) if f"rx_prio{p}_pause" in self.counters)

    def drop_counters(self) -> dict[str, int]:
        """Every counter whose name says it counts drops (discard, out_of_buffer, dropped), by name."""
        keys = ("discard", "out_of_buffer", "dropped")
        return {k: v for k, v in self.counters.items() if any(s in k for s in keys)}


@dataclass(frozen=True)
class EthtoolStats(_CounterView):
    """One ``ethtool -S`` snapshot: every counter by name."""

    counters: dict[str, int] = field(hash=False)


@dataclass(frozen=True)
class CounterDelta(_CounterView):
    """``after - before`` for counters present in both snapshots that did not go backwards."""

    counters: dict[str, int] = field(hash=False)
    went_backwards: tuple[str, ...]  # after < before: driver reload / counter reset between the snapshots
    only_before: tuple[str, ...]
    only_after: tuple[str, ...]  # e.g. rx_prio3_pause appears once PFC is enabled on prio 3


def parse(text: str) -> EthtoolStats:
    """Parse ``ethtool -S`` output into name -> value; ParseError on a malformed or repeated counter line."""
    lines = text.splitlines()
    start = next((i + 1 for i, ln in enumerate(lines) if ln.strip() == "NIC statistics:"), 0)
    counters: dict[str, int] = {}
    for idx in range(start, len(lines)):
        line = lines[idx].strip()
        if not line:
            continue
        m = _LINE_RE.match(line)
        if not m:
            raise ParseError(idx + 1, "'name: value' counter line", line)
        name, value = m.group("name"), int(m.group("value"))
        if value > _U64_MAX:
            raise ParseError(idx + 1, "a u64 counter value", m.group("value"))
        if name in counters:
            raise ParseError(idx + 1, f"counter {name!r} once", line)
        counters[name] = value
    if not counters:
        raise ParseError(0, "ethtool -S counter lines", text[:80])
    return EthtoolStats(counters)


def delta(before: EthtoolStats, after: EthtoolStats) -> CounterDelta:
    """Counter increments between two snapshots (pure); counters that went backwards are listed only."""
    common = [k for k in after.counters if k in before.counters]
    return CounterDelta(
        counters={
            k: after.counters[k] - before.counters[k]
            for k in common
            if after.counters[k] >= before.counters[k]
        },
        went_backwards=tuple(k for k in common if after.counters[k] < before.counters[k]),
        only_before=tuple(k for k in before.counters if k not in after.counters),
        only_after=tuple(k for k in after.counters if k not in before.counters),
    )
