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


# A schedule has at most this many pairs: all pairs of 1449 ranks. Past it a check runs for
# hours and a dry run prints gigabytes (all pairs of 100000 ranks: 5e9): sample instead.
MAX_PAIRS = 1 << 20


def rounds_of(n: int) -> int:
    """Rounds of the tournament of n players: n-1 (n even) or n (n odd)."""
    return n - 1 if n % 2 == 0 else n


def round_of(n: int, k: int) -> list[Pair]:
    """Round k of the circle method for n players, pairs as (low, high), built alone: player 0
    stays, the others rotate one place a round, so after k rounds position i (i >= 1) holds
    player (i - 1 - k) mod (m - 1) + 1, m = n rounded up to even (m - 1 is a sit-out)."""
    assert n >= 2 and 0 <= k < rounds_of(n), (n, k)
    m = n + n % 2
    at = [0, *(((i - 1 - k) % (m - 1)) + 1 for i in range(1, m))]
    pairs = ((at[i], at[m - 1 - i]) for i in range(m // 2))
    return sorted((min(a, b), max(a, b)) for a, b in pairs if max(a, b) < n)


def round_robin(n: int) -> list[list[Pair]]:
    """The n-1 rounds (n even) or n rounds (n odd) of n players, pairs as (low, high)."""
    return [round_of(n, k) for k in range(rounds_of(n))]


def check_pairs(kind: str, rounds: int, pairs: int, n: int) -> None:
    """A schedule of at most MAX_PAIRS pairs, said before any round is built."""
    if pairs > MAX_PAIRS:
        raise UsageError(
            f"--schedule {kind} on {n} ranks: {pairs} pairs in {rounds} rounds, over the bound "
            f"of {MAX_PAIRS} pairs one check may have: use --schedule sampled --peers K (K "
            "rounds) or --schedule nodes"
        )


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
        check_pairs(kind, rounds_of(n), n * (n - 1) // 2, n)
        return Schedule(kind, tuple(map(tuple, round_robin(n))), n)
    if kind == "sampled":
        total = rounds_of(n)
        if peers is None or not 1 <= peers <= total:
            raise UsageError(
                f"--schedule sampled needs --peers between 1 and {total} (world {n}), got {peers}"
            )
        check_pairs(kind, peers, peers * (n // 2), n)
        picked = sorted(random.Random(seed).sample(range(total), peers))
        return Schedule(kind, tuple(tuple(round_of(n, k)) for k in picked), n)
    if kind == "nodes":
        groups = node_groups(nodes)
        rails = rail_groups(nodes)  # equal ranks per node, checked
        if len(groups) < 2:
            raise UsageError("--schedule nodes needs at least 2 nodes (the job has 1)")
        check_pairs(
            kind, rounds_of(len(groups)), len(groups) * (len(groups) - 1) // 2 * len(rails), n
        )
        out = []
        for rnd in round_robin(len(groups)):
            out.append(tuple(sorted((rail[a], rail[b]) for a, b in rnd for rail in rails)))
        return Schedule(kind, tuple(out), n)
    raise UsageError(f"unknown schedule {kind!r}: choose {', '.join(SCHEDULES)}")
