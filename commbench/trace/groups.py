"""Which process group each gloo op ran on, found by matching the ranks' traces.

gloo's profiler events name no process group, and a mesh dimension that spans the whole world
reuses the default group. What is known: the groups each rank belongs to (`pg_config`), and
that the ranks of one group issue its collectives in the same order with the same op and
size, so every member's next op on that group agrees (MPI's and c10d's matching rule). The
traces are replayed as a blocking schedule: a group's op is taken when every member's next op
agrees with it (a send when its peer's next op is the matching receive). Where more than one
group would fit, consistent assignments are searched (bounded): each group runs on its own
gloo worker threads (two by default), so one thread never serves two groups. Of those, the one
taken has its threads created in the groups' creation order (pg_config's numbering), then
the smaller groups (two subgroups at once read as one world op otherwise), then its threads
in the pools their creation order suggests (pool_hints), then the collectives whose members
finished closest together; ops whose group still differs between the best assignments are
said to be open.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from commbench.trace.ops import P2P, CommOp

MAX_NODES = 20000
MAX_SOLUTIONS = 64
GLOO_THREADS = 2  # ProcessGroupGloo::Options' default pool: each group's work runs on 2 threads


@dataclass
class Matching:
    """The result: ops given groups in place, and what was left open or unmatched."""

    open_ops: list[tuple[CommOp, list[tuple[int, ...]]]] = field(default_factory=list)
    unmatched: list[CommOp] = field(default_factory=list)
    searched_out: bool = False


def _candidates(rank: int, groups: dict[int, list[tuple[int, ...]]], world: int):
    got = groups.get(rank) or [tuple(range(world))]
    return [g for g in dict.fromkeys(tuple(sorted(x)) for x in got) if rank in g]


def match_groups(
    ops: dict[int, list[CommOp]], groups: dict[int, list[tuple[int, ...]]], world: int,
    pg_order: dict[int, dict[tuple[int, ...], int]],
    pools: dict[int, dict[object, tuple[int, ...]]] | None = None,
) -> Matching:  # fmt: skip
    """Give every op without group_ranks its group (in place). `groups`: each traced rank's
    groups (pg_config); `pg_order`: each group's creation number per rank; `pools`: per rank,
    the group each gloo worker thread's pool likely serves (pool_hints), a tie-breaker."""
    todo = {r: [o for o in rops if o.group_ranks is None] for r, rops in ops.items()}
    traced = set(todo)
    solutions: list[dict[tuple[int, int], tuple[int, ...]]] = []
    nodes = [0]
    cands = {r: _candidates(r, groups, world) for r in todo}

    def options(r: int, pos: dict[int, int], bind: dict) -> list[tuple[tuple[int, ...], list[int]]]:  # noqa: E501
        head = todo[r][pos[r]]
        out = []
        for g in cands[r]:
            if head.op == P2P:
                if head.peer is None or head.peer >= len(g):
                    continue
                partner = g[head.peer]
                members = [r, partner]
                if partner in traced:
                    if pos[partner] >= len(todo[partner]):
                        continue
                    other = todo[partner][pos[partner]]
                    if (other.op != P2P or other.direction == head.direction
                            or other.bytes != head.bytes or other.peer != g.index(r)):  # fmt: skip
                        continue
            else:
                members = [m for m in g if m in traced]
                if any(pos[m] >= len(todo[m]) for m in members):
                    continue
                if any(todo[m][pos[m]].signature != head.signature or todo[m][pos[m]].op == P2P
                       for m in members):  # fmt: skip
                    continue
            if all(_fits(bind, m, todo[m][pos[m]], g, order) for m in members):
                out.append((g, members))
        return out

    seen: set = set()
    total = sum(map(len, todo.values()))
    complete = [0]
    partial: dict = {}

    def search(pos: dict[int, int], bind: dict, chosen: dict) -> None:
        """Depth first over the group ops that could complete next, on any rank (a rank whose
        next op looks ready may in truth wait for a later one); states met before are skipped,
        so ops of disjoint groups taken in either order are searched once."""
        nodes[0] += 1
        if nodes[0] > MAX_NODES or complete[0] >= MAX_SOLUTIONS:
            return
        state = (tuple(sorted(pos.items())), frozenset(bind.items()))
        if state in seen:
            return
        seen.add(state)
        actions: dict[tuple, tuple] = {}
        for r in todo:
            if pos[r] < len(todo[r]):
                for g, members in options(r, pos, bind):
                    key = (g, tuple(sorted((m, pos[m]) for m in members)))
                    bound = sum((m, todo[m][pos[m]].exec_tid) in bind for m in members)
                    ends = [todo[m][pos[m]].end_us for m in members]
                    spread = max(ends) - min(ends)
                    actions.setdefault(key, (-bound, len(g), spread, g, members))
        if not actions:  # done, or stuck
            if len(chosen) == total:
                solutions.append(dict(chosen))
                complete[0] += 1
            elif len(chosen) > len(partial):  # the furthest a dead end got, if nothing ends
                partial.clear()
                partial.update(chosen)
            return
        for *_, g, members in sorted(actions.values(), key=lambda a: a[:3]):
            new_bind, new_pos, new_chosen = dict(bind), dict(pos), dict(chosen)
            for m in members:
                op = todo[m][pos[m]]
                if op.exec_tid != op.cpu_tid:
                    new_bind[(m, op.exec_tid)] = g
                new_chosen[(m, op.seq)] = tuple(sorted(members)) if op.op == P2P else g
                new_pos[m] += 1
            search(new_pos, new_bind, new_chosen)

    order: dict | None = pg_order
    search({r: 0 for r in todo}, {}, {})
    if not solutions:
        order = None  # threads not in the groups' order (ids wrapped, pools made lazily)
        nodes[0] = 0
        seen.clear()
        search({r: 0 for r in todo}, {}, {})
    result = Matching(searched_out=nodes[0] > MAX_NODES)
    if not solutions:
        solutions.append(partial)

    def score(s: dict) -> tuple[int, int, int, int, float]:
        off = sum(
            1 for r, rops in todo.items() for o in rops
            if (hint := (pools or {}).get(r, {}).get(o.exec_tid)) and s.get((r, o.seq)) != hint
        )  # fmt: skip
        size = sum(len(g) for g in s.values())  # the smaller groups, all else equal
        return -len(s), _inversions(s, todo, pg_order), size, off, _spread(s, todo)

    scored = sorted(solutions, key=score)
    ties = [s for s in scored if score(s) == score(scored[0])]
    chosen = scored[0]
    for r, rops in todo.items():
        for op in rops:
            g = chosen.get((r, op.seq))
            if g is None:
                result.unmatched.append(op)
                continue
            op.group_ranks = g
            alts = list(dict.fromkeys(s.get((r, op.seq)) for s in ties))
            if len(alts) > 1:
                result.open_ops.append((op, [a for a in alts if a is not None]))
    return result


def pool_hints(threads: list[int], pgs: list[tuple[int, ...]]) -> dict[object, tuple[int, ...]]:
    """Worker threads (sorted ids) cut into pools of GLOO_THREADS, the i-th pool taken as the
    i-th group this rank joined (pools start as groups are made). The trace lists only the
    threads that ran something: a group that never ran shifts the pools after it, so this
    breaks ties only, after the threads' order and the groups' sizes."""
    if not threads or len(threads) > GLOO_THREADS * len(pgs):
        return {}
    return {t: tuple(sorted(pgs[i // GLOO_THREADS])) for i, t in enumerate(threads)}


def _fits(bind: dict, rank: int, op: CommOp, g: tuple[int, ...], order: dict | None) -> bool:
    """A worker thread serves one group, and a group has at most GLOO_THREADS of them a rank
    (an op run inline on the thread that issued it, as gloo's send and recv are, says nothing).
    With `order` (rank -> group -> creation number), threads started in the groups' order."""
    tid = op.exec_tid
    if tid == op.cpu_tid:
        return True
    if (rank, tid) in bind:
        return bind[(rank, tid)] == g
    mine = [(t, h) for (r, t), h in bind.items() if r == rank]
    if sum(1 for _, h in mine if h == g) >= GLOO_THREADS:
        return False
    if order is None or not isinstance(tid, int) or g not in order.get(rank, {}):
        return True
    n = order[rank][g]
    return all(
        (t < tid) == (order[rank][h] < n) or order[rank][h] == n
        for t, h in mine
        if isinstance(t, int) and h in order[rank]
    )


def _spread(solution: dict, todo: dict[int, list[CommOp]]) -> float:
    """How far apart the members of each collective finished, summed (us): the ranks of one
    collective leave it together, ranks of two independent ones need not."""
    ends: dict[tuple, list[float]] = {}
    count: dict[tuple, int] = {}
    for r, rops in todo.items():
        for op in rops:
            g = solution.get((r, op.seq))
            if g is None or op.op == P2P:
                continue
            k = count[(r, g)] = count.get((r, g), -1) + 1
            ends.setdefault((g, k), []).append(op.end_us)
    return round(sum(max(e) - min(e) for e in ends.values()), 1)


def _inversions(solution: dict, todo: dict[int, list[CommOp]], pg_order: dict) -> int:
    """Pairs of worker threads on one rank whose creation order (thread ids grow as threads
    start) is the other way round from their groups' (each group starts its pool when made)."""
    count = 0
    for r, rops in todo.items():
        order = pg_order.get(r, {})
        tids: dict[int, int] = {}
        for op in rops:
            g = solution.get((r, op.seq))
            if g in order and op.exec_tid != op.cpu_tid and isinstance(op.exec_tid, int):
                tids[op.exec_tid] = order[g]
        items = sorted(tids.items())
        count += sum(1 for i, a in enumerate(items) for b in items[i + 1 :] if a[1] > b[1])
    return count
