"""The run's raw/ archive: every Evidence written on the submit host BEFORE any parser sees it, and read back
for ``--rejudge``."""

from __future__ import annotations

import json
from pathlib import Path

from clusteraccept.evidence import Evidence, slug


def archive_name(ev: Evidence) -> str | None:
    """The raw/ file name of a campaign's evidence: per step, or per counter snapshot; None: default."""
    if "subject" in ev.meta:
        return f"{ev.meta['collective']}_{ev.meta['subject']}"
    if ev.meta.get("role") == "counters" and "snapshot" in ev.meta:
        return f"counters_{ev.meta['snapshot']}"
    return None


def archive(ev: Evidence, raw_dir: Path, check: str, name: str | None = None) -> Path:
    """Write ``ev`` to ``raw/<check>/<host>/<name>.json`` (redacted) and return the path.

    Called on the submit host BEFORE any parser sees the evidence, so a parse error never loses it.
    """
    from clusteraccept.redact import redact_evidence

    ev = redact_evidence(ev)
    base = name or slug(ev.source + ("_" + "_".join(ev.argv[1:]) if ev.argv else "_" + ev.path))
    out_dir = raw_dir / check / slug(ev.host)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{slug(base)}.json"
    n = 1
    while path.exists():
        n += 1
        path = out_dir / f"{slug(base)}.{n}.json"
    path.write_text(json.dumps(ev.to_dict(), indent=1))
    return path


def load(path: Path) -> Evidence:
    """Read back an archived Evidence (for ``--rejudge``)."""
    return Evidence.from_dict(json.loads(path.read_text()))
