"""Nightly: the rendered entries, the comparison with the last good run, the summary line, the webhook."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from clusteraccept.errors import SiteConfigError
from clusteraccept.ops import nightly
from clusteraccept.site.cron import parse_scrontab
from clusteraccept.site.load import load_site, parse_site

REPO = Path(__file__).resolve().parents[3]


def site_with(tmp_path: Path, nightly_cfg: dict[str, Any]) -> Any:
    import yaml

    data = yaml.safe_load((REPO / "site-configs" / "demo.yaml").read_text())
    data["nightly"] = nightly_cfg
    path = tmp_path / "demo.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_site(str(path), REPO / "site-configs")


def test_scrontab_entry_is_valid_and_runs_the_nightly(tmp_path: Path) -> None:
    site = site_with(
        tmp_path,
        {
            "reports_dir": str(tmp_path / "r"),
            "schedule": "@daily",
            "scron_options": ["--partition=service", "--mail-type=FAIL"],
        },
    )
    (entry,) = parse_scrontab(nightly.render_scrontab(site, python="/shared/venv/bin/python"))
    assert entry.spec == "@daily"
    assert entry.options[:3] == (
        "--job-name=clusteraccept-nightly",
        "--time=240",
        f"--output={tmp_path}/r/demo/nightly-%j.out",
    )
    assert entry.options[3:] == ("--partition=service", "--mail-type=FAIL")
    assert entry.command == (
        f"cd {REPO} && SLURM_CONF={REPO}/.vcluster/demo/etc/slurm.conf /shared/venv/bin/python "
        f"-m clusteraccept nightly --site {tmp_path}/demo.yaml"
    )
    (cron,) = parse_scrontab(nightly.render_crontab(site, python="/shared/venv/bin/python"))
    assert cron.command.endswith(f">> {tmp_path}/r/demo/nightly.log 2>&1") and cron.spec == "@daily"


def test_site_errors_name_the_key(tmp_path: Path) -> None:
    with pytest.raises(SiteConfigError, match=r"nightly\.schedule"):
        site_with(tmp_path, {"schedule": "0 25 * * *"})
    with pytest.raises(SiteConfigError, match="did you mean 'summary_file'"):
        site_with(tmp_path, {"sumary_file": "x"})
    with pytest.raises(SiteConfigError, match=r"nightly\.scron_options"):
        site_with(tmp_path, {"scron_options": ["partition=x"]})
    with pytest.raises(SiteConfigError, match=r"drain\.max_fraction"):
        parse_site(
            Path("x.yaml"), {"nodes": "n1", "node_types": {"t": {"gpus": 1}}, "drain": {"max_fraction": 2}}
        )


def v(check: str, subject: str, outcome: str) -> dict[str, Any]:
    return {
        "check": check,
        "family": "nccl",
        "subject": subject,
        "outcome": outcome,
        "message": "m",
        "value": None,
        "labels": {},
    }


def run(run_id: str, started: str, verdicts: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    jobs = [{"name": "campaign-leaf1", "state": "COMPLETED", "missing": []}]
    return {"site": "demo", "run_id": run_id, "started": started, "jobs": jobs, "verdicts": verdicts, **extra}


GOOD = run(
    "r1",
    "2026-11-28T02:00:00+00:00",
    [v("nccl.busbw", "a-b:rail5:sendrecv:1GiB", "pass"), v("nccl.localization", "a", "fail")],
)


def test_a_new_failure_is_a_regression() -> None:
    now = run(
        "r2",
        "2026-11-29T02:00:00+00:00",
        [v("nccl.busbw", "a-b:rail5:sendrecv:1GiB", "fail"), v("nccl.localization", "a", "fail")],
    )
    night = nightly.verdict_of_night("demo", now, GOOD, [])
    assert night.code == nightly.REGRESSED
    assert night.line == (
        "clusteraccept nightly demo run r2: REGRESSED: 1 new failure(s) "
        "(nccl.busbw[a-b:rail5:sendrecv:1GiB]); 0 fixed, 1 still failing vs r1"
    )


def test_known_failures_alone_are_ok_and_median_regressions_are_not() -> None:
    same = run("r2", "2026-11-29T02:00:00+00:00", GOOD["verdicts"])
    assert nightly.verdict_of_night("demo", same, GOOD, []).code == nightly.OK
    slow = nightly.verdict_of_night("demo", same, GOOD, ["nccl.busbw.sendrecv.pair_in_block.rail5.1GiB"])
    assert slow.code == nightly.REGRESSED and "1 median regression(s)" in slow.line


def test_an_incomplete_night_says_what_was_lost() -> None:
    lost = run("r2", "2026-11-29T02:00:00+00:00", GOOD["verdicts"])
    lost["jobs"] = [{"name": "campaign-leaf2", "state": "NODE_FAIL", "missing": ["sendrecv:c-d:rail0"]}]
    night = nightly.verdict_of_night("demo", lost, GOOD, [])
    assert night.code == nightly.INCOMPLETE and "lost: campaign-leaf2: sendrecv:c-d:rail0" in night.line


def test_last_good_skips_incomplete_and_later_runs(tmp_path: Path) -> None:
    root = tmp_path / "demo"
    bad = run("r0b", "2026-11-28T03:00:00+00:00", GOOD["verdicts"], dry_run=True)
    later = run("r9", "2026-12-01T02:00:00+00:00", GOOD["verdicts"])
    for r in (GOOD, bad, later):
        (root / r["run_id"]).mkdir(parents=True)
        (root / r["run_id"] / "results.json").write_text(json.dumps(r))
    now = run("r2", "2026-11-29T02:00:00+00:00", [])
    (root / "r2").mkdir()
    found = nightly.last_good(root, now, tmp_path / "no-store.sqlite")
    assert found is not None and found["run_id"] == "r1"


def test_webhook_posts_the_line_and_never_fails_the_night() -> None:
    sent: list[Any] = []

    class Resp:
        status = 200

        def __enter__(self) -> Resp:
            return self

        def __exit__(self, *a: object) -> None:
            return None

    def opener(req: Any, timeout: float) -> Resp:
        sent.append((req.full_url, json.loads(req.data), timeout))
        return Resp()

    assert nightly.post("https://chat.example/hook", "line", opener) == "webhook: HTTP 200"
    assert sent == [("https://chat.example/hook", {"text": "line"}, 10)]

    def broken(req: Any, timeout: float) -> Resp:
        raise OSError("no route")

    assert nightly.post("https://chat.example/hook", "line", broken) == "webhook: not delivered (no route)"
