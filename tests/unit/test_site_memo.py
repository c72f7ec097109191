"""site/memo.ByIdentity: one memo per owner object, by identity, the owner held."""

from __future__ import annotations

from clusteraccept.site.memo import ByIdentity


def test_one_memo_per_owner_held_and_forgotten_after_keep_owners() -> None:
    memos: ByIdentity[str, int] = ByIdentity(keep=2)
    a, b = {"x": 1}, {"x": 1}  # equal, not the same object: two memos
    memos.of(a)["k"] = 1
    assert memos.of(a) == {"k": 1} and memos.of(b) == {}
    memos.of(b)["k"] = 2
    assert memos.of(a)["k"] == 1 and memos.of(b)["k"] == 2
    c: dict[str, int] = {}
    assert memos.of(c) == {}  # a third owner: the two before are forgotten
    assert memos.of(a) == {}
