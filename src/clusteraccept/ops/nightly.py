"""The nightly run: rendered into a Slurm ``scrontab`` entry (or a login node's crontab), it runs the suite
into the site's fixed reports dir, compares the run with the last good one, writes a one-line summary
(for mail or a chat webhook) and exits non-zero when anything regressed or the run is incomplete.

``python -m clusteraccept nightly --site X --print-scrontab`` prints the entry; without ``--print-*`` it
runs the night. Comparison (pure, :func:`verdict_of_night`) reuses the report's history and diff:
``report.history`` (the runs store, for the previous runs and the medians' trends) and ``report.compare``
(new failures, fixed, still failing). The "last good run" is the newest earlier run that is complete: every
job COMPLETED with nothing missing, no ERROR verdict, not a dry run. Exit codes: 0 nothing regressed, 1
regressions or new failures, 2 the run is incomplete or did not produce results.

Due-only nights (``nightly.only_due`` or ``--only-due``: pytest ``--only-due``, ops/scope.py) are complete
when they ran everything they planned (nothing at all when nothing was due), and are compared on what they
judged only: each test id judged tonight against the newest good run that judged it.
"""

from __future__ import annotations

import itertools
import json
import shlex
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clusteraccept.ops.scope import due_partial, nothing_due, summary_line
from clusteraccept.render import REPO_ROOT, render
from clusteraccept.report.model import NOTHING_DUE
from clusteraccept.site.cron import parse_scrontab
from clusteraccept.site.model import Site, reports_dir, summary_path

DONE = ("COMPLETED", "FINISHED", "DONE")
OK, REGRESSED, INCOMPLETE = 0, 1, 2


def complete(results: Mapping[str, Any]) -> bool:
    """Ran to the end: every job COMPLETED with nothing missing, verdicts for all, none ERROR."""
    if results.get("dry_run"):
        return False
    if any(j.get("missing") or j.get("state") not in DONE for j in results.get("jobs", [])):
        return False
    if nothing_due(results):
        return True  # a due-only run that found nothing due planned nothing: nothing is missing
    if not results.get("verdicts"):
        return False
    return not any(v["outcome"] == "error" for v in results["verdicts"])


# --- rendering the entry -----------------------------------------------------------------------------
def command(site: Site, python: str | None = None) -> str:
    """The shell line the entry runs (a scrontab job starts in $HOME with the user's login environment,
    src/scrontab/scrontab.c _entry_to_job: so cd and SLURM_CONF are explicit)."""
    py = python or site.slurm.python or sys.executable
    env = f"SLURM_CONF={shlex.quote(site.slurm.slurm_conf)} " if site.slurm.slurm_conf else ""
    site_file = str(Path(site.file).resolve())
    run = f"{shlex.quote(py)} -m clusteraccept nightly --site {shlex.quote(site_file)}"
    if site.ops.nightly.only_due:  # also read from the site: the flag shows in the entry what it runs
        run += " --only-due"
    return f"cd {shlex.quote(str(REPO_ROOT))} && {env}{run}"


def _no_space(what: str, value: str) -> str:
    # #SCRON options are split on whitespace with no quoting (src/scrontab/parse.c get_argument).
    if any(c.isspace() for c in value):
        raise ValueError(f"{what} {value!r} has whitespace, which a #SCRON line cannot carry")
    return value


def render_scrontab(site: Site, python: str | None = None) -> str:
    n = site.ops.nightly
    out_dir = reports_dir(site) / site.name
    text = render(
        "scrontab.j2",
        site=site.name,
        schedule=n.schedule,
        time_limit_min=n.time_limit_min,
        output=_no_space("output path", str(out_dir / "nightly-%j.out")),
        options=[_no_space("option", o) for o in n.scron_options],
        command=command(site, python),
    )
    parse_scrontab(text)  # never hand out an entry scrontab would refuse
    return text


def render_crontab(site: Site, python: str | None = None) -> str:
    log = reports_dir(site) / site.name / "nightly.log"
    # crontab(5): an unescaped % in the command is a newline
    line = f"{command(site, python)} >> {shlex.quote(str(log))} 2>&1".replace("%", r"\%")
    text = render("crontab.j2", site=site.name, schedule=site.ops.nightly.schedule, line=line)
    parse_scrontab(text)
    return text


# --- comparing with the last good run ----------------------------------------------------------------
def previous_run_ids(store: Path, results: Mapping[str, Any], run_root: Path) -> list[str]:
    """Earlier runs of the site, newest first: from the report's history store when it has them, else
    from the run directories beside this one."""
    ids: list[str] = []
    if store.exists():
        from contextlib import closing

        from clusteraccept.report import history

        with closing(history.connect(store)) as con:
            ids = history.previous_runs(
                con, str(results.get("site")), str(results["run_id"]), str(results.get("started") or ""), 60
            )[::-1]
    if not ids:
        runs = [p for p in run_root.iterdir() if p.name not in ("latest", results["run_id"]) and p.is_dir()]
        ids = sorted((p.name for p in runs if (p / "results.json").exists()), reverse=True)
    return ids


def good_runs(run_root: Path, results: Mapping[str, Any], store: Path) -> Iterator[dict[str, Any]]:
    """The earlier complete runs of the site, newest first (read one at a time: they can be large)."""
    from clusteraccept.judge import record

    started = str(results.get("started") or "")
    for run_id in previous_run_ids(store, results, run_root):
        path = run_root / run_id / "results.json"
        if not path.exists():
            continue
        other: dict[str, Any] = record.load(path.parent)
        if str(other.get("started") or "") <= started and complete(other):
            yield other


def last_good(run_root: Path, results: Mapping[str, Any], store: Path) -> dict[str, Any] | None:
    return next(good_runs(run_root, results, store), None)


def _judged_ids(results: Mapping[str, Any]) -> set[str]:
    """The test ids (``check[subject]``) a run judged: not a skip."""
    return {f"{v['check']}[{v['subject']}]" for v in results.get("verdicts", []) if v["outcome"] != "skip"}


def reference(run_root: Path, results: Mapping[str, Any], store: Path) -> dict[str, Any] | None:
    """What tonight is compared with: the last good run; when tonight or that run is due-only, each test
    id judged tonight against the newest good run that judged it (back to the last full run), and nothing
    else: a subject not tested tonight is neither fixed nor new, and one the last due-only run did not test
    is compared with the run that last did."""
    runs = good_runs(run_root, results, store)
    newest = next(runs, None)
    if newest is None or not (due_partial(results) or due_partial(newest)):
        return newest
    wanted = _judged_ids(results)
    merged: dict[str, Any] = {**newest, "verdicts": [], "backfilled_from": []}
    covered: set[str] = set()
    for run in itertools.chain([newest], runs):
        ids = _judged_ids(run) & (wanted - covered)
        if ids and run is not newest:
            merged["backfilled_from"].append(run.get("run_id"))
        merged["verdicts"] += [v for v in run["verdicts"] if f"{v['check']}[{v['subject']}]" in ids]
        covered |= ids
        if covered >= wanted or not due_partial(run):  # a full run judged everything it could
            break
    return merged


@dataclass(frozen=True)
class Night:
    code: int  # OK | REGRESSED | INCOMPLETE
    line: str  # the one-line summary
    detail: dict[str, Any]


def verdict_of_night(
    site: str, results: Mapping[str, Any], reference: Mapping[str, Any] | None, trend_flags: Sequence[str]
) -> Night:
    """Compare a night with the last good run (pure): what regressed, the one line, the exit code."""
    from clusteraccept.report.compare import compare

    run_id = results.get("run_id")
    if nothing_due(results) and complete(results):
        line = f"clusteraccept nightly {site} run {run_id}: OK: {NOTHING_DUE}"
        return Night(OK, line, {"scope": results["scope"], "reference": "nothing judged"})
    bad = sorted(
        {
            f"{v['check']}[{v['subject']}]"
            for v in results.get("verdicts", [])
            if v["outcome"] in ("fail", "error")
        }
    )
    diff: dict[str, Any]
    if reference is None:
        diff = {"new_failures": bad, "n_new_failures": len(bad), "n_fixed": 0, "n_still_failing": 0}
        against = "no earlier good run"
    else:
        diff = compare(reference, results)
        earlier = reference.get("backfilled_from") or []
        against = f"vs {reference.get('run_id')}" + (f" and {len(earlier)} earlier run(s)" if earlier else "")
    n_new = int(diff["n_new_failures"])
    # culprits first: "nccl.localization[node3]" says more than the 20 busbw results it explains
    named = sorted(diff["new_failures"], key=lambda t: (not t.startswith("nccl.localization["), t))
    first = ", ".join(named[:3]) + (" ..." if n_new > 3 else "")
    lost = [
        f"{j['name']}: {', '.join(j['missing'][:3])}" for j in results.get("jobs", []) if j.get("missing")
    ]
    if not complete(results):
        code, head = INCOMPLETE, "INCOMPLETE"
    elif n_new or trend_flags:
        code, head = REGRESSED, "REGRESSED"
    else:
        code, head = OK, "OK"
    parts = [f"{n_new} new failure(s)" + (f" ({first})" if n_new else "")]
    if trend_flags:
        parts.append(f"{len(trend_flags)} median regression(s) ({', '.join(trend_flags[:2])})")
    parts.append(f"{diff['n_fixed']} fixed, {diff['n_still_failing']} still failing {against}")
    if lost:
        parts.append(f"lost: {'; '.join(lost[:2])}")
    scoped = summary_line(results, shown=0)
    if scoped:
        parts.append(scoped)
    line = f"clusteraccept nightly {site} run {run_id}: {head}: " + "; ".join(parts)
    return Night(code, line, {"diff": diff, "trend_regressions": list(trend_flags), "reference": against})


def post(url: str, line: str, opener: Callable[..., Any] | None = None) -> str:
    """POST ``{"text": line}`` (the Slack/Mattermost incoming-webhook shape) and say how it went."""
    import urllib.request

    req = urllib.request.Request(
        url, data=json.dumps({"text": line}).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with (opener or urllib.request.urlopen)(req, timeout=10) as resp:
            return f"webhook: HTTP {getattr(resp, 'status', '?')}"
    except OSError as exc:  # urllib's URLError is an OSError: the night's result stands, say it failed
        return f"webhook: not delivered ({exc})"


# --- the night ---------------------------------------------------------------------------------------
def night(
    site: Site, extra_args: Sequence[str] = (), python: str | None = None, due_only: bool = False
) -> Night:
    """Run the suite into the fixed reports dir, compare, write the summary; returns the Night.
    ``due_only`` (or the site's ``nightly.only_due``): only what is attestation-due (pytest --only-due)."""
    from clusteraccept.judge import record
    from clusteraccept.rundir import new_run_id, write_json

    reports = reports_dir(site)
    run_id = new_run_id()
    argv = [
        python or sys.executable, "-m", "pytest", "suites/", f"--site={Path(site.file).resolve()}",
        f"--reports-dir={reports}", f"--run-id={run_id}", "-q", *site.ops.nightly.pytest_args, *extra_args,
    ]  # fmt: skip
    if due_only or site.ops.nightly.only_due:
        argv.append("--only-due")
    proc = subprocess.run(argv, cwd=REPO_ROOT, check=False)
    run_dir = reports / site.name / run_id
    if not (run_dir / "results.json").exists():
        line = (
            f"clusteraccept nightly {site.name} run {run_id}: INCOMPLETE: no results "
            f"(pytest exit {proc.returncode})"
        )
        result = Night(INCOMPLETE, line, {})
    else:
        results = record.load(run_dir)
        store = reports / site.name / "history.sqlite"
        flags: list[str] = []
        if store.exists() and not due_partial(results):
            # a due-only night's medians are those of its due subjects: not comparable with the full
            # nights' rolling medians (and biased to the subjects that failed last time)
            from clusteraccept.report.history import key_stats, trends

            flags = [t.key for t in trends(store, results, key_stats(results)) if t.regression]
        result = verdict_of_night(site.name, results, reference(reports / site.name, results, store), flags)
        line = f"{result.line}; report {run_dir / 'report.html'}"
        result = Night(result.code, line, result.detail)
        write_json(run_dir / "nightly.json", {"code": result.code, "summary": line, **result.detail})
    out = summary_path(site)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(result.line + "\n")
    return result
