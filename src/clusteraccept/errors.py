"""The project's small error hierarchy (DESIGN.md, Conventions), and how a CLI ends on a closed pipe."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable


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


class InitError(ClusterAcceptError):
    """``init`` refused its input in one line (a partition with no nodes, no node answered...)."""


class ArchiveError(ClusterAcceptError):
    """The run directory could not be written (a full filesystem) or an archived bundle is cut off; the
    message is one line naming the path."""


class ProbeError(ClusterAcceptError):
    """A node-side collector could not gather what it was asked for."""


# --- a command line whose reader went away -------------------------------------------------------------
# ``python -m clusteraccept.parsers TOOL FILE | head``: Python raises BrokenPipeError at the write after the
# reader closed the pipe, and again when it flushes stdout at exit. The Python docs' recipe (library/
# signal.rst, "Note on SIGPIPE") points stdout at devnull so that the second write cannot fail, and exits
# 1, as Python itself does on EPIPE. No traceback.
CLOSED_PIPE_EXIT = 1


def run_main(main: Callable[[], int]) -> int:
    """``main()``'s exit status, or CLOSED_PIPE_EXIT, quietly, when stdout's reader closed the pipe."""
    try:
        code = main()
        sys.stdout.flush()  # inside the try: the last buffered lines are where a closed pipe shows
        return code
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return CLOSED_PIPE_EXIT
