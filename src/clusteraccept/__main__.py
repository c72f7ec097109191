"""``python -m clusteraccept <command>``: operations around the pytest suite.

    nightly  --site X [--print-scrontab | --print-crontab] [--only-due] [--no-post] [-- PYTEST_ARGS...]
    drain    --site X RUN_DIR [--apply]     drain what RUN_DIR convicted, undrain ours that pass (preview)
    undrain  --site X RUN_DIR [--apply]     only undrain nodes clusteraccept drained that RUN_DIR found clean
    attest   --site X [--due]               per node/link: last verifying run and until when it holds
    init     --out site-configs/NAME.yaml (--partition P | --nodes HOSTLIST) [--sample N] [--dry-run]
             a site file from the cluster itself: node types, rail maps, and the nodes that deviate

The acceptance run itself is ``pytest suites/ --site X`` (see README.md).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from clusteraccept.errors import InitError, SiteConfigError, SubmitError
from clusteraccept.render import REPO_ROOT
from clusteraccept.site.load import load_site
from clusteraccept.site.model import Site


def _site(name: str) -> Site:
    configs = Path(os.environ.get("CLUSTERACCEPT_SITE_CONFIGS", REPO_ROOT / "site-configs"))
    site = load_site(name, configs)
    from clusteraccept.jobs.slurm_clients import export_client_env, slurm_blocks

    export_client_env(site)
    if site.blocks_from_slurm:
        site = site.with_slurm_blocks(slurm_blocks(site))
    return site


def _nightly(args: argparse.Namespace) -> int:
    from clusteraccept.ops import nightly
    from clusteraccept.site.model import reports_dir

    site = _site(args.site)
    if args.print_scrontab:
        # Slurm writes the job's --output there but does not create the directory.
        (reports_dir(site) / site.name).mkdir(parents=True, exist_ok=True)
        print(nightly.render_scrontab(site), end="")
        return 0
    if args.print_crontab:
        print(nightly.render_crontab(site), end="")
        return 0
    night = nightly.night(site, args.pytest_args, due_only=args.only_due)
    print(night.line)
    if night.code != nightly.OK and site.ops.nightly.webhook_url and not args.no_post:
        print(nightly.post(site.ops.nightly.webhook_url, night.line))
    return night.code


def _drain(args: argparse.Namespace, drain_nodes: bool) -> int:
    from clusteraccept.ops.drain import run_for_site

    site = _site(args.site)
    run_dir = Path(args.run_dir)
    if not (run_dir / "results.json").exists():
        print(f"{args.command}: expected a run directory with results.json, got {run_dir}", file=sys.stderr)
        return 2
    for line in run_for_site(site, run_dir, apply_now=args.apply, drain_nodes=drain_nodes):
        print(line)
    return 0


def _attest(args: argparse.Namespace) -> int:
    from clusteraccept.ops import attest

    site = _site(args.site)
    for line in attest.report_lines(site, Path(args.reports_dir) if args.reports_dir else None, args.due):
        print(line)
    return 0


def _init(args: argparse.Namespace) -> int:
    from clusteraccept.ops.init import InitRequest, run

    env = []
    for item in args.env:
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise ValueError(f"--env: expected KEY=VALUE, got {item!r}")
        env.append((key, value))
    req = InitRequest(
        out=Path(args.out),
        partition=args.partition,
        nodes=args.nodes,
        sample=args.sample,
        account=args.account,
        qos=args.qos,
        reservation=args.reservation,
        executor=args.executor,
        dry_run=args.dry_run,
        force=args.force,
        reports_dir=Path(args.reports_dir),
        slurm_conf=args.slurm_conf or os.environ.get("SLURM_CONF"),
        bin_dir=args.bin_dir,
        python=args.python,
        env=tuple(env),
    )
    return run(req)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m clusteraccept", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    n = sub.add_parser("nightly", help="run the nightly acceptance, or print its scrontab/crontab entry")
    n.add_argument("--site", required=True)
    n.add_argument("--print-scrontab", action="store_true", help="print the Slurm scrontab entry")
    n.add_argument("--print-crontab", action="store_true", help="print a login node crontab line")
    n.add_argument("--no-post", action="store_true", help="never post to the site's webhook")
    n.add_argument(
        "--only-due",
        action="store_true",
        help="test only what is attestation-due (pytest --only-due; the site's nightly.only_due does too)",
    )
    n.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    for name, what in (("drain", "drain convicted nodes"), ("undrain", "undrain nodes that pass again")):
        d = sub.add_parser(name, help=what)
        d.add_argument("--site", required=True)
        d.add_argument("run_dir")
        d.add_argument("--apply", action="store_true", help="run the scontrol commands (default: preview)")
    a = sub.add_parser("attest", help="attestations per node and link")
    a.add_argument("--site", required=True)
    a.add_argument("--reports-dir", default=None)
    a.add_argument("--due", action="store_true", help="list only what is due for re-verification")
    i = sub.add_parser("init", help="write a site file from the cluster itself (node types, rail maps)")
    i.add_argument("--out", required=True, help="the site file to write, e.g. site-configs/clusterA.yaml")
    i.add_argument("--partition", help="probe this partition's nodes (sinfo)")
    i.add_argument("--nodes", help="probe exactly these nodes (a hostlist: node[001-128])")
    i.add_argument("--sample", type=int, help="probe N nodes per hostname pattern")
    i.add_argument("--account")
    i.add_argument("--qos")
    i.add_argument("--reservation")
    i.add_argument("--executor", choices=("slurm", "local"), default="slurm", help="local: this host")
    i.add_argument("--slurm-conf", help="the cluster's slurm.conf (default: $SLURM_CONF)")
    i.add_argument("--bin-dir", help="the cluster's Slurm clients, where not on PATH")
    i.add_argument("--python", help="the nodes' python (a shared virtualenv)")
    i.add_argument("--env", action="append", default=[], help="KEY=VALUE for the probe job (repeatable)")
    i.add_argument("--reports-dir", default="reports", help="where the init run's evidence goes")
    i.add_argument("--dry-run", action="store_true", help="write the probe job's script, submit nothing")
    i.add_argument("--force", action="store_true", help="overwrite an existing site file")
    args = p.parse_args(argv)
    try:
        if args.command == "init":
            return _init(args)
        if args.command == "nightly":
            return _nightly(args)
        if args.command in ("drain", "undrain"):
            return _drain(args, drain_nodes=args.command == "drain")
        return _attest(args)
    except (SiteConfigError, SubmitError, ValueError) as exc:
        print(f"{args.command}: {exc}", file=sys.stderr)
        return 2
    except InitError as exc:
        print(exc, file=sys.stderr)
        return 2


if __name__ == "__main__":
    from clusteraccept.errors import run_main

    sys.exit(run_main(main))
