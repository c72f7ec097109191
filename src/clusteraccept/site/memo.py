"""Values worked out once per loaded Site, or one of its mappings (its baselines), which are never changed
once loaded and are not hashable (they hold dicts): remembered by the object's identity. The plan's pair
step shapes, the baseline lookups and the busbw combinations use it."""

from __future__ import annotations

from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class ByIdentity(Generic[K, V]):
    """One memo dict per owner object, found by ``id(owner)``. The owner is held beside its memo, so its id
    cannot be reused by another object while it is remembered; after ``keep`` owners every memo is
    forgotten (a process judges one site, tests a few hundred)."""

    def __init__(self, keep: int = 8) -> None:
        self._keep = keep
        self._memos: dict[int, tuple[object, dict[K, V]]] = {}

    def of(self, owner: object) -> dict[K, V]:
        memo = self._memos.get(id(owner))
        if memo is None or memo[0] is not owner:
            if len(self._memos) >= self._keep:
                self._memos.clear()
            memo = self._memos[id(owner)] = (owner, {})
        return memo[1]
