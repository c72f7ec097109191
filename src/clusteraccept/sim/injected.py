"""Did a run on a simulated site find exactly the faults injected into it (``sim.faults``)? The demo's exit
status (tools/demo): 0 only when every failure is explained by an injected fault and every injected fault
within what the run selected failed.

A failure (a FAIL or ERROR verdict) is explained by a fault of its family on one of its nodes: a pair's two
nodes, a block's members, every node for "all". An ERROR is never explained: it says something could not be
judged. A fault is within the selection when its family ran, one of its nodes was selected, and (for a
fault on one rail) some verdict of its family is on that node and rail; it is found when a failure of its
family is on one of its nodes (and on its rail).

    python -m clusteraccept.sim.injected --site SITE [--reports-dir DIR] [RUN_DIR]
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from clusteraccept.site.load import FAULT_ALSO, FAULT_FAMILY
from clusteraccept.site.model import Site

# kinds that only one check of their family catches (errors under traffic leave busbw intact)
FAULT_CHECK = {"link_errors": "nccl.link_errors"}


def _catches(fault: Mapping[str, Any], family: str, v: Mapping[str, Any]) -> bool:
    only = FAULT_CHECK.get(str(fault["kind"]))
    return bool(
        v["check"] == only if only else v["family"] in (family, *FAULT_ALSO.get(str(fault["kind"]), ()))
    )


@dataclass(frozen=True)
class Finding:
    unexplained: tuple[str, ...]  # failures no injected fault explains ("check[subject]")
    missed: tuple[str, ...]  # injected faults within the selection that nothing failed on
    found: tuple[str, ...]  # injected faults within the selection that failed
    outside: tuple[str, ...]  # injected faults the run did not select

    @property
    def exact(self) -> bool:
        return not self.unexplained and not self.missed


def fault_nodes(site: Site, fault: Mapping[str, Any]) -> frozenset[str]:
    if fault.get("node"):
        return frozenset({str(fault["node"])})
    if fault.get("nodes"):
        return frozenset(map(str, fault["nodes"]))
    if fault.get("leaf"):
        return frozenset(site.blocks.get(str(fault["leaf"]), ()))
    return frozenset(site.nodes)  # a fault of the whole fabric (non_mpi)


def subject_nodes(site: Site, subject: str) -> frozenset[str]:
    """The nodes a verdict's subject names: node names, block names (their members), "all"."""
    out: set[str] = set()
    nodes = set(site.nodes)
    for part in re.split(r"[:\[\]]", subject):
        words = {part, *part.split("-")} if part not in nodes else {part}
        for w in words:
            if w in nodes:
                out.add(w)
            elif w in site.blocks:
                out.update(site.blocks[w])
            elif w == "all":
                out.update(site.nodes)
    return frozenset(out)


def _describe(fault: Mapping[str, Any]) -> str:
    return "{" + ", ".join(f"{k}: {v}" for k, v in fault.items()) + "}"


def check(site: Site, results: Mapping[str, Any]) -> Finding:
    verdicts: Sequence[Mapping[str, Any]] = results.get("verdicts", [])
    families = set(results.get("families", []))
    selected = set(results.get("selected_nodes") or results.get("nodes") or site.nodes)
    faults = [(f, FAULT_FAMILY[str(f["kind"])], fault_nodes(site, f)) for f in site.sim_faults]
    where = [(v, subject_nodes(site, str(v["subject"]))) for v in verdicts]
    unexplained = [
        f"{v['check']}[{v['subject']}] ({v['outcome']})"
        for v, nodes in where
        if v["outcome"] == "error"
        or (
            v["outcome"] == "fail"
            and not any(_catches(f, fam, v) and nodes & fnodes for f, fam, fnodes in faults)
        )
    ]
    found, missed, outside = [], [], []
    for f, fam, fnodes in faults:
        rail = f.get("rail")
        on_rail = re.compile(rf"(?:^|:)rail{rail}(?:$|:)")  # node3:rail5, node1-node2:rail2:sendrecv:1GiB
        within = fam in families and bool(fnodes & selected)
        if within and rail is not None:
            within = any(
                v["outcome"] in ("pass", "fail")
                and v["family"] == fam
                and nodes & fnodes
                and on_rail.search(v["subject"])
                for v, nodes in where
            )  # a SKIP (a rail the selection left out) is not a test of it
        if not within:
            outside.append(_describe(f))
        elif any(
            v["outcome"] == "fail"
            and _catches(f, fam, v)
            and nodes & fnodes
            and (rail is None or on_rail.search(v["subject"]))
            for v, nodes in where
        ):
            found.append(_describe(f))
        else:
            missed.append(_describe(f))
    return Finding(tuple(unexplained), tuple(missed), tuple(found), tuple(outside))


def pytest_errors(junit: Path) -> tuple[str, ...]:
    """The items pytest itself reports as errors (an exception outside the verdicts): never injected."""
    import xml.etree.ElementTree as ET

    root = ET.parse(junit).getroot()
    return tuple(
        f"{case.get('classname')}::{case.get('name')} (pytest error)"
        for case in root.iter("testcase")
        if case.find("error") is not None
    )


def summary(finding: Finding) -> str:
    if finding.exact:
        line = f"as injected: {len(finding.found)} injected fault(s) found, no other failure"
    else:
        parts = []
        if finding.unexplained:
            more = f" (+{len(finding.unexplained) - 5} more)" if len(finding.unexplained) > 5 else ""
            parts.append(f"{len(finding.unexplained)} failure(s) no injected fault explains: "
                         + ", ".join(finding.unexplained[:5]) + more)  # fmt: skip
        if finding.missed:
            parts.append(f"{len(finding.missed)} injected fault(s) not found: " + ", ".join(finding.missed))
        line = "NOT as injected: " + "; ".join(parts)
    if finding.outside:
        line += f" ({len(finding.outside)} injected fault(s) outside the selection)"
    return line


def main(argv: list[str] | None = None) -> int:
    from clusteraccept.judge import record
    from clusteraccept.render import REPO_ROOT
    from clusteraccept.site.load import load_site

    ap = argparse.ArgumentParser(prog="python -m clusteraccept.sim.injected", description=__doc__)
    ap.add_argument("--site", required=True)
    ap.add_argument("--reports-dir", default=str(REPO_ROOT / "reports"))
    ap.add_argument("--pytest-junit", default=None, help="pytest's --junitxml file: its errored items count")
    ap.add_argument("run_dir", nargs="?", help="default: the site's latest run under --reports-dir")
    args = ap.parse_args(argv)
    site = load_site(args.site, REPO_ROOT / "site-configs")
    run_dir = Path(args.run_dir) if args.run_dir else Path(args.reports_dir) / site.name / "latest"
    try:
        results = record.load(run_dir)
    except (OSError, ValueError) as exc:
        print(f"no results to compare with the injected faults: {run_dir}: {exc}")
        return 1
    if results.get("dry_run"):
        print("dry run: nothing was judged, nothing to compare with the injected faults")
        return 0
    finding = check(site, results)
    if args.pytest_junit and Path(args.pytest_junit).exists():
        errored = pytest_errors(Path(args.pytest_junit))
        finding = replace(finding, unexplained=(*errored, *finding.unexplained))
    print(summary(finding))
    return 0 if finding.exact else 1


if __name__ == "__main__":
    sys.exit(main())
