"""The measuring side of `commbench check`, on every rank: the pair rounds, then each node's
group and each rail (local rank r of every node) for every group op, all groups of a kind at
once. Rank 0 writes one CheckRecord per pair and per group, each as soon as its round ends. A
kind of group in which rank 0 sees an outlier runs once more (`round` 1) before the verdict,
which takes each group's better attempt: on shared CPUs a scheduler hiccup slowed one node's
intra-node all-reduce to 0.37 of its peers once, and a real fault is slow both times.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from commbench.check import outliers
from commbench.check.outliers import Judgement, RankInfo, Rule
from commbench.check.schedule import (
    GROUP_OPS,
    PAIR_OP,
    Schedule,
    local_ranks,
    node_groups,
    rail_groups,
)
from commbench.check.summary import sample
from commbench.errors import UsageError
from commbench.measure.session import Session
from commbench.ops import round_bytes
from commbench.results.checkrecords import CheckRecord
from commbench.results.records import fields_of
from commbench.traffic.layout import GroupInfo
from commbench.traffic.program import Step


def label(axis: str, groups: Sequence[tuple[int, ...]], nodes: tuple[int, ...]) -> GroupInfo:
    """Placement of `groups` run at once: the most hosts one spans, intra if that is 1."""
    first = groups[0]
    steps = {b - a for a, b in zip(first, first[1:])}
    stride = steps.pop() if len(steps) == 1 else -1
    spanned = max(len({nodes[r] for r in g}) for g in groups)
    return GroupInfo(
        axis, tuple(groups), len(first), stride, spanned, "intra" if spanned == 1 else "inter"
    )


def rank_places(s: Session) -> list[dict]:
    """meta.json's `devices` per rank, with the node as host: under --ranks-per-node the
    pretend node (`HOST/node<k>`) and the local rank on it, so outliers name nodes."""
    if not s.opts.ranks_per_node:
        return s.devices
    local = local_ranks(s.nodes)
    return [
        {**d, "host": f"{d['host']}/node{s.nodes[r]}", "local_rank": local[r]}
        for r, d in enumerate(s.devices)
    ]


def group_plan(nodes: tuple[int, ...]) -> tuple[list[tuple[str, list[tuple[int, ...]]]], list[str]]:
    """[(test, groups)] for the collectives, and why any kind is left out."""
    plan: list[tuple[str, list[tuple[int, ...]]]] = []
    notes: list[str] = []
    per_node = node_groups(nodes)
    if min(len(g) for g in per_node) >= 2:
        plan.append(("node", per_node))
    else:
        notes.append("node groups left out: a node with a single rank has no intra-node group")
    if len(per_node) >= 2:
        try:
            plan.append(("rail", rail_groups(nodes)))
        except UsageError as e:  # unequal ranks per node
            notes.append(f"rail groups left out: {e}")
    else:
        notes.append("rail groups left out: one node")
    return plan, notes


def measure(
    s: Session,
    schedule: Schedule,
    nbytes: int,
    dtype: str,
    say: Callable[[str], None],
    rule: Rule,
    collectives: bool = True,
) -> list[CheckRecord]:
    """Run the schedule's rounds, then the groups (a kind with a suspect twice); the records on
    rank 0 ([] elsewhere)."""
    nodes = s.nodes
    plan, notes = group_plan(nodes) if collectives else ([], [])
    for n in notes:
        say(f"# {n}")
    pair = Step(op=PAIR_OP, nbytes=round_bytes(PAIR_OP, nbytes, 2, dtype), axis="pair",
                dtype=dtype, label="check pairs")  # fmt: skip
    units: list[tuple[str, int, Step, list[tuple[int, ...]]]] = [
        ("pairs", i, pair, list(rnd)) for i, rnd in enumerate(schedule.rounds)
    ]
    for test, unsorted in plan:
        groups = [tuple(sorted(g)) for g in unsorted]  # per-rank times come in rank order
        for op in GROUP_OPS:
            p = len(groups[0])
            st = Step(op=op, nbytes=round_bytes(op, nbytes, p, dtype), axis=test, dtype=dtype,
                      label=f"check {test}")  # fmt: skip
            units.append((test, -1, st, groups))
    places = rank_places(s)
    info_of = [RankInfo.from_meta(d) for d in places]
    s.runner.reserve([(st, label(t, g, nodes)) for t, _, st, g in units])
    out: list[CheckRecord] = []
    for test, rnd, st, groups in units:
        mine = _run_unit(s, test, max(rnd, 0), st, groups, places)
        worst = min(mine, key=lambda r: r.busbw_GBps) if mine else None
        where = f"round {rnd + 1}/{len(schedule.rounds)}" if rnd >= 0 else f"{st.op} per {test}"
        if worst is not None:
            say(
                f"# {test} {where}: {len(mine)} unit(s), slowest {worst.busbw_GBps:.4g} GB/s "
                f"(ranks {', '.join(map(str, worst.ranks))})"
            )
        if rnd < 0:  # a group outlier is measured once more: a noisy dip rarely repeats
            j = Judgement()
            outliers.groups([sample(r) for r in mine], info_of, rule, j)
            if s.world.bcast_obj(len(j.findings), root=0):
                say(f"# {test} {where}: {', '.join(f.where for f in j.findings)} slow: again")
                mine += _run_unit(s, test, 1, st, groups, places)
        out += mine
    return out


def _run_unit(
    s: Session, test: str, attempt: int, st: Step, groups: list[tuple[int, ...]], places: list[dict]
) -> list[CheckRecord]:
    """One round of pairs, or one op on every group of a kind, all at once; rank 0 writes a
    record per pair or group and returns them ([] elsewhere)."""
    info = label(test, groups, s.nodes)
    got = s.runner.measure_each(st, info, [label(test, [g], s.nodes) for g in groups])
    if got is None:
        return []
    mine = []
    for g, (m, per_rank) in zip(groups, got):
        rec = CheckRecord(
            **fields_of(m),
            backend=s.opts.backend,
            test=test,
            round=attempt,
            ranks=list(g),
            hosts=[places[r]["host"] for r in g],
            local_ranks=[int(places[r]["local_rank"]) for r in g],
            per_rank_us=per_rank,
        )
        assert s.writer is not None  # rank 0 holds the run directory
        s.writer.write(rec.to_json())
        mine.append(rec)
    return mine
