"""Judging measurements against references (DESIGN.md §7): pure. Measurement + Reference -> Verdict.

The references are the site's (:mod:`clusteraccept.site.baselines`: ReFrame's model with names,
``{ref: 48.0, lower: -0.08, upper: null, unit: GB/s}``). ``xfail: "reason"`` waives a failure with that
reason (the verdict is WAIVED, never PASS).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from clusteraccept.site.baselines import Reference


class Outcome(enum.StrEnum):
    PASS = "pass"
    FAIL = "fail"
    SKIP = "skip"
    ERROR = "error"  # the measurement could not be made for reasons outside the hardware (job lost, ...)
    WAIVED = "waived"


@dataclass(frozen=True, init=False)
class Verdict:
    """One judged subject. ``subject`` is what a ``-k`` selects on (``node03-node07:rail5:1GiB``)."""

    check: str
    family: str
    subject: str
    outcome: Outcome
    message: str
    value: float | str | None = None
    ref: float | None = None
    lower: float | None = None
    upper: float | None = None
    unit: str = ""
    evidence: tuple[str, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)

    def __init__(
        self,
        check: str,
        family: str,
        subject: str,
        outcome: Outcome,
        message: str,
        value: float | str | None = None,
        ref: float | None = None,
        lower: float | None = None,
        upper: float | None = None,
        unit: str = "",
        evidence: tuple[str, ...] = (),
        labels: Mapping[str, str] | None = None,
    ) -> None:
        """The dataclass's own, but its fields set at once: a frozen dataclass's generated __init__ sets
        each through object.__setattr__ (4 us a verdict, 1 us this way; a 256-node run makes ~360,000 in
        the workers and unpickles them again in the parent)."""
        self.__dict__.update(
            check=check,
            family=family,
            subject=subject,
            outcome=outcome,
            message=message,
            value=value,
            ref=ref,
            lower=lower,
            upper=upper,
            unit=unit,
            evidence=evidence,
            labels={} if labels is None else labels,
        )

    @property
    def test_id(self) -> str:
        return f"{self.check}[{self.subject}]"

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as its fields, the outcome by value: the step judging's workers send the parent ~5
        verdicts a step (~360,000 at 256 nodes), which load ~30% faster than through the dataclass's
        default (an Enum call and a state dict each)."""
        return (
            _restored,
            (
                self.check,
                self.family,
                self.subject,
                self.outcome.value,
                self.message,
                self.value,
                self.ref,
                self.lower,
                self.upper,
                self.unit,
                self.evidence,
                self.labels,
            ),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "check": self.check,
            "family": self.family,
            "subject": self.subject,
            "outcome": self.outcome.value,
            "message": self.message,
            "value": self.value,
            "ref": self.ref,
            "lower": self.lower,
            "upper": self.upper,
            "unit": self.unit,
            "evidence": list(self.evidence),
            "labels": dict(self.labels),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Verdict:
        return cls(
            check=d["check"],
            family=d["family"],
            subject=d["subject"],
            outcome=Outcome(d["outcome"]),
            message=d["message"],
            value=d.get("value"),
            ref=d.get("ref"),
            lower=d.get("lower"),
            upper=d.get("upper"),
            unit=d.get("unit", ""),
            evidence=tuple(d.get("evidence", ())),
            labels=dict(d.get("labels", {})),
        )


_OUTCOMES = {o.value: o for o in Outcome}


def _restored(
    check: str,
    family: str,
    subject: str,
    outcome: str,
    message: str,
    value: float | str | None,
    ref: float | None,
    lower: float | None,
    upper: float | None,
    unit: str,
    evidence: tuple[str, ...],
    labels: Mapping[str, str],
) -> Verdict:
    return Verdict(
        check, family, subject, _OUTCOMES[outcome], message, value, ref, lower, upper, unit, evidence, labels
    )


def _fmt(x: float) -> str:
    return f"{x:.3g}" if abs(x) < 1000 else f"{x:.0f}"


def judge(
    check: str,
    family: str,
    subject: str,
    value: float,
    reference: Reference | None,
    *,
    what: str,
    context: str = "",
    evidence: tuple[str, ...] = (),
    labels: Mapping[str, str] | None = None,
) -> Verdict:
    """Judge a number against its reference. No reference: SKIP saying which key lacks one (never PASS)."""
    ctx = f" [{context}]" if context else ""
    if reference is None:
        return Verdict(
            check,
            family,
            subject,
            Outcome.SKIP,
            f"{what}={_fmt(value)}: no baseline for this key{ctx}",
            value=value,
            evidence=evidence,
            labels=dict(labels or {}),
        )
    lo, hi = reference.bounds()
    outcome, msg = against(value, reference, lo, hi, what)
    return Verdict(
        check,
        family,
        subject,
        outcome,
        msg + ctx,
        value=value,
        ref=reference.ref,
        lower=lo,
        upper=hi,
        unit=reference.unit,
        evidence=evidence,
        labels=dict(labels or {}),
    )


def against(
    value: float, reference: Reference, lo: float | None, hi: float | None, what: str
) -> tuple[Outcome, str]:
    """The outcome of ``value`` against ``reference`` (whose bounds are ``lo``, ``hi``) and what it says,
    without its context: :func:`judge`'s, for a caller that makes millions of verdicts against a few
    hundred references (checks/nccl.judge_measured) and works their bounds out once each."""
    unit = reference.unit
    rel = ""
    if reference.ref:
        pct = (value / reference.ref - 1) * 100
        rel = f"{pct:+.0f}%"
    if lo is not None and value < lo:
        outcome, msg = (
            Outcome.FAIL,
            f"{what}={_fmt(value)} {unit} is below {_fmt(lo)} (ref {_fmt(reference.ref)}, {rel})",
        )
    elif hi is not None and value > hi:
        outcome, msg = (
            Outcome.FAIL,
            f"{what}={_fmt(value)} {unit} is above {_fmt(hi)} (ref {_fmt(reference.ref)}, {rel})",
        )
    else:
        span = f"[{'-inf' if lo is None else _fmt(lo)}, {'inf' if hi is None else _fmt(hi)}]"
        outcome, msg = Outcome.PASS, f"{what}={_fmt(value)} {unit} within {span} (ref {_fmt(reference.ref)})"
    if outcome is Outcome.FAIL and reference.xfail:
        outcome, msg = Outcome.WAIVED, f"{msg}; waived: {reference.xfail}"
    return outcome, msg.replace("  ", " ")


def to_row(v: Verdict, evidence: bool | list[str]) -> list[Any]:
    """``v`` as a list JSON writes, in its fields' order, with ``evidence`` standing for its evidence refs
    (the stored step judgements write ``true`` for "its own step's"): how checks/launched.py and
    checks/kept.py keep verdicts in the run."""
    return [
        v.check,
        v.family,
        v.subject,
        v.outcome.value,
        v.message,
        v.value,
        v.ref,
        v.lower,
        v.upper,
        v.unit,
        evidence,
        dict(v.labels),
    ]


def from_row(row: Sequence[Any], own: tuple[str, ...] | None = None) -> Verdict:
    """The verdict of a :func:`to_row` list; its evidence ``own`` where the row says ``true`` (a row that
    says so where no ``own`` is given is refused), none where ``false``. TypeError or ValueError where the
    list is not such a row (a damaged file: the callers judge again)."""
    c, fam, s, o, m, val, r, lo, hi, u, e, lab = row
    if type(e) is not bool:
        evidence = tuple(e)
    elif own is None:
        raise TypeError(f"evidence refs, got {e!r}")
    else:
        evidence = own if e else ()
    return Verdict(
        c, fam, s, Outcome(o), m, val, _bound(r), _bound(lo), _bound(hi), u, evidence, dict(lab)
    )  # fmt: skip


def _bound(x: Any) -> float | None:
    if x is not None and type(x) not in (int, float):
        raise TypeError(f"a reference value, got {x!r}")
    return x  # type: ignore[no-any-return]


def expect(
    check: str,
    family: str,
    subject: str,
    ok: bool,
    message: str,
    *,
    value: float | str | None = None,
    evidence: tuple[str, ...] = (),
    labels: Mapping[str, str] | None = None,
) -> Verdict:
    """A yes/no verdict (a configuration fact: trust mode, PFC priority, module loaded...)."""
    return Verdict(
        check,
        family,
        subject,
        Outcome.PASS if ok else Outcome.FAIL,
        message,
        value=value,
        evidence=evidence,
        labels=dict(labels or {}),
    )


def skip(check: str, family: str, subject: str, reason: str, evidence: tuple[str, ...] = ()) -> Verdict:
    return Verdict(check, family, subject, Outcome.SKIP, reason, evidence=evidence)


def error(check: str, family: str, subject: str, reason: str, evidence: tuple[str, ...] = ()) -> Verdict:
    return Verdict(check, family, subject, Outcome.ERROR, reason, evidence=evidence)
