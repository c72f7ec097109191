"""Turning a run's verdicts into one pytest outcome per item (family x node, family x block;
:mod:`clusteraccept.judge.items`): pure selection + the assertion."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from _pytest.mark.expression import Expression  # what -k compiles to; pytest exports no public name for it

from clusteraccept.judge.items import SHOWN, counts_line, failure_lines


@dataclass(frozen=True)
class ItemNames:
    """The names pytest's ``-k`` matches an item by, less its own ``func[param]`` name."""

    function: str
    others: frozenset[str]


def compile_keyword(expression: str) -> Expression:
    try:
        return Expression.compile(expression)
    except Exception as exc:  # SyntaxError in pytest 9; older ones raise _pytest.mark.expression.ParseError
        raise pytest.UsageError(f"Wrong expression passed to '-k': {expression}: {exc}") from None


def item_names(item: pytest.Item) -> ItemNames:
    """As pytest's KeywordMatcher.from_item: the chain's names (not the session's or the root dir's), extra
    keywords, markers."""
    names = {
        n.name
        for n in item.listchain()[:-1]
        if not isinstance(n, pytest.Session)
        and not (isinstance(n, pytest.Directory) and isinstance(n.parent, pytest.Session))
    }
    names.update(item.listextrakeywords())
    names.update(m.name for m in item.iter_markers())
    function = getattr(item, "originalname", item.name)
    return ItemNames(function, frozenset(n.lower() for n in names if n != item.name))


def keyword_matches(expr: Expression, names: ItemNames, subject: str, owners: Sequence[str] = ()) -> bool:
    """Whether ``-k`` selects ``subject`` as a test of its own, ``<function>[<subject>]``, would be; a part
    answers to its items' ids too (``<function>[<owner>]``: ``-k "test_nccl_node[node3]"`` is all of it)."""
    return _evaluate(expr, [f"{names.function}[{s}]".lower() for s in (subject, *owners)], names.others)


def item_matches(expr: Expression, item: pytest.Item) -> bool:
    """pytest's own ``-k`` rule for an item that is not a suite check."""
    return _evaluate(expr, [item.name.lower()], item_names(item).others)


def _evaluate(expr: Expression, own: Sequence[str], others: frozenset[str]) -> bool:
    """``expr`` over names, as pytest's KeywordMatcher matches: a case-insensitive substring of any."""

    def match(sub: str, /, **kwargs: object) -> bool:
        sub = sub.lower()
        return any(sub in n for n in own) or any(sub in n for n in others)

    return bool(expr.evaluate(match))


def picked_parts(item: pytest.Item, expr: Expression, parts: Sequence[str]) -> frozenset[str]:
    """The parts of ``item`` (judge/items.py) that ``-k`` selects; ``parts[0]`` is the item's own subject."""
    names = item_names(item)
    return frozenset(p for p in parts if keyword_matches(expr, names, p, parts[:1]))


def missing_reason(jobs: Sequence[Mapping[str, Any]], subject: str) -> str | None:
    """Why nothing came back for ``subject``, from the job outcomes (node down, timeout, sbatch refused)."""
    parts = set(subject.replace("-", ":").split(":"))
    for job in jobs:
        for m in job.get("missing", []):
            if m == subject or m.split(":", 1)[-1] == subject or m in parts or m.split(":")[-1] in parts:
                return str(job.get("message") or f"job {job.get('name')} returned nothing for {m}")
    return None


DRY_RUN = "--dry-run: job scripts written to the run's jobs/, nothing submitted"  # every item's skip


@dataclass
class Judged:
    """What a suite test gets: the verdicts of its item and one assertion over them.

    ``verdicts`` are results.json dicts; ``evidence`` the failing pair results that involve the item's node
    (``evidence_n`` of them in all): quoted when the item fails, never its reason to fail."""

    family: str
    subject: str
    verdicts: list[Mapping[str, Any]]
    jobs: Sequence[Mapping[str, Any]]
    dry_run: bool
    record: Callable[[str, object], None]
    # --only-due: this subject is outside the run's scope, and why (the attestation it still holds)
    not_due: str | None = None
    evidence: Sequence[Mapping[str, Any]] = ()
    evidence_n: int = 0

    def assert_accepted(self) -> None:
        if self.dry_run:
            pytest.skip(DRY_RUN)
        outcomes = {v["outcome"] for v in self.verdicts}
        bad = [v for v in self.verdicts if v["outcome"] in ("fail", "error")]
        if self.not_due is not None and not bad:
            # Not tested by this run: neither a pass nor a missing verdict. A failure the due steps found on
            # it anyway (localization blaming a partner of a due node) still fails: it is never hidden.
            pytest.skip(self.not_due)
        self.record("verdicts", counts_line(self.verdicts))
        for v in bad[:SHOWN]:
            prefix = f"{v['check']}[{v['subject']}]"
            if v.get("value") is not None:
                self.record(f"{prefix}.measured", v["value"])
            if v.get("ref") is not None:
                self.record(f"{prefix}.ref", v["ref"])
            if v.get("evidence"):
                self.record(f"{prefix}.evidence", " ".join(v["evidence"]))
        if not self.verdicts:
            reason = missing_reason(self.jobs, self.subject)
            pytest.fail(
                f"ERROR: no verdict for {self.family}[{self.subject}]: "
                f"{reason or 'no evidence came back for this subject'}",
                pytrace=False,
            )
        if bad:
            lines = failure_lines(self.verdicts, self.subject, self.evidence, self.evidence_n)
            pytest.fail("\n".join(lines), pytrace=False)
        if "pass" in outcomes:
            return
        if "waived" in outcomes:
            pytest.xfail("; ".join(v.get("message") or "" for v in self.verdicts if v["outcome"] == "waived"))
        pytest.skip("; ".join(dict.fromkeys(v.get("message") or "" for v in self.verdicts)))
