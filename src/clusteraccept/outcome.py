"""Turning a run's verdicts into one pytest outcome per (check, subject): pure selection + the assertion."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from clusteraccept.judge.verdicts import Outcome, Verdict


def matching(verdicts: Sequence[Verdict], check: str, subject: str) -> list[Verdict]:
    """Verdicts of ``check`` on ``subject`` or on its finer parts (``node1-node2:rail3`` -> ``...:1GiB``)."""
    return [
        v
        for v in verdicts
        if (v.check == check or v.check.startswith(check + "."))
        and (v.subject == subject or v.subject.startswith(subject + ":"))
    ]


def missing_reason(jobs: Sequence[Mapping[str, Any]], subject: str) -> str | None:
    """Why nothing came back for ``subject``, from the job outcomes (node down, timeout, sbatch refused)."""
    parts = set(subject.replace("-", ":").split(":"))
    for job in jobs:
        for m in job.get("missing", []):
            if m == subject or m.split(":", 1)[-1] == subject or m in parts or m.split(":")[-1] in parts:
                return str(job.get("message") or f"job {job.get('name')} returned nothing for {m}")
    return None


@dataclass
class Judged:
    """What a suite test gets: the verdicts of its (check, subject) and one assertion over them."""

    check: str
    subject: str
    verdicts: list[Verdict]
    jobs: Sequence[Mapping[str, Any]]
    dry_run: bool
    record: Callable[[str, object], None]
    # --only-due: this subject is outside the run's scope, and why (the attestation it still holds)
    not_due: str | None = None

    def assert_accepted(self) -> None:
        if self.dry_run:
            pytest.skip("--dry-run: job scripts written to the run's jobs/, nothing submitted")
        found_bad = any(v.outcome in (Outcome.FAIL, Outcome.ERROR) for v in self.verdicts)
        if self.not_due is not None and not found_bad:
            # Not tested by this run: neither a pass nor a missing verdict. A failure the due steps found on
            # it anyway (localization blaming a partner of a due node) still fails: it is never hidden.
            pytest.skip(self.not_due)
        for v in self.verdicts:
            prefix = f"{v.check}[{v.subject}]"
            if v.value is not None:
                self.record(f"{prefix}.measured", v.value)
            if v.ref is not None:
                self.record(f"{prefix}.ref", v.ref)
            if v.lower is not None or v.upper is not None:
                self.record(f"{prefix}.bounds", f"[{v.lower}, {v.upper}] {v.unit}".strip())
            if v.evidence:
                self.record(f"{prefix}.evidence", " ".join(v.evidence))
        if not self.verdicts:
            reason = missing_reason(self.jobs, self.subject)
            pytest.fail(
                f"ERROR: no verdict for {self.check}[{self.subject}]: "
                f"{reason or 'no evidence came back for this subject'}",
                pytrace=False,
            )
        by = {o: [v for v in self.verdicts if v.outcome is o] for o in Outcome}
        bad = by[Outcome.FAIL] + by[Outcome.ERROR]
        if bad:
            lines = [("ERROR: " if v.outcome is Outcome.ERROR else "") + v.message for v in bad]
            pytest.fail("\n".join(lines), pytrace=False)
        if by[Outcome.PASS]:
            return
        if by[Outcome.WAIVED]:
            pytest.xfail("; ".join(v.message for v in by[Outcome.WAIVED]))
        pytest.skip("; ".join(dict.fromkeys(v.message for v in by[Outcome.SKIP])))
