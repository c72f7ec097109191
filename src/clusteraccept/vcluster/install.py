"""Install Debian's Slurm 22.05, munge and MariaDB when they are missing.

The packages' postinst scripts try to start their daemons; there is no systemd here, and we start our own
private instances anyway, so the install runs with a policy-rc.d that exits 101 ("action forbidden",
invoke-rc.d(8)). An existing policy-rc.d is left exactly as it was.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

# Not the `slurm-wlm` meta package: it drags in every -dev plugin.
PACKAGES = ("slurmctld", "slurmd", "slurm-client", "munge", "slurmdbd", "mariadb-server")
BINARIES = (
    "slurmctld",
    "slurmd",
    "slurmdbd",
    "sinfo",
    "srun",
    "sbatch",
    "sacct",
    "scontrol",
    "scancel",
    "munged",
    "mariadbd",
    "mariadb-install-db",
    "nsenter",
    "unshare",
    "ip",
)
POLICY_RC_D = Path("/usr/sbin/policy-rc.d")


class InstallError(RuntimeError):
    """Slurm cannot be installed here (not root, no apt-get, or apt-get failed)."""


def missing_binaries() -> list[str]:
    # The daemons live in /usr/sbin, which a non-login PATH may lack.
    path = os.environ.get("PATH", "") + ":/usr/sbin:/sbin"
    return [b for b in BINARIES if shutil.which(b, path=path) is None]


def _installed(pkg: str) -> bool:
    out = subprocess.run(
        ["dpkg-query", "-W", "-f=${Status}", pkg], capture_output=True, text=True, check=False
    )
    return out.returncode == 0 and out.stdout.strip() == "install ok installed"


def missing_packages() -> list[str]:
    if shutil.which("dpkg-query") is None:
        return list(PACKAGES)
    return [p for p in PACKAGES if not _installed(p)]


def ensure_installed(log: Path | None = None) -> None:
    """Install whatever of PACKAGES is missing; raise InstallError if that is impossible."""
    if not missing_binaries() and not missing_packages():
        return
    if os.geteuid() != 0:
        raise InstallError("Slurm packages are missing and installing them needs root")
    if shutil.which("apt-get") is None:
        raise InstallError(
            f"Slurm packages are missing ({', '.join(missing_binaries())}) and there is no apt-get"
        )
    apt_install(missing_packages() or list(PACKAGES), log)
    if missing_binaries():
        raise InstallError(f"still missing after apt-get: {', '.join(missing_binaries())}")


def apt_install(packages: list[str], log: Path | None = None) -> None:
    """``apt-get install --no-install-recommends`` with no daemon started; one ``apt-get update`` and a retry
    if it fails (most likely stale package lists)."""
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise InstallError(f"cannot install {' '.join(packages)}: needs root and apt-get")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    created_policy = False
    if not POLICY_RC_D.exists():
        POLICY_RC_D.write_text(
            "#!/bin/sh\n# clusteraccept.vcluster: no daemon starts during apt-get\nexit 101\n"
        )
        POLICY_RC_D.chmod(0o755)
        created_policy = True
    try:
        install = ["apt-get", "install", "-y", "--no-install-recommends", *packages]
        result = _run(install, env, log)
        if result.returncode != 0:
            _run(["apt-get", "update"], env, log)
            result = _run(install, env, log)
        if result.returncode != 0:
            raise InstallError(f"apt-get install {' '.join(packages)} failed:\n{result.stdout[-2000:]}")
    finally:
        if created_policy:
            POLICY_RC_D.unlink(missing_ok=True)


def _run(argv: list[str], env: dict[str, str], log: Path | None) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(argv, capture_output=True, text=True, env=env, check=False, timeout=1800)
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("a") as f:
            f.write(f"$ {' '.join(argv)}\n{result.stdout}{result.stderr}\n")
    result.stdout = (result.stdout or "") + (result.stderr or "")
    return result
