"""The site's operations sections (``nightly``, ``drain``, ``attest``), validated with the site.

```yaml
nightly:
  reports_dir: /shared/acceptance           # fixed: every night's run lands here, next to the last one
  schedule: "0 2 * * *"                     # cron time spec (min hour day-of-month month day-of-week)
  summary_file: /shared/acceptance/nightly-summary.txt   # the one-line summary (for mail or chat)
  webhook_url: https://chat.example/hooks/x # optional: the summary is POSTed there as {"text": line}
  pytest_args: ["-m", "nccl"]               # optional: extra pytest arguments for the nightly run
  scron_options: ["--partition=service"]    # optional: sbatch options for the scrontab entry (#SCRON)
  time_limit_min: 240                       # the nightly driver job's own limit (scrontab)
  only_due: false                           # true: test only what is attestation-due (pytest --only-due)
drain:
  max_fraction: 0.125                       # never drain more than this share of a block in one run
  # the checks whose failure convicts a node
  checks: ["nccl.localization", "nccl.link_errors", "topology.*", "nvlink.*", "gpudirect.*", "roce.*"]
attest:
  ttl_days: 7                               # an attestation of a node or link is valid this long
```
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from clusteraccept.errors import SiteConfigError
from clusteraccept.site.schema import Section

KEYS = ("nightly", "drain", "attest")
DEFAULT_DRAIN_CHECKS = (
    "nccl.localization",
    "nccl.link_errors",
    "topology.*",
    "nvlink.*",  # an inactive link, a fabric not up, a tray in another clique or without IMEX
    "gpudirect.*",
    "roce.*",
    # an EFA device short (AWS's own health check isolates such a node); not efa.memlock, which is
    # slurmd's configuration, the same on every node it is wrong on
    "efa.devices",
    # a Slingshot NIC short or its link down (CSCS's node checks count the links up); not slingshot.env,
    # the site's environment, the same on every node it is wrong on
    "slingshot.devices",
    # a GPUDirect-TCPX(O) GPU NIC gone or its link down (Google's cluster-health-scanner marks its
    # node results as Kubernetes taints); not tcpx.env, the site's environment
    "tcpx.devices",
)


@dataclass(frozen=True)
class Nightly:
    reports_dir: str | None = None  # None: the checkout's reports/
    schedule: str = "0 2 * * *"
    summary_file: str | None = None  # None: <reports_dir>/<site>/nightly-summary.txt
    webhook_url: str | None = None
    pytest_args: tuple[str, ...] = ()
    scron_options: tuple[str, ...] = ()
    time_limit_min: int = 240
    only_due: bool = False  # run pytest --only-due: only what is attestation-due (ops/scope.py)


@dataclass(frozen=True)
class Drain:
    max_fraction: float = 0.125
    checks: tuple[str, ...] = DEFAULT_DRAIN_CHECKS


@dataclass(frozen=True)
class Attest:
    ttl_days: float = 7.0


@dataclass(frozen=True)
class Ops:
    nightly: Nightly = field(default_factory=Nightly)
    drain: Drain = field(default_factory=Drain)
    attest: Attest = field(default_factory=Attest)


def _schedule(sec: Section) -> str:
    value: str = sec.string("schedule", "a cron time spec like '0 2 * * *' or '@daily'", default="0 2 * * *")
    from clusteraccept.site.cron import CronError, check_spec

    try:
        check_spec(value)
    except CronError as exc:
        raise SiteConfigError(
            sec.file,
            sec.key("schedule"),
            "a cron time spec like '0 2 * * *' or '@daily'",
            repr(value),
            str(exc),
        ) from None
    return value


def parse_ops(top: Section, expand: object = None) -> Ops:
    """The ``nightly``/``drain``/``attest`` sections of a site (all optional; defaults apply)."""

    def path(value: str | None) -> str | None:
        return expand(value) if callable(expand) else value

    n = top.section(
        "nightly",
        [
            "reports_dir",
            "schedule",
            "summary_file",
            "webhook_url",
            "pytest_args",
            "scron_options",
            "time_limit_min",
            "only_due",
        ],
    )
    webhook = n.string("webhook_url", "an http(s) URL", default=None, pattern=r"https?://\S+")
    scron = n.str_list("scron_options", "a list of sbatch options like '--partition=service'", default=())
    for i, opt in enumerate(scron):
        if not re.fullmatch(r"--?[A-Za-z][A-Za-z0-9-]*(=\S.*)?", opt):
            raise SiteConfigError(
                top.file,
                f"nightly.scron_options[{i}]",
                "an sbatch option like '--partition=service'",
                repr(opt),
            )
    nightly = Nightly(
        reports_dir=path(n.string("reports_dir", "a directory path", default=None)),
        schedule=_schedule(n),
        summary_file=path(n.string("summary_file", "a file path", default=None)),
        webhook_url=webhook,
        pytest_args=n.str_list("pytest_args", "a list of pytest arguments", default=()),
        scron_options=scron,
        time_limit_min=n.integer("time_limit_min", "minutes >= 1", default=240, minimum=1),
        only_due=n.flag("only_due", default=False),
    )
    d = top.section("drain", ["max_fraction", "checks"])
    fraction = d.number("max_fraction", "a fraction between 0 and 1", default=0.125, minimum=0.0)
    if fraction > 1:
        raise d.error("max_fraction", "a fraction between 0 and 1", fraction)
    drain = Drain(
        max_fraction=fraction,
        checks=d.str_list(
            "checks", "a list of check ids or patterns like 'topology.*'", default=DEFAULT_DRAIN_CHECKS
        ),
    )
    a = top.section("attest", ["ttl_days"])
    attest = Attest(ttl_days=a.number("ttl_days", "days > 0", default=7.0, minimum=0.001))
    return Ops(nightly, drain, attest)
