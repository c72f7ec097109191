"""The Debian 13 root that Slurm 24.11 runs from: built once with mmdebstrap, cached, rebuilt when stale.

Debian 12's own Slurm is 22.05; Debian 13 (trixie) ships slurm-wlm 24.11, Open MPI 5 and PMIx 5 in its main
archive, which the machine's package mirror serves. The root holds the Slurm daemons and clients, munge,
Open MPI, PMIx and python3 with mpi4py; the Python packages the project needs on a node (submitit, pandas,
pytest, ...) are added under ``/opt/clusteraccept/lib`` by the host's pip, for CPython 3.13, at the versions
the host's virtualenv has (cloudpickle pickles cross between the two). The project's own source is not
copied: the node's python finds it through PYTHONPATH, in the checkout bind-mounted at the same path.

Stale means: no manifest, a manifest of another spec (packages, suite, format), or a daemon missing. A
stale root is built again beside the old one and swapped in; a root with anything mounted under it is
never deleted (a bind-mounted checkout would go with it).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clusteraccept.vcluster.install import InstallError, apt_install
from clusteraccept.vcluster.record import repo_root

SUITE = "trixie"
SLURM_VERSION = "24.11"
# slurmdbd is here and MariaDB is not: the host's MariaDB only stores what slurmdbd sends it.
PACKAGES = (
    "slurmctld",
    "slurmd",
    "slurm-client",
    "slurmdbd",
    "munge",
    "openmpi-bin",
    "libpmix-bin",
    "python3",
    "python3-mpi4py",
    # python-hostlist publishes no wheel, so the host's pip cannot fetch it for 3.13: Debian's package.
    "python3-hostlist",
)
PYTHON_VERSION = "3.13"
LIB = "/opt/clusteraccept/lib"  # inside the root
# Bumped when what the root holds changes in a way the package list does not show.
FORMAT = 1
MANIFEST = ".clusteraccept-root.json"
_REQUIRED = (
    "usr/sbin/slurmctld",
    "usr/sbin/slurmd",
    "usr/sbin/slurmdbd",
    "usr/bin/sbatch",
    "usr/bin/python3",
)
# Platforms the host's pip may take wheels for (CPython 3.13 on x86_64 glibc; trixie has glibc 2.41).
_PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")


@dataclass(frozen=True)
class Root:
    path: Path
    manifest: dict[str, Any]

    @property
    def python(self) -> str:
        return "/usr/bin/python3"  # inside the root


def default_roots_dir() -> Path:
    """$CLUSTERACCEPT_VCLUSTER_ROOTS, else ``<repo>/.vcluster/roots``."""
    env = os.environ.get("CLUSTERACCEPT_VCLUSTER_ROOTS")
    return Path(env) if env else repo_root() / ".vcluster" / "roots"


def mirror(texts: list[str] | None = None) -> str:
    """The Debian archive this machine's apt sources use (deb822 ``URIs:`` or one-line ``deb URL``), not
    its security archive; ``texts``: the sources files' contents (read from /etc/apt when None)."""
    if texts is None:
        texts = []
        for path in [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]:
            try:
                texts.append(path.read_text())
            except OSError:
                continue
    for text in texts:
        for m in re.finditer(r"^\s*(?:URIs:\s*|deb\s+(?:\[[^\]]*\]\s+)?)(\S+)", text, re.MULTILINE):
            url = m.group(1).rstrip("/")
            if not url.endswith("-security"):
                return url
    return "http://deb.debian.org/debian"


def runtime_requirements() -> list[str]:
    """``name==version`` for every distribution the project needs at run time, as the host has it
    (the project's Requires-Dist, followed through; python-hostlist comes from Debian)."""
    pins: dict[str, str] = {}
    todo = [r for r in _requires("clusteraccept")]
    while todo:
        name = todo.pop()
        key = name.lower().replace("_", "-")
        if key in pins or key == "python-hostlist":
            continue
        try:
            pins[key] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pins[key] = ""
            continue
        todo += _requires(name)
    return sorted(f"{k}=={v}" if v else k for k, v in pins.items())


def _requires(dist: str) -> list[str]:
    try:
        reqs = importlib.metadata.requires(dist) or []
    except importlib.metadata.PackageNotFoundError:
        return []
    names = []
    for req in reqs:
        if "extra ==" in req:
            continue
        marker = req.split(";", 1)[1] if ";" in req else ""
        if "python_version" in marker and "<" in marker:  # back-ports for older Pythons
            continue
        m = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", req)
        if m:
            names.append(m.group(0))
    return names


def spec() -> dict[str, Any]:
    return {
        "format": FORMAT,
        "suite": SUITE,
        "packages": list(PACKAGES),
        "python_requirements": runtime_requirements(),
    }


def _spec_hash(s: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(s, sort_keys=True).encode()).hexdigest()[:16]


def load(path: Path) -> Root | None:
    """The root at ``path`` if it is complete and built from today's spec, else None."""
    try:
        manifest = json.loads((path / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    if manifest.get("spec_hash") != _spec_hash(spec()):
        return None
    if not all((path / rel).exists() for rel in _REQUIRED):
        return None
    return Root(path, manifest)


def mounts_under(path: Path) -> list[str]:
    """Mount points at or below ``path`` in this mount namespace (/proc/self/mountinfo field 5)."""
    prefix = str(path.resolve())
    found = []
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError as exc:  # unknown is not "none": a bind-mounted checkout would go with an rmtree
        raise InstallError(f"cannot tell what is mounted under {path}: {exc}") from None
    for line in lines:
        fields = line.split()
        if len(fields) > 4:
            # mountinfo escapes space, tab, newline and backslash as octal (proc(5))
            point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])
            if point == prefix or point.startswith(prefix + "/"):
                found.append(point)
    return found


def users(path: Path) -> list[int]:
    """Processes whose root directory is ``path`` (/proc/PID/root): daemons and jobs chrooted in it."""
    target = str(path.resolve())
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.readlink(f"/proc/{entry}/root") == target:
                    found.append(int(entry))
            except OSError:
                continue
    return found


def _remove(path: Path) -> None:
    if not path.exists():
        return
    busy = mounts_under(path)
    if busy:
        raise InstallError(f"will not delete {path}: {busy[0]} is mounted under it (unmount it first)")
    shutil.rmtree(path)


def ensure(roots_dir: Path | None = None, log: Path | None = None) -> Root:
    """The cached root, built first if it is missing or stale. Needs root and network to the mirrors.
    Call it under the machine lock (vcluster/record.machine_lock): two builds must not swap roots at once."""
    base = (roots_dir or default_roots_dir()).resolve()
    path = base / f"slurm-{SLURM_VERSION}"
    found = load(path)
    if found is not None:
        return found
    if os.geteuid() != 0:
        raise InstallError("building the Slurm 24.11 root needs root")
    running = users(path) if path.exists() else []
    if running:
        raise InstallError(
            f"{path} is stale (built from other packages or pins than this checkout's) but {len(running)} "
            f"processes run in it (pid {running[0]}): bring down the virtual clusters that use it first"
        )
    if shutil.which("mmdebstrap") is None:
        apt_install(["mmdebstrap"], log)
    base.mkdir(parents=True, exist_ok=True)
    new = base / f".building-{SLURM_VERSION}-{os.getpid()}"
    _remove(new)
    try:
        manifest = _build(new, log)
    except BaseException:
        shutil.rmtree(new, ignore_errors=True)  # a half-built root; nothing is mounted under it
        raise
    old = base / f".old-{SLURM_VERSION}-{os.getpid()}"
    if path.exists():
        os.replace(path, old)
    os.replace(new, path)
    _remove(old)
    return Root(path, manifest)


def _build(new: Path, log: Path | None = None) -> dict[str, Any]:
    t0 = time.monotonic()
    url = mirror()
    argv = [
        "mmdebstrap",
        "--variant=apt",
        f"--include={','.join(PACKAGES)}",
        SUITE,
        str(new),
        f"deb {url} {SUITE} main",
    ]
    _run(argv, log, "mmdebstrap")
    strap_s = time.monotonic() - t0
    reqs = runtime_requirements()
    pip = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        "--target",
        f"{new}{LIB}",
        "--python-version",
        PYTHON_VERSION,
        "--implementation",
        "cp",
        "--only-binary=:all:",
        *[f"--platform={p}" for p in _PLATFORMS],
        *reqs,
    ]
    _run(pip, log, "pip install (node packages for Python 3.13)")
    manifest = {
        "spec_hash": _spec_hash(spec()),
        **spec(),
        "mirror": url,
        "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "build_s": round(time.monotonic() - t0, 1),
        "mmdebstrap_s": round(strap_s, 1),
        "versions": _versions(new),
    }
    (new / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def _versions(root: Path) -> dict[str, str]:
    pkgs = ["slurmd", "slurm-client", "slurmdbd", "munge", "openmpi-bin", "python3", "python3-mpi4py"]
    out = subprocess.run(
        ["chroot", str(root), "dpkg-query", "-W", "-f=${Package} ${Version}\\n", *pkgs, "libpmix2t64"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    versions = dict(line.split(" ", 1) for line in out.stdout.splitlines() if " " in line)
    return versions


def _run(argv: list[str], log: Path | None, what: str) -> None:
    result = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=1800)
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("a") as f:
            f.write(f"$ {' '.join(argv)}\n{result.stdout}{result.stderr}\n")
    if result.returncode != 0:
        tail = (result.stdout + result.stderr).strip().splitlines()[-3:]
        raise InstallError(f"{what} failed (exit {result.returncode}): {' / '.join(tail)}")


def describe(root: Root) -> str:
    """One line for `vcluster status`: what the root was built from."""
    m = root.manifest
    versions = m.get("versions", {})
    pkgs = ", ".join(f"{k} {v}" for k, v in sorted(versions.items()))
    return f"root {root.path}: Debian {m.get('suite')} from {m.get('mirror')}, built {m.get('built')}: {pkgs}"
