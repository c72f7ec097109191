"""A family's verdicts kept with the run and used again while nothing they were judged from changed.

``--rejudge`` is mostly run after a baselines edit, and most families read no baseline: the topology, NVLink,
GPUDirect and SHARP judges of a 256-node run took ~5 s of a rejudge's ~22 s, each time the same. A family
(other than nccl, whose steps keep their own: checks/launched.py) is judged from :func:`view` of the site
only, always, stored or not: the site without its baselines but for the patterns that could match a key of
the family's own (``gpudirect.``, ``sharp.``, ``nvlink.``: the keys its judge looks up), and without where
its file is and its description. Its verdicts are kept under :func:`key_of` that view, this code and these
parsers, the nodes it judged and every byte of the evidence it was handed, so that what a judge cannot see
cannot be stale, and anything else it read (an edit of its own baselines, a step re-run by ``--resume``,
an upgrade) judges the family again.

Pure: text in, text out (flow.py reads and writes the files, jobs/archive.py says where).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import zlib
from collections.abc import Sequence

from clusteraccept.checks.launched import CODE, canon, unjudged
from clusteraccept.evidence import Evidence, crc_of
from clusteraccept.judge.verdicts import Verdict, from_row, to_row
from clusteraccept.site.model import Site

Archived = tuple[Evidence, str]
_WILD = "*?["  # fnmatch's special characters (site/baselines.lookup matches the patterns with fnmatchcase)


def could_match(pattern: str, prefix: str) -> bool:
    """Whether the fnmatch ``pattern`` matches some key that begins with ``prefix``: its literal start
    (up to its first special character) begins with the prefix, or the pattern is still open where its
    start is a part of the prefix (``*``, ``gpu*``). True where unsure: a pattern left in a view only
    judges the family again when it is edited."""
    cut = min((i for i in (pattern.find(c) for c in _WILD) if i >= 0), default=len(pattern))
    literal = pattern[:cut]
    return literal.startswith(prefix) or (cut < len(pattern) and prefix.startswith(literal))


def view(family: str, site: Site) -> Site:
    """The site as ``family``'s judge is given it: :func:`launched.unjudged
    <clusteraccept.checks.launched.unjudged>`'s, with the baselines that could match a key ``<family>.``."""
    prefix = f"{family}."
    own = {p: r for p, r in site.baselines.items() if could_match(p, prefix)}
    return dataclasses.replace(unjudged(site), baselines=own)


def _digest(evidence: Sequence[Archived]) -> int:
    """A CRC over every field of every evidence handed in, and its reference, in order."""
    crc = 0
    for ev, ref in evidence:
        crc = crc_of(ev, zlib.crc32(f"{ref}\0".encode(), crc))
    return crc


def key_of(name: str, seen: Site, nodes: Sequence[str], evidence: Sequence[Archived]) -> str:
    """What the verdicts kept as ``name`` (a family, or nccl's link errors) must have been judged under to
    be used: this code and these parsers, the site as their judge was given it (``seen``: a family's
    :func:`view`), the nodes it judged (in order) and the evidence it was handed."""
    text = json.dumps(
        [CODE, name, canon(seen), list(nodes), len(evidence), _digest(evidence)], separators=(",", ":")
    )
    return hashlib.sha256(text.encode()).hexdigest()[:16]


_PLAIN = (type(None), bool, int, float, str)


def dumps(key: str, verdicts: Sequence[Verdict]) -> str | None:
    """The verdicts as one line under ``key``; None where one holds a value JSON would not give back as it
    is (a tuple, an object) or cannot write: such a family is judged every time."""
    rows = []
    for v in verdicts:
        if type(v.value) not in _PLAIN or not all(type(x) is str for x in (*v.labels, *v.labels.values())):
            return None
        rows.append(to_row(v, list(v.evidence)))
    try:
        return json.dumps([key, rows], separators=(",", ":"))
    except (TypeError, ValueError):  # a reference, unit or evidence of another type (a numpy number)
        return None


def loads(text: str, key: str) -> list[Verdict] | None:
    """The verdicts kept in ``text`` under ``key``; None where they were kept under another key, or the
    text is damaged: the caller judges the family again."""
    try:
        got_key, rows = json.loads(text)
        if got_key != key:
            return None
        return [from_row(row) for row in rows]
    except (ValueError, TypeError, KeyError, IndexError, AttributeError):
        return None
