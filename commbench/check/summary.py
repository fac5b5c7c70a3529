"""From check records to verdicts (pure): the rank -> host -> local rank -> device map, the
pair-bandwidth matrix, each result against its expectation, the outliers, the exit status.

Exit status: 0 every result meets its expectation and nothing is an outlier; 4 a result is below
its threshold (min_pct of expected) or arrived wrong (the exact data check); 5 an outlier is named and no result is below its threshold
(2 stays a usage error, 1 and 3 a failed job).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from commbench.check import outliers
from commbench.check.expect import DEFAULT_MIN_PCT, Threshold, expected
from commbench.check.outliers import Judgement, RankInfo, Rule, Sample
from commbench.results.checkrecords import CheckRecord

if TYPE_CHECKING:
    from commbench.calibration import Calibration

EXIT_PASS = 0
DEFAULT_RULE = Rule()
EXIT_BELOW = 4
EXIT_OUTLIER = 5


@dataclass(frozen=True)
class Result:
    """One measured unit against what it should reach."""

    test: str
    op: str
    ranks: list[int]
    hosts: list[str]
    link_class: str
    bytes: int
    group_size: int
    GBps: float  # busbw (pairs: one direction)
    per_rank_us: list[float]
    expected_GBps: float | None
    pct: float | None
    min_pct: float | None
    source: str  # the threshold entry or calibration, or why there is none
    status: str  # pass | below | unchecked | wrong (the data check failed)

    def to_json(self) -> dict:
        return dict(self.__dict__)


@dataclass
class Summary:
    """Everything `commbench check` prints, and `--json` writes."""

    ranks: list[RankInfo]
    results: list[Result]
    judgement: Judgement
    notes: list[str] = field(default_factory=list)
    rule: Rule = DEFAULT_RULE  # the outlier rule it was judged by (check.json keeps it)

    @property
    def below(self) -> list[Result]:
        return [r for r in self.results if r.status in ("below", "wrong")]

    @property
    def exit_code(self) -> int:
        if self.below:
            return EXIT_BELOW
        return EXIT_OUTLIER if self.judgement.findings else EXIT_PASS

    def verdict(self) -> str:
        parts = []
        if self.below:
            parts.append(f"{len(self.below)} result(s) below threshold or wrong")
        if self.judgement.findings:
            named = ", ".join(f"{f.level} {f.where}" for f in self.judgement.findings)
            parts.append(f"outlier(s): {named}")
        checked = sum(r.status != "unchecked" for r in self.results)
        if not parts:
            return f"PASS: no outlier; {checked} of {len(self.results)} result(s) had an expectation, all met"
        return f"FAIL (exit {self.exit_code}): " + "; ".join(parts)

    def matrix(self) -> list[list[float | None]]:
        """Pair bandwidth (GB/s) of every measured pair, symmetric; None where not measured."""
        n = len(self.ranks)
        out: list[list[float | None]] = [[None] * n for _ in range(n)]
        for r in self.results:
            if r.test == "pairs":
                a, b = r.ranks
                out[a][b] = out[b][a] = r.GBps
        return out

    def to_json(self) -> dict[str, Any]:
        j = self.judgement
        return {
            "verdict": self.verdict(),
            "exit_code": self.exit_code,
            "ranks": [
                {"rank": i, "host": r.host, "local_rank": r.local_rank, "device": r.device}
                for i, r in enumerate(self.ranks)
            ],
            "outliers": [f.to_json() for f in j.findings],
            "below": [r.to_json() for r in self.below],
            "pair_matrix_GBps": self.matrix(),
            "rank_scores_GBps": {
                c: {str(k): v for k, v in s.items()} for c, s in j.rank_scores.items()
            },
            "host_scores_GBps": j.host_scores,
            "results": [r.to_json() for r in self.results],
            "notes": self.notes + j.notes,
            "outlier_rule": dict(self.rule.__dict__),
        }


def rank_map(devices: Sequence[dict], world: int) -> list[RankInfo]:
    """Each rank's host, local rank and device, from meta.json's `devices`."""
    assert len(devices) == world, (len(devices), world)
    return [RankInfo.from_meta(d) for d in devices]


def places(records: Sequence[CheckRecord], devices: Sequence[dict]) -> list[dict]:
    """Each rank's host and local rank as its records name them (the pretend node under
    --ranks-per-node), its device from meta.json's `devices`: the map of a finished run."""
    out = [dict(d) for d in devices]
    for rec in records:
        for r, h, lr in zip(rec.ranks, rec.hosts, rec.local_ranks):
            out[r].update(host=h, local_rank=lr)
    return out


def best_attempts(records: Sequence[CheckRecord]) -> list[CheckRecord]:
    """Each group's better attempt (a group measured again to confirm a suspect); pairs as
    they are, in order."""
    best: dict[tuple, CheckRecord] = {}
    out: list[CheckRecord] = []
    for rec in records:
        if rec.test == "pairs":
            out.append(rec)
            continue
        key = (rec.test, rec.op, tuple(rec.ranks))
        if key not in best:
            out.append(rec)
            best[key] = rec
        elif rec.busbw_GBps > best[key].busbw_GBps:
            out[out.index(best[key])] = best[key] = rec
    return out


def sample(rec: CheckRecord) -> Sample:
    test = "sendrecv pairs" if rec.test == "pairs" else f"{rec.op} {rec.test}"
    return Sample(test, tuple(rec.ranks), rec.link_class, rec.busbw_GBps)


def summarize(
    records: Sequence[CheckRecord],
    devices: Sequence[dict],
    rule: Rule = DEFAULT_RULE,
    thresholds: Sequence[Threshold] = (),
    cal: Calibration | None = None,
    min_pct: float = DEFAULT_MIN_PCT,
) -> Summary:
    """Judge a check run: outliers among peers, and each result against its expectation."""
    records = best_attempts(records)
    world = records[0].world_size if records else len(devices)
    ranks = rank_map(devices, world)
    judgement = Judgement()
    outliers.pairs([sample(r) for r in records if r.test == "pairs"], ranks, rule, judgement)
    outliers.groups([sample(r) for r in records if r.test != "pairs"], ranks, rule, judgement)
    results = []
    for rec in records:
        exp, why = expected(
            rec.op, rec.bytes, rec.group_size, rec.link_class, list(thresholds), cal, min_pct
        )
        pct = 100.0 * rec.busbw_GBps / exp.GBps if exp else None
        if rec.wrong:
            status = "wrong"
        elif exp is None or pct is None:
            status = "unchecked"
        else:
            status = "below" if pct < exp.min_pct else "pass"
        results.append(
            Result(
                test=rec.test,
                op=rec.op,
                ranks=rec.ranks,
                hosts=rec.hosts,
                link_class=rec.link_class,
                bytes=rec.bytes,
                group_size=rec.group_size,
                GBps=rec.busbw_GBps,
                per_rank_us=rec.per_rank_us,
                expected_GBps=exp.GBps if exp else None,
                pct=round(pct, 2) if pct is not None else None,
                min_pct=exp.min_pct if exp else None,
                source=exp.source if exp else why,
                status=status,
            )
        )
    return Summary(ranks, results, judgement, rule=rule)
