"""The one registry of check families (families.py) against what the suites declare and the judges emit."""

from __future__ import annotations

import ast

from clusteraccept import families

from .conftest import REPO, DemoRun

PKG = REPO / "src" / "clusteraccept"


def declared() -> set[tuple[str, str]]:
    """(check id, family) of every ``@check(...)`` in suites/, read from the source."""
    out = set()
    for path in sorted((REPO / "suites").glob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "check":
                kw = {k.arg: ast.literal_eval(k.value) for k in node.keywords}
                out.add((ast.literal_eval(node.args[0]), kw["family"]))
    return out


def test_every_family_has_its_stages() -> None:
    for fam in families.FAMILIES:
        assert (PKG / "probes" / f"{fam.name}.py").exists() == fam.probed, fam.name
        # checks/fingerprint.py compares versions across nodes (results.json "fingerprint"), no verdicts
        assert (PKG / "checks" / f"{fam.name}.py").exists() or not fam.judged, fam.name
    assert families.PROBED[0] == "fingerprint"  # a node that ran at all returns its versions first
    assert set(families.NODE_FAMILIES) < set(families.JUDGED) and "nccl" not in families.NODE_FAMILIES


def test_suites_declare_exactly_the_judged_families() -> None:
    checks = declared()
    assert {fam for _, fam in checks} == set(families.JUDGED)
    assert all(check.split(".", 1)[0] == fam for check, fam in checks), checks


def test_the_check_ids_the_suites_declare_are_exactly_the_ones_the_judges_emit(demo_run: DemoRun) -> None:
    """A judge emitting a check no suite test declares would be judged and never shown to pytest (a
    silent failure); a declared check no judge emits would fail every run with "no verdict"."""
    emitted = {v["check"] for v in demo_run.results["verdicts"]}
    assert {check for check, _ in declared()} == emitted
    assert set(demo_run.results["families"]) == set(families.JUDGED)
