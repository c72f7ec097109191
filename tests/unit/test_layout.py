"""The layout is the flow (docs/DESIGN.md): no import cycle, and no stage imports a later one.

Read from the source with ``ast`` (every import, module level or inside a function, TYPE_CHECKING ones too),
so a lazy import cannot hide a cycle."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
PKG = SRC / "clusteraccept"


def _module(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.cache
def _trees() -> dict[str, ast.Module]:
    return {_module(p): ast.parse(p.read_text(), str(p)) for p in sorted(PKG.rglob("*.py"))}


@functools.cache
def _graph() -> dict[str, set[str]]:
    modules = _trees()
    graph: dict[str, set[str]] = {}
    for name, tree in modules.items():
        deps: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("clusteraccept"):
                assert node.level == 0, f"{name}: relative import"
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    deps.add(full if full in modules else node.module)
            elif isinstance(node, ast.Import):
                deps |= {a.name for a in node.names if a.name.startswith("clusteraccept")}
        graph[name] = deps - {name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while (w := stack.pop()) != v:
                comp.append(w)
            if comp:
                out.append(sorted([v, *comp]))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycle() -> None:
    assert _cycles(_graph()) == []


# stage -> the stages it must never import (later stages, and the layers above the run)
ABOVE_THE_RUN = ("clusteraccept.ops", "clusteraccept.plugin", "clusteraccept.__main__")
AFTER_JUDGING = ("clusteraccept.jobs", "clusteraccept.report", "clusteraccept.flow", *ABOVE_THE_RUN)
NEVER = {
    "clusteraccept.site": (
        "clusteraccept.plan", "clusteraccept.jobs", "clusteraccept.probes", "clusteraccept.parsers",
        "clusteraccept.checks", "clusteraccept.judge", "clusteraccept.report", "clusteraccept.flow",
        *ABOVE_THE_RUN,
    ),
    "clusteraccept.plan": (
        "clusteraccept.jobs", "clusteraccept.probes", "clusteraccept.parsers", "clusteraccept.checks",
        "clusteraccept.judge", "clusteraccept.report", "clusteraccept.flow", *ABOVE_THE_RUN,
    ),
    "clusteraccept.jobs": (
        "clusteraccept.checks", "clusteraccept.judge", "clusteraccept.report", "clusteraccept.flow",
        *ABOVE_THE_RUN,
    ),
    "clusteraccept.probes": (
        "clusteraccept.plan", "clusteraccept.jobs", "clusteraccept.checks", "clusteraccept.judge",
        "clusteraccept.report", "clusteraccept.flow", *ABOVE_THE_RUN,
    ),
    "clusteraccept.parsers": (
        "clusteraccept.site", "clusteraccept.plan", "clusteraccept.jobs", "clusteraccept.probes",
        "clusteraccept.checks", "clusteraccept.judge", "clusteraccept.report", "clusteraccept.flow",
        *ABOVE_THE_RUN,
    ),
    "clusteraccept.judge": AFTER_JUDGING,
    "clusteraccept.checks": AFTER_JUDGING,
    # the report quotes raw evidence: from the job layer it reads the archive (its format's one owner) only
    "clusteraccept.report": (
        "clusteraccept.jobs.submit", "clusteraccept.jobs.slurm_clients", "clusteraccept.jobs.node_entry",
        "clusteraccept.jobs.spool", "clusteraccept.flow", *ABOVE_THE_RUN,
    ),
    "clusteraccept.flow": ABOVE_THE_RUN,
    "clusteraccept.ops": ("clusteraccept.plugin", "clusteraccept.__main__"),
}  # fmt: skip


def _under(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


@pytest.mark.parametrize("stage", sorted(NEVER))
def test_no_stage_imports_a_later_one(stage: str) -> None:
    graph = _graph()
    assert any(_under(m, stage) for m in graph), f"no module {stage}"
    wrong = sorted(
        f"{m} -> {d}"
        for m, deps in graph.items()
        if _under(m, stage)
        for d in deps
        if any(_under(d, later) for later in NEVER[stage])
    )
    assert wrong == []


# Modules every stage may use: they import none of the stages, only each other.
LEAVES = (
    "clusteraccept.errors", "clusteraccept.evidence", "clusteraccept.families", "clusteraccept.hostio",
    "clusteraccept.redact", "clusteraccept.render", "clusteraccept.rundir",
)  # fmt: skip


@pytest.mark.parametrize("leaf", LEAVES)
def test_shared_modules_import_no_stage(leaf: str) -> None:
    assert sorted(d for d in _graph()[leaf] if d not in LEAVES) == []


def test_parsers_are_pure_leaves() -> None:
    """Any stage may read a tool's output with a parser (jobs/slurm_clients.py reads scontrol's): so a parser
    imports nothing but other parsers, the errors and the redaction of secrets in what it returns."""
    allowed = ("clusteraccept.parsers", "clusteraccept.errors", "clusteraccept.redact")
    wrong = sorted(
        f"{m} -> {d}"
        for m, deps in _graph().items()
        if _under(m, "clusteraccept.parsers")
        for d in deps
        if not any(_under(d, a) for a in allowed)
    )
    assert wrong == []


def _importers(top: str) -> set[str]:
    """Modules that import the third-party package ``top``."""
    found = set()
    for name, tree in _trees().items():
        for node in ast.walk(tree):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom) and node.level == 0
                else []
            )
            if any(n == top or n.startswith(top + ".") for n in names):
                found.add(name)
    return found


def test_one_seam_each_for_slurm_jobs_and_pytest() -> None:
    assert _importers("submitit") == {"clusteraccept.jobs.submit"}
    assert _importers("pytest") == {"clusteraccept.plugin", "clusteraccept.outcome"}


def test_at_most_ten_modules_at_the_top() -> None:
    top = sorted(p.stem for p in PKG.glob("*.py") if p.stem not in ("__init__", "__main__"))
    assert len(top) <= 10, top
