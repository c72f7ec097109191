"""The ONE seam for processes and node files (DESIGN.md, Collect; Simulation).

Every probe runs commands through :func:`run` and reads files through :func:`read`/:func:`listdir`.
When the environment names a host profile (``CLUSTERACCEPT_HOST_PROFILE=<dir>``), these resolve to the
recorded outputs and the recorded filesystem tree of that profile instead of the live host; probe code has
no ``if simulated`` branch.

A profile directory holds ``commands.json`` (a list of ``{"match": "<fnmatch on the command line>",
"stdout": "<file in the profile>", "returncode": 0}``, or ``{"match": ..., "passthrough": true}`` for what
really runs there, e.g. the launcher ``srun``) and ``fs/`` (a tree mirroring ``/sys``, ``/proc``...).
If ``<dir>/<hostname>`` exists it is used, so one directory can describe every node of a simulated cluster.
"""

from __future__ import annotations

import fnmatch
import json
import os
import shlex
import socket
import subprocess
import time
from functools import lru_cache
from pathlib import Path

from clusteraccept.evidence import Evidence

PROFILE_ENV = "CLUSTERACCEPT_HOST_PROFILE"
PASSTHROUGH = ("", -1)  # a profile entry for a command that really runs there


def hostname() -> str:
    return os.environ.get("CLUSTERACCEPT_HOSTNAME") or socket.gethostname().split(".")[0]


def _profile_dir() -> Path | None:
    root = os.environ.get(PROFILE_ENV)
    if not root:
        return None
    base = Path(root)
    per_host = base / hostname()
    return per_host if per_host.is_dir() else base


@lru_cache(maxsize=16)
def _commands(profile: Path) -> tuple[tuple[str, str | None, int], ...]:
    index = profile / "commands.json"
    if not index.exists():
        return ()
    return tuple(
        (e["match"], None if e.get("passthrough") else e["stdout"], int(e.get("returncode", 0)))
        for e in json.loads(index.read_text())
    )


def _recorded(profile: Path, argv: tuple[str, ...]) -> tuple[str, int] | None:
    line = shlex.join(argv)
    for pattern, out_file, rc in _commands(profile):
        if fnmatch.fnmatchcase(line, pattern):
            return PASSTHROUGH if out_file is None else ((profile / out_file).read_text(), rc)
    return None


def run(
    argv: list[str] | tuple[str, ...],
    timeout_s: float,
    source: str | None = None,
    env: dict[str, str] | None = None,
) -> Evidence:
    """Run ``argv`` (no shell) with a timeout and return its Evidence; never raises for the command's fault.

    A missing binary gives returncode 127 and the reason in stderr; a timeout gives returncode None.
    """
    argv_t = tuple(str(a) for a in argv)
    src = source or Path(argv_t[0]).name
    host = hostname()
    t0 = time.monotonic()
    profile = _profile_dir()
    if profile is not None:
        rec = _recorded(profile, argv_t)
        if rec is not None and rec is not PASSTHROUGH:
            return Evidence(
                host,
                src,
                argv=argv_t,
                returncode=rec[1],
                stdout=rec[0],
                duration_s=0.0,
                meta={"simulated": "host-profile"},
            )
        # Only site-provided tools given by absolute path (e.g. the simulated nccl-tests) run for real.
        if rec is None and not (os.path.isabs(argv_t[0]) and os.access(argv_t[0], os.X_OK)):
            return Evidence(
                host,
                src,
                argv=argv_t,
                returncode=127,
                stderr=f"{argv_t[0]}: command not found",
                meta={"simulated": "host-profile"},
            )
    full_env = None if env is None else {**os.environ, **env}
    try:
        proc = subprocess.run(
            argv_t,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=full_env,
            errors="replace",
            check=False,
        )
    except FileNotFoundError as exc:
        return Evidence(
            host,
            src,
            argv=argv_t,
            returncode=127,
            stderr=f"{argv_t[0]}: command not found ({exc})",
            duration_s=time.monotonic() - t0,
        )
    except PermissionError as exc:
        return Evidence(
            host, src, argv=argv_t, returncode=126, stderr=str(exc), duration_s=time.monotonic() - t0
        )
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        err = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        return Evidence(
            host,
            src,
            argv=argv_t,
            returncode=None,
            stdout=out,
            stderr=err + f"\ntimed out after {timeout_s:g} s",
            duration_s=time.monotonic() - t0,
        )
    return Evidence(
        host,
        src,
        argv=argv_t,
        returncode=proc.returncode,
        stdout=proc.stdout,
        stderr=proc.stderr,
        duration_s=time.monotonic() - t0,
    )


def _resolve(path: str) -> Path:
    profile = _profile_dir()
    if profile is None:
        return Path(path)
    return profile / "fs" / path.lstrip("/")


def read(path: str, source: str = "sysfs") -> Evidence:
    """Read a (small) node file; a missing or unreadable file gives returncode 1 and the reason in stderr."""
    host = hostname()
    try:
        text = _resolve(path).read_text(errors="replace")
    except OSError as exc:
        return Evidence(host, source, path=path, returncode=1, stderr=f"{type(exc).__name__}: {exc.strerror}")
    return Evidence(host, source, path=path, returncode=0, stdout=text)


def listdir(path: str) -> list[str]:
    """Names in a node directory (sorted); empty when it does not exist."""
    try:
        return sorted(os.listdir(_resolve(path)))
    except OSError:
        return []


def realpath(path: str) -> str:
    """The resolved node path of a sysfs link (``/sys/class/net/ib0/device`` -> the PCI device dir)."""
    profile = _profile_dir()
    if profile is None:
        return os.path.realpath(path)
    fs = (profile / "fs").resolve()
    resolved = (fs / path.lstrip("/")).resolve()
    try:
        return "/" + str(resolved.relative_to(fs))
    except ValueError:
        return str(resolved)
