"""``scontrol show config`` and ``scontrol show partition``: the cluster's own limits on a job.

``scontrol show config`` prints one ``Key = Value`` line per parameter under a ``Configuration data as of
<time>`` header (SchedMD/slurm src/api/config_info.c ``slurm_print_ctl_conf``); a line without ``=`` (the
header, blank lines, ``Slurmctld(primary) at ctl is UP``, the cgroup and plugin sections' titles) is not a
parameter and is skipped. ``scontrol show partition`` prints each partition as ``Key=Value`` words over
several indented lines, a blank line between partitions (src/api/partition_info.c).

What the plan reads (plan/limits.py):

- ``MaxStepCount`` (slurm.conf(5): "the maximum number of steps that any job can initiate", default 40000);
- ``SrunPortRange`` (``0-0`` when unset: ephemeral ports);
- ``SlurmctldParameters`` (``rl_enable``, ``rl_refill_rate=``, ``rl_refill_period=``, ``rl_bucket_size=``:
  the per-user RPC rate limit; defaults 2 tokens per 1 s, bucket 30: src/slurmctld/rate_limit.c);
- a partition's ``MaxTime`` (``UNLIMITED``, ``[days-]hours:minutes:seconds``, or minutes).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from clusteraccept.errors import ParseError

_LINE = re.compile(r"^(?P<key>\S+)\s+= ?(?P<value>.*)$")
_WORD = re.compile(r"(?P<key>[A-Za-z][A-Za-z0-9_]*)=(?P<value>\S*)")
# printed by secs2time_str (src/common/parse_time.c): [days-]HH:MM:SS, always three fields
_TIME = re.compile(r"^(?:(?P<d>\d+)-)?(?P<h>\d+):(?P<m>\d+):(?P<s>\d+)$")


@dataclass(frozen=True)
class Config:
    """``scontrol show config``: every parameter as printed (values stripped)."""

    params: dict[str, str]

    def get(self, key: str) -> str | None:
        value = self.params.get(key)
        return None if value in (None, "(null)", "") else value

    def integer(self, key: str) -> int | None:
        value = self.get(key)
        if value is None:
            return None
        try:
            return int(value.split()[0])
        except ValueError:
            raise ParseError(0, f"{key} = <integer>", value) from None

    @property
    def max_step_count(self) -> int | None:
        return self.integer("MaxStepCount")

    @property
    def srun_port_range(self) -> tuple[int, int] | None:
        """(low, high) inclusive, or None when unset (``0-0``: the kernel's ephemeral ports)."""
        value = self.get("SrunPortRange")
        if value is None:
            return None
        m = re.fullmatch(r"(\d+)-(\d+)", value.strip())
        if not m:
            raise ParseError(0, "SrunPortRange = <low>-<high>", value)
        low, high = int(m[1]), int(m[2])
        return None if (low, high) == (0, 0) else (low, high)

    @property
    def slurmctld_parameters(self) -> dict[str, str]:
        """``rl_enable,rl_refill_rate=10`` -> {"rl_enable": "", "rl_refill_rate": "10"}."""
        value = self.get("SlurmctldParameters") or ""
        out: dict[str, str] = {}
        for item in value.split(","):
            if item.strip():
                key, _, val = item.strip().partition("=")
                out[key.lower()] = val
        return out


def parse(text: str) -> Config:
    params: dict[str, str] = {}
    for line in text.splitlines():
        m = _LINE.match(line.strip())
        if m:
            params.setdefault(m["key"], m["value"].strip())
    if "MaxStepCount" not in params and "SLURM_VERSION" not in params:
        first = next((ln for ln in text.splitlines() if ln.strip()), "")
        raise ParseError(1, "scontrol show config output (Key = Value lines with MaxStepCount)", first[:80])
    return Config(params)


@dataclass(frozen=True)
class Partition:
    name: str
    default: bool
    max_time_min: int | None  # None: UNLIMITED


def parse_partitions(text: str) -> dict[str, Partition]:
    """``scontrol show partition`` -> partitions by name."""
    out: dict[str, Partition] = {}
    for no, chunk in enumerate(re.split(r"\n\s*\n", text), 1):
        words = {m["key"]: m["value"] for m in _WORD.finditer(chunk)}
        if "PartitionName" not in words:
            continue
        if "MaxTime" not in words:
            raise ParseError(no, "a partition record with MaxTime=", chunk.strip()[:80])
        name = words["PartitionName"]
        out[name] = Partition(name, words.get("Default") == "YES", minutes(words["MaxTime"]))
    return out


def minutes(value: str) -> int | None:
    """A Slurm time limit (``UNLIMITED``, ``7-00:00:00``, ``01:30:00``, ``90``) in whole minutes, rounded
    down (it is a cap: a --time of the next minute up would be over it)."""
    if value.upper() in ("UNLIMITED", "INFINITE", "NONE"):
        return None
    if value.isdigit():
        return int(value)
    m = _TIME.match(value)
    if not m:
        raise ParseError(0, "a time limit (UNLIMITED, [days-]hours:minutes:seconds, or minutes)", value)
    return int(m["d"] or 0) * 1440 + int(m["h"]) * 60 + int(m["m"])
