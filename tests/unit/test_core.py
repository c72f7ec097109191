"""The seams and the judge: hostio (live and host profile), redaction, references, evidence archive,
parse CLI."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from clusteraccept import hostio
from clusteraccept.evidence import Evidence
from clusteraccept.jobs.archive import archive_job, load, load_all, read
from clusteraccept.judge.verdicts import Outcome, judge
from clusteraccept.redact import REDACTED, redact_text
from clusteraccept.site.baselines import Reference, lookup


def test_runner_live_command_timeout_and_missing() -> None:
    ok = hostio.run([sys.executable, "-c", "print('hi')"], timeout_s=30)
    assert ok.returncode == 0 and ok.stdout == "hi\n" and ok.source == Path(sys.executable).name
    slow = hostio.run(["sleep", "5"], timeout_s=0.2)
    assert slow.returncode is None and "timed out after 0.2 s" in slow.stderr
    missing = hostio.run(["/no/such/tool", "-x"], timeout_s=5)
    assert missing.returncode == 127 and "not found" in missing.stderr


def test_run_many_runs_at_once_in_order_each_with_its_timeout(tmp_path: Path) -> None:
    # a rendezvous: each command waits for the other's file, so run one after the other they would both
    # time out; at once they both end (no timing is asserted)
    a, b = tmp_path / "a", tmp_path / "b"
    wait_for = (
        "touch {me}; i=0; while [ ! -e {other} ] && [ $i -lt 500 ]; do sleep 0.01; i=$((i+1)); done; "
        "test -e {other} && echo {name}"
    )
    evs = hostio.run_many(
        [
            ["sh", "-c", wait_for.format(me=a, other=b, name="A")],
            ["sh", "-c", wait_for.format(me=b, other=a, name="B")],
            ["sleep", "0.1"],
            ["/no/such/tool"],
        ],
        timeout_s=10,
    )
    assert [ev.stdout for ev in evs[:2]] == ["A\n", "B\n"] and [ev.returncode for ev in evs[:2]] == [0, 0]
    assert evs[2].returncode == 0 and evs[3].returncode == 127
    slow = hostio.run_many([["sleep", "5"], ["true"]], timeout_s=0.3)
    assert slow[0].returncode is None and "timed out after 0.3 s" in slow[0].stderr
    assert slow[1].returncode == 0


def test_run_many_paces_its_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    starts: list[float] = []
    real_popen = subprocess.Popen

    def popen(*args: Any, **kwargs: Any) -> Any:  # when each process is started, by this process's clock
        starts.append(time.monotonic())
        return real_popen(*args, **kwargs)

    monkeypatch.setattr(hostio.subprocess, "Popen", popen)
    evs = hostio.run_many([["true"]] * 4, timeout_s=30, start_interval_s=0.2)
    assert [ev.returncode for ev in evs] == [0, 0, 0, 0] and len(starts) == 4
    assert all(b - a >= 0.2 for a, b in itertools.pairwise(starts))  # never closer than asked


def test_runner_host_profile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    node = tmp_path / "node7"
    (node / "fs/sys/class/net/ib0").mkdir(parents=True)
    (node / "fs/sys/class/net/ib0/mtu").write_text("4092\n")
    (node / "topo.txt").write_text("GPU0\tX\n")
    (node / "commands.json").write_text(json.dumps([{"match": "nvidia-smi topo -m", "stdout": "topo.txt"}]))
    monkeypatch.setenv("CLUSTERACCEPT_HOST_PROFILE", str(tmp_path))
    monkeypatch.setenv("CLUSTERACCEPT_HOSTNAME", "node7")
    ev = hostio.run(["nvidia-smi", "topo", "-m"], timeout_s=5)
    assert (ev.host, ev.returncode, ev.stdout) == ("node7", 0, "GPU0\tX\n")
    assert hostio.run(["ibstat"], timeout_s=5).returncode == 127  # not recorded: absent on that host
    assert hostio.read("/sys/class/net/ib0/mtu").stdout == "4092\n"
    assert hostio.read("/sys/class/net/ib1/mtu").returncode == 1
    assert hostio.listdir("/sys/class/net") == ["ib0"]


def test_redaction() -> None:
    text = 'NCCL_DEBUG=INFO\nHF_TOKEN=hf_abc123\n"AWS_SECRET_ACCESS_KEY": "xyz"\nMY_API_KEY=k1 DB_PASSWORD=p'
    out = redact_text(text)
    assert "hf_abc123" not in out and "xyz" not in out and "k1" not in out and "=p" not in out
    assert "NCCL_DEBUG=INFO" in out and out.count(REDACTED) == 4


def test_archive_redacts_bundles_and_roundtrips(tmp_path: Path) -> None:
    secret = "GITHUB_TOKEN=ghp_secret\nok\n"
    ev = Evidence("node1", "nccl-tests", argv=("x",), stdout=secret, meta={"check": "nccl"})
    ((back, ref), (_, twice)) = archive_job(tmp_path, "probe-nodes", [ev, ev])
    assert ref == "raw/probe-nodes/node1.jsonl.gz#nccl/node1/nccl-tests.json"
    assert twice == "raw/probe-nodes/node1.jsonl.gz#nccl/node1/nccl-tests.2.json"  # both kept
    assert "ghp_secret" not in back.stdout and back.stdout.endswith("ok\n")
    assert read(tmp_path, ref) == back.to_dict() and [r for _, r in load_all(tmp_path)] == [ref, twice]
    (_, again), _ = archive_job(tmp_path, "probe-nodes", [ev, ev])
    assert again.startswith("raw/probe-nodes/node1.2.jsonl.gz#")  # never overwrites a bundle
    # a run archived before bundles: one JSON file per evidence, read as it is
    old = tmp_path / "raw" / "nccl" / "node2" / "x.json"
    old.parent.mkdir(parents=True)
    old.write_text(json.dumps(back.to_dict()))
    assert load(old) == back and "raw/nccl/node2/x.json" in {r for _, r in load_all(tmp_path)}


def test_evidence_read_back_is_what_was_written_and_a_wrong_field_is_refused() -> None:
    """Evidence.from_dict sets its fields at once (not through the dataclass's __init__): the same Evidence,
    the dataclass's defaults for what a dict leaves out, and the dataclass's own error for a key that is not
    a field or a field it needs that is missing."""
    full = Evidence("n1", "nccl-tests", ("srun", "-N2"), "", None, "out", "err", 1.5, {"check": "nccl"})
    assert Evidence.from_dict(full.to_dict()) == full and Evidence.from_dict(full.to_dict()).meta == full.meta
    bare = Evidence.from_dict({"host": "n1", "source": "sysfs"})
    assert bare == Evidence("n1", "sysfs") and bare.meta == {} and bare.returncode == 0 and bare.argv == ()
    with pytest.raises(TypeError, match="colour"):
        Evidence.from_dict({"host": "n1", "source": "sysfs", "colour": "red"})
    with pytest.raises(TypeError, match="source"):
        Evidence.from_dict({"host": "n1"})
    # words are interned (one string per word across evidence); a word that is no string is kept as it is,
    # never made another (1 and True are one key to a dict)
    a, b = (Evidence.from_dict({"host": "n1", "source": "s", "argv": ["srun", f"-N{n}"]}) for n in "22")
    assert a.argv[1] is b.argv[1]
    words = {"argv": ["x", 1, True], "meta": {"k": True, "j": 1}}
    odd = Evidence.from_dict({"host": "n1", "source": "s", **words})
    assert odd.argv == ("x", 1, True) and odd.argv[2] is True and odd.meta["k"] is True and odd.meta["j"] == 1


def test_reference_semantics() -> None:
    ref = Reference(48.0, lower=-0.08, upper=None, unit="GB/s")
    assert ref.bounds() == pytest.approx((44.16, None))
    v = judge(
        "nccl.busbw",
        "nccl",
        "node03-node07:rail5:1GiB",
        41.2,
        ref,
        what="busbw_GBps",
        context="pair node03-node07, rail 5, 1 GiB",
    )
    assert v.outcome is Outcome.FAIL
    assert v.message == (
        "busbw_GBps=41.2 GB/s is below 44.2 (ref 48, -14%) [pair node03-node07, rail 5, 1 GiB]"
    )
    assert judge("c", "f", "s", 47.0, ref, what="x").outcome is Outcome.PASS
    absolute = Reference(0, lower=None, upper=0, unit="frames")
    assert judge("c", "f", "s", 3, absolute, what="pause").outcome is Outcome.FAIL
    waived = Reference(48.0, lower=-0.08, xfail="known bad cable, ticket 42")
    w = judge("c", "f", "s", 10.0, waived, what="x")
    assert w.outcome is Outcome.WAIVED and "ticket 42" in w.message
    none = judge("c", "f", "s", 10.0, None, what="x")
    assert none.outcome is Outcome.SKIP and "no baseline" in none.message


def test_lookup_most_specific() -> None:
    b = {
        "nccl.busbw.*": Reference(1),
        "nccl.busbw.sendrecv.*": Reference(2),
        "nccl.busbw.sendrecv.pair_in_block.rail3.*": Reference(3),
    }
    assert lookup(b, "nccl.busbw.sendrecv.pair_in_block.rail3.1GiB") == Reference(3)
    assert lookup(b, "nccl.busbw.sendrecv.pair_in_block.rail4.1GiB") == Reference(2)
    assert lookup(b, "nccl.busbw.alltoall.block.1GiB") == Reference(1)
    assert lookup(b, "topology.x") is None


def test_parse_cli_errors(tmp_path: Path) -> None:
    bad = tmp_path / "garbage.txt"
    bad.write_text("this is not\nan ibstat output\n")
    proc = subprocess.run(
        [sys.executable, "-m", "clusteraccept.parsers", "ibstat", str(bad)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2 and proc.stderr.startswith(f"{bad}:") and "Traceback" not in proc.stderr
    assert ": expected " in proc.stderr
    unknown = subprocess.run(
        [sys.executable, "-m", "clusteraccept.parsers", "nosuchtool", str(bad)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert unknown.returncode == 2 and "unknown tool 'nosuchtool'" in unknown.stderr
