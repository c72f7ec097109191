"""A campaign step's parse, stored: parsed once when its run is first judged, read back by ``--rejudge``.

A pair step's nccl-tests table, its NCCL INFO log and its launch records take ~300 us of Python to parse,
and a 16,384-node run has ~4 million steps: re-parsing all of raw/ on every ``--rejudge`` is most of what
a rejudge costs. :func:`parse_step` is the one place the three parsers run on a step; :func:`dumps` writes
its result as one compact JSON line (the dataclasses' fields in order) and :func:`loads` builds the same
frozen dataclasses back (equal to a fresh parse, which tests hold) in a fraction of the time.

A stored parse is derived data, never evidence: raw/ stays the record. It is used only when

- it was written by these parsers: :data:`VERSION` hashes every parser module's source, so any change to a
  parser makes the stored parses stale and the steps are parsed again (``--reparse`` forces it), and
- it was made from this very output: each line carries the CRC-32 of the stdout it was parsed from.

Anything else (a line damaged, a field of the wrong shape) makes :func:`loads` return None: the step is
parsed from raw/ as if nothing had been stored.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
import secrets
import types
import typing
import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clusteraccept.errors import ParseError
from clusteraccept.parsers import launch_record, nccl_debug, nccl_tests, torch_nccl
from clusteraccept.parsers.launch_record import LaunchRecord
from clusteraccept.parsers.nccl_debug import NcclDebug
from clusteraccept.parsers.nccl_tests_result import NcclTestsResult


def _version() -> str:
    """The parsers' version: a hash of this package's sources (every parser and their shared helpers) and of
    the two modules they import from outside it (errors.py words a refusal, which a stored parse keeps;
    redact.py takes secrets out of what nccl-tests' JSON dumps). Installed without its sources, it cannot
    tell one version from another: a version of this process alone, so that no stored parse is trusted."""
    here = Path(__file__).parent
    sources = sorted(here.glob("*.py"))
    if not sources:
        return f"unknown-{secrets.token_hex(8)}"
    h = hashlib.sha256()
    for path in [*sources, here.parent / "errors.py", here.parent / "redact.py"]:
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


VERSION = _version()


@dataclass(frozen=True)
class StepParse:
    """What the parsers made of one nccl-tests (or PyTorch fallback) step's output: each part, or why the
    parser refused it (its ParseError's message)."""

    result: NcclTestsResult | None
    result_error: str | None
    debug: NcclDebug | None  # None: no INFO log the parser could read (not an error: judged without it)
    records: tuple[LaunchRecord, ...] | None
    records_error: str | None


def _nothing_stored(bundle: str) -> Mapping[str, str]:
    return {}


def _nothing_kept(name: str) -> str | None:
    return None


@dataclass(frozen=True)
class Stored:
    """A run's stored parses as the judge gets them: ``read`` gives one evidence bundle's (the part of a
    reference before ``#``) :func:`dumps` lines by member, so that a worker reads only the bundles of the
    steps it judges; ``fresh`` gets, for the caller to store, every bundle where the judge parsed a step
    (or judged one anew: checks/launched.py), whole: the lines it kept beside the new ones; and the same for
    what the judge keeps whole (``kept``, ``keep``)."""

    read: Callable[[str], Mapping[str, str]] = _nothing_stored
    # bundle -> all its steps' lines as gzip members (:func:`pack`), in the order of the steps: compressed
    # where they were made, so that the parent never holds a whole run's parses (~1.7 KB a step, 4 million
    # steps) nor reads a bundle's file again to add to it
    fresh: dict[str, list[bytes]] = field(default_factory=dict)
    # verdicts kept whole by name (checks/kept.py: nccl's link errors): ``kept`` gives the line stored,
    # ``keep`` gets, for the caller to store, the line of what was judged anew
    kept: Callable[[str], str | None] = _nothing_kept
    keep: dict[str, str] = field(default_factory=dict)


def parse_step(source: str, stdout: str) -> StepParse:
    """Parse a campaign step's stdout (``source``: nccl-tests, or torch-nccl for the PyTorch fallback):
    the benchmark's table, the NCCL INFO log, the launch records."""
    result: NcclTestsResult | None = None
    result_error = records_error = None
    try:
        if source == "torch-nccl":
            result = torch_nccl.as_nccl_tests(torch_nccl.parse(stdout))
        else:
            result = nccl_tests.parse(stdout)
    except ParseError as exc:
        result_error = str(exc)
    try:
        debug: NcclDebug | None = nccl_debug.parse(stdout)
    except ParseError:
        debug = None
    records: tuple[LaunchRecord, ...] | None = None
    try:
        records = launch_record.records(stdout)
    except ParseError as exc:
        records_error = str(exc)
    return StepParse(result, result_error, debug, records, records_error)


# -- the codec: a dataclass as the list of its fields' values, in field order ------------------------------
#
# Both directions are generated as Python source once per class (as dataclasses and attrs make their
# __init__): a generic walk over ~30 objects of ~45 fields each costs as much as parsing the text again.


def _expr(tp: Any, x: str, names: dict[str, Any], decode: bool) -> str:
    """A Python expression converting ``x`` (a value of type ``tp``, or its stored form when ``decode``)."""
    origin = typing.get_origin(tp)
    if tp in (int, float, str, bool, type(None)) or tp is Any:
        return x
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(inner) != 1:
            if any(_expr(a, x, names, decode) != x for a in inner):
                raise TypeError(f"no stored form for {tp}")
            return x
        conv = _expr(inner[0], x, names, decode)
        return x if conv == x else f"(None if {x} is None else {conv})"
    if origin is tuple:
        args = typing.get_args(tp)
        seq = list if not decode else tuple
        names[seq.__name__] = seq
        if len(args) == 2 and args[1] is Ellipsis:
            conv = _expr(args[0], "y", names, decode)
            if conv == "y":
                return f"{seq.__name__}({x})"
            return f"{seq.__name__}([{conv} for y in {x}])"
        if any(_expr(a, x, names, decode) != x for a in args):
            raise TypeError(f"no stored form for {tp}")
        return f"{seq.__name__}({x})"
    if dataclasses.is_dataclass(tp):
        enc, dec = _class_codecs(tp)
        name = f"_{'dec' if decode else 'enc'}_{typing.cast(type, tp).__name__}"
        names[name] = dec if decode else enc
        return f"{name}({x})"
    raise TypeError(f"no stored form for {tp}")


_CLASS: dict[type, tuple[Callable[[Any], Any], Callable[[Any], Any]]] = {}


def _class_codecs(cls: Any) -> tuple[Callable[[Any], Any], Callable[[Any], Any]]:
    """A dataclass as the list of all its fields (``init=False`` ones too: they are stored, not derived
    again, when read back); read back without ``__init__`` (a frozen dataclass sets each field through
    ``object.__setattr__``: most of the cost), straight into the instance's ``__dict__``."""
    if cls in _CLASS:
        return _CLASS[cls]
    hints = typing.get_type_hints(cls)
    fields = [f.name for f in dataclasses.fields(cls)]
    names: dict[str, Any] = {"_cls": cls, "_new": object.__new__, "_n": len(fields)}
    encoded = ", ".join(_expr(hints[f], f"o.{f}", names, False) for f in fields)
    decoded = ", ".join(f"{f!r}: {_expr(hints[f], f'v[{i}]', names, True)}" for i, f in enumerate(fields))
    source = (
        f"def encode(o):\n    return [{encoded}]\n"
        "def decode(v):\n"
        "    if len(v) != _n:\n"
        f"        raise ValueError('{cls.__name__}: {len(fields)} fields expected, got ' + str(len(v)))\n"
        "    o = _new(_cls)\n"
        f"    o.__dict__.update({{{decoded}}})\n"
        "    return o\n"
    )
    exec(source, names)  # source made above from the class's own field names and types, nothing read in
    _CLASS[cls] = (names["encode"], names["decode"])
    return _CLASS[cls]


_ENCODE, _DECODE = _class_codecs(StepParse)


def dumps(parse: StepParse, stdout: str) -> str:
    """One step's parse as a JSON line, tied to the stdout it was made from by its CRC-32."""
    return json.dumps([zlib.crc32(stdout.encode()), _ENCODE(parse)], separators=(",", ":"))


def loads(line: str, stdout: str) -> StepParse | None:
    """The stored parse of ``stdout``, or None where the line is not one of this very output (another CRC)
    or is damaged: the caller parses the step again."""
    try:
        crc, values = json.loads(line)
        if crc != zlib.crc32(stdout.encode()):
            return None
        parse: StepParse = _DECODE(values)
    except (ValueError, TypeError, KeyError, IndexError, AttributeError):
        return None
    return parse


# -- a stored bundle's text: ``<member>\t<line>`` per step (members are slugs: no tab, no newline) --------


def pack(lines: Iterable[tuple[str, str]]) -> bytes:
    """``(member, line)`` pairs as one gzip member; gzip members concatenated read as one text (RFC 1952
    2.2), so each worker's part of a bundle is written as it came."""
    text = "".join(f"{member}\t{line}\n" for member, line in lines)
    return gzip.compress(text.encode(), compresslevel=3, mtime=0)


def unpack(lines: Iterable[str]) -> dict[str, str]:
    """The stored lines of a bundle's text by member (a later line for a member replaces an earlier one)."""
    out: dict[str, str] = {}
    for line in lines:
        member, tab, stored = line.partition("\t")
        if tab:
            out[member] = stored
    return out
