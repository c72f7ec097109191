"""Which node pairs meet in which round of a campaign: pure matching maths over node names.

Pair rounds are perfect matchings (DESIGN.md §2): inside a block, the round-robin "circle method" covers
every pair in n-1 rounds with each node in one pair per round; across blocks, a seeded sample of partners
packed first-fit into rounds in which no node appears twice.
"""

from __future__ import annotations

import random
from collections.abc import Sequence


def circle_rounds(nodes: Sequence[str]) -> list[list[tuple[str, str]]]:
    """Round-robin perfect matchings: n-1 rounds (n even) or n rounds with one bye each (n odd).

    Every pair appears in exactly one round and no node twice in a round.
    """
    players: list[str | None] = list(nodes)
    if len(players) < 2:
        return []
    if len(players) % 2:
        players.append(None)  # the bye
    n = len(players)
    order = {name: i for i, name in enumerate(nodes)}
    rounds: list[list[tuple[str, str]]] = []
    for _ in range(n - 1):
        pairs = []
        for i in range(n // 2):
            a, b = players[i], players[n - 1 - i]
            if a is not None and b is not None:
                pairs.append((a, b) if order[a] < order[b] else (b, a))
        rounds.append(pairs)
        players = [players[0], players[-1], *players[1:-1]]  # fix the first, rotate the rest
    return rounds


def cross_block_pairs(blocks: dict[str, tuple[str, ...]], partners: int, seed: int) -> list[tuple[str, str]]:
    """Each node with ``partners`` random nodes of other blocks (seeded, deterministic); no pair twice."""
    rng = random.Random(seed)
    order = {n: i for i, n in enumerate(n for members in blocks.values() for n in members)}
    pairs: set[tuple[str, str]] = set()
    for name, members in blocks.items():
        others = sorted(n for b, m in blocks.items() if b != name for n in m)
        if not others:
            continue
        for node in members:
            for partner in rng.sample(others, min(partners, len(others))):
                pairs.add((node, partner) if order[node] < order[partner] else (partner, node))
    return sorted(pairs, key=lambda p: (order[p[0]], order[p[1]]))


def greedy_matchings(pairs: Sequence[tuple[str, str]]) -> list[list[tuple[str, str]]]:
    """Pack arbitrary pairs into rounds in which no node appears twice (first-fit)."""
    rounds: list[tuple[list[tuple[str, str]], set[str]]] = []
    for a, b in pairs:
        for members, busy in rounds:
            if a not in busy and b not in busy:
                members.append((a, b))
                busy.update((a, b))
                break
        else:
            rounds.append(([(a, b)], {a, b}))
    return [members for members, _ in rounds]
