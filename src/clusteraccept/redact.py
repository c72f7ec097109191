"""Redaction of secrets wherever evidence holds an environment (nccl-tests -J JSON, INFO logs, job envs)."""

from __future__ import annotations

import dataclasses
import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from clusteraccept.evidence import Evidence

REDACTED = "<redacted>"
# Names that look like credentials: *TOKEN*, *SECRET*, *PASSWORD*/*PASSWD*, *_KEY, *CREDENTIAL*, *_AUTH*.
_SECRET_NAME = (
    r"[A-Za-z_][A-Za-z0-9_]*(?:TOKEN|SECRET|PASSW(?:OR)?D|CREDENTIAL|_KEY|_AUTH|APIKEY)[A-Za-z0-9_]*"
)
_SECRET_RE = re.compile(_SECRET_NAME, re.IGNORECASE)
# NAME=value (env dumps, shell lines), "NAME": "value" (JSON), NAME: value (yaml-ish)
_ASSIGN = re.compile(
    rf"(?P<name>\b{_SECRET_NAME})(?P<sep>=|\"\s*:\s*\"|:\s+)(?P<val>[^\s\"',;]*)", re.IGNORECASE
)


def is_secret_name(name: str) -> bool:
    return bool(_SECRET_RE.fullmatch(name))


# Every credential-looking name contains one of these (case-insensitively): a cheap test that lets the
# reports skip the regular expression on the ~10^6 messages of a 4,096-node run.
_HINTS = ("token", "secret", "passw", "credential", "key", "auth")


def redact_text(text: str) -> str:
    """Replace the value of every credential-looking variable in ``text``."""
    low = text.lower()
    if not any(h in low for h in _HINTS):
        return text
    return _ASSIGN.sub(lambda m: f"{m['name']}{m['sep']}{REDACTED}" if m["val"] else m[0], text)


def redact_env(env: dict[str, str]) -> dict[str, str]:
    return {k: (REDACTED if is_secret_name(k) else v) for k, v in env.items()}


def redact_evidence(ev: Evidence) -> Evidence:
    return dataclasses.replace(
        ev,
        stdout=redact_text(ev.stdout),
        stderr=redact_text(ev.stderr),
        argv=tuple(redact_text(a) for a in ev.argv),
        meta={k: redact_text(v) for k, v in ev.meta.items()},
    )
