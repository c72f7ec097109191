"""What the site's fabric must be: the ``roce`` (lossless RoCE), ``sharp`` and ``gpudirect`` sections,
validated."""

from __future__ import annotations

from dataclasses import dataclass, field

from clusteraccept.site.schema import Section, refuse_secrets


@dataclass(frozen=True)
class Roce:
    lossless_priority: int
    trust: str
    roce_dscp: int
    ecn: bool
    cnp_dscp: int | None
    cnp_priority: int | None
    mtu: int


@dataclass(frozen=True)
class Sharp:
    enabled: bool
    reason: str = ""
    hello: tuple[str, ...] = ("sharp_hello",)
    env: dict[str, str] = field(default_factory=dict)


# What /sys/kernel/iommu_groups/<grp_id>/type reads (Documentation/ABI/testing/sysfs-kernel-iommu_groups:
# DMA = translated, DMA-FQ = translated with batched invalidation, identity = not translated, i.e. the
# kernel's iommu=pt passthrough), plus "none": the GPU is in no IOMMU group (IOMMU off).
IOMMU_MODES = ("none", "identity", "DMA", "DMA-FQ")


@dataclass(frozen=True)
class Gpudirect:
    """``gpudirect.iommu``: the IOMMU modes accepted on the GPUs (empty: not checked). NVIDIA's advice for
    PCIe peer-to-peer on bare metal is IOMMU off or passthrough (``iommu=pt``): [none, identity]."""

    iommu: tuple[str, ...] = ()


def parse_roce(top: Section) -> Roce | None:
    """The ``roce`` section; None for an InfiniBand-only site (no section)."""
    if not top.has("roce"):
        return None
    r = top.section(
        "roce", ["lossless_priority", "trust", "roce_dscp", "ecn", "cnp_dscp", "cnp_priority", "mtu"]
    )
    return Roce(
        lossless_priority=r.integer("lossless_priority", "a priority 0-7", minimum=0, maximum=7),
        trust=r.choice("trust", ["dscp", "pcp"]),
        roce_dscp=r.integer("roce_dscp", "a DSCP value 0-63", minimum=0, maximum=63),
        ecn=r.flag("ecn", default=True),
        cnp_dscp=r.integer("cnp_dscp", "a DSCP value 0-63", default=None, minimum=0, maximum=63),
        cnp_priority=r.integer("cnp_priority", "a priority 0-7", default=None, minimum=0, maximum=7),
        mtu=r.integer("mtu", "an MTU like 4200 or 9000", minimum=576, maximum=9216),
    )


def parse_sharp(top: Section) -> Sharp:
    """The ``sharp`` section (SHARP off unless ``enabled``)."""
    sh = top.section("sharp", ["enabled", "reason", "hello", "env"])
    refuse_secrets(sh.file, sh.key("env"), sh.str_map("env"))
    return Sharp(
        enabled=sh.flag("enabled", default=False),
        reason=sh.string("reason", default="the site declares no SHARP"),
        hello=sh.str_list("hello", "a command as a list of strings", default=("sharp_hello",)),
        env=sh.str_map("env"),
    )


def parse_gpudirect(top: Section) -> Gpudirect:
    """The ``gpudirect`` section (what IOMMU mode the GPUs may be in)."""
    g = top.section("gpudirect", ["iommu"])
    modes = g.str_list("iommu", "a list of IOMMU modes", default=())
    for i, mode in enumerate(modes):
        if mode not in IOMMU_MODES:
            raise g.error(f"iommu[{i}]", f"one of {', '.join(IOMMU_MODES)}", mode)
    return Gpudirect(iommu=tuple(modes))
