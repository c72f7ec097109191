"""roce_sysfs path builders and the {path: content} parser (paths cited in the module docstring)."""

from __future__ import annotations

import pytest
from fuzzing import FUZZ
from hypothesis import given
from hypothesis import strategies as st

from clusteraccept.errors import ParseError
from clusteraccept.parsers.roce_sysfs import (
    all_paths,
    cnp_802p_prio_path,
    cnp_dscp_path,
    default_roce_mode_path,
    default_roce_tos_path,
    ecn_np_enable_path,
    ecn_rp_enable_path,
    hw_counter_path,
    mtu_path,
    parse,
)


def lossless_host(netdev: str = "ens1f0np0", dev: str = "mlx5_0", port: int = 1) -> dict[str, str]:
    """A typical lossless-RoCE configuration: ECN on prio 3 only, CNPs on DSCP 48 / prio 6, TOS 106."""
    files = {ecn_np_enable_path(netdev, p): "1\n" if p == 3 else "0\n" for p in range(8)}
    files |= {ecn_rp_enable_path(netdev, p): "1\n" if p == 3 else "0\n" for p in range(8)}
    files[cnp_dscp_path(netdev)] = "48\n"
    files[cnp_802p_prio_path(netdev)] = "6\n"
    files[mtu_path(netdev)] = "9000\n"
    files[default_roce_tos_path(dev, port)] = "106\n"
    files[default_roce_mode_path(dev, port)] = "RoCE v2\n"
    return files


def test_paths_are_the_documented_ones() -> None:
    assert ecn_np_enable_path("ens1f0np0", 3) == "/sys/class/net/ens1f0np0/ecn/roce_np/enable/3"
    assert ecn_rp_enable_path("ens1f0np0", 3) == "/sys/class/net/ens1f0np0/ecn/roce_rp/enable/3"
    assert cnp_dscp_path("eth2") == "/sys/class/net/eth2/ecn/roce_np/cnp_dscp"
    assert cnp_802p_prio_path("eth2") == "/sys/class/net/eth2/ecn/roce_np/cnp_802p_prio"
    assert mtu_path("eth2") == "/sys/class/net/eth2/mtu"
    assert default_roce_tos_path("mlx5_0", 1) == "/sys/kernel/config/rdma_cm/mlx5_0/ports/1/default_roce_tos"
    assert (
        default_roce_mode_path("mlx5_0", 1, "/config") == "/config/rdma_cm/mlx5_0/ports/1/default_roce_mode"
    )
    assert (
        hw_counter_path("mlx5_0", 1, "np_cnp_sent")
        == "/sys/class/infiniband/mlx5_0/ports/1/hw_counters/np_cnp_sent"
    )
    assert len(all_paths("eth2", "mlx5_0", 1)) == 21 and len(set(all_paths("eth2", "mlx5_0", 1))) == 21


@pytest.mark.parametrize("bad", ["", "..", "a/b", "eth 0"])
def test_path_builders_refuse_non_component_names(bad: str) -> None:
    with pytest.raises(ValueError):
        mtu_path(bad)


def test_path_builders_refuse_bad_priority() -> None:
    with pytest.raises(ValueError):
        ecn_np_enable_path("eth0", 8)


def test_lossless_host() -> None:
    r = parse(lossless_host())
    assert (r.netdev, r.rdma_device, r.port) == ("ens1f0np0", "mlx5_0", 1)
    assert r.ecn_np_enabled == (False, False, False, True, False, False, False, False)
    assert r.ecn_rp_enabled == r.ecn_np_enabled and r.ecn_enabled(3) is True and r.ecn_enabled(0) is False
    assert (r.cnp_dscp, r.cnp_802p_prio, r.mtu_B) == (48, 6, 9000)
    assert (r.default_roce_tos, r.default_roce_dscp, r.default_roce_mode) == (106, 26, "RoCE v2")


def test_partial_files_give_none() -> None:
    # inbox mlx5 driver: no ecn/ directory; rdma_cm/<dev> not created: only the MTU was readable
    r = parse({mtu_path("eth0"): "1500"})
    assert r.mtu_B == 1500 and r.ecn_np_enabled == (None,) * 8 and r.ecn_enabled(3) is None
    assert (
        r.cnp_dscp is None and r.default_roce_tos is None and r.default_roce_dscp is None and r.port is None
    )
    assert parse({default_roce_mode_path("mlx5_1", 2): "IB/RoCE v1\n"}).default_roce_mode == "IB/RoCE v1"


@pytest.mark.parametrize(
    ("path", "content", "fragment"),
    [
        (ecn_np_enable_path("eth0", 3), "yes\n", "/sys/class/net/eth0/ecn/roce_np/enable/3"),
        (ecn_rp_enable_path("eth0", 3), "2\n", "roce_rp/enable/3"),
        (cnp_dscp_path("eth0"), "64\n", "cnp_dscp"),
        (cnp_802p_prio_path("eth0"), "8\n", "cnp_802p_prio"),
        (default_roce_tos_path("mlx5_0", 1), "0x6a\n", "default_roce_tos"),
        (default_roce_mode_path("mlx5_0", 1), "RoCE v3\n", "default_roce_mode"),
        (mtu_path("eth0"), "\n", "/mtu"),
        ("/sys/class/net/eth0/ecn/roce_np/params/foo", "1", "a known RoCE sysfs path"),
        ("/etc/passwd", "x", "a known RoCE"),
    ],
)
def test_bad_value_raises_parse_error_naming_the_path(path: str, content: str, fragment: str) -> None:
    with pytest.raises(ParseError) as exc:
        parse({path: content})
    assert exc.value.line_no == 0 and fragment in str(exc.value)


def test_files_of_two_netdevs_are_refused() -> None:
    with pytest.raises(ParseError) as exc:
        parse({mtu_path("eth0"): "1500", mtu_path("eth1"): "9000"})
    assert exc.value.line_no == 0 and "/sys/class/net/eth1/mtu" in str(exc.value)


@FUZZ
@given(st.dictionaries(st.sampled_from(all_paths("eth0", "mlx5_0", 1)), st.text(max_size=8)))
def test_fuzz_contents(files: dict[str, str]) -> None:
    try:
        r = parse(files)
    except ParseError as exc:
        assert exc.line_no == 0
    else:
        assert r.netdev in (None, "eth0")


@FUZZ
@given(st.dictionaries(st.text(max_size=60), st.text(max_size=8), max_size=4))
def test_fuzz_paths(files: dict[str, str]) -> None:
    try:
        parse(files)
    except ParseError as exc:
        assert exc.line_no == 0
