"""Evidence: what a node-side probe gathered, verbatim, before anyone parses it."""

from __future__ import annotations

import re
import sys
from dataclasses import MISSING, asdict, dataclass, field, fields
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
        """An Evidence read back (``--rejudge``, ``--resume``). Its argv words and meta keys and values are
        interned: they repeat from step to step (srun's options, the meta's names, node and collective
        names), and a JSON line gives each its own copy: 35% of a 1,024-node run's evidence in memory."""
        if "host" not in d or "source" not in d or not _FIELDS.issuperset(d):
            return cls(**d)  # the dataclass's own TypeError names what is missing or not a field
        # its fields set at once, as Verdict's (evidence read back: ~157,000 at 256 nodes, 13 -> 6 us each)
        ev = object.__new__(cls)
        got = {**_DEFAULTS, **d}
        got["argv"] = tuple([_shared(w) for w in got["argv"]])
        meta = got.get("meta")
        got["meta"] = {_shared(k): _shared(v) for k, v in meta.items()} if meta else {}
        ev.__dict__.update(got)
        return ev


def _shared(text: Any) -> Any:
    return sys.intern(text) if text.__class__ is str else text


_FIELDS = frozenset(f.name for f in fields(Evidence))
_DEFAULTS = {f.name: f.default for f in fields(Evidence) if f.default is not MISSING}


# The line hostio appends to the stderr of a command it ended at its timeout: spelled here only.
_TIMED_OUT = "timed out after"


def timed_out_line(timeout_s: float) -> str:
    """The stderr line of a command ended at its timeout (hostio), for the reader of the raw evidence."""
    return f"{_TIMED_OUT} {timeout_s:g} s"


def is_timed_out_line(line: str) -> bool:
    return line.strip().startswith(_TIMED_OUT)


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def slug(text: str) -> str:
    """A file-name-safe form of ``text`` (``/sys/class/net/ib0/mtu`` -> ``sys_class_net_ib0_mtu``)."""
    return _UNSAFE.sub("_", text).strip("_")[:120] or "_"
