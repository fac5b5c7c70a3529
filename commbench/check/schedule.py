"""Which pairs and groups `commbench check` measures, round by round (pure).

All pairs: the round-robin tournament by the circle method (Knuth, TAOCP 7.2.1.2; the schedule
of a round-robin chess tournament): n ranks meet in n-1 rounds of n/2 disjoint pairs (n odd:
n rounds, one rank sits out each), every pair exactly once, so all pairs of a round can run at
once without two sharing a rank. Large jobs sample: `peers` rounds of the tournament (each rank
meets exactly that many distinct peers), or node-level pairs (a tournament over nodes, each node
pair measured by its ranks of equal local rank, one rail each).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from commbench.errors import UsageError

Pair = tuple[int, int]
SCHEDULES = ("all", "sampled", "nodes")
PAIR_OP = "sendrecv"  # both ranks of a pair send S to each other at once
GROUP_OPS = ("allreduce", "allgather")  # within each node, and across nodes rail by rail
CHECK_OPS = (PAIR_OP, *GROUP_OPS)


def round_robin(n: int) -> list[list[Pair]]:
    """The n-1 rounds (n even) or n rounds (n odd) of n players, pairs as (low, high)."""
    assert n >= 2, n
    players: list[int | None] = [*range(n), *([None] if n % 2 else [])]
    m = len(players)
    rounds = []
    for _ in range(m - 1):
        pairs = [(players[i], players[m - 1 - i]) for i in range(m // 2)]
        rounds.append(
            sorted((min(a, b), max(a, b)) for a, b in pairs if a is not None and b is not None)
        )
        players = [players[0], players[-1], *players[1:-1]]  # rotate all but the first
    return rounds


def local_ranks(nodes: tuple[int, ...]) -> tuple[int, ...]:
    """Each rank's position among the ranks of its node (its rail)."""
    seen: dict[int, int] = {}
    out = []
    for node in nodes:
        out.append(seen.get(node, 0))
        seen[node] = seen.get(node, 0) + 1
    return tuple(out)


def node_groups(nodes: tuple[int, ...]) -> list[tuple[int, ...]]:
    """The ranks of each node, node by node."""
    by: dict[int, list[int]] = {}
    for rank, node in enumerate(nodes):
        by.setdefault(node, []).append(rank)
    return [tuple(by[k]) for k in sorted(by)]


def rail_groups(nodes: tuple[int, ...]) -> list[tuple[int, ...]]:
    """Local rank r of every node, rail by rail (needs the same ranks on every node)."""
    groups = node_groups(nodes)
    per = {len(g) for g in groups}
    if len(per) != 1:
        raise UsageError(
            f"the nodes have different numbers of ranks ({sorted(per)}): rails and node-level "
            "pairs need the same number on every node"
        )
    return [tuple(g[r] for g in groups) for r in range(per.pop())]


@dataclass(frozen=True)
class Schedule:
    """The rounds of pairs to run, and what that costs."""

    kind: str  # all | sampled | nodes
    rounds: tuple[tuple[Pair, ...], ...]
    world: int

    @property
    def pairs(self) -> int:
        return sum(len(r) for r in self.rounds)

    def cost(self, calls_per_pair: int, nbytes: int) -> str:
        """The cost said before anything runs: rounds, pairs, calls and bytes per rank."""
        total = self.world * (self.world - 1) // 2
        moved = len(self.rounds) * calls_per_pair * nbytes
        return (
            f"{self.kind} pairs: {len(self.rounds)} round(s), {self.pairs} of {total} pairs; "
            f"each round {calls_per_pair} exchange(s) of {nbytes} B each way, "
            f"at most {moved / 1e6:.1f} MB sent per rank"
        )


def build(kind: str, nodes: tuple[int, ...], peers: int | None = None, seed: int = 0) -> Schedule:
    """The schedule of `kind` over ranks whose node indices are `nodes`."""
    n = len(nodes)
    if n < 2:
        raise UsageError("check needs at least 2 ranks (pairs of ranks are what it measures)")
    if kind == "all":
        return Schedule(kind, tuple(map(tuple, round_robin(n))), n)
    if kind == "sampled":
        rounds = round_robin(n)
        if peers is None or not 1 <= peers <= len(rounds):
            raise UsageError(
                f"--schedule sampled needs --peers between 1 and {len(rounds)} (world {n}), "
                f"got {peers}"
            )
        picked = sorted(random.Random(seed).sample(range(len(rounds)), peers))
        return Schedule(kind, tuple(tuple(rounds[i]) for i in picked), n)
    if kind == "nodes":
        groups = node_groups(nodes)
        rails = rail_groups(nodes)  # equal ranks per node, checked
        if len(groups) < 2:
            raise UsageError("--schedule nodes needs at least 2 nodes (the job has 1)")
        out = []
        for rnd in round_robin(len(groups)):
            out.append(tuple(sorted((rail[a], rail[b]) for a, b in rnd for rail in rails)))
        return Schedule(kind, tuple(out), n)
    raise UsageError(f"unknown schedule {kind!r}: choose {', '.join(SCHEDULES)}")
