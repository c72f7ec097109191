"""What actually ran: each step's launch records (probes/launch.py) and NCCL's own INFO lines, judged
before its numbers (judged as part of the ``nccl`` family, :mod:`clusteraccept.checks.nccl`).

Per step, :func:`step_findings` gives one finding per check and node of the step (pure):

- ``launch.binding``: each rank's CPUs lie on its GPU's NUMA node (``bound`` within the GPU's sysfs
  ``local_cpulist``); the GPU nccl-tests reports for the rank (its rank line's bus id) is the GPU the rail
  map means (nvidia-smi's bus id of GPU k, k = the rail's GPU or the rank's local id); the ranks of one
  step on a node do not share fewer CPUs than they are;
- ``launch.nic``: every NET channel of a rank goes through its rail's HCA (a rail step) or one of the
  site's rail HCAs (a step over every GPU), never a storage or management port;
- ``nccl.transport``: no NET/Socket; within a node P2P, not SHM (``nccl.expect.intra_node: p2p``);
  NVLS and CollNet engaged or not as ``nccl.expect`` says (GPUDirect RDMA is gpudirect.nccl_gdrdma's);
- ``nccl.config``: no tuning knob (:data:`TUNING`) set by the site or the node (environment, NCCL config
  files) unless ``nccl.accept_env`` names it with a reason; the variables the suite sets are told apart;
  the node's NCCL (its ranks' "NCCL version" lines) is the one most nodes of the run logged.

:func:`node_verdicts` folds the findings of every step into one verdict per check and node: items grow
with nodes, not steps (DESIGN.md §9); a failure quotes the steps that show it. A step whose binding, NIC
or transport is wrong has its busbw "not judged" (checks/nccl.py): a launch fault cannot hide as, or
hide, a slow rail.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from clusteraccept.checks.libfabric import NicPci
from clusteraccept.judge.verdicts import Outcome, Verdict
from clusteraccept.parsers.launch_record import LaunchRecord
from clusteraccept.parsers.nccl_debug import NcclConnection, NcclDebug
from clusteraccept.parsers.nccl_tests_result import NcclTestsResult
from clusteraccept.plan.commands import env_words
from clusteraccept.site.model import Site
from clusteraccept.site.nodes import LIBFABRIC_PROVIDER, TCP_PLUGIN

FAMILY = "nccl"
CHECKS = ("launch.binding", "launch.nic", "nccl.transport", "nccl.config")
GATING = ("launch.binding", "launch.nic", "nccl.transport")  # a step failing these has no busbw verdicts
# NCCL environment variables that override NCCL's own tuning (NCCL docs, "Environment Variables":
# NCCL_ALGO, NCCL_PROTO, NCCL_MIN_NCHANNELS, NCCL_MAX_NCHANNELS); a cluster handed to users must not set
# them, or every job runs with what one benchmark once preferred.
TUNING = ("NCCL_ALGO", "NCCL_PROTO", "NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS")
MAX_QUOTED = 4


@dataclass(frozen=True)
class Finding:
    check: str
    node: str
    ok: bool | None  # None: cannot be judged from this step (the reason is the message)
    message: str
    step: str  # the step's subject, quoted by a failing node verdict
    cpus: frozenset[int] = frozenset()  # launch.binding: the CPUs this node's ranks of the step ran on
    versions: tuple[str, ...] = ()  # nccl.config: the NCCL version(s) this node's ranks logged


@dataclass
class Folded:
    """One check's findings on one node, folded step by step into what :func:`node_verdicts` says of them."""

    n_ok: int = 0
    first_ok: str | None = None  # the first passing finding's message (a PASS verdict's example)
    first: str | None = None  # the first finding's message (a SKIP verdict's reason)
    bad: list[Finding] = field(default_factory=list)  # every failing finding, in step order
    steps: list[str] = field(default_factory=list)  # the first MAX_QUOTED steps (a run-wide FAIL cites)


@dataclass
class Findings:
    """Every step's findings as :func:`node_verdicts` and :func:`crowded_steps` read them. They add up
    (:meth:`merge`): each worker of the step judging (checks/nccl.py) folds its own steps, and the parent
    adds the workers' folds in step order. ~4 findings a step came back to the parent one object each
    (~275,000 at 256 nodes, ~1.9 s of unpickling in the parent alone); now a few per node."""

    folded: dict[tuple[str, str], Folded] = field(default_factory=dict)  # (check, node) ->
    # launch.binding of rail steps, with the CPUs they ran on: compared across a round's steps
    bound: list[Finding] = field(default_factory=list)
    versions: dict[str, set[str]] = field(default_factory=dict)  # node -> the NCCL versions its ranks logged

    def add(self, findings: Iterable[Finding]) -> None:
        folded = self.folded
        for f in findings:
            got = folded.get((f.check, f.node))
            if got is None:
                got = folded[(f.check, f.node)] = Folded(first=f.message)
            if f.ok:
                got.n_ok += 1
                if got.first_ok is None:
                    got.first_ok = f.message
            elif f.ok is False:
                got.bad.append(f)
            if len(got.steps) < MAX_QUOTED and f.step not in got.steps:
                got.steps.append(f.step)
            if f.check == "launch.binding" and f.cpus and ":rail" in f.step:
                self.bound.append(f)
            if f.check == "nccl.config" and f.versions:
                self.versions.setdefault(f.node, set()).update(f.versions)

    def merge(self, later: Findings) -> None:
        """Add ``later``'s folds, of steps after this one's."""
        for key, f in later.folded.items():
            got = self.folded.get(key)
            if got is None:
                self.folded[key] = f
                continue
            got.n_ok += f.n_ok
            got.first_ok = got.first_ok if got.first_ok is not None else f.first_ok
            got.bad += f.bad
            got.steps += [s for s in f.steps if s not in got.steps][: MAX_QUOTED - len(got.steps)]
        self.bound += later.bound
        for node, vs in later.versions.items():
            self.versions.setdefault(node, set()).update(vs)


def fold(findings: Iterable[Finding]) -> Findings:
    out = Findings()
    out.add(findings)
    return out


def step_id(meta: dict[str, str]) -> str:
    """What a finding quotes for its step: the subject of its nccl.launch verdict. A confirmation step
    (plan/confirm.py) carries its attempt: a retest of a pair is another step than its first run."""
    attempt = meta.get("attempt")
    return f"{meta['subject']}:{meta['collective']}" + (f":{attempt}" if attempt else "")


def bus_number(bus_id: str | None) -> int | None:
    """The PCI bus of a GPU as nvidia-smi (``00000000:19:00.0``) or nccl-tests (``0000:19:00``, old
    ``0x19``) print it: GPUs are told apart by their bus."""
    if not bus_id:
        return None
    text = bus_id.strip().lower()
    try:
        if text.startswith("0x"):
            return int(text, 16)
        parts = text.split(".", 1)[0].split(":")
        return int(parts[-2], 16) if len(parts) >= 2 else None
    except ValueError:
        return None


def _cpus(ids: Iterable[int]) -> str:
    ids = sorted(ids)
    return ",".join(map(str, ids[:8])) + (f",... ({len(ids)} CPUs)" if len(ids) > 8 else "")


def _binding(
    meta: dict[str, str], recs: Sequence[LaunchRecord], result: NcclTestsResult | None
) -> list[Finding]:
    step, out = step_id(meta), []
    rank_bus = {r.rank: r.bus_id for r in result.ranks} if result is not None else {}
    rail = meta.get("rail") or ""
    for node in dict.fromkeys(r.host for r in recs):
        mine = [r for r in recs if r.host == node]
        bad: list[str] = []
        unknown: list[str] = []
        for r in mine:
            who = f"rank {r.procid}" + (f" (rail {rail})" if rail else "")
            if r.error:
                unknown.append(f"{who}: the launch record failed: {r.error}")
                continue
            if r.cuda_index is not None and r.gpu_bus_id is None and r.gpu_count is not None:
                bad.append(f"{who}: no GPU {r.cuda_index} on this node (nvidia-smi lists {r.gpu_count})")
                continue
            if r.local_cpus is None:
                unknown.append(f"{who}: its GPU's CPUs are unknown ({r.bind_error or 'no local_cpulist'})")
            elif not set(r.bound_cpus) <= set(r.local_cpus):
                off = sorted(set(r.bound_cpus) - set(r.local_cpus))
                bad.append(
                    f"{who} ran on CPUs {_cpus(r.bound_cpus)}, {len(off)} of them off GPU {r.cuda_index}'s "
                    f"NUMA node {r.numa_node} (its CPUs: {_cpus(r.local_cpus)})"
                )
            want, got = bus_number(r.gpu_bus_id), bus_number(rank_bus.get(r.procid or 0))
            if want is not None and got is not None and want != got:
                bad.append(
                    f"{who} drove the GPU on bus {got:02x}, not GPU {r.cuda_index} (bus {want:02x}, "
                    f"CUDA_DEVICE_ORDER={r.cuda_device_order or 'unset'})"
                )
        bound = [frozenset(r.bound_cpus) for r in mine if not r.error]
        union = frozenset().union(*bound) if bound else frozenset()
        if len(bound) > 1 and len(union) < len(bound):
            bad.append(f"{len(bound)} ranks share {len(union)} CPU(s) {_cpus(union)}")
        if bad:
            out.append(Finding("launch.binding", node, False, "; ".join(bad), step, union))
        elif unknown:
            out.append(Finding("launch.binding", node, None, "; ".join(unknown), step, union))
        else:
            n = len(mine)
            out.append(Finding("launch.binding", node, True, f"{n} rank(s) on their GPU's CPUs", step, union))
    return out


def _ofi_nics(node: str, debug: NcclDebug, pci: Mapping[str, str]) -> tuple[set[str] | None, str]:
    """The devices an EFA or Slingshot node's NET channels went through: NCCL's net device G is
    aws-ofi-nccl's NIC group G, whose "NIC group G device #D <PCI address>" lines name its devices (a
    p5en's 16 devices in groups of two: NVIDIA/nccl#1597), mapped to names by the efa or slingshot probe's
    device links. None: cannot say."""
    mine = [c for c in debug.net_channels() if c.host == node and c.net_dev is not None]
    if mine and all(c.net == "Socket" for c in mine):
        return None, f"its NET channels are TCP sockets, no fabric device (nccl.transport on {node} says why)"
    used = {c.net_dev for c in mine if c.net in OFI_NETS and c.net_dev is not None}
    if not used:
        return None, "no NET channel of this node over aws-ofi-nccl in the NCCL log"
    groups: dict[int, set[str]] = {}
    for host, group, bdf in debug.ofi_nic_groups:
        if host == node:
            groups.setdefault(group, set()).add(bdf)
    if unknown := sorted(i for i in used if i not in groups):
        return None, f"the log has no NET/OFI NIC group lines for net device(s) {unknown}"
    if not pci:
        return (
            None,
            "the PCI addresses of this node's devices are unknown (no efa or slingshot probe evidence)",
        )
    return {pci.get(b, b) for i in used for b in groups[i]}, ""


def _nics(site: Site, meta: dict[str, str], debug: NcclDebug, nic_pci: NicPci) -> list[Finding]:
    step, out = step_id(meta), []
    nodes = meta["nodes"].split(",")
    if len(nodes) < 2:
        return []  # a step inside one node uses no NIC
    used_by: dict[str | None, set[int]] = {}  # each node's NET devices, read once (not per node: quadratic)
    for c in debug.net_channels():
        if c.net_dev is not None:
            used_by.setdefault(c.host, set()).add(c.net_dev)
    for node in nodes:
        fabric = _fabric(site, node)
        ofi = fabric in LIBFABRIC_PROVIDER
        nt = site.node_type(node)
        rails, kind = nt.rails, "device" if ofi else ("HCA" if nt.verbs else nt.nic_noun)
        if meta.get("rail"):
            allowed = {n for r in rails if r.index == int(meta["rail"]) for n in r.devices}
            what = f"rail {meta['rail']}'s {kind} {', '.join(sorted(allowed))}"
        else:
            allowed, what = {n for r in rails for n in r.devices}, f"a rail {kind} of the site"
        if fabric in TCP_PLUGIN:  # the plugin names its devices itself
            out.append(_tcp_nics(node, debug, allowed, what, step))
            continue
        if ofi:  # no NET/IB device listing: aws-ofi-nccl's NIC group lines
            found, why = _ofi_nics(node, debug, nic_pci.get(node, {}))
            if found is None:
                out.append(Finding("launch.nic", node, None, why, step))
                continue
            stray = sorted(found - allowed)
            msg = f"used {', '.join(sorted(found))}" + (f", not {what}: {', '.join(stray)}" if stray else "")
            out.append(Finding("launch.nic", node, not stray, msg, step))
            continue
        used = used_by.get(node, set())
        if not used:
            out.append(Finding("launch.nic", node, None, "no NET channel of this node in the NCCL log", step))
            continue
        behind = {i: debug.net_device_names(node, i) for i in sorted(used)}
        if unknown := [i for i, names in behind.items() if names is None]:
            why = f"the log does not say which HCA NET device(s) {unknown} are (no NET subsystem lines)"
            out.append(Finding("launch.nic", node, None, why, step))
            continue
        names = {n for found in behind.values() for n in found or ()}
        stray = sorted(names - allowed)
        ok = not stray
        msg = f"used {', '.join(sorted(names))}" + ("" if ok else f", not {what}: {', '.join(stray)}")
        out.append(Finding("launch.nic", node, ok, msg, step))
    return out


def _tcp_nics(node: str, debug: NcclDebug, allowed: set[str], what: str, step: str) -> Finding:
    """The GPU NICs a TCPX(O) node's NET channels went through, by the plugin's own device lines."""
    mine = [c for c in debug.net_channels() if c.host == node and c.net_dev is not None]
    if mine and all(c.net == "Socket" for c in mine):
        why = f"its NET channels are TCP sockets, no GPU NIC (nccl.transport on {node} says why)"
        return Finding("launch.nic", node, None, why, step)
    used = {c.net_dev for c in mine if c.net != "Socket" and c.net_dev is not None}
    if not used:
        return Finding("launch.nic", node, None, "no NET channel of this node in the NCCL log", step)
    names = {i: n for h, i, n in debug.tcp_net_devices if h == node}
    if unknown := sorted(i for i in used if i not in names):
        why = f"the plugin's log does not say which GPU NIC net device(s) {unknown} are (NET subsystem)"
        return Finding("launch.nic", node, None, why, step)
    found = {names[i] for i in used}
    # FasTrak moves a connection to another NIC to keep rails aligned, and says so
    found |= {to for h, was, to in debug.tcp_rail_swaps if h == node and was in found}
    stray = sorted(found - allowed)
    msg = f"used {', '.join(sorted(found))}" + (f", not {what}: {', '.join(stray)}" if stray else "")
    return Finding("launch.nic", node, not stray, msg, step)


def _transport(site: Site, meta: dict[str, str], debug: NcclDebug) -> list[Finding]:
    expect, step, out = site.nccl.expect, step_id(meta), []
    nodes = meta["nodes"].split(",")
    # each node's connections, and what the whole step engaged, read once: a block step's log has tens of
    # thousands of connection lines, and scanning them per node made it quadratic in the block's size
    by_host: dict[str | None, list[NcclConnection]] = {}
    for c in debug.connections:
        by_host.setdefault(c.host, []).append(c)
    nvls, collnet = debug.nvls_used(), debug.collnet_used()
    for node in nodes:
        mine = by_host.get(node, [])
        asked = [net for h, net in debug.net_not_found if h == node]
        failed = [m for h, m in debug.tcp_plugin_failures if h == node]
        if not mine and asked:  # NCCL_NET names a network NCCL could not load: the step failed at init
            why = f"NCCL_NET asks for network {asked[0]!r}, which NCCL did not find (the step failed at init)"
            out.append(Finding("nccl.transport", node, False, why + _socket_cause(site, node, debug), step))
            continue
        if failed and _fabric(site, node) in TCP_PLUGIN:  # Google's plugins stop the process, no fallback
            peers = [
                h
                for h, m in debug.tcp_plugin_failures
                if h != node and h in nodes and m.startswith(_RXDM_LINES)
            ]
            if peers and not any(m.startswith(_RXDM_LINES) for m in failed):
                # TCPX: a receiver whose RxDM did not answer fails its sender's connection too
                why = f"its connection failed because {peers[0]}'s receive-datapath manager did not answer"
                out.append(Finding("nccl.transport", node, None, why, step))
                continue
            why = "the net plugin stopped the step" + _tcp_cause(node, debug)
            out.append(Finding("nccl.transport", node, False, why, step))
            continue
        if not mine:
            out.append(Finding("nccl.transport", node, None, "no connection lines of this node", step))
            continue
        bad = []
        if any(c.transport == "NET/Socket" for c in mine):
            bad.append("NET/Socket: NCCL fell back to TCP sockets" + _socket_cause(site, node, debug))
        elif (provider := LIBFABRIC_PROVIDER.get(_fabric(site, node) or "")) is not None:
            bad += _off_ofi(node, mine, debug, provider)
        elif _fabric(site, node) in TCP_PLUGIN:
            bad += _off_tcp(site, node, mine, debug)
        if expect.intra_node == "p2p" and any(c.family == "SHM" for c in mine):
            bad.append("GPU to GPU over SHM (host memory) inside the node, not P2P (NVLink/PCIe)")
        # NVLS reduces over the NVLink switch: only a step with several GPUs per node can engage it;
        # CollNet (SHARP) only a block step across nodes, and the SHARP runs are the sharp family's
        many_gpus = meta.get("kind") in ("node", "block")
        across = meta.get("kind") == "block" and meta.get("check") != "sharp"
        for name, want, used in (
            ("NVLS", expect.nvls if many_gpus else None, nvls),
            ("CollNet", expect.collnet if across else None, collnet),
        ):
            if want is not None and used != want:
                bad.append(
                    f"{name} {'' if want else 'not '}expected but {'engaged' if used else 'not engaged'}"
                )
        kinds = ", ".join(sorted({c.transport for c in mine}))
        if not bad and (unknown := _tcp_unversioned(site, node, debug)):
            out.append(Finding("nccl.transport", node, None, unknown, step))
            continue
        out.append(Finding("nccl.transport", node, not bad, "; ".join(bad) or f"over {kinds}", step))
    return out


# The names aws-ofi-nccl's NCCL net plugin gives itself: "Libfabric" from 1.13.0-aws, "AWS Libfabric"
# before (aws/aws-ofi-nccl commit 7c014f0d, src/nccl_ofi_interface_nvidia.cpp), and what it renames itself
# to when NCCL_NET asks for "AWS Libfabric" (HPE's and CSCS's Slingshot setting) or "OFI"
OFI_NETS = ("Libfabric", "AWS Libfabric", "OFI")


def _fabric(site: Site, node: str) -> str | None:
    """The node's fabric; None for a host the site does not list (a log judged on its own)."""
    try:
        return site.node_type(node).fabric
    except KeyError:
        return None


_LABEL = {"efa": "EFA"}  # how a provider is named to a person where its fi_info name is not it


def _socket_cause(site: Site, node: str, debug: NcclDebug) -> str:
    """Why an EFA, Slingshot or TCPX(O) node's NCCL took sockets, as its own log lines say."""
    if _fabric(site, node) in TCP_PLUGIN:
        return _tcp_cause(node, debug)
    provider = LIBFABRIC_PROVIDER.get(_fabric(site, node) or "")
    if provider is None:
        return ""
    if node in debug.ofi_no_provider:
        versions = debug.of_host("ofi_versions", node)
        which = f" {versions[0]}" if versions else ""
        return (
            f": aws-ofi-nccl{which} found no {_LABEL.get(provider, provider)} provider (NET/OFI 'No "
            "eligible providers were "
            f"found'; the job's libfabric, e.g. a container's, may lack the {provider} provider)"
        )
    return _no_plugin(node, debug, "aws-ofi-nccl's")


def _no_plugin(node: str, debug: NcclDebug, whose: str) -> str:
    """Where the node's NCCL loaded no net plugin: which library it could not find (``whose``: the plugin's
    maker as a person names it), else nothing."""
    missing = [lib for h, lib in debug.net_plugin_missing if h == node]
    if missing or not debug.of_host("net_plugins", node):
        found = f" (NET/Plugin: could not find {missing[0]})" if missing else ""
        lib = missing[0] if missing else "libnccl-net.so"
        return f": no net plugin loaded{found}: {whose} {lib} is not on the job's library path"
    return ""


# The plugins' lines that say their receive-datapath manager did not answer (parsers/nccl_debug.py)
_RXDM_LINES = ("Timeout: RxDM", "unix client", "NET/GPUDirectTCPX register", "update flow steering rule")


def _tcp_unversioned(site: Site, node: str, debug: NcclDebug) -> str | None:
    """Why a TCPX(O) node's plugin version cannot be judged where the site pins one: no version line."""
    if _fabric(site, node) not in TCP_PLUGIN:
        return None
    nt = site.node_type(node)
    want = nt.tcp.plugin_version if nt.tcp else None
    if want and not debug.of_host("tcp_plugin_versions", node):
        return f"the site pins plugin version {want}, and this node's log has no version line (NET subsystem)"
    return None


def _tcp_cause(node: str, debug: NcclDebug) -> str:
    """Why a GPUDirect-TCPX(O) node's NCCL did not run over Google's plugin, as its log says: the
    receive-datapath manager (RxDM: a container the Slurm prolog starts per job) did not answer, so the
    plugin's init failed; or no plugin was found on the library path."""
    if failed := [msg for h, msg in debug.tcp_plugin_failures if h == node]:
        rxdm = [m for m in failed if not m.startswith("Plug-in core")] or failed
        return (
            f": {rxdm[0]!r}: its receive-datapath manager (RxDM, the container the job's prolog starts "
            "on every node of a multi-node job) is not running or not reachable on this node"
            if rxdm[0].startswith(_RXDM_LINES)
            else f": {rxdm[0]!r}"
        )
    return _no_plugin(node, debug, "Google's")


def _off_tcp(site: Site, node: str, mine: Sequence[NcclConnection], debug: NcclDebug) -> list[str]:
    """A TCPX(O) node's network channels go through Google's plugin (GPUDirectTCPX_v7, FasTrak), of the
    version the site pins (``tcpx.plugin_version``), or say what instead."""
    nt = site.node_type(node)
    plugin = TCP_PLUGIN[nt.fabric]
    nets = sorted({c.net for c in mine if c.family == "NET" and c.net})
    bad = [f"NET/{n}, not Google's {nt.fabric.upper()} plugin (NET/{plugin})" for n in nets if n != plugin]
    want = nt.tcp.plugin_version if nt.tcp else None
    versions = debug.of_host("tcp_plugin_versions", node)
    if nets and not bad and want and versions and set(versions) != {want}:
        bad.append(f"{plugin} plugin version {', '.join(versions)}, the site expects {want}")
    return bad


def _off_ofi(node: str, mine: Sequence[NcclConnection], debug: NcclDebug, provider: str) -> list[str]:
    """An EFA or Slingshot node's network channels go through aws-ofi-nccl with its fabric's provider
    (efa, cxi), or say what instead."""
    nets = sorted({c.net for c in mine if c.family == "NET" and c.net})
    bad = [f"NET/{n}, not aws-ofi-nccl (NET/{OFI_NETS[0]})" for n in nets if n not in OFI_NETS]
    providers = debug.of_host("ofi_providers", node)
    if nets and not bad and providers and provider not in providers:
        bad.append(f"aws-ofi-nccl selected libfabric provider {', '.join(providers)}, not {provider}")
    return bad


def _config(
    site: Site, meta: dict[str, str], recs: Sequence[LaunchRecord], ours: dict[str, str]
) -> list[Finding]:
    accepted = dict(site.nccl.accept_env)
    step, out = step_id(meta), []
    for node in dict.fromkeys(r.host for r in recs if not r.error):
        settings: dict[str, str] = {}  # NAME -> "value (where)"
        for r in (r for r in recs if r.host == node and not r.error):
            for k, v in r.nccl_env:
                if ours.get(k) != v:
                    settings.setdefault(k, f"{v} (environment)")
            for k, (v, path) in r.conf_settings().items():
                settings.setdefault(k, f"{v} ({path})")
        knobs = [f"{k}={settings[k]}" for k in TUNING if k in settings and k not in accepted]
        waived = [f"{k} ({accepted[k]})" for k in TUNING if k in settings and k in accepted]
        others = sorted(k for k in settings if k not in TUNING)
        msg = (
            f"tuning set outside the suite, hiding what NCCL would choose: {', '.join(knobs)}"
            if knobs
            else "no tuning knob set outside the suite"
        )
        if waived:
            msg += f"; accepted: {', '.join(waived)}"
        if others:
            msg += f"; also set by the site or node: {', '.join(others)}"
        out.append(Finding("nccl.config", node, not knobs, msg, step))
    return out


def step_findings(
    site: Site,
    meta: dict[str, str],
    argv: Sequence[str],
    recs: Sequence[LaunchRecord],
    debug: NcclDebug | None,
    result: NcclTestsResult | None,
    nic_pci: NicPci | None = None,
) -> list[Finding]:
    """Every finding of one step (none for a check its evidence cannot speak to). ``nic_pci``: node -> PCI
    address -> EFA or cxi device (checks/libfabric.device_addresses), how aws-ofi-nccl's NIC group lines
    are read."""
    # what the suite set: the env words of the step's command line (the template's and the step's own)
    out = _binding(meta, recs, result) + _config(site, meta, recs, env_words(argv)[0])
    if debug is not None and debug.host_versions:
        out = [
            replace(f, versions=tuple(sorted({v for h, v in debug.host_versions if h == f.node})))
            if f.check == "nccl.config"
            else f
            for f in out
        ]
    if debug is not None:
        out += _nics(site, meta, debug, nic_pci or {}) + _transport(site, meta, debug)
    return out


def gating(findings: Sequence[Finding]) -> str | None:
    """Why a step's numbers are not judged as hardware (its first gating failure), or None."""
    bad = next((f for f in findings if f.ok is False and f.check in GATING), None)
    return None if bad is None else f"{bad.check} on {bad.node}: {bad.message}"


def crowded_steps(findings: Sequence[Finding], evidence: dict[str, str]) -> dict[str, tuple[str, str]]:
    """Rail steps whose ranks on a node shared fewer CPUs than there were concurrent rail steps on it:
    step -> (node, why). The rails of a pair run at once (one rank per node each), so their bound CPU
    sets are compared across the steps of one round (the steps' evidence bundle)."""
    rounds: dict[tuple[str, str], list[Finding]] = {}
    for f in findings:
        if f.check == "launch.binding" and ":rail" in f.step and f.cpus:
            rounds.setdefault((evidence.get(f.step, "").split("#", 1)[0], f.node), []).append(f)
    out: dict[str, tuple[str, str]] = {}
    for (_, node), fs in rounds.items():
        union = frozenset().union(*(f.cpus for f in fs))
        if len(fs) > 1 and len(union) < len(fs):
            why = f"{len(fs)} concurrent rail steps share {len(union)} CPU(s) {_cpus(union)}"
            out.update({f.step: (node, why) for f in fs})
    return out


def _odd_versions(by_node: Mapping[str, set[str]]) -> dict[str, str]:
    """Nodes whose NCCL differs from the one most nodes of the run logged: node -> why (``by_node``: the
    versions each node's ranks logged). One job's ranks must run one NCCL; a node with another (a stale
    image, a module loaded by a prolog) changes what every collective it is part of does."""
    if len(by_node) < 2:
        return {}
    ranked = Counter(v for vs in by_node.values() for v in vs).most_common()
    if len(ranked) == 1:
        return {}
    (common, count), (_, second) = ranked[0], ranked[1]
    if count == second:  # no majority: every node says what it runs and what the others do
        split = "; ".join(f"{v} on {n}" for v, n in ranked)
        return {node: f"NCCL differs between the nodes ({split} nodes)" for node in by_node}
    return {
        node: f"NCCL {', '.join(sorted(vs - {common}))} here, {common} on {count} of {len(by_node)} nodes"
        for node, vs in by_node.items()
        if vs != {common}
    }


def _quoted(bad: Sequence[Finding]) -> tuple[list[str], int, list[str]]:
    """The failing findings as a verdict quotes them, each message once with the steps that showed it
    (a node whose plugin failed says so on every step: once, not 37 times), how many steps that is, and
    those steps (whose evidence the verdict cites)."""
    by_message: dict[str, list[str]] = {}
    for f in bad:
        by_message.setdefault(f.message, []).append(f.step)
    out, quoted = [], []
    for message, steps in list(by_message.items())[:MAX_QUOTED]:
        out.append(f"{message} [{', '.join(steps[:MAX_QUOTED])}]")
        quoted += steps[:MAX_QUOTED]
    return out, len(quoted), quoted


def node_verdicts(
    findings: Findings,
    nodes: Sequence[str],
    evidence: dict[str, str],
    crowded: dict[str, tuple[str, str]],
) -> list[Verdict]:
    """One verdict per check and node of ``nodes`` from every step's findings (``evidence``: step -> path).

    ``crowded``: :func:`crowded_steps` of the same findings, the rail steps whose node shared fewer CPUs
    than there were concurrent rail steps on it (computed once: the caller also un-judges their numbers)."""
    shared: dict[str, list[str]] = {}
    for node, why in crowded.values():
        if why not in shared.setdefault(node, []):
            shared[node].append(why)
    odd = _odd_versions(findings.versions)
    out = []
    for check in CHECKS:
        for node in nodes:
            f = findings.folded.get((check, node))
            bad = f.bad if f is not None else []
            extra = shared.get(node, [])[:1] if check == "launch.binding" else []
            if check == "nccl.config" and node in odd:
                extra = [odd[node]]
            quoted, shown, steps = _quoted(bad)
            # a run-wide finding: the node's steps
            quote = steps or (f.steps if f is not None and extra else [])
            paths = tuple(dict.fromkeys(evidence[s] for s in quote if s in evidence))[:MAX_QUOTED]
            if bad or extra:
                more = f" (+{len(bad) - shown} more steps)" if len(bad) > shown else ""
                out.append(
                    Verdict(
                        check, FAMILY, node, Outcome.FAIL, "; ".join(extra + quoted) + more, evidence=paths
                    )
                )
            elif f is not None and f.n_ok:
                out.append(
                    Verdict(check, FAMILY, node, Outcome.PASS, f"{f.n_ok} step(s) judged, e.g. {f.first_ok}")
                )
            elif f is not None:
                out.append(Verdict(check, FAMILY, node, Outcome.SKIP, f"cannot be judged: {f.first}"))
    return out
