"""Credentials a site's jobs need (``env_file``): read at submit time, never written anywhere.

The site file is data a vendor receives with the run; a token in it would be in every job script. So the
site names a file of ``NAME=value`` lines that only its owner can read (mode 0600, as ssh asks of a private
key), the submitting process reads it just before it calls sbatch, and the values reach the jobs the way
the rest of the submitting environment does (sbatch(1) --export: "by default all of the user's environment
will be loaded"). Nothing the suite writes holds them: not the job scripts, not submitit's pickles, not the
spool. The nightly scrontab entry loads the same site, so it reads the same file.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
from collections.abc import Iterator, Mapping
from pathlib import Path

from clusteraccept.errors import SiteConfigError

_LINE = re.compile(r"(?:export\s+)?(?P<name>[A-Za-z_][A-Za-z0-9_]*)=(?P<value>.*)")


def read_env_file(path: str, site_file: str = "", key: str = "env_file") -> dict[str, str]:
    """``NAME=value`` lines (``export`` allowed, ``#`` comments, blank lines), from a file only its owner
    can read. Values are taken as written: no quotes are removed and nothing is expanded. A file that is
    missing or readable by others is an error of the site's ``key``; a bad line, of the file's line."""
    where = (site_file, key) if site_file else (path, "")
    try:
        st = os.stat(path)
        if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise SiteConfigError(
                *where,
                "a credentials file only its owner can read (chmod 600)",
                f"{path} of mode {stat.S_IMODE(st.st_mode):04o}",
            )
        text = Path(path).read_text()
    except OSError as exc:
        raise SiteConfigError(
            *where, "a readable credentials file", f"{path}: {exc.strerror or exc}"
        ) from None
    out: dict[str, str] = {}
    for no, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        m = _LINE.fullmatch(line.strip())
        if m is None:
            # the line may be a credential: say where it is and what it should look like, never what it is
            raise SiteConfigError(path, f"line {no}", "NAME=value", "a line of another form (not shown)")
        out[m["name"]] = m["value"]
    return out


@contextlib.contextmanager
def exported(values: Mapping[str, str]) -> Iterator[None]:
    """``values`` in this process's environment while a job is submitted (sbatch and submitit's local
    executor hand it to the job), as they were before afterwards."""
    before = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
