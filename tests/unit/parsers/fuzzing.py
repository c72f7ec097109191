"""Fuzzing and error-line helpers shared by the parser tests (CONTRIBUTING.md, parser rules):
random text and random truncations/mutations of the real fixtures must parse or raise ParseError,
never any other exception, and a ParseError names the offending line.

A plain module, not a test file: `from fuzzing import ...` (conftest.py puts this folder on sys.path).
The strategies take the fixture texts themselves, so each test file keeps choosing its own fixtures.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

import pytest
from hypothesis import settings
from hypothesis import strategies as st

from clusteraccept.errors import ParseError

Parse = Callable[[str], object]
In = TypeVar("In")  # what a parser takes: the text, or (roce_sysfs) a {path: contents} dict

# 200 examples per fuzz test; no deadline, so a slow or busy worker (pytest -n) does not turn a
# correct parse into a flaky failure.
FUZZ = settings(max_examples=200, deadline=None)


def parses_or_parse_error(parse: Parse, *texts: str) -> None:
    """Each text parses, or raises ParseError with a line number >= 0; any other exception fails."""
    for text in texts:
        try:
            parse(text)
        except ParseError as exc:
            assert exc.line_no >= 0, (exc, text[:200])


def assert_parse_error_at(parse: Callable[[In], object], given: In, line_no: int) -> ParseError:
    """parse(given) raises ParseError naming 1-based line `line_no` (0: the input as a whole).

    Returns the error so that a test can check its `expected`/`got` as well.
    """
    with pytest.raises(ParseError) as err:
        parse(given)
    assert err.value.line_no == line_no, (err.value, repr(given)[:200])
    return err.value


@st.composite
def truncations(draw: st.DrawFn, texts: Sequence[str]) -> str:
    """One of `texts` cut at any position (empty and whole included)."""
    text = draw(st.sampled_from(texts))
    return text[: draw(st.integers(0, len(text)))]


@st.composite
def mutations(
    draw: st.DrawFn,
    texts: Sequence[str],
    *,
    max_cut: int = 40,
    insert: st.SearchStrategy[str] | None = None,
) -> str:
    """One of `texts` with up to `max_cut` characters at any position replaced by `insert`
    (default: any text of up to 12 characters, which may be empty: a pure deletion)."""
    text = draw(st.sampled_from(texts))
    a = draw(st.integers(0, len(text)))
    b = draw(st.integers(a, min(len(text), a + max_cut)))
    return text[:a] + draw(st.text(max_size=12) if insert is None else insert) + text[b:]


@st.composite
def splices(draw: st.DrawFn, texts: Sequence[str]) -> str:
    """One of `texts` as text[:a] + text[b:] for any a, b: a removed range when a < b, a repeated
    one when a > b (a whole block of lines gone or duplicated, not only a few characters)."""
    text = draw(st.sampled_from(texts))
    a = draw(st.integers(0, len(text)))
    b = draw(st.integers(0, len(text)))
    return text[:a] + text[b:]
