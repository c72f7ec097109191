"""A small reader for validated YAML: every error names the file, the key path, what was expected and got.

Used by every section reader of the site (and the baselines file). Unknown keys are errors with a "did you
mean" where one is close.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from clusteraccept.errors import SiteConfigError
from clusteraccept.redact import is_secret_name

T = TypeVar("T")
_MISSING: Any = object()

ENV_NAME = r"[A-Za-z_][A-Za-z0-9_]*"  # an environment variable name (POSIX: letters, digits, _)


def describe(value: Any) -> str:
    """How a found value reads in an error message: its repr, shortened, and its YAML type where unclear."""
    if value is None:
        return "null"
    if isinstance(value, dict):
        return f"a mapping with keys {sorted(map(str, value))[:6]}"
    if isinstance(value, list):
        return f"a list of {len(value)} items"
    text = repr(value)
    return text if len(text) < 60 else text[:57] + "..."


# Characters no site value may hold: C0/C1 controls (newline, CR, NUL, ESC, ...) and the Unicode line and
# paragraph separators. A newline inside an ``#SBATCH`` value ends the line: what follows runs as a command
# in the batch script, and sbatch stops reading options at the first line that is not a comment, so every
# option after it is silently dropped. ``description`` (report text only, HTML-escaped) may span lines.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_MULTILINE_KEYS = frozenset({"description"})  # top-level key paths
# a value (a path, a feature expression) that cannot be taken for an option where it is a command-line word
NOT_AN_OPTION = r"[^-].*"
_TEXT_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029]")  # newline and tab allowed


def refuse_control(file: str, data: Any, path: str = "") -> None:
    """Every string of a YAML document (keys and values, at any depth) is one line of printable text.

    Run on the whole document before its sections are read, so no reader can forget it: the one-line error
    names the file, the key path and the character found."""
    if isinstance(data, str):
        if m := (_TEXT_CONTROL if path in _MULTILINE_KEYS else _CONTROL).search(data):
            raise SiteConfigError(file, path, "one line of text without control characters", _found(data, m))
    elif isinstance(data, dict):
        for k, v in data.items():
            if isinstance(k, str) and (m := _CONTROL.search(k)):
                where = f"{path}.{k!r}" if path else repr(k)  # the path itself stays one line
                raise SiteConfigError(file, where, "a key without control characters", _found(k, m))
            refuse_control(file, v, f"{path}.{k}" if path else str(k))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            refuse_control(file, v, f"{path}[{i}]")


def _found(value: str, m: re.Match[str]) -> str:
    return f"{m[0]!r} at character {m.start() + 1} of {describe(value)}"


def refuse_secrets(file: str, key: str, env: dict[str, str]) -> None:
    """A variable named like a credential (redact.py) is not written into the site file: the job scripts
    and the run directory a vendor receives would hold it."""
    for k in env:
        if is_secret_name(k):
            raise SiteConfigError(
                file,
                f"{key}.{k}",
                "no credentials in the site file",
                f"{k}, named like one",
                f"put {k}=... in the file env_file names (mode 0600), or export it where you submit",
            )


class Section:
    """A mapping at ``path`` inside ``file``; reads typed keys and rejects unknown ones."""

    def __init__(self, file: str, path: str, data: Any, allowed: Iterable[str]) -> None:
        self.file, self.path = file, path
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise SiteConfigError(file, path or "(top level)", "a mapping", describe(data))
        self.data: dict[str, Any] = data
        allowed = list(allowed)
        for key in data:
            if not isinstance(key, str):
                raise SiteConfigError(file, self.key(str(key)), "a string key", describe(key))
            if key not in allowed:
                close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
                hint = f"did you mean {close[0]!r}?" if close else f"known keys: {', '.join(allowed)}"
                raise SiteConfigError(file, self.key(key), "a known key", f"unknown key {key!r}", hint)

    def key(self, name: str) -> str:
        return f"{self.path}.{name}" if self.path else name

    def error(self, name: str, expected: str, value: Any) -> SiteConfigError:
        return SiteConfigError(self.file, self.key(name), expected, describe(value))

    def has(self, name: str) -> bool:
        return self.data.get(name) is not None

    def raw(self, name: str, default: Any = _MISSING) -> Any:
        if name not in self.data or self.data[name] is None:
            if default is _MISSING:
                raise SiteConfigError(self.file, self.key(name), "a value (required key)", "nothing")
            return default
        return self.data[name]

    def typed(
        self, name: str, kind: type[T] | tuple[type, ...], expected: str, default: Any = _MISSING
    ) -> Any:
        value = self.raw(name, default)
        if value is default and default is not _MISSING:
            return value
        # YAML booleans are ints in Python: never accept True where a number is expected.
        if isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,)):
            raise self.error(name, expected, value)
        if not isinstance(value, kind):
            raise self.error(name, expected, value)
        return value

    def string(
        self, name: str, expected: str = "a string", default: Any = _MISSING, pattern: str | None = None
    ) -> Any:
        value = self.typed(name, str, expected, default)
        if isinstance(value, str) and pattern and not re.fullmatch(pattern, value):
            raise self.error(name, expected, value)
        return value

    def integer(
        self,
        name: str,
        expected: str = "an integer",
        default: Any = _MISSING,
        minimum: int | None = None,
        maximum: int | None = None,
    ) -> Any:
        value = self.typed(name, int, expected, default)
        if isinstance(value, int) and (
            (minimum is not None and value < minimum) or (maximum is not None and value > maximum)
        ):
            raise self.error(name, expected, value)
        return value

    def number(
        self, name: str, expected: str = "a number", default: Any = _MISSING, minimum: float | None = None
    ) -> Any:
        value = self.typed(name, (int, float), expected, default)
        if isinstance(value, int | float) and minimum is not None and value < minimum:
            raise self.error(name, expected, value)
        return float(value) if isinstance(value, int | float) else value

    def flag(self, name: str, expected: str = "true or false", default: Any = _MISSING) -> Any:
        return self.typed(name, bool, expected, default)

    def choice(self, name: str, choices: Iterable[str], default: Any = _MISSING) -> Any:
        choices = list(choices)
        value = self.raw(name, default)
        if value is default and default is not _MISSING:
            return value
        if value not in choices:
            close = difflib.get_close_matches(str(value), choices, n=1, cutoff=0.6)
            hint = f"did you mean {close[0]!r}?" if close else ""
            raise SiteConfigError(
                self.file, self.key(name), f"one of {', '.join(choices)}", describe(value), hint
            )
        return value

    def str_list(
        self, name: str, expected: str = "a list of strings", default: Any = _MISSING
    ) -> tuple[str, ...]:
        value = self.raw(name, default)
        if value is default and default is not _MISSING:
            return tuple(value)
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.error(name, expected, value)
        return tuple(value)

    def str_map(self, name: str, expected: str = "a mapping of strings to strings") -> dict[str, str]:
        value = self.raw(name, {})
        if not isinstance(value, dict):
            raise self.error(name, expected, value)
        out: dict[str, str] = {}
        for k, v in value.items():
            if isinstance(v, bool) or not isinstance(v, str | int | float) or not isinstance(k, str):
                raise SiteConfigError(self.file, self.key(f"{name}.{k}"), "a string or number", describe(v))
            out[k] = str(v)
        return out

    def section(self, name: str, allowed: Iterable[str]) -> Section:
        return Section(self.file, self.key(name), self.data.get(name), allowed)

    def sections(self, name: str, allowed: Iterable[str]) -> dict[str, Section]:
        """A mapping of named sub-sections (``node_types.h100: {...}``)."""
        value = self.raw(name, {})
        if not isinstance(value, dict):
            raise self.error(name, "a mapping of named sections", value)
        return {str(k): Section(self.file, self.key(f"{name}.{k}"), v, allowed) for k, v in value.items()}

    def convert(self, name: str, fn: Callable[[Any], T], expected: str, default: Any = _MISSING) -> T:
        """Read a value through ``fn``; any ValueError/TypeError becomes a SiteConfigError."""
        value = self.raw(name, default)
        if value is default and default is not _MISSING:
            return value  # type: ignore[no-any-return]
        try:
            return fn(value)
        except (ValueError, TypeError) as exc:
            raise SiteConfigError(
                self.file, self.key(name), expected, describe(value), str(exc) or ""
            ) from None


_SIZE = re.compile(r"(?i)^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(i?B?)\s*$")


def parse_size_B(value: Any) -> int:
    """``8``, ``"1G"``, ``"1GiB"``, ``"64M"`` -> bytes (binary multiples, as nccl-tests' -b/-e do)."""
    if isinstance(value, bool):
        raise ValueError("a boolean is not a size")
    if isinstance(value, int):
        return value
    m = _SIZE.match(str(value))
    if not m:
        raise ValueError("sizes look like 8, 64K, 1G or 1GiB")
    mult = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}[m[2].upper()]
    return int(float(m[1]) * mult)


def format_size(size_B: int) -> str:
    """Bytes -> the shortest exact binary form (``1073741824`` -> ``1GiB``)."""
    for unit, mult in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size_B >= mult and size_B % mult == 0:
            return f"{size_B // mult}{unit}"
    return f"{size_B}B"


def expand_repo(value: str | None) -> Any:
    """``{repo}`` in a path-like value stands for the checkout's root (used by the demo and example sites)."""
    from clusteraccept.render import REPO_ROOT

    return None if value is None else value.replace("{repo}", str(REPO_ROOT))
