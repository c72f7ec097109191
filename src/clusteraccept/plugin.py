"""The only pytest glue (DESIGN.md §9): options, fixtures, parametrization by subject, state in config.stash.

Suite tests are declared with :func:`check` and parametrized by the subjects of the site (``-k node07``,
``-k rail3``). The run itself (plan, submit, archive, judge) happens once per run, under a lock in the run
directory, so pytest-xdist workers share one submission.
"""

from __future__ import annotations

import atexit
import functools
import gc
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, TypeVar

import pytest

from clusteraccept import flow
from clusteraccept.errors import ArchiveError, SiteConfigError
from clusteraccept.families import FAMILIES
from clusteraccept.judge import record
from clusteraccept.judge.items import Items, group, parts, selected
from clusteraccept.ops import scope as due_scope
from clusteraccept.outcome import (
    DRY_RUN,
    ItemNames,
    Judged,
    compile_keyword,
    item_matches,
    item_names,
    keyword_matches,
    picked_parts,
)
from clusteraccept.plan import limits
from clusteraccept.plan.jobs import make_plan
from clusteraccept.plan.subjects import item_subjects, not_applicable, pick_steps, rail_steps, subjects
from clusteraccept.render import REPO_ROOT
from clusteraccept.rundir import locked, make_run_dir, new_run_id, read_json
from clusteraccept.site.load import load_site
from clusteraccept.site.model import Site

F = TypeVar("F", bound=Callable[..., Any])
MARK = "ca_check"


def check(name: str, *, family: str, per: str, parts: tuple[str, ...] = ()) -> Callable[[F], F]:
    """Declare a suite test as the pytest face of check family ``name``: one test per node or per block
    (``per``), judging every verdict of the family on it. ``parts``: the finer subjects (``gpu``, ``rail``)
    its verdicts name, which ``-k`` selects as if each were a test of its own (``-k rail3``)."""

    def deco(fn: F) -> F:
        mark = pytest.mark.ca_check(name, family=family, per=per, parts=parts)
        marked: F = getattr(pytest.mark, family)(mark(fn))
        return marked

    return deco


@dataclass
class State:
    site: Site | None = None
    run_dir: Path | None = None
    run_id: str | None = None
    dry_run: bool = False
    rejudge: Path | None = None
    reparse: bool = False  # --rejudge --reparse: every step parsed from raw/ again
    executor: str | None = None
    families: tuple[str, ...] = ()
    nccl: bool = False
    subjects: frozenset[str] | None = None
    nodes: frozenset[str] | None = None  # --nodes HOSTLIST, expanded
    probe_nodes: frozenset[str] | None = None  # the nodes the selected node items need probed; None = all
    domains: frozenset[str] | None = None  # the NVLink domains whose items are selected; None = all
    not_applicable: dict[str, str] = field(default_factory=dict)  # family -> why it has no items here
    results: dict[str, Any] | None = None
    items: Items = field(default_factory=Items)  # the run's verdicts by item, made once per process
    step_names: dict[str, ItemNames] = field(default_factory=dict)  # -k: the names a step matches as
    keyword: str = ""  # the -k expression, applied per part (outcome.picked_parts)
    resume: Path | None = None  # --resume RUN_DIR (clusteraccept.ops.resume)
    resume_token: str | None = None  # one resume per session, shared by xdist workers
    rejudge_token: str | None = None  # one --rejudge per session, shared by xdist workers
    ops_lines: list[str] = field(default_factory=list)  # what ops did after the run (drain), for the summary
    only_due: bool = False  # --only-due (clusteraccept.ops.scope)
    due_now: str | None = None  # when "due" is decided: the controller's clock, shared by xdist workers
    scope: due_scope.Scope | None = None  # a due-only run's scope, once known
    report_lines: list[str] = field(default_factory=list)  # regressions / --compare diff, for the summary
    crashed: str = ""  # the run raised (the first item shows how): the later items do not run it again


STATE = pytest.StashKey[State]()


def pytest_addoption(parser: pytest.Parser) -> None:
    g = parser.getgroup("clusteraccept", "cluster acceptance")
    g.addoption("--site", default=None, help="site name (site-configs/NAME.yaml) or path to a site file")
    g.addoption(
        "--dry-run",
        action="store_true",
        default=False,
        help="render every job script into the run's jobs/ and submit nothing",
    )
    g.addoption("--reports-dir", default=None, help="where runs are written (default: reports/)")
    g.addoption("--run-id", default=None, help="run id (default: UTC timestamp + random suffix)")
    g.addoption(
        "--executor",
        default=None,
        choices=("slurm", "local", "debug"),
        help="override the site's submitit executor",
    )
    g.addoption(
        "--propose-baselines",
        default=None,
        metavar="FILE",
        help="after the run, write a reviewable baselines file (p05 per key) proposed from its results",
    )
    g.addoption(
        "--rejudge",
        default=None,
        metavar="RUN_DIR",
        help="re-judge RUN_DIR's archived evidence against the current site; submit nothing (its steps' "
        "parses stored by these parsers are read back, the rest of raw/ is parsed again)",
    )
    g.addoption(
        "--reparse",
        action="store_true",
        default=False,
        help="with --rejudge: parse every step from raw/ again, not from the parses stored in RUN_DIR/parsed",
    )
    g.addoption(
        "--nodes",
        default=None,
        metavar="HOSTLIST",
        help="only these nodes (a Slurm hostlist, exact names: -k node7 also matches node70): their items, "
        "their pair and intra-node steps; no block items",
    )
    # --- reports (clusteraccept.report) ---
    g.addoption("--signoff-name", default=None, help="who signs the report (recorded in results.json)")
    g.addoption("--signoff-role", default=None, help="the signer's role (recorded in results.json)")
    g.addoption(
        "--compare",
        default=None,
        metavar="RUN_ID",
        help="diff this run against run RUN_ID of the same site (or a run directory): compare.json + summary",
    )
    # --- operations (clusteraccept.ops) ---
    g.addoption(
        "--resume",
        default=None,
        metavar="RUN_DIR",
        help="rerun only what RUN_DIR lost (missing subjects, ERROR verdicts) and merge it into that run",
    )
    g.addoption(
        "--drain-failed",
        nargs="?",
        const="preview",
        default=None,
        choices=("preview", "apply"),
        help="after the run, drain the nodes it convicted (and undrain ours that pass): print/write the "
        "scontrol commands (default), or run them with --drain-failed=apply",
    )
    g.addoption(
        "--only-due",
        action="store_true",
        default=False,
        help="submit only what is attestation-due (python -m clusteraccept attest --due, from the runs "
        "under --reports-dir): due nodes, their pairs, blocks and due links; the rest skips",
    )


def _configs_dir(config: pytest.Config) -> Path:
    return Path(os.environ.get("CLUSTERACCEPT_SITE_CONFIGS", REPO_ROOT / "site-configs"))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "ca_check(name, family, per): a clusteraccept check")
    for fam in FAMILIES:
        if fam.judged:
            config.addinivalue_line("markers", f"{fam.name}: clusteraccept {fam.about}")
    state = State()
    config.stash[STATE] = state
    site_opt = config.getoption("--site")
    if not site_opt:
        return
    try:
        state.site = load_site(site_opt, _configs_dir(config))
    except SiteConfigError as exc:
        raise pytest.UsageError(str(exc)) from None
    from clusteraccept.jobs.slurm_clients import export_client_env
    from clusteraccept.jobs.submit import for_executor

    state.executor = config.getoption("--executor")
    state.site = for_executor(state.site, state.executor)
    export_client_env(state.site)
    if state.site.blocks_from_slurm:
        from clusteraccept.errors import SubmitError
        from clusteraccept.jobs.slurm_clients import slurm_blocks

        try:
            state.site = state.site.with_slurm_blocks(slurm_blocks(state.site))
        except SubmitError as exc:
            raise pytest.UsageError(f"{state.site.file}: blocks: {exc}") from None
        except SiteConfigError as exc:  # nvlink_domains: blocks, and Slurm's blocks are no racks
            raise pytest.UsageError(str(exc)) from None
    state.dry_run = config.getoption("--dry-run")
    state.only_due = config.getoption("--only-due")
    rejudge = config.getoption("--rejudge")
    if state.only_due and (rejudge or config.getoption("--resume")):
        raise pytest.UsageError("--only-due decides what a new run submits: not with --rejudge or --resume")
    if config.getoption("--reparse") and not rejudge:
        raise pytest.UsageError("--reparse parses a run's raw/ evidence again: only with --rejudge RUN_DIR")
    if rejudge:
        state.rejudge = Path(rejudge)
        state.reparse = config.getoption("--reparse")
        from clusteraccept.ops.resume import new_token

        # one re-judging per session: a pytest-xdist worker does it, the controller then only reads it
        state.rejudge_token = (getattr(config, "workerinput", None) or {}).get(
            "ca_rejudge_token"
        ) or new_token()
        if not (state.rejudge / flow.RESULTS).exists():
            raise pytest.UsageError(
                f"--rejudge {rejudge}: expected a run directory with results.json, got none there"
            )
        state.run_dir, state.run_id = state.rejudge, state.rejudge.name
        return
    if config.getoption("--resume"):  # ops: resume an earlier run in place
        from clusteraccept.ops.resume import new_token

        state.resume = Path(config.getoption("--resume"))
        if not (state.resume / flow.RESULTS).exists():
            raise pytest.UsageError(f"--resume {state.resume}: expected a run directory with results.json")
        state.run_dir, state.run_id = state.resume, state.resume.name
        workerinput = getattr(config, "workerinput", None) or {}
        state.resume_token = workerinput.get("ca_resume_token") or new_token()
        return
    reports = Path(config.getoption("--reports-dir") or REPO_ROOT / "reports")
    workerinput = getattr(config, "workerinput", None)
    if state.only_due:
        state.due_now = (workerinput or {}).get("ca_due_now") or datetime.now(UTC).isoformat()
    state.run_id = (workerinput or {}).get("ca_run_id") or config.getoption("--run-id") or new_run_id()
    if workerinput is None:
        state.run_dir = make_run_dir(reports, state.site.name, state.run_id)
    else:
        state.run_dir = reports / state.site.name / state.run_id


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """xdist (controller): every worker joins the controller's run."""
    node.workerinput["ca_run_id"] = node.config.stash[STATE].run_id
    node.workerinput["ca_resume_token"] = node.config.stash[STATE].resume_token
    node.workerinput["ca_rejudge_token"] = node.config.stash[STATE].rejudge_token
    node.workerinput["ca_due_now"] = node.config.stash[STATE].due_now


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    mark = metafunc.definition.get_closest_marker(MARK)
    if mark is None or "subject" not in metafunc.fixturenames:
        return
    site = metafunc.config.stash[STATE].site
    subs = item_subjects(site, mark.kwargs["per"]) if site is not None else []
    metafunc.parametrize("subject", subs, ids=subs)


@pytest.hookimpl(tryfirst=True)
def pytest_pycollect_makeitem(
    collector: pytest.Collector, name: str, obj: object
) -> list[pytest.Item] | None:
    """A suite test that has nothing to judge on this site is not collected at all: a family that does not
    apply (RoCE checks on an IB site: the summary says why) and the NVLink-domain items of a site whose
    domains end at the node. Made per node and then deselected, they were 4 items per node on an IB site,
    65,000 at 16,384 nodes, ~0.5 ms each to make."""
    marks = [m for m in getattr(obj, "pytestmark", ()) if getattr(m, "name", None) == MARK]
    state = collector.config.stash.get(STATE, None)
    if not marks or state is None or state.site is None:
        return None  # pytest's own collection (and without --site, the usage error of modifyitems)
    family, per = marks[0].kwargs["family"], marks[0].kwargs["per"]
    why = not_applicable(state.site, family)
    if why is not None:
        state.not_applicable[family] = why
        return []
    if per == "domain" and not state.site.nvlink_domains:
        return []
    return None


PARTS = pytest.StashKey[frozenset[str]]()  # the parts of an item -k picked (absent: all of them)


@pytest.hookimpl(tryfirst=True)  # before pytest's own -k, which this replaces for the suites' items
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    state = config.stash[STATE]
    marked = [i for i in items if i.get_closest_marker(MARK)]
    if state.site is None:
        if marked:
            available = sorted(p.stem for p in _configs_dir(config).glob("*.yaml"))
            raise pytest.UsageError(f"suites/ need --site NAME (available: {', '.join(available)})")
        return
    site = state.site
    keep: list[pytest.Item] = []
    gone: list[pytest.Item] = []
    nodes = state.nodes = _nodes_option(config, site)
    state.keyword = config.option.keyword.strip()
    expr = compile_keyword(state.keyword) if state.keyword else None
    for item in items:
        mark = item.get_closest_marker(MARK)
        if mark is None:  # not a suite check: pytest's own -k rule (this hook replaces that pass)
            (keep if expr is None or item_matches(expr, item) else gone).append(item)
            continue
        per, subject = mark.kwargs["per"], item.callspec.params["subject"]  # type: ignore[attr-defined]
        if nodes is not None and (per != "node" or subject not in nodes):
            gone.append(item)
            continue
        if mark.kwargs["family"] == "nccl":  # what a step matches -k as: its item's names, its own subject
            state.step_names.setdefault(per, item_names(item))
        if expr is None:
            keep.append(item)
            continue
        rails = [r.index for r in site.node_type(subject).rails] if per == "node" else []
        gpus = site.node_type(subject).gpus if per == "node" else 0
        picked = picked_parts(item, expr, parts(subject, per, mark.kwargs["parts"], gpus, rails))
        if picked:
            item.stash[PARTS] = picked
            keep.append(item)
        else:
            gone.append(item)
    if expr is not None:
        config.option.keyword = ""  # applied above, per part; pytest's own pass would drop every item
    if gone:
        config.hook.pytest_deselected(items=gone)
        items[:] = keep


def _nodes_option(config: pytest.Config, site: Site) -> frozenset[str] | None:
    """--nodes HOSTLIST: exact node names (``-k node7`` also matches node70)."""
    value = config.getoption("--nodes")
    if not value:
        return None
    from hostlist import expand_hostlist

    try:
        wanted = frozenset(expand_hostlist(value))
    except Exception as exc:  # hostlist.BadHostlist
        raise pytest.UsageError(
            f"--nodes {value!r}: expected a Slurm hostlist (node[01-04]), got {exc}"
        ) from None
    unknown = sorted(wanted - set(site.nodes))
    if unknown:
        raise pytest.UsageError(f"--nodes: {', '.join(unknown[:5])} not in {site.file} nodes")
    return wanted


def pytest_collection_finish(session: pytest.Session) -> None:
    """What the selected tests need decides what is submitted (``-k rail3`` submits only rail 3)."""
    state = session.config.stash[STATE]
    selected = [(m, i) for i in session.items if (m := i.get_closest_marker(MARK)) is not None]
    state.families = tuple(
        dict.fromkeys(m.kwargs["family"] for m, _ in selected if m.kwargs["family"] != "nccl")
    )
    nccl_items = [(m, i) for m, i in selected if m.kwargs["family"] == "nccl"]
    state.nccl = bool(nccl_items)
    if state.site is None:
        return
    probed = set()  # the nodes whose probes the selected items need (-k node07, --nodes: not all of them)
    for m, i in selected:
        if m.kwargs["family"] != "nccl":
            subject = i.callspec.params["subject"]  # type: ignore[attr-defined]
            probed |= {subject} if m.kwargs["per"] == "node" else set(_members(state.site, subject))
    state.probe_nodes = None if not probed or probed >= set(state.site.nodes) else frozenset(probed)
    # a rack's MNNVL all_reduce runs for its own item only (-k rack1, or -k gb005 with no rack: none)
    domains = {i.callspec.params["subject"] for m, i in selected if m.kwargs["per"] == "domain"}  # type: ignore[attr-defined]
    state.domains = None if domains >= set(state.site.nvlink_domains) else frozenset(domains)
    nodes = state.nodes
    # the nccl items selected (by -k, --nodes, node ids on the command line, --lf ...): their steps only
    chosen: dict[str, set[str]] = {"node": set(), "block": set()}
    for m, i in nccl_items:
        chosen[m.kwargs["per"]].add(i.callspec.params["subject"])  # type: ignore[attr-defined]
    every_node = chosen["node"] >= set(state.site.nodes)
    every_block = chosen["block"] >= set(item_subjects(state.site, "block"))
    if not nccl_items or (not state.keyword and nodes is None and every_node and every_block):
        return
    expr = compile_keyword(state.keyword) if state.keyword else None
    picked = frozenset(p for _, i in nccl_items for p in i.stash.get(PARTS, frozenset()))

    def keep(per: str, subject: str, step_nodes: tuple[str, ...]) -> bool:
        if per == "node" and not (every_node or chosen["node"].intersection(step_nodes)):
            return False
        if per == "block" and not (every_block or subject in chosen["block"]):
            return False
        if nodes is not None and (per != "node" or not nodes.intersection(step_nodes)):
            return False
        return expr is None or keyword_matches(expr, state.step_names[per], subject, step_nodes)

    plan = make_plan(state.site, families=())
    wanted = pick_steps(plan, keep)
    # nccl.link_errors[node:railK] is judged over that rail's pair traffic: -k node07:rail3 needs its pairs
    wanted |= rail_steps(subjects(state.site, "pair_rail", plan), picked)
    every = {s.subject for s in plan.steps() if s.family == "nccl"}
    state.subjects = None if every <= wanted else wanted


def _members(site: Site, block: str) -> tuple[str, ...]:
    members = site.blocks.get(block) or site.nvlink_domains.get(block)
    return members or (site.nodes if block == "all" else ())


def _results(config: pytest.Config) -> dict[str, Any]:
    state = config.stash[STATE]
    if state.results is not None:
        return state.results
    if state.crashed:
        # every item asks for the run: running it again would submit its jobs again, once per item
        pytest.exit(
            f"the run {state.run_dir} failed ({state.crashed}; its traceback is the first item's error); "
            "nothing was judged, and its jobs were not submitted again",
            returncode=pytest.ExitCode.INTERNAL_ERROR,
        )
    try:
        return _run(state)
    except ArchiveError as exc:  # a full reports filesystem, a bundle cut off: say where, keep the rest
        pytest.exit(
            f"{exc}; the run {state.run_dir} is INCOMPLETE: what was archived before stays, nothing was "
            "judged from it (free the space, then run again, or --rejudge RUN_DIR for a bundle restored)",
            returncode=pytest.ExitCode.INTERRUPTED,
        )
    except Exception as exc:
        state.crashed = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        raise


def _run(state: State) -> dict[str, Any]:
    """Run (or re-judge, or resume) the run and read back its results."""
    assert state.site is not None and state.run_dir is not None
    if state.rejudge is not None:
        with locked(state.run_dir):
            done = read_json(state.run_dir / flow.RESULTS)
            if state.rejudge_token and done.get("rejudge_token") == state.rejudge_token:
                state.results = done  # another process of this session (an xdist worker) re-judged it
            else:
                state.results = flow.rejudge(
                    state.site,
                    state.run_dir,
                    token=state.rejudge_token,
                    reparse=state.reparse,
                )
    elif state.resume is not None:
        from clusteraccept.ops.resume import ResumeError, resume_run

        with locked(state.run_dir):
            try:
                state.results = resume_run(
                    state.site, state.run_dir, executor=state.executor, token=state.resume_token
                )
            except ResumeError as exc:
                raise pytest.UsageError(str(exc)) from None
    else:
        path = state.run_dir / flow.RESULTS
        with locked(state.run_dir):
            if path.exists():
                state.results = read_json(path)  # the facts; the items' verdicts are read below
            else:
                request = flow.Request(
                    site=state.site,
                    run_dir=state.run_dir,
                    families=state.families,
                    nccl=state.nccl,
                    subjects=state.subjects,
                    nodes=state.probe_nodes,
                    domains=state.domains,
                    dry_run=state.dry_run,
                    executor=state.executor,
                    scope=_decide_scope(state),
                )
                try:
                    state.results = flow.execute(request)
                except SiteConfigError as exc:  # the site's limits cannot hold its plan (plan/limits.py)
                    pytest.exit(str(exc), returncode=pytest.ExitCode.USAGE_ERROR)
    site = state.site
    owners = [*site.nodes, *dict.fromkeys([*item_subjects(site, "block"), *site.nvlink_domains])]
    if "verdicts" in state.results:  # a run written before the record's split
        verdicts: Iterable[Mapping[str, Any]] = state.results["verdicts"]
    else:  # what the items show: their own verdicts, the pairs' that did not pass (not every pair's pass)
        verdicts = record.rows(state.run_dir, "items", owners)
    state.items = group(verdicts, site.nodes, owners[len(site.nodes) :])
    if state.scope is None:  # the processes that did not decide it (xdist workers, --rejudge, --resume)
        state.scope = due_scope.of_results(state.site, state.results, state.run_dir.parent)
    return state.results


def _decide_scope(state: State) -> due_scope.Scope | None:
    """--only-due: what is due now, from the site's earlier runs (this one left out)."""
    if not state.only_due or state.due_now is None:
        return None
    assert state.site is not None and state.run_dir is not None
    now = datetime.fromisoformat(state.due_now)
    state.scope = due_scope.compute(state.site, state.run_dir.parent, state.run_id, now)
    return state.scope


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> None:
    """The collected items (four per node and family at 16,384 nodes) live as long as the session: out of
    the cyclic collector's way (``gc.freeze``), which would walk them again at each full collection while
    the items run (~10% of a 4,096-node dry run). Reference counting is unaffected; the loop is pytest's."""
    gc.freeze()
    _freeze_at_exit()


@functools.cache
def _freeze_at_exit() -> None:
    """Once per process: at the interpreter's exit, what is still alive is frozen again. The session's
    items and reports outlive pytest (cycles through their parents), and the interpreter's last full
    collection walked and freed them one by one: ~5.5 s of a 16,384-node dry run's end, memory the OS takes
    back at once. Nothing is lost: CPython does not promise ``__del__`` for objects still alive at exit
    (the data model's note on ``object.__del__``), and logging's own atexit handler, registered before this
    one, still flushes its handlers after it."""
    atexit.register(gc.freeze)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """After the other plugins' (trylast): pytest's unraisable-exception check collects garbage in its
    own ``pytest_unconfigure``, and with the session's items frozen it does not walk them (1.1 s at 16,384
    nodes); what it looks for is garbage, which they are not yet. Unfrozen here, so that a process that
    runs pytest again (pytester in-process) collects this session's items once they are garbage."""
    gc.unfreeze()


def _skips_dry(item: pytest.Item | None) -> bool:
    """A suite item of a dry run whose job scripts are written: all it can say is so."""
    if item is None:
        return False
    state = item.config.stash.get(STATE, None)
    return (
        state is not None
        and state.results is not None
        and bool(state.results.get("dry_run"))
        and item.get_closest_marker(MARK) is not None
    )


def _skip_dry() -> None:
    pytest.skip(DRY_RUN)


def _nothing() -> None:
    pass


_DRY_PHASES: tuple[tuple[Literal["setup", "teardown"], Callable[[], None]], ...] = (
    ("setup", _skip_dry),
    ("teardown", _nothing),
)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> bool | None:
    """A dry run's items after the first are reported skipped (setup) and torn down (teardown) without
    pytest's per-phase machinery (fixture setup state, output capture, log capture per phase): 0.76 -> 0.50
    ms an item at 4,096 nodes, of which a 16,384-node dry run has 66,562. Their reports go through the same
    makereport and logreport hooks as any item's (terminal, --junitxml, -rs see the same skip, raised at
    the same line as pytest_runtest_setup's). Only where the next item skips too (or none follows): such
    an item sets nothing up, so pytest's own protocol for a next item of another kind would find the
    previous item's fixtures still set up; pytest's session end tears down what the first item set up."""
    if not _skips_dry(item) or not (nextitem is None or _skips_dry(nextitem)):
        return None
    ihook = item.ihook
    ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    for when, run in _DRY_PHASES:
        call = pytest.CallInfo.from_call(run, when)
        ihook.pytest_runtest_logreport(report=ihook.pytest_runtest_makereport(item=item, call=call))
    ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    return True


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """A dry run's items skip before their fixtures once the first one has written the job scripts: each
    would only say so, and pytest's fixture setup and teardown were ~40% of a dry run's time at 4,096 nodes
    (16,642 items). The first item still runs the plan through its fixture, so a run that fails is that
    item's error, as in a real run. (Most of them never get here: pytest_runtest_protocol.)"""
    if _skips_dry(item):
        _skip_dry()


@pytest.fixture(scope="session")
def ca_site(pytestconfig: pytest.Config) -> Site:
    site = pytestconfig.stash[STATE].site
    if site is None:
        pytest.skip("no --site given")
    return site


@pytest.fixture(scope="session")
def ca_run_dir(pytestconfig: pytest.Config, ca_site: Site) -> Path:
    run_dir = pytestconfig.stash[STATE].run_dir
    assert run_dir is not None
    return run_dir


@pytest.fixture
def judged(request: pytest.FixtureRequest, ca_site: Site) -> Judged:
    """The verdicts of this test's item (family x node or block), with ``assert_accepted()``.

    Its properties go to the item's ``user_properties`` (what pytest's ``record_property`` fixture does,
    without that fixture's warning per item under ``--junitxml``'s default xunit2 family, which does not
    write testcase properties: 50,000 warnings at 16,384 nodes; ``-o junit_family=xunit1`` writes them)."""

    def record(name: str, value: object) -> None:
        request.node.user_properties.append((name, value))

    mark = request.node.get_closest_marker(MARK)
    assert mark is not None, "use @check(...) on suite tests"
    results = _results(request.config)
    state = request.config.stash[STATE]
    subject = request.node.callspec.params["subject"]
    family, per = mark.kwargs["family"], mark.kwargs["per"]
    per = "block" if per == "domain" else per  # a domain's verdicts are grouped as a block's (judge/items.py)
    verdicts = selected(state.items.of(family, per, subject), request.node.stash.get(PARTS, None), subject)
    return Judged(
        family,
        subject,
        verdicts,
        results.get("jobs", []),
        bool(results.get("dry_run")),
        record,
        state.scope.skip_reason(per, subject) if state.scope is not None else None,
        # quoted only when the item's localization failed (items.failure_lines)
        evidence=state.items.evidence.get(subject, ()),
        evidence_n=state.items.evidence_n.get(subject, 0),
    )


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    state = session.config.stash.get(STATE, None)
    if state is None or state.run_dir is None or hasattr(session.config, "workerinput"):
        return
    path = state.run_dir / "results.json"
    if (
        state.rejudge is not None
        and state.results is None
        and state.site is not None
        and path.exists()
        and not state.crashed
    ):
        _results(session.config)  # no selected test asked for verdicts: re-judge anyway, reports follow it
    if path.exists():
        from clusteraccept.report import signoff_block, write_reports
        from clusteraccept.report.model import unfinished_jobs, unfinished_line

        opt = session.config.getoption
        # the digest makes a chart row and a trend value of every verdict (2.5 million objects at 1,024
        # nodes), which each full collection walked again: --rejudge at 1,024 nodes, A/B wall 0.976
        with flow.collector_paused():
            written = write_reports(
                state.run_dir,
                signoff=signoff_block(opt("--signoff-name"), opt("--signoff-role")),
                compare=opt("--compare"),
            )
        state.report_lines = written.summary_lines()
        results = state.results or read_json(path)
        if state.only_due:  # say first what this run was restricted to (or that nothing was due)
            line = due_scope.summary_line(results)
            state.report_lines[:0] = [line] if line else []
        unfinished = unfinished_jobs(results, ran=True)
        if results.get("interrupted") and session.exitstatus == pytest.ExitCode.OK:
            # An item passes on the steps that came back and skips the ones its cancelled job never ran,
            # so a run stopped late can have no failed item: the nightly entry's exit must still say the
            # run is not whole (docs/faults.md, "the run killed mid-run")
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
            state.report_lines.append(
                f"  INCOMPLETE, exit {int(pytest.ExitCode.TESTS_FAILED)}: the run was interrupted "
                f"({results['interrupted']}) and its jobs cancelled; --resume {state.run_dir} completes it"
            )
        elif unfinished and session.exitstatus == pytest.ExitCode.OK and not results.get("dry_run"):
            # a job that ended badly (a node failed, its time ran out, its script failed after its steps)
            # leaves the run INCOMPLETE in every report even where each item passed on what came back:
            # the exit, which the nightly entry reads, says so too
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
            state.report_lines.append(
                f"  INCOMPLETE, exit {int(pytest.ExitCode.TESTS_FAILED)}: {unfinished_line(unfinished)}; "
                f"--resume {state.run_dir} reruns what was lost"
            )
        drain = session.config.getoption("--drain-failed")
        if drain and state.site is not None:  # ops: opt-in drain/undrain after the run
            from clusteraccept.ops.drain import run_for_site

            state.ops_lines = run_for_site(state.site, state.run_dir, apply_now=drain == "apply")
        proposal = session.config.getoption("--propose-baselines")
        if proposal:
            from clusteraccept.judge.propose import write_proposal

            write_proposal(record.load(state.run_dir), Path(proposal))


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    state = config.stash.get(STATE, None)
    if state is None or state.run_dir is None:
        return
    terminalreporter.write_sep("-", "clusteraccept")
    sim = " (SIMULATED HARDWARE)" if state.site is not None and state.site.simulated else ""
    terminalreporter.write_line(f"site {state.site.name if state.site else '?'}{sim}: run {state.run_dir}")
    for name in ("results.json", "junit.xml", "report.html"):
        if (state.run_dir / name).exists():
            terminalreporter.write_line(f"  {state.run_dir / name}")
    if state.dry_run:
        terminalreporter.write_line(f"  dry run: job scripts in {state.run_dir / 'jobs'}")
        if state.results and state.results.get("limits"):
            line = limits.summary_line(state.results.get("plan") or {}, state.results["limits"])
            if line:
                terminalreporter.write_line(line)
    for family, why in state.not_applicable.items():
        terminalreporter.write_line(f"  no {family} items: {why}")
    for line in state.report_lines + state.ops_lines:
        terminalreporter.write_line(line)
