"""The one registry of check families (families.py) against what the suites declare and the judges emit."""

from __future__ import annotations

import ast

from clusteraccept import families
from clusteraccept.judge.items import group

from .conftest import REPO, DemoRun

PKG = REPO / "src" / "clusteraccept"


def declared() -> set[tuple[str, str, str]]:
    """(check prefix, family, per) of every ``@check(...)`` in suites/, read from the source."""
    out = set()
    for path in sorted((REPO / "suites").glob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "check":
                kw = {k.arg: ast.literal_eval(k.value) for k in node.keywords}
                out.add((ast.literal_eval(node.args[0]), kw["family"], kw["per"]))
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
    assert {fam for _, fam, _ in checks} == set(families.JUDGED)
    assert all(check == fam for check, fam, _ in checks), checks  # one item per family and node or block
    assert {per for _, _, per in checks} == {"node", "block", "domain"}  # domain: NVL72 racks


def test_every_verdict_the_judges_emit_has_an_item_or_is_a_pairs_evidence(demo_run: DemoRun) -> None:
    """A verdict no item owns would be judged and never shown to pytest (a silent failure), unless it is a
    pair result: the localization's evidence, quoted by the culprit's item."""
    results = demo_run.results
    kinds = {(fam, per) for _, fam, per in declared()}
    got = group(results["verdicts"], results["nodes"], [*results["blocks"], "all"])
    assert {(fam, per) for fam, per, _ in got.owned} <= kinds
    owned = {id(v) for vs in got.owned.values() for v in vs}
    loose = [v for v in results["verdicts"] if id(v) not in owned]
    assert loose and all(v["family"] == "nccl" and "-" in v["subject"].split(":")[0] for v in loose)
    # roce, efa and sharp have no items on the demo (IB, no SHARP), so they are neither probed nor judged
    assert set(results["families"]) == set(families.JUDGED) - {"roce", "efa", "slingshot", "tcpx", "sharp"}
