"""Start daemons inside a namespace, know them again by (pid, start time, comm), stop them, wait for them.

Every daemon runs in the foreground of a detached process chain
``nsenter --net=/run/netns/NS unshare --uts --mount --propagation slave -- sh -c 'hostname H; mount --bind
<hosts> /etc/hosts; exec DAEMON'`` where every step execs the next, so the pid we get is the daemon's.
``ip netns exec`` is not used: it remounts /sys and hides /sys/fs/cgroup, and slurmd 22.05 then dies.
The chain is started by a short-lived ``sh`` that backgrounds it and exits, so daemons are orphans reaped by
init, never children of (say) a pytest process that would have to wait for them.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from clusteraccept.vcluster.netns import NETNS_DIR


@dataclass(frozen=True)
class Proc:
    """One daemon we started: enough to recognise it later even if its pid was reused."""

    name: str  # e.g. "slurmd-node3"
    comm: str  # expected /proc/PID/comm once it has exec'd
    pid: int
    start_ticks: int  # /proc/PID/stat field 22: identical for a pid only within one process's life
    ns: str
    mnt_ns: int = 0  # inode of its private mount namespace, shared by everything it starts (jobs too)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_json(d: dict[str, Any]) -> Proc:
        return Proc(
            str(d["name"]),
            str(d["comm"]),
            int(d["pid"]),
            int(d["start_ticks"]),
            str(d["ns"]),
            int(d.get("mnt_ns", 0)),
        )

    def with_mnt_ns(self) -> Proc:
        """Record the mount namespace once the daemon runs (before, it may still be nsenter/unshare)."""
        ino = mnt_ns_of(self.pid)
        return Proc(self.name, self.comm, self.pid, self.start_ticks, self.ns, ino or 0)


def mnt_ns_of(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}/ns/mnt").st_ino
    except OSError:
        return None


def _stat(pid: int) -> tuple[str, int] | None:
    """(state letter, start time in clock ticks) of a pid, or None if there is no such process."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The comm field is in parentheses and may contain spaces: split after the last ')'.
    fields = raw[raw.rindex(")") + 2 :].split()
    return fields[0], int(fields[19])


def comm_of(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return None


# What the process is called while the launch chain is still exec'ing towards the daemon.
# (The 24.11 flavour's chain goes through its enter-root script and chroot: vcluster/flavour.py.)
_LAUNCHING = frozenset({"sh", "nsenter", "unshare", ".enter-root", "chroot"})


def is_ours(p: Proc) -> bool:
    """The very process we started (same pid and start time), the daemon or its launch chain still."""
    st = _stat(p.pid)
    return st is not None and st[1] == p.start_ticks and comm_of(p.pid) in (p.comm, *_LAUNCHING)


def alive(p: Proc) -> bool:
    """Ours and not a zombie (it may still be exec'ing towards the daemon)."""
    st = _stat(p.pid)
    return st is not None and st[0] not in ("Z", "X") and is_ours(p)


def running(p: Proc) -> bool:
    """Alive and already the expected program."""
    return alive(p) and comm_of(p.pid) == p.comm


# slurmd 22.05 dies without a cgroup fs on /sys/fs/cgroup even with no cgroup plugin configured ("No
# filesystem mounted on /sys/fs/cgroup"; with a bare tmpfs: "can't stat /sys/fs/cgroup/systemd/"). If the
# host has none, mount one in the daemon's private mount namespace: cgroup2 where the process is in the
# unified hierarchy only (its /proc/self/cgroup is just "0::..."; slurmd refuses a cgroup2 mount in a
# hybrid setup), else a tmpfs with a named v1 hierarchy, as systemd would. (The v1 path was tried here by
# unmounting /sys/fs/cgroup in a private namespace; the v2 path is untested.)
_CGROUP_FS = (
    "if ! mountpoint -q /sys/fs/cgroup; then "
    "if grep -qv '^0::' /proc/self/cgroup; then "
    "mount -t tmpfs cgroup_root /sys/fs/cgroup && mkdir -p /sys/fs/cgroup/systemd && "
    "mount -t cgroup -o none,name=systemd cgroup /sys/fs/cgroup/systemd; "
    "else mount -t cgroup2 cgroup2 /sys/fs/cgroup; fi; fi"
)


def spawn(
    name: str,
    comm: str,
    ns: str,
    hostname: str,
    hosts_file: Path,
    argv: list[str],
    log: Path,
    env: dict[str, str],
    prefix: Sequence[str] = (),
) -> Proc:
    """Start ``argv`` (a foreground daemon) in namespace ``ns`` with its own hostname and /etc/hosts;
    ``prefix`` goes before it (the 24.11 flavour's enter-root script, which execs it inside the root)."""
    inner = (
        f"hostname {shlex.quote(hostname)} && mount --bind {shlex.quote(str(hosts_file))} /etc/hosts && "
        f"{_CGROUP_FS} && "
        f"exec {shlex.join([*prefix, *argv])}"
    )
    chain = [
        "nsenter",
        f"--net={NETNS_DIR / ns}",
        "unshare",
        "--uts",
        "--mount",
        "--propagation",
        "slave",
        "--",
        "sh",
        "-c",
        inner,
    ]
    launcher = f"{shlex.join(chain)} </dev/null >>{shlex.quote(str(log))} 2>&1 & echo $!"
    log.parent.mkdir(parents=True, exist_ok=True)
    out = subprocess.run(
        ["sh", "-c", launcher],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        timeout=30,
        start_new_session=True,
    )
    pid = int(out.stdout.strip())
    st = _stat(pid)
    if st is None:
        raise RuntimeError(f"{name} exited at once; see {log}")
    return Proc(name, comm, pid, st[1], ns)


def wait_until(
    what: str,
    check: Callable[[], bool],
    timeout_s: float,
    procs: Sequence[Proc] = (),
    log: Path | None = None,
) -> None:
    """Poll ``check`` every 50 ms until true; fail early if one of ``procs`` died."""
    deadline = time.monotonic() + timeout_s
    while True:
        if check():
            return
        dead = [p.name for p in procs if not alive(p)]
        if dead:
            raise RuntimeError(
                f"{', '.join(dead)} died while waiting for {what}" + (f"; see {log}" if log else "")
            )
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"timed out after {timeout_s:.0f} s waiting for {what}" + (f"; see {log}" if log else "")
            )
        time.sleep(0.05)


def tcp_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def unix_open(path: Path) -> bool:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.settimeout(0.5)
        s.connect(str(path))
        return True
    except OSError:
        return False
    finally:
        s.close()


def _exited(pid: int, start_ticks: int) -> bool:
    """Gone, or a zombie: it has closed its sockets and files, only its exit status is left to collect."""
    st = _stat(pid)
    return st is None or st[1] != start_ticks or st[0] in ("Z", "X")


def _reaped(pid: int, start_ticks: int) -> bool:
    st = _stat(pid)
    if st is None or st[1] != start_ticks:
        return True
    if st[0] in ("Z", "X"):
        # Our own child (only if the caller started it directly): reap it; otherwise init will.
        with contextlib.suppress(ChildProcessError):
            return os.waitpid(pid, os.WNOHANG)[0] == pid
    return False


def stop(procs: list[Proc], term_timeout_s: float = 10.0, kill_timeout_s: float = 5.0) -> list[str]:
    """SIGTERM our live processes, SIGKILL the ones still running after ``term_timeout_s``.

    Returns once all have exited (zombies count: init here reaps only every ~2 s, so waiting for that
    at every stage would cost seconds; call :func:`wait_reaped` once at the end). Returns a note per
    process that needed SIGKILL or never went away.
    """
    notes: list[str] = []
    targets = [p for p in procs if is_ours(p)]
    for p in targets:
        _signal(p.pid, signal.SIGTERM)
    left = _wait(targets, term_timeout_s, _exited)
    for p in left:
        notes.append(f"{p.name} (pid {p.pid}) ignored SIGTERM; sent SIGKILL")
        _signal(p.pid, signal.SIGKILL)
    for p in _wait(left, kill_timeout_s, _exited):
        notes.append(f"{p.name} (pid {p.pid}) still present after SIGKILL")
    return notes


def wait_reaped(procs: list[Proc], timeout_s: float = 10.0) -> list[str]:
    """Wait until the processes have disappeared from /proc; a note for each still there."""
    return [
        f"{p.name} (pid {p.pid}) not reaped after {timeout_s:.0f} s" for p in _wait(procs, timeout_s, _reaped)
    ]


def _signal(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def _wait(procs: list[Proc], timeout_s: float, done: Callable[[int, int], bool]) -> list[Proc]:
    deadline = time.monotonic() + timeout_s
    left = list(procs)
    while left:
        left = [p for p in left if not done(p.pid, p.start_ticks)]
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    return left


def snapshot(pid: int, ns: str) -> Proc | None:
    """A Proc for a process found in one of our namespaces (not started by us directly, e.g. slurmstepd)."""
    st, comm = _stat(pid), comm_of(pid)
    if st is None or comm is None:
        return None
    return Proc(f"{comm}@{ns}", comm, pid, st[1], ns)


def run_env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env.update(extra)
    return env
