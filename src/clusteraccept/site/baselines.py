"""The site's baselines: references in ReFrame's model (``{ref, lower, upper, unit, xfail}``) by key pattern.

``lower``/``upper`` are signed fractions of ``ref`` (null = unbounded); with ``ref: 0`` they are absolute
values. Keys are dotted strings (``nccl.busbw.sendrecv.pair.rail3.1GiB``); patterns use fnmatch wildcards
and the most specific matching pattern (most literal characters) wins (:func:`lookup`).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from clusteraccept.site.memo import ByIdentity
from clusteraccept.site.schema import Section


@dataclass(frozen=True)
class Reference:
    ref: float
    lower: float | None = None
    upper: float | None = None
    unit: str = ""
    xfail: str | None = None

    def bounds(self) -> tuple[float | None, float | None]:
        """Absolute (low, high) limits."""
        if self.ref == 0:
            return self.lower, self.upper
        lo = None if self.lower is None else self.ref * (1 + self.lower)
        hi = None if self.upper is None else self.ref * (1 + self.upper)
        return lo, hi


def lookup(baselines: Mapping[str, Reference], key: str) -> Reference | None:
    """The reference whose pattern matches ``key`` most specifically, or None. Remembered per mapping and
    key: a run asks for the same few hundred keys once per measured size (millions of times at scale),
    each an fnmatch over every pattern; a Site's baselines are never changed once loaded."""
    memo = _LOOKUPS.of(baselines)
    found = memo.get(key, _UNKNOWN)
    if found is _UNKNOWN:
        found = memo[key] = _lookup(baselines, key)
    return found  # type: ignore[return-value]


_UNKNOWN = object()
_LOOKUPS: ByIdentity[str, object] = ByIdentity()


def _lookup(baselines: Mapping[str, Reference], key: str) -> Reference | None:
    best: tuple[int, Reference] | None = None
    for pattern, reference in baselines.items():
        if fnmatch.fnmatchcase(key, pattern):
            score = len(pattern.replace("*", "").replace("?", ""))
            if best is None or score > best[0]:
                best = (score, reference)
    return None if best is None else best[1]


def _reference(sec: Section) -> Reference:
    return Reference(
        ref=sec.number("ref"),
        lower=sec.number("lower", "a signed fraction like -0.08, or null", default=None),
        upper=sec.number("upper", "a signed fraction like 0.10, or null", default=None),
        unit=sec.string("unit", default=""),
        xfail=sec.string("xfail", "a reason string", default=None),
    )


def load_baselines(file: str, data: Any, path: str = "baselines") -> dict[str, Reference]:
    """A baselines mapping ``pattern -> reference`` (inline in the site, or a separate reviewable file)."""
    top = Section(file, path, data, [str(k) for k in data] if isinstance(data, dict) else [])
    return {
        str(k): _reference(top.section(str(k), ["ref", "lower", "upper", "unit", "xfail"])) for k in top.data
    }
