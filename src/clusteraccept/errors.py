"""The project's small error hierarchy (DESIGN.md, Conventions)."""

from __future__ import annotations


class ClusterAcceptError(Exception):
    """Base of every error this project raises on purpose."""


class SiteConfigError(ClusterAcceptError):
    """A site file is missing or invalid; the message is one line: file, key path, expected, got."""

    def __init__(self, file: str, key: str, expected: str, got: str, hint: str = "") -> None:
        self.file, self.key, self.expected, self.got, self.hint = file, key, expected, got, hint
        where = f"{file}: {key}: " if key else f"{file}: "
        msg = f"{where}expected {expected}, got {got}"
        super().__init__(msg + (f" ({hint})" if hint else ""))


class ParseError(ClusterAcceptError):
    """A tool output does not say what its tool says. line_no is 1-based (0: the input as a whole)."""

    def __init__(self, line_no: int, expected: str, got: str) -> None:
        self.line_no, self.expected, self.got = line_no, expected, got
        super().__init__(f"line {line_no}: expected {expected}, got {got!r}")


class SubmitError(ClusterAcceptError):
    """Slurm (or submitit) refused or lost a job; carries Slurm's own message."""


class ProbeError(ClusterAcceptError):
    """A node-side collector could not gather what it was asked for."""
