"""Run-to-run variation of the simulated fabric (DESIGN.md, "Simulation"; used by :mod:`.fabric`).

The fabric's own +-1% noise is keyed by a step's arguments, so a retest reproduces it to the bit. What a
retest does not reproduce is drawn here from a key that also names the attempt: a Gaussian factor of
relative standard deviation ``spread`` and, with probability ``transient_probability``, a dip by
``transient_factor``. Both are drawn once per run, from independent bits of one hash.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from typing import Any

from clusteraccept.errors import SiteConfigError


def _uniforms(key: str) -> tuple[float, float, float]:
    """Three independent uniforms in (0, 1] from ``key``. blake2b, not crc32: crc32 is affine, so the
    crc32s of keys that differ only in a suffix are a fixed XOR apart (far from independent)."""
    d = hashlib.blake2b(key.encode(), digest_size=12).digest()
    u1, u2, u3 = (int.from_bytes(d[i : i + 4], "big") + 1 for i in (0, 4, 8))
    return u1 / 2**32, u2 / 2**32, u3 / 2**32


def run_factor(key: str, spread: float, transient_probability: float, transient_factor: float) -> float:
    """One attempt's factor on busbw (``key``: seed|run|attempt): ``max(0.05, 1 + spread * z)``, z standard
    normal (Box-Muller; the floor keeps a bandwidth positive), times ``transient_factor`` with probability
    ``transient_probability`` (a draw independent of z)."""
    u1, u2, u3 = _uniforms(key)
    z = math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)
    f = max(0.05, 1.0 + spread * z)
    return f * transient_factor if u3 <= transient_probability else f


def fraction(v: Any, key: str, src: str, zero_ok: bool) -> float:
    """A number in [0, 1] (``zero_ok``) or in (0, 1] (a factor: 0 would make a run take forever)."""
    if isinstance(v, bool) or not isinstance(v, int | float) or not 0 <= v <= 1 or (v == 0 and not zero_ok):
        raise SiteConfigError(src, key, f"a number in {'[' if zero_ok else '('}0, 1]", repr(v))
    return float(v)


def run_noise(d: Mapping[str, Any], src: str) -> tuple[float, float, float]:
    """(spread, transient probability, transient factor) from a fabric JSON's top-level ``spread``
    (default 0) and ``transient`` ({probability (default 0), factor (default 0.6)})."""
    spread = d.get("spread", 0.0)
    if isinstance(spread, bool) or not isinstance(spread, int | float) or not 0 <= spread < math.inf:
        raise SiteConfigError(src, "spread", "a non-negative number", repr(spread))
    t = d.get("transient") or {}
    if not isinstance(t, Mapping) or not set(t) <= {"probability", "factor"}:
        raise SiteConfigError(src, "transient", "{probability, factor}", repr(t))
    p = fraction(t.get("probability", 0.0), "transient.probability", src, zero_ok=True)
    return float(spread), p, fraction(t.get("factor", 0.6), "transient.factor", src, zero_ok=False)
