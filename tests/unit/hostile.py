"""Hostile values in every string field of a site file, and what the suite must do with each: refuse it at
load with a one-line error naming the file and key, or render job scripts that stay what the suite wrote.

For one (field, value) case: the value is written into a site file (YAML, as a user would) that sets every
string key the schema reads; the site is loaded; its job scripts are rendered as ``--dry-run`` writes them
(jobs/*.sbatch, jobs/*.steps.sh) with the nightly scrontab entry's command line; then
(a) ``bash -n`` passes on every script, (b) the ``#SBATCH`` lines are contiguous at the top of each batch
script and each option appears once, (c) every script run by bash with only stubs on PATH (srun, module,
the nodes' python, ...) never runs the canary command a value tried to smuggle in. ``setup`` lines are
shell by design (documented): they must be one line each (load refuses control characters) and are not
held to (c). Used by tests/unit/test_hostile_schema.py (a seeded sample) and benchmarks/hostile_input.py
(every case).
"""

from __future__ import annotations

import copy
import random
import re
import stat
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from clusteraccept.errors import SiteConfigError
from clusteraccept.families import NODE_FAMILIES
from clusteraccept.flow import probe_options
from clusteraccept.jobs.submit import JobLayer
from clusteraccept.ops.nightly import command
from clusteraccept.plan.jobs import make_plan
from clusteraccept.site import schema
from clusteraccept.site.load import load_site

REPO = Path(__file__).resolve().parents[2]
CANARY = "ca_canary"
# newline, CR, NUL, quotes of both kinds, $(), backticks, ;, &&, |, globs, a leading -, very long, non-ASCII
HOSTILE = (
    "a\nb",
    "x\ntouch pwned\n#",
    "a\rb",
    "a\x00b",
    "a\x1b[31mb",
    "it's",
    'say "hi"',
    f"$({CANARY})",
    f"`{CANARY}`",
    f"x;{CANARY}",
    f"x && {CANARY}",
    f"x | {CANARY}",
    f"${{IFS}}{CANARY}",
    f"'; {CANARY}; '",
    f'"; {CANARY}; "',
    "*",
    "node[1-4]?",
    "-rf",
    "--help",
    "x" * 5000,
    "nöde-ü",
    "a\u2028b",
    " ",
    "",
    "\\",
    "$HOME",
)
# Keys none of the demo sites sets, with a plain value, so that every string key the schema reads is a
# field the cases reach (test_every_string_key_the_schema_reads_is_covered keeps this true).
EXTRA: dict[tuple[str, ...], Any] = {
    ("slurm", "account"): "acct",
    ("slurm", "qos"): "normal",
    ("slurm", "reservation"): "bringup",
    ("slurm", "constraint"): "gpu&ib",
    ("slurm", "wckey"): "acceptance",
    ("slurm", "mpi"): "pmix",
    ("slurm", "sbatch_options"): {"comment": "acceptance run"},
    ("slurm", "srun_options"): ["--gres-flags=disable-binding"],
    ("setup",): ["module load nccl"],
    ("tools", "nccl_tests_bin"): "/opt/nccl-tests/build",
    ("tools", "perftest_bin"): "/usr/bin",
    ("tools", "nccl_tests_build"): {"CUDA_HOME": "/usr/local/cuda"},
    ("nccl", "intra_collectives"): ["all_reduce"],
    ("nccl", "fallback"): "torch",
    ("nccl", "expect"): {"intra_node": "p2p"},
    # NCCL_IB_HCA: NCCL env docs ("NCCL_IB_HCA ... which RDMA interfaces to use")
    ("nccl", "accept_env"): {"NCCL_IB_HCA": "the site pins its HCAs"},
    ("nightly", "reports_dir"): "/srv/acceptance/reports",
    ("nightly", "schedule"): "15 3 * * *",
    ("nightly", "summary_file"): "/srv/acceptance/summary.txt",
    ("nightly", "webhook_url"): "https://hooks.example.invalid/x",
    ("nightly", "pytest_args"): ["-m", "nccl"],
    ("nightly", "scron_options"): ["--partition=service"],
    ("drain", "checks"): ["topology.*"],
    ("node_types", "h100-roce", "gpu_nic_path"): ["PIX", "PXB"],
    ("node_types", "h100-roce", "fabric"): "roce",
    ("baselines", "nccl.busbw.sendrecv.pair_in_block.*", "xfail"): "known slow leaf",
}
# mappings whose keys are the site's own names: each key is a field too
NAMED_KEYS = (
    ("env",),
    ("sharp", "env"),
    ("slurm", "sbatch_options"),
    ("tools", "nccl_tests_build"),
    ("nccl", "accept_env"),
    ("blocks",),
    ("node_types",),
    ("baselines",),
)
SHELL_BY_DESIGN = ("setup",)  # passed as written: one line each, no control characters


def base_document(tmp: Path) -> dict[str, Any]:
    """demo-roce.yaml (RoCE and SHARP sections) with every other string key set (EXTRA) and an env_file."""
    doc: dict[str, Any] = yaml.safe_load((REPO / "site-configs" / "demo-roce.yaml").read_text())
    doc["slurm"]["executor"] = "slurm"
    doc["sharp"]["env"] = {"SHARP_COLL_LOG_LEVEL": "3"}
    doc["sharp"]["reason"] = "SHARP is on"
    doc["sharp"]["hello"] = ["sharp_hello"]
    doc["sim"]["faults"] = [doc["sim"]["faults"][0]]
    for path, value in EXTRA.items():
        node = doc
        for k in path[:-1]:
            node = node.setdefault(k, {})
        node[path[-1]] = copy.deepcopy(value)
    creds = tmp / "credentials.env"
    creds.write_text("MY_API_TOKEN=not-a-real-token\n")
    creds.chmod(0o600)
    doc["env_file"] = str(creds)
    return doc


Path_ = tuple[str | int, ...]


@dataclass(frozen=True)
class Field:
    path: Path_
    is_key: bool = False  # the mapping key at ``path`` (not its value)

    def __str__(self) -> str:
        text = ".".join(str(p) if isinstance(p, str) else f"[{p}]" for p in self.path).replace(".[", "[")
        return text + (" (key)" if self.is_key else "")


def fields(doc: Any, path: Path_ = ()) -> Iterator[Field]:
    """Every string leaf of ``doc``, and the keys of the site's own named mappings."""
    if isinstance(doc, dict):
        for k, v in doc.items():
            if path in NAMED_KEYS:
                yield Field((*path, k), is_key=True)
            yield from fields(v, (*path, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from fields(v, (*path, i))
    elif isinstance(doc, str):
        yield Field(path)


def with_value(doc: dict[str, Any], field: Field, value: str) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    node: Any = out
    for k in field.path[:-1]:
        node = node[k]
    last = field.path[-1]
    if field.is_key:
        node[value] = node.pop(last)
    else:
        node[last] = value
    return out


@dataclass(frozen=True)
class Outcome:
    field: Field
    value: str
    refused: str | None = None  # the one-line error
    problems: tuple[str, ...] = ()  # what went wrong with the rendered scripts (empty: all held)


def stubs(tmp: Path) -> tuple[Path, Path]:
    """A PATH folder of stubs (every command a rendered script may call exits 0, the canary leaves a
    mark) and the mark's path."""
    bin_dir, mark = tmp / "stubs", tmp / "canary-ran"
    bin_dir.mkdir(exist_ok=True)
    names = ("srun", "module", "stub_python")
    for name in names:
        (bin_dir / name).write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / CANARY).write_text(f"#!/bin/sh\necho ran >> '{mark}'\n")
    for f in bin_dir.iterdir():
        f.chmod(f.stat().st_mode | stat.S_IXUSR)
    return bin_dir, mark


_OPTION = re.compile(r"#SBATCH\s+(--?[A-Za-z][A-Za-z0-9-]*)")


def sbatch_problems(text: str, name: str) -> list[str]:
    """(b): the #SBATCH lines are one block before any command, each option once."""
    lines = text.splitlines()
    idx = [i for i, ln in enumerate(lines) if ln.startswith("#SBATCH")]
    if not idx:
        return [f"{name}: no #SBATCH line"]
    out = []
    if any(not lines[i].startswith("#SBATCH") for i in range(idx[0], idx[-1] + 1)):
        out.append(f"{name}: #SBATCH lines are not contiguous")
    if any(ln.strip() and not ln.startswith("#") for ln in lines[: idx[0]]):
        out.append(f"{name}: a command before the #SBATCH lines")
    opts = [m[1] for i in idx if (m := _OPTION.match(lines[i]))]
    if len(opts) != len(idx):
        out.append(f"{name}: an #SBATCH line without an option")
    dup = sorted({o for o in opts if opts.count(o) > 1})
    if dup:
        out.append(f"{name}: options given twice: {dup}")
    return out


def run_case(doc: dict[str, Any], field: Field, value: str, tmp: Path) -> Outcome:
    site_file = tmp / "site.yaml"
    site_file.write_text(yaml.safe_dump(with_value(doc, field, value), allow_unicode=True, sort_keys=False))
    run = tmp / "run"
    subprocess.run(["rm", "-rf", str(run)], check=True)
    try:
        site = load_site(str(site_file), REPO / "site-configs")
        layer = JobLayer(site, run, dry_run=True)  # reads the env_file, as a real submission does
        plan = make_plan(site, families=NODE_FAMILIES, nccl=True)
        options = probe_options(site)
        for pj in plan.probe_jobs:
            layer.submit_probes(pj, options)
        for cj in plan.campaign_jobs:
            layer.submit_campaign(cj)
    except SiteConfigError as exc:
        msg = str(exc)
        bad = (
            []
            if "\n" not in msg and msg.startswith(str(site_file))
            else [f"not one line of the file: {msg!r}"]
        )
        return Outcome(field, value, refused=msg, problems=tuple(bad))
    problems: list[str] = []
    scripts = sorted((run / "jobs").glob("*.sbatch")) + sorted((run / "jobs").glob("*.steps.sh"))
    if not scripts:
        problems.append("no job script rendered")
    entry = tmp / "nightly-entry.sh"
    entry.write_text(command(site, python="stub_python") + "\n")
    scripts.append(entry)
    for s in scripts:
        if s.suffix == ".sbatch":
            problems += sbatch_problems(s.read_text(), s.name)
    bin_dir, mark = stubs(tmp)
    mark.unlink(missing_ok=True)
    shell = field.path[0] in SHELL_BY_DESIGN
    checks = " ".join(f"/bin/bash -n {_q(s)} || echo 'bash -n failed: {s.name}';" for s in scripts)
    runs = "" if shell else " ".join(f"/bin/bash {_q(s)} >/dev/null 2>&1;" for s in scripts)
    proc = subprocess.run(
        ["/bin/bash", "-c", checks + runs],
        env={"PATH": str(bin_dir), "HOME": str(tmp)},
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    problems += [ln for ln in proc.stdout.splitlines() if ln.startswith("bash -n failed")]
    if not shell and mark.exists():
        problems.append("the canary ran")
    return Outcome(field, value, problems=tuple(problems))


def _q(path: Path) -> str:
    return "'" + str(path).replace("'", "'\\''") + "'"


def cases(doc: dict[str, Any], sample: int | None, seed: int) -> list[tuple[Field, str]]:
    every = [(f, v) for f in fields(doc) for v in HOSTILE]
    if sample is None or sample >= len(every):
        return every
    return random.Random(seed).sample(every, sample)


def string_keys_read(site_file: Path) -> set[str]:
    """The key paths the schema reads as strings (Section.string/str_list/str_map/choice) loading a site."""
    read: set[str] = set()
    originals = {m: getattr(schema.Section, m) for m in ("string", "str_list", "str_map", "choice")}

    def spy(method: str) -> Any:
        def wrapped(self: schema.Section, name: str, *args: Any, **kwargs: Any) -> Any:
            read.add(self.key(name))
            return originals[method](self, name, *args, **kwargs)

        return wrapped

    try:
        for m in originals:
            setattr(schema.Section, m, spy(m))
        load_site(str(site_file), REPO / "site-configs")
    finally:
        for m, f in originals.items():
            setattr(schema.Section, m, f)
    return read
