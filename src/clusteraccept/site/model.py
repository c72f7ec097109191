"""The site: one cluster's description (loaded and validated by :mod:`clusteraccept.site.load`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from clusteraccept.render import REPO_ROOT
from clusteraccept.site.baselines import Reference
from clusteraccept.site.campaign import Nccl, Tools
from clusteraccept.site.fabric import Gpudirect, Roce, Sharp
from clusteraccept.site.nodes import NodeType, domains_in_blocks, domains_of_slurm_blocks
from clusteraccept.site.operations import Ops
from clusteraccept.site.slurm import Slurm


@dataclass(frozen=True)
class Site:
    name: str
    file: str
    description: str
    simulated: bool
    slurm: Slurm
    setup: tuple[str, ...]
    env: dict[str, str]
    nodes: tuple[str, ...]
    blocks: dict[str, tuple[str, ...]]
    blocks_from_slurm: bool
    node_types: tuple[NodeType, ...]
    roce: Roce | None
    sharp: Sharp
    tools: Tools
    nccl: Nccl
    baselines: dict[str, Reference]
    baselines_file: str | None
    sim_faults: tuple[dict[str, Any], ...] = ()
    ops: Ops = field(default_factory=Ops)  # nightly / drain / attest sections (site/operations.py)
    gpudirect: Gpudirect = field(default_factory=Gpudirect)
    # a file of NAME=value credentials (mode 0600) read at submit time and never written (site/env_file.py)
    env_file: str | None = None
    # NVLink domains that span nodes (NVL72 racks), name -> nodes (site/nodes.parse_nvlink_domains); a
    # node in none is its own domain (HGX)
    nvlink_domains: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # ``nvlink_domains: blocks`` with ``blocks: slurm``: the domains are Slurm's blocks, known once read
    domains_are_slurm_blocks: bool = False

    def with_slurm_blocks(self, blocks: dict[str, tuple[str, ...]]) -> Site:
        """The site with ``blocks: slurm`` resolved (jobs/slurm_clients.slurm_blocks), and its NVLink domains
        where they are those blocks, validated as a site's own (SiteConfigError)."""
        domains = self.nvlink_domains
        if self.domains_are_slurm_blocks:
            domains = domains_of_slurm_blocks(self.file, self.node_types, blocks)
        elif domains:  # racks named in the site: each inside one of Slurm's blocks, as with site blocks
            domains = domains_in_blocks(self.file, self.node_types, domains, blocks)
        return dataclasses.replace(self, blocks=blocks, nvlink_domains=domains)

    @cached_property
    def _type_of(self) -> dict[str, NodeType]:
        return {n: nt for nt in self.node_types for n in nt.nodes}

    @cached_property
    def _block_index(self) -> dict[str, str]:
        return {n: name for name, members in self.blocks.items() for n in members}

    def node_type(self, node: str) -> NodeType:
        return self._type_of[node]  # KeyError for a node the site does not have

    @cached_property
    def _domain_index(self) -> dict[str, str]:
        return {n: name for name, members in self.nvlink_domains.items() for n in members}

    def domain_of(self, node: str) -> str | None:
        """The multi-node NVLink domain ``node`` is in (None: the node is its own)."""
        return self._domain_index.get(node)

    def block_of(self, node: str) -> str | None:
        return self._block_index.get(node)


def reports_dir(site: Site) -> Path:
    return Path(site.ops.nightly.reports_dir or REPO_ROOT / "reports")


def summary_path(site: Site) -> Path:
    return Path(site.ops.nightly.summary_file or reports_dir(site) / site.name / "nightly-summary.txt")
