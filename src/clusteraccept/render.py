"""jinja2 rendering of shell text (sbatch setup lines, srun step lines, the report) from ``templates/``.

StrictUndefined: a missing variable is an error, never an empty string in a shell line. Every value that
comes from a site file goes through the ``q`` filter (shlex.quote).
"""

from __future__ import annotations

import os
import shlex
from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2

REPO_ROOT = Path(__file__).resolve().parents[2]


def templates_dir() -> Path:
    return Path(os.environ.get("CLUSTERACCEPT_TEMPLATES", REPO_ROOT / "templates"))


@lru_cache(maxsize=4)
def _env(directory: str, autoescape: bool) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(directory),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=autoescape,
    )
    env.filters["q"] = lambda v: shlex.quote(str(v))
    return env


def render(template: str, **context: Any) -> str:
    """Render ``templates/<template>`` with ``context``; html templates are autoescaped."""
    env = _env(str(templates_dir()), template.endswith(".html.j2"))
    return env.get_template(template).render(**context)


def render_argv(template: str, **context: Any) -> tuple[str, ...]:
    """Render a one-command template and split it as the shell would (the result runs without a shell)."""
    text = " ".join(line.strip() for line in render(template, **context).splitlines() if line.strip())
    return tuple(shlex.split(text))
