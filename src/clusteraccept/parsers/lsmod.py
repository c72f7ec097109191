"""``lsmod`` (kmod), whole or filtered through ``grep``: loaded modules, sizes, use counts, holders.

kmod tools/lsmod.c prints a header, then one line per module::

    Module                  Size  Used by
    mlx5_ib               495616  0
    ib_core               528384  2 ib_uverbs,mlx5_ib        ("%-19s %8ld  %d" then " a,b,c")

A ``lsmod | grep mlx`` capture has no header and may show a module only inside another module's
"Used by" list (``ib_core ... nv_peer_mem,mlx5_ib``); ``loaded()`` counts that as loaded, since
the kernel lists only live modules as holders. Older lsmod versions (module-init-tools, busybox)
print ``[permanent]`` after the count or inside the list (``1 nvgpu,[permanent]``) and a taint
state after the header; ``/proc/modules`` prints ``-`` for an unknown use count. Kernel 2.4
``(autoclean) [a b]`` lines are not supported.
Empty input is a valid, empty result (grep matched nothing).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from clusteraccept.errors import ParseError

# busybox lsmod appends the taint state: "Used by    Tainted: G" / "Used by    Not tainted".
_HEADER = re.compile(r"Module\s+Size\s+Used by(?:\s+(?:Not tainted|Tainted:.*))?")
_LINE = re.compile(r"([A-Za-z0-9_\-]+)\s+([0-9]+)\s+(-?[0-9]+|-)((?:\s+\S+)*)")
_NAME = re.compile(r"[A-Za-z0-9_\-]+")


def _norm(name: str) -> str:
    # The kernel stores module names with '_' (modprobe nvidia-peermem loads "nvidia_peermem").
    return name.replace("-", "_")


@dataclass(frozen=True)
class Module:
    name: str
    size_B: int
    use_count: int | None  # None: printed as "-"
    used_by: tuple[str, ...]  # holder module names, as printed
    permanent: bool = False  # "[permanent]": cannot be unloaded (old lsmod only)


@dataclass(frozen=True)
class Lsmod:
    modules: tuple[Module, ...]
    has_header: bool  # False for "lsmod | grep ..." captures

    def module(self, name: str) -> Module | None:
        """The module's own line, if it was printed ('-' and '_' are the same)."""
        want = _norm(name)
        return next((m for m in self.modules if _norm(m.name) == want), None)

    def loaded(self, name: str) -> bool:
        """True if the module has its own line or appears as a holder of a printed module."""
        want = _norm(name)
        return self.module(name) is not None or any(want == _norm(h) for m in self.modules for h in m.used_by)

    def holders(self, name: str) -> tuple[str, ...]:
        """Modules using ``name`` (empty when it has no line of its own)."""
        m = self.module(name)
        return m.used_by if m else ()


def parse(text: str) -> Lsmod:
    """Parse ``lsmod`` output; every non-blank line must be the header or a module line."""
    modules: list[Module] = []
    has_header = False
    for no, raw in enumerate(text.split("\n"), start=1):
        s = raw.strip()
        if not s:
            continue
        if _HEADER.fullmatch(s):
            if has_header or modules:
                raise ParseError(no, "the 'Module Size Used by' header only as the first line", s)
            has_header = True
            continue
        m = _LINE.fullmatch(s)
        if m is None:
            raise ParseError(no, "'<module> <size> <use count> [holder,holder,...]'", s)
        rest = m.group(4).replace(",", " ").split()
        if len(m.group(4).split()) > 2 or not all(_NAME.fullmatch(h) or h == "[permanent]" for h in rest):
            raise ParseError(no, "holder module names separated by commas", m.group(4).strip())
        count = m.group(3)
        modules.append(
            Module(
                name=m.group(1),
                size_B=int(m.group(2)),
                # kmod prints a negative errno when the refcount is unreadable; /proc/modules says "-".
                use_count=None if count == "-" or count.startswith("-") else int(count),
                used_by=tuple(h for h in rest if h != "[permanent]"),
                permanent="[permanent]" in rest,
            )
        )
    if len({_norm(m.name) for m in modules}) != len(modules):
        raise ParseError(0, "each module once", ", ".join(m.name for m in modules))
    return Lsmod(modules=tuple(modules), has_header=has_header)
