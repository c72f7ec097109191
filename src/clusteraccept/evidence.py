"""Evidence: what a node-side probe gathered, verbatim, before anyone parses it."""

from __future__ import annotations

import json
import re
import sys
import zlib
from dataclasses import MISSING, asdict, dataclass, field, fields
from itertools import chain
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
        shared = _SHARED.__getitem__  # found in C: a Python call per word made it 8.7 us, 6.5 this way
        meta = got.get("meta")
        try:
            got["argv"] = tuple(map(shared, got["argv"]))
            got["meta"] = (
                dict(zip(map(shared, meta), map(shared, meta.values()), strict=True)) if meta else {}
            )
        except TypeError:  # a word that is no string (not what the archive writes): kept as it is
            got["argv"] = tuple(_SHARED[w] if w.__class__ is str else w for w in got["argv"])
            got["meta"] = {
                _SHARED[k] if k.__class__ is str else k: _SHARED[v] if v.__class__ is str else v
                for k, v in (meta or {}).items()
            }
        ev.__dict__.update(got)
        return ev


class _Interned(dict[str, str]):
    """The words of evidence read back, each kept once (``sys.intern``) and found again by a dict lookup.
    Forgotten every :data:`_WORDS` words (a run's pairs make a few unique words each): what was read keeps
    its words, and sys.intern gives the same one again while any evidence holds it."""

    def __missing__(self, text: str) -> str:
        if text.__class__ is not str:  # only strings are kept: 1, 1.0 and True would be one key
            raise TypeError(f"not a string: {text!r}")
        if len(self) >= _WORDS:
            self.clear()
        text = sys.intern(text)
        self[text] = text
        return text


_WORDS = 200_000


_SHARED = _Interned()


_FIELDS = frozenset(f.name for f in fields(Evidence))
_DEFAULTS = {f.name: f.default for f in fields(Evidence) if f.default is not MISSING}


def crc_of(ev: Evidence, crc: int = 0) -> int:
    """A CRC-32 of every field of ``ev`` (continuing ``crc``): whether a stored judgement was made from this
    very evidence (checks/launched.py, checks/kept.py). Its small fields joined with separators no probe
    prints (3x faster than as JSON: 67,826 steps at 256 nodes in 0.2 s); a field of an unexpected type
    (not what the archive writes) as JSON."""
    try:
        meta = chain.from_iterable(ev.meta.items())
        head = "\0".join((ev.host, ev.source, ev.path, *ev.argv, "\1", *meta, "\1", ev.stderr))
    except TypeError:
        parts = [ev.host, ev.source, ev.path, ev.argv, list(ev.meta.items()), ev.stderr]
        head = json.dumps(parts, default=repr)
    tail = f"\1{ev.returncode}\1{ev.duration_s!r}\1"
    return zlib.crc32(ev.stdout.encode(), zlib.crc32((head + tail).encode(), crc))


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
