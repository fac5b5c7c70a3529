"""Which node, rank (GPU) or link is slow: robust outliers among peers of the same link class.

A value is an outlier when it is far below the median of its peers by both of two tests: below
`ratio` times the median (a 2x slower link is at 0.5, equal links under load stay near 1), and a
modified z-score (x - median) / (1.4826 MAD) below -`z` (Iglewicz & Hoaglin, "How to Detect and
Handle Outliers", 1993: |z| > 3.5). MAD is floored at `mad_floor` x median, so links that agree
to a few percent do not make a tiny spread look like a large z.

Pairs are attributed in turn: a rank's score is the median bandwidth of its pairs in a class
(robust to the one slow peer every rank meets); a rank is slow when its score is an outlier
among ranks; a node is slow when all its ranks are; a link is slow when its pair is an outlier
among the pairs that touch no slow rank. Needs at least 3 ranks in a class to compare (4 nodes
to name one slow node: on 3, the two good nodes meet the slow one in half their pairs).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

MIN_PEERS = 3


@dataclass(frozen=True)
class Rule:
    """When a value counts as an outlier among its peers."""

    ratio: float = 0.7
    z: float = 3.5
    mad_floor: float = 0.05


@dataclass(frozen=True)
class RankInfo:
    """Where a rank runs: the rank -> host -> local rank -> device map of meta.json."""

    host: str
    local_rank: int
    device: str  # "cpu", or "cuda:0 NVIDIA H100 80GB HBM3 0000:1a:00.0"

    @classmethod
    def from_meta(cls, d: dict) -> RankInfo:
        parts = [d.get("device", "cpu"), d.get("gpu"), d.get("pci_bus_id")]
        return cls(
            str(d.get("host", "?")), int(d.get("local_rank", 0)), " ".join(p for p in parts if p)
        )


@dataclass(frozen=True)
class Sample:
    """One measured unit: a pair (two ranks) or a group, its link class and bandwidth."""

    test: str  # "sendrecv pairs", "allreduce node", "allgather rail"
    ranks: tuple[int, ...]
    link_class: str
    GBps: float


@dataclass(frozen=True)
class Finding:
    """A slow node, rank or link, with the peers it was judged against."""

    level: str  # node | rank | link | group
    test: str
    link_class: str
    where: str
    hosts: list[str]
    ranks: list[int]
    devices: list[str]
    GBps: float
    peer_median_GBps: float
    ratio: float
    z: float

    def to_json(self) -> dict:
        return dict(self.__dict__)


@dataclass
class Judgement:
    """What the outlier pass found, and the scores it judged (for the tables and --json)."""

    findings: list[Finding] = field(default_factory=list)
    rank_scores: dict[str, dict[int, float]] = field(default_factory=dict)  # class -> rank
    host_scores: dict[str, dict[str, float]] = field(default_factory=dict)  # class -> host
    notes: list[str] = field(default_factory=list)


def robust(values: Sequence[float]) -> tuple[float, float]:
    """(median, median absolute deviation)."""
    m = statistics.median(values)
    return m, statistics.median(abs(v - m) for v in values)


def judge(value: float, median: float, mad: float, rule: Rule) -> tuple[float, float, bool]:
    """(ratio to the median, modified z-score, outlier?) of one value among its peers."""
    scale = 1.4826 * max(mad, rule.mad_floor * median)
    ratio = value / median if median > 0 else 1.0
    z = (value - median) / scale if scale > 0 else 0.0
    return ratio, z, ratio < rule.ratio and z < -rule.z


def _finding(level: str, s: Sample, where: str, info: Sequence[RankInfo], got: tuple, m: float):
    ratio, z, _ = got
    return Finding(
        level=level,
        test=s.test,
        link_class=s.link_class,
        where=where,
        hosts=sorted({info[r].host for r in s.ranks}),
        ranks=list(s.ranks),
        devices=[info[r].device for r in s.ranks],
        GBps=s.GBps,
        peer_median_GBps=m,
        ratio=round(ratio, 4),
        z=round(z, 2),
    )


def rank_label(rank: int, info: Sequence[RankInfo]) -> str:
    i = info[rank]
    return f"rank {rank} ({i.host} local {i.local_rank}, {i.device})"


def pairs(samples: Sequence[Sample], info: Sequence[RankInfo], rule: Rule, out: Judgement) -> None:
    """Slow nodes, ranks and links from pair bandwidths, class by class."""
    for cls in sorted({s.link_class for s in samples}):
        mine = [s for s in samples if s.link_class == cls]
        per_rank: dict[int, list[float]] = {}
        for s in mine:
            for r in s.ranks:
                per_rank.setdefault(r, []).append(s.GBps)
        scores = {r: statistics.median(v) for r, v in sorted(per_rank.items())}
        out.rank_scores[cls] = scores
        by_host: dict[str, list[float]] = {}
        for r, v in scores.items():
            by_host.setdefault(info[r].host, []).append(v)
        out.host_scores[cls] = {h: statistics.median(v) for h, v in by_host.items()}
        if len(scores) < MIN_PEERS:
            out.notes.append(
                f"{cls} pairs: {len(scores)} rank(s) to compare, fewer than {MIN_PEERS}: "
                "no outlier test (use more nodes)"
            )
            continue
        m, mad = robust(list(scores.values()))
        slow = {r: judge(v, m, mad, rule) for r, v in scores.items()}
        slow = {r: got for r, got in slow.items() if got[2]}
        hosts = {info[r].host for r in scores}
        for h in sorted(hosts):
            members = [r for r in scores if info[r].host == h]
            if all(r in slow for r in members) and len(hosts) > 1:
                unit = Sample(
                    mine[0].test, tuple(members), cls, statistics.median(scores[r] for r in members)
                )
                got = judge(unit.GBps, m, mad, rule)
                out.findings.append(_finding("node", unit, h, info, got, m))
            else:
                for r in members:
                    if r in slow:
                        unit = Sample(mine[0].test, (r,), cls, scores[r])
                        out.findings.append(
                            _finding("rank", unit, rank_label(r, info), info, slow[r], m)
                        )
        clean = [s for s in mine if not set(s.ranks) & set(slow)]
        if len(clean) < MIN_PEERS:
            continue
        pm, pmad = robust([s.GBps for s in clean])
        for s in clean:
            got = judge(s.GBps, pm, pmad, rule)
            if got[2]:
                where = " <-> ".join(rank_label(r, info) for r in s.ranks)
                out.findings.append(_finding("link", s, where, info, got, pm))


def groups(samples: Sequence[Sample], info: Sequence[RankInfo], rule: Rule, out: Judgement) -> None:
    """Slow groups (a node's all-reduce, a rail's all-gather) among groups of the same test."""
    for test in sorted({s.test for s in samples}):
        mine = [s for s in samples if s.test == test]
        if len(mine) < MIN_PEERS:
            if len(mine) > 1:
                out.notes.append(
                    f"{test}: {len(mine)} groups, fewer than {MIN_PEERS}: no outlier test"
                )
            continue
        m, mad = robust([s.GBps for s in mine])
        for s in mine:
            got = judge(s.GBps, m, mad, rule)
            if got[2]:
                hosts = sorted({info[r].host for r in s.ranks})
                where = hosts[0] if len(hosts) == 1 else f"ranks {', '.join(map(str, s.ranks))}"
                out.findings.append(_finding("group", s, where, info, got, m))
