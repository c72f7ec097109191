"""Evidence: what a node-side probe gathered, verbatim, before anyone parses it."""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Evidence:
    """One command's output or one file's content from one host.

    ``source`` names what was gathered (``nvidia-smi-topo``, ``sysfs``, ``nccl-tests``...); exactly one of
    ``argv`` (a command) or ``path`` (a file read) is set. ``returncode`` is None for a command that timed out
    or could not start, and for file reads that failed.
    """

    host: str
    source: str
    argv: tuple[str, ...] = ()
    path: str = ""
    returncode: int | None = 0
    stdout: str = ""
    stderr: str = ""
    duration_s: float = 0.0
    meta: dict[str, str] = field(default_factory=dict, compare=False)

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["argv"] = list(self.argv)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Evidence:
        d = dict(d)
        d["argv"] = tuple(d.get("argv", ()))
        return cls(**d)


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def slug(text: str) -> str:
    """A file-name-safe form of ``text`` (``/sys/class/net/ib0/mtu`` -> ``sys_class_net_ib0_mtu``)."""
    return _UNSAFE.sub("_", text).strip("_")[:120] or "_"


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
