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

import contextlib
import fnmatch
import json
import os
import resource
import shlex
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import IO

from clusteraccept.evidence import Evidence, timed_out_line

PROFILE_ENV = "CLUSTERACCEPT_HOST_PROFILE"
PASSTHROUGH = ("", -1)  # a profile entry for a command that really runs there


def hostname() -> str:
    """This node's name as the site and Slurm name it: SLURMD_NODENAME inside a Slurm task (srun(1): "Name
    of the node running the task"; a node's hostname may differ from its NodeName), else the hostname."""
    return (
        os.environ.get("CLUSTERACCEPT_HOSTNAME")
        or os.environ.get("SLURMD_NODENAME")
        or socket.gethostname().split(".")[0]
    )


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


def _answered(argv_t: tuple[str, ...], src: str, host: str) -> Evidence | None:
    """The host profile's recorded answer for ``argv_t`` (or its refusal); None: run it for real."""
    profile = _profile_dir()
    if profile is None:
        return None
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
    return run_many([argv], timeout_s, source, env)[0]


@dataclass
class _Running:
    index: int
    argv: tuple[str, ...]
    src: str
    proc: subprocess.Popen[bytes]
    out: IO[bytes]
    err: IO[bytes]
    t0: float
    interrupts: int = 0  # SIGINTs sent to a timed-out srun (_still_stopping)
    stop_t: float = 0.0


# srun(1), SIGNALS AND ESCAPE SEQUENCES: a second SIGINT within one second makes srun send SIGINT to all
# tasks and enter "a termination sequence ... sending SIGCONT, SIGTERM, and SIGKILL to all spawned tasks".
# SIGKILL to srun alone leaves its step running on the nodes (until its -t), into the next round.
SRUN_INTERRUPT_GAP_S = 0.2  # apart, so that the two are not merged into one pending signal
SRUN_STOP_GRACE_S = 15.0  # how long srun may take to end its step before it is killed


def _still_stopping(r: _Running, now: float) -> bool:
    """For a timed-out ``srun``: advance its stop sequence; True while it is given time to end its step."""
    if Path(r.argv[0]).name != "srun":
        return False
    if r.interrupts == 0:
        r.proc.send_signal(signal.SIGINT)
        r.interrupts, r.stop_t = 1, now
        return True
    if r.interrupts == 1:
        if now - r.stop_t >= SRUN_INTERRUPT_GAP_S:
            r.proc.send_signal(signal.SIGINT)
            r.interrupts = 2
        return True
    return now - r.stop_t < SRUN_STOP_GRACE_S


def run_many(
    argvs: Sequence[Sequence[str]],
    timeout_s: float,
    source: str | None = None,
    env: dict[str, str] | None = None,
    start_interval_s: float = 0.0,
    stop: Callable[[], bool] | None = None,
    envs: Sequence[dict[str, str]] | None = None,
) -> list[Evidence]:
    """Run every command at once (no shell), each with its own timeout, and return their Evidence in order.

    One thread for any number of processes: each writes to unlinked temporary files (no pipe to drain,
    so no reader thread per process) and the loop only starts, polls and kills. Starts are spaced
    ``start_interval_s`` apart (a site's step rate). What :func:`run` promises, each command gets.
    Once ``stop()`` is true no further command is started (the running ones are waited for): those left
    get an Evidence that says so, returncode None. ``envs``: each command's own additions to ``env``.
    """
    items = [tuple(str(a) for a in argv) for argv in argvs]
    host = hostname()
    full_env = None if env is None else {**os.environ, **env}
    per = [full_env if not e else {**(full_env or os.environ), **e} for e in envs] if envs else None
    results: list[Evidence | None] = [None] * len(items)
    _room_for_files(2 * len(items))
    running: list[_Running] = []
    try:
        _loop(
            items,
            results,
            running,
            host,
            per or [full_env] * len(items),
            source,
            timeout_s,
            start_interval_s,
            stop,
        )
    finally:  # an exception (an interrupt) leaves no child running, as subprocess.run's does not
        for r in running:
            with contextlib.suppress(OSError):
                r.proc.kill()
                r.proc.wait()
            r.out.close()
            r.err.close()
    return [ev for ev in results if ev is not None]


def _loop(
    items: list[tuple[str, ...]],
    results: list[Evidence | None],
    running: list[_Running],
    host: str,
    envs: Sequence[dict[str, str] | None],
    source: str | None,
    timeout_s: float,
    start_interval_s: float,
    stop: Callable[[], bool] | None,
) -> None:
    next_i, next_start = 0, time.monotonic()
    while next_i < len(items) or running:
        if stop is not None and next_i < len(items) and stop():
            for i in range(next_i, len(items)):
                argv_t = items[i]
                why = "not started: told to stop before its turn (the caller is ending)"
                results[i] = Evidence(
                    host, source or Path(argv_t[0]).name, argv=argv_t, returncode=None, stderr=why
                )
            next_i = len(items)
        now = time.monotonic()
        while next_i < len(items) and now >= next_start:
            argv_t = items[next_i]
            src = source or Path(argv_t[0]).name
            started = _answered(argv_t, src, host) or _start(next_i, argv_t, src, host, envs[next_i])
            next_i += 1
            if isinstance(started, Evidence):  # answered (host profile) or refused: nothing started
                results[next_i - 1] = started
                continue
            running.append(started)
            if start_interval_s:  # from this start, not from the loop's "now": never closer than asked
                next_start = time.monotonic() + start_interval_s
                break
        for r in list(running):
            rc = r.proc.poll()
            now = time.monotonic()
            if rc is None and now - r.t0 <= timeout_s:
                continue
            if rc is None and _still_stopping(r, now):
                continue
            running.remove(r)
            results[r.index] = _finish(r, host, timeout_s, timed_out=rc is None or r.interrupts > 0)
        if len(running) == 1 and next_i >= len(items):  # the last one: block on it (no poll latency)
            r = running[0]
            left = r.t0 + timeout_s - time.monotonic()
            with contextlib.suppress(subprocess.TimeoutExpired):
                r.proc.wait(timeout=max(0.0, left) if not r.interrupts else SRUN_INTERRUPT_GAP_S)
        elif running or next_i < len(items):
            wake = next_start - time.monotonic() if next_i < len(items) else 1.0
            time.sleep(max(0.0, min(0.01 if len(running) <= 16 else 0.05, wake)))


def _start(
    index: int, argv_t: tuple[str, ...], src: str, host: str, env: dict[str, str] | None
) -> _Running | Evidence:
    t0 = time.monotonic()
    files: list[IO[bytes]] = []
    try:
        # open past this call: _finish reads and closes them when the process has ended
        files = [tempfile.TemporaryFile(), tempfile.TemporaryFile()]  # noqa: SIM115
        proc = subprocess.Popen(argv_t, stdin=subprocess.DEVNULL, stdout=files[0], stderr=files[1], env=env)
    except OSError as exc:  # this command could not start (missing, not executable, no file left...)
        for f in files:
            f.close()
        code, why = (
            (127, f"{argv_t[0]}: command not found ({exc})")
            if isinstance(exc, FileNotFoundError)
            else (126, str(exc))
        )
        return Evidence(host, src, argv=argv_t, returncode=code, stderr=why, duration_s=time.monotonic() - t0)
    return _Running(index, argv_t, src, proc, files[0], files[1], t0)


def _text(f: IO[bytes]) -> str:
    """What the process wrote, as ``subprocess.run(text=True)`` gives it (universal newlines)."""
    f.seek(0)
    text = f.read().decode(errors="replace")
    f.close()
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _finish(r: _Running, host: str, timeout_s: float, timed_out: bool) -> Evidence:
    if timed_out and r.proc.poll() is None:
        r.proc.kill()  # as subprocess.run does on its timeout (an srun: after its stop sequence)
    rc = r.proc.wait()
    duration_s = time.monotonic() - r.t0
    out, err = _text(r.out), _text(r.err)
    if timed_out:
        return Evidence(
            host,
            r.src,
            argv=r.argv,
            returncode=None,
            stdout=out,
            stderr=err
            + f"\n{timed_out_line(timeout_s)}"
            + ("; srun was interrupted twice to end its step" if r.interrupts > 1 else ""),
            duration_s=duration_s,
        )
    return Evidence(host, r.src, argv=r.argv, returncode=rc, stdout=out, stderr=err, duration_s=duration_s)


def _room_for_files(n: int) -> None:
    """Raise this process's open-file limit towards its hard limit when ``n`` more files need room (two
    per running command: a wave of 750 steps needs 1,500, above the usual soft limit of 1,024)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = n + 256
    if want > soft and (hard == resource.RLIM_INFINITY or soft < hard):
        new = want if hard == resource.RLIM_INFINITY else min(want, hard)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))


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


def cpu_affinity() -> frozenset[int]:
    """The CPUs this process may run on (sched_getaffinity(2)). In a host profile: the ``allowed`` list of
    its ``affinity.json``, the CPUs Slurm gave the task on that simulated node."""
    profile = _profile_dir()
    if profile is None:
        return frozenset(os.sched_getaffinity(0))
    return frozenset(_profile_affinity(profile).get("allowed", ()))


def bind_cpus(cpus: frozenset[int]) -> frozenset[int]:
    """Bind this process (and what it execs) to ``cpus`` (sched_setaffinity(2)); the affinity it then has.
    In a host profile nothing real is bound: the answer is ``cpus``, unless its ``affinity.json`` has a
    ``forced`` list, what that node forces on every task (an injected fault)."""
    profile = _profile_dir()
    if profile is None:
        os.sched_setaffinity(0, cpus)
        return frozenset(os.sched_getaffinity(0))
    forced = _profile_affinity(profile).get("forced")
    return cpus if forced is None else frozenset(forced)


# The file a process's environment is in (proc(5)): what environ()'s Evidence is named after. It reads
# os.environ, the same variables, as this process holds them
ENVIRON = "/proc/self/environ"


def environ(names: Sequence[str]) -> Evidence:
    """The values this process's environment gives ``names`` (only those: a job's environment holds
    credentials), one ``NAME=value`` line each, the unset ones left out. In a host profile: this process's
    environment changed by its ``environ.json`` (name -> value, or null where that node's jobs lack it)."""
    env = dict(os.environ)
    profile = _profile_dir()
    if profile is not None:
        try:
            changes: dict[str, str | None] = json.loads((profile / "environ.json").read_text())
        except OSError:
            changes = {}
        env.update({k: v for k, v in changes.items() if v is not None})
        for k in (k for k, v in changes.items() if v is None):
            env.pop(k, None)
    lines = "".join(f"{n}={env[n]}\n" for n in names if n in env)
    return Evidence(hostname(), "job-env", path=ENVIRON, returncode=0, stdout=lines)


def _profile_affinity(profile: Path) -> dict[str, list[int]]:
    try:
        found: dict[str, list[int]] = json.loads((profile / "affinity.json").read_text())
    except OSError:
        return {}
    return found
