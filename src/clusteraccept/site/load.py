"""Loading a site file (``site-configs/<name>.yaml``) into a fully validated :class:`.model.Site`.

Every error is ONE line naming the file, the key path, what was expected and what was found. The
sections are read by nodes.py (nodes, blocks, node_types), slurm.py, fabric.py (roce, sharp, gpudirect),
campaign.py (tools, nccl), baselines.py and operations.py (nightly, drain, attest).
"""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path
from typing import Any

import yaml

from clusteraccept.errors import SiteConfigError
from clusteraccept.site.baselines import load_baselines
from clusteraccept.site.campaign import parse_nccl, parse_tools
from clusteraccept.site.fabric import Roce, Sharp, parse_gpudirect, parse_roce, parse_sharp
from clusteraccept.site.model import Site
from clusteraccept.site.nodes import (
    NodeType,
    expand_hostlist,
    parse_blocks,
    parse_node_types,
    parse_nvlink_domains,
)
from clusteraccept.site.operations import KEYS as OPS_KEYS
from clusteraccept.site.operations import parse_ops
from clusteraccept.site.schema import (
    ENV_NAME,
    Section,
    describe,
    expand_repo,
    refuse_control,
    refuse_secrets,
)
from clusteraccept.site.slurm import parse_slurm


def _read_yaml(path: Path) -> Any:
    try:
        text = path.read_text()
    except OSError as exc:
        raise SiteConfigError(str(path), "", "a readable YAML file", exc.strerror or str(exc)) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else "(syntax)"
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SiteConfigError(str(path), where, "valid YAML", problem) from None
    if data is None:
        raise SiteConfigError(str(path), "", "a site description (a YAML mapping)", "an empty file")
    return data


TOP_KEYS = [
    "name",
    "description",
    "simulated",
    "slurm",
    "setup",
    "env",
    "env_file",
    "nodes",
    "blocks",
    "node_types",
    "nvlink_domains",
    "roce",
    "sharp",
    "gpudirect",
    "tools",
    "nccl",
    "baselines",
    "sim",
    *OPS_KEYS,
]
# The simulator's fault kinds (sim.faults[].kind), each with the check family that must catch it
# (sim/injected.py: the demo's exit status).
FAULT_FAMILY: dict[str, str] = {
    "straggler": "nccl",
    "slow_rail": "nccl",
    "slow_node": "nccl",
    "bad_cable": "nccl",
    "slow_uplink": "nccl",
    "non_mpi": "nccl",
    "wrong": "nccl",
    "nic_wrong_numa": "topology",
    "pcie_x8": "topology",
    "peermem_missing": "gpudirect",
    "acs_on": "gpudirect",
    "trust_pcp": "roce",
    "pfc_wrong_prio": "roce",
    "ecn_rp_off": "roce",
    "mtu_1500": "roce",
    "sharp_no_resource": "sharp",
    "link_errors": "nccl",
    "iommu_translated": "gpudirect",
    # what actually ran (issue 18): launch record and NCCL's choices
    "cpu_pinned": "nccl",
    "gpu_order": "nccl",
    "stray_nic": "nccl",
    "shm_fallback": "nccl",
    "nccl_conf": "nccl",
    "nccl_version": "nccl",
    # NVLink/NVSwitch in the node (issue 21): sim/profile_nvlink.py
    "nvlink_inactive": "nvlink",
    "nvlink_errors": "nvlink",
    "fabric_manager_down": "nvlink",
    # multi-node NVLink domains (an NVL72 rack): a tray in another clique, the IMEX service down there
    "wrong_clique": "nvlink",
    "imex_down": "nvlink",
    # AWS EFA (issue 22): a device gone, the job's memlock limited, NCCL on sockets (sim/profile_efa.py,
    # sim/nccl_info.py)
    "efa_device_missing": "efa",
    "memlock_limited": "efa",
    "ofi_no_provider": "nccl",
    "ofi_plugin_missing": "nccl",
    # HPE Slingshot (issue 22): a cxi NIC gone, a rail's link down, a required variable missing from the
    # jobs' environment (sim/profile_slingshot.py); NCCL on sockets is ofi_no_provider/ofi_plugin_missing
    "cxi_device_missing": "slingshot",
    "slingshot_link_down": "slingshot",
    "slingshot_env_missing": "slingshot",
    # Google GPUDirect-TCPX/TCPXO (issue 22): a GPU NIC's link down, a required variable missing from the
    # jobs' environment, the receive-datapath manager not running (sim/profile_tcpx.py: its socket gone;
    # sim/nccl_tcp.py: FasTrak aborts every step there); the plugin not on the library path: NCCL on
    # sockets (sim/nccl_info.py)
    "tcpx_nic_down": "tcpx",
    "tcpx_env_missing": "tcpx",
    "rxdm_down": "tcpx",
    "net_plugin_missing": "nccl",
}
# Faults seen by more than their family: the failures of these families are theirs too (an RxDM that does
# not run fails the probe's tcpx.rxdm and every nccl step of the node: nccl.transport, nccl.launch)
FAULT_ALSO: dict[str, tuple[str, ...]] = {"rxdm_down": ("nccl",)}
FAULT_KINDS = tuple(FAULT_FAMILY)
# Faults only a fabric's own devices or net plugin can have (the simulator models them nowhere else)
FAULT_FABRICS: dict[str, tuple[str, ...]] = {
    "efa_device_missing": ("efa",),
    "memlock_limited": ("efa",),
    "ofi_no_provider": ("efa", "slingshot"),
    "ofi_plugin_missing": ("efa", "slingshot"),
    "cxi_device_missing": ("slingshot",),
    "slingshot_link_down": ("slingshot",),
    "slingshot_env_missing": ("slingshot",),
    "tcpx_nic_down": ("tcpx", "tcpxo"),
    "tcpx_env_missing": ("tcpx", "tcpxo"),
    "rxdm_down": ("tcpx", "tcpxo"),
    "net_plugin_missing": ("efa", "slingshot", "tcpx", "tcpxo"),
}


def _faults(top: Section, nodes: tuple[str, ...]) -> tuple[dict[str, Any], ...]:
    sim = top.section("sim", ["faults"])
    raw = sim.raw("faults", [])
    if not isinstance(raw, list):
        raise sim.error("faults", "a list of faults", raw)
    out = []
    for i, f in enumerate(raw):
        fs = Section(
            top.file,
            f"sim.faults[{i}]",
            f,
            [
                *("kind", "node", "nodes", "rail", "gpu", "link", "leaf"),
                *("factor", "port", "count", "hca", "setting"),
            ],
        )
        fs.choice("kind", FAULT_KINDS)
        if fs.has("node") and fs.data["node"] not in nodes:
            raise fs.error("node", "a node of the site", fs.data["node"])
        out.append(dict(fs.data))
    return tuple(out)


def parse_site(path: Path, data: Any) -> Site:
    file = str(path)
    refuse_control(file, data)
    top = Section(file, "", data, TOP_KEYS)
    slurm = parse_slurm(top)
    nodes = expand_hostlist(top, "nodes")
    blocks, from_slurm = parse_blocks(top, nodes)
    roce = parse_roce(top)
    sharp = parse_sharp(top)
    tools = parse_tools(top)
    nccl = parse_nccl(top)
    node_types = parse_node_types(top, nodes)
    _fabric_sections(top, node_types, roce, sharp)
    simulated = top.flag("simulated", default=False)
    setup, env = _setup(top), _env(top)
    if not simulated:
        _required_not_set_here(top, node_types, setup, env)
    faults = _faults(top, nodes)
    _faults_fit_fabrics(top, node_types, faults)
    raw_baselines = top.raw("baselines", {})
    baselines_file = None
    if isinstance(raw_baselines, str):
        bpath = (path.parent / raw_baselines).resolve()
        baselines_file = str(bpath)
        raw_baselines = _read_yaml(bpath)
        refuse_control(str(bpath), raw_baselines)
        baselines = load_baselines(str(bpath), raw_baselines, "")
    else:
        baselines = load_baselines(file, raw_baselines)
    return Site(
        name=top.string("name", "a site name", default=path.stem),
        file=file,
        description=top.string("description", default=""),
        simulated=simulated,
        slurm=slurm,
        setup=setup,
        env=env,
        nodes=nodes,
        blocks=blocks,
        blocks_from_slurm=from_slurm,
        node_types=node_types,
        nvlink_domains=parse_nvlink_domains(top, node_types, blocks, from_slurm),
        domains_are_slurm_blocks=from_slurm and top.raw("nvlink_domains", None) == "blocks",
        roce=roce,
        sharp=sharp,
        tools=tools,
        nccl=nccl,
        baselines=baselines,
        baselines_file=baselines_file,
        sim_faults=faults,
        ops=parse_ops(top, expand_repo),
        gpudirect=parse_gpudirect(top),
        env_file=_env_file(top, path),
    )


def _fabric_sections(top: Section, node_types: tuple[NodeType, ...], roce: Roce | None, sharp: Sharp) -> None:
    """What the site's fabric sections apply to: ``roce`` needs a RoCE node type, SHARP an InfiniBand or
    RoCE one (it aggregates in NVIDIA's switches); an EFA- or Slingshot-only site has neither."""
    fabrics = {nt.fabric for nt in node_types}
    if roce is not None and "roce" not in fabrics:
        raise top.error(
            "roce",
            f"no roce section: no node type is fabric roce ({', '.join(sorted(fabrics))})",
            "a section",
        )
    if sharp.enabled and not fabrics & {"infiniband", "roce"}:
        raise SiteConfigError(
            top.file,
            "sharp.enabled",
            f"false: SHARP needs an infiniband or roce fabric ({', '.join(sorted(fabrics))} here)",
            "true",
        )


def _required_not_set_here(
    top: Section, node_types: tuple[NodeType, ...], setup: tuple[str, ...], env: dict[str, str]
) -> None:
    """A variable a fabric's jobs must get (``slingshot.env``, ``tcpx.env``, ``tcpxo.env``) is judged on
    what the site's own profile or prolog gives them: one this file sets itself (``env:``, an assignment
    in ``setup:``) would have the check judge the suite's own setting, and pass on every node. (A
    simulated site's ``env:`` stands for that profile.)"""
    for nt in node_types:
        section = "slingshot" if nt.slingshot else nt.fabric
        wanted = nt.slingshot.env if nt.slingshot else (nt.tcp.env if nt.tcp else ())
        for name, _ in wanted:
            here = "env" if name in env else None
            assign = re.compile(rf"(?:^|[\s;&|])(?:export\s+)?{re.escape(name)}=")
            here = here or next((f"setup[{i}]" for i, line in enumerate(setup) if assign.search(line)), None)
            if here:
                raise SiteConfigError(
                    top.file,
                    f"node_types.{nt.name}.{section}.env.{name}",
                    "a variable the site's own profile or prolog gives jobs, not one this file sets",
                    f"set by {here} (the check would judge the suite's own setting)",
                )


def _faults_fit_fabrics(
    top: Section, node_types: tuple[NodeType, ...], faults: tuple[dict[str, Any], ...]
) -> None:
    """A simulated fault that only a fabric's plugin or devices can have is refused on a node of another."""
    for i, f in enumerate(faults):
        fabrics = FAULT_FABRICS.get(str(f["kind"]))
        node = f.get("node")
        if fabrics is None or not node:
            continue
        fabric = next(nt.fabric for nt in node_types if node in nt.nodes)
        if fabric not in fabrics:
            raise SiteConfigError(
                top.file,
                f"sim.faults[{i}].kind",
                f"a fault of a {' or '.join(fabrics)} node",
                f"{f['kind']} on {node} ({fabric})",
            )


def _setup(top: Section) -> tuple[str, ...]:
    """``setup``: shell lines by design, run by every job's batch shell before its command (module load,
    source ...), each one complete line: an open quote or a trailing backslash would swallow the lines the
    suite writes after it (its exports and its command)."""
    lines = top.str_list("setup", "a list of shell lines", default=())
    for i, line in enumerate(lines):
        try:
            shlex.split(line, comments=True)
        except ValueError as exc:
            raise SiteConfigError(
                top.file, f"setup[{i}]", "one complete shell line", describe(line), str(exc).lower()
            ) from None
    return lines


def _env(top: Section) -> dict[str, str]:
    env = top.str_map("env")
    for k in env:
        if not re.fullmatch(ENV_NAME, k):
            raise SiteConfigError(top.file, f"env.{k}", "an environment variable name", repr(k))
    refuse_secrets(top.file, "env", env)
    return {k: str(expand_repo(v)) for k, v in env.items()}


def _env_file(top: Section, path: Path) -> str | None:
    value = top.string("env_file", "a path to a NAME=value file of credentials (mode 0600)", default=None)
    if value is None:
        return None
    return str((path.parent / str(expand_repo(value))).resolve())


def resolve_site_path(name_or_path: str, configs_dir: Path) -> Path:
    """``clusterA`` -> ``site-configs/clusterA.yaml``; a path works too; unknown names list the sites."""
    candidate = Path(name_or_path)
    if candidate.suffix in (".yaml", ".yml") or os.sep in name_or_path:
        if candidate.exists():
            return candidate
        raise SiteConfigError(name_or_path, "", "an existing site file", "no such file")
    path = configs_dir / f"{name_or_path}.yaml"
    if path.exists():
        return path
    available = sorted(p.stem for p in configs_dir.glob("*.yaml"))
    raise SiteConfigError(
        f"--site {name_or_path}", "", f"a site among: {', '.join(available) or '(none)'}", f"no {path}"
    )


def load_site(name_or_path: str, configs_dir: Path) -> Site:
    path = resolve_site_path(name_or_path, configs_dir)
    return parse_site(path, _read_yaml(path))
