"""The variables a fabric's jobs must get (``node_types.<t>.slingshot.env``, ``.tcpx.env``/``.tcpxo.env``),
judged on the environment the probe job found (``hostio.environ``: only the names asked for). A job
without them still runs, slower or hanging under load, and a user cannot tell. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence

from clusteraccept.checks.hostfacts import NodeEvidence
from clusteraccept.hostio import ENVIRON
from clusteraccept.judge.verdicts import Verdict, error, expect, skip

ANY = "*"  # a required variable's value where any value will do (set, not empty)


def read(ne: NodeEvidence) -> dict[str, str] | None:
    """The job's environment as the probe read it (only the names asked for), None where it was not read."""
    item = ne.file(ENVIRON)
    if item is None or not item[0].ok:
        return None
    return dict(line.split("=", 1) for line in item[0].stdout.splitlines() if "=" in line)


def verdict(
    check: str,
    family: str,
    node: str,
    wanted: Sequence[tuple[str, str]],
    ne: NodeEvidence,
    what: str,
    hint: str,
) -> Verdict:
    """``check`` on ``node``: the job's environment gives every variable of ``wanted`` its value (``*``:
    any value, for one that differs per job, like TCPX's ``/run/tcpx-<job id>``). ``what``: whose
    settings they are; ``hint``: who gives them, as a failure says it."""
    if not wanted:
        return skip(check, family, node, f"the node type's {check} names no variable")
    got = read(ne)
    path = ne.archived(ENVIRON)
    if got is None or path is None:
        return error(check, family, node, f"{node}: the job's environment was not read")
    unset = [k for k, v in wanted if k not in got or (v == ANY and not got[k])]
    other = [f"{k}={got[k]} (expected {v})" for k, v in wanted if k in got and got[k] != v and v != ANY]
    bad = ([f"unset: {', '.join(unset)}"] if unset else []) + other
    if bad:
        msg = f"{node}: the job's environment lacks the site's {what}: {'; '.join(bad)} ({hint})"
        return expect(check, family, node, False, msg, evidence=(path,))
    msg = f"{node}: the job gets all {len(wanted)} required variables"
    return expect(check, family, node, True, msg, evidence=(path,))
