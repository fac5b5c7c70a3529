"""commbench check, the pure part: schedules, outliers among peers, expectations, verdicts.

Outlier cases are synthetic pair bandwidths whose answer is known (a slow node, a slow rank on a
node of two, one slow link, equal links with noise); the real emulated cluster is in
tests/test_check_cluster.py.
"""

from __future__ import annotations

import itertools
import json
import random

import pytest

from commbench.check import outliers
from commbench.check.expect import expected, parse_thresholds
from commbench.check.outliers import Judgement, RankInfo, Rule, Sample, judge, robust
from commbench.check.schedule import build, node_groups, rail_groups, round_robin
from commbench.check.summary import EXIT_BELOW, EXIT_OUTLIER, EXIT_PASS, summarize
from commbench.errors import UsageError
from commbench.results.checkrecords import CheckRecord

from conftest import run_single

# ---------------------------------------------------------------- schedules


@pytest.mark.parametrize("n", range(2, 12))
def test_round_robin_meets_every_pair_once_in_disjoint_rounds(n):
    rounds = round_robin(n)
    assert len(rounds) == (n - 1 if n % 2 == 0 else n)
    seen = [p for r in rounds for p in r]
    assert sorted(seen) == list(itertools.combinations(range(n), 2))
    for r in rounds:
        members = [x for p in r for x in p]
        assert len(members) == len(set(members)) == 2 * (n // 2)


def test_sampled_rounds_give_each_rank_that_many_distinct_peers():
    s = build("sampled", (0,) * 16, peers=3, seed=7)
    assert len(s.rounds) == 3 and s.pairs == 24
    peers: dict[int, set[int]] = {}
    for a, b in (p for r in s.rounds for p in r):
        peers.setdefault(a, set()).add(b)
        peers.setdefault(b, set()).add(a)
    assert all(len(v) == 3 for v in peers.values()) and len(peers) == 16
    assert build("sampled", (0,) * 16, peers=3, seed=7) == s  # the seed fixes the rounds
    with pytest.raises(UsageError, match="--peers between 1 and 15"):
        build("sampled", (0,) * 16, peers=16)


def test_node_pairs_run_rail_by_rail():
    nodes = (0, 0, 1, 1, 2, 2, 3, 3)  # 4 nodes x 2 ranks
    s = build("nodes", nodes)
    assert len(s.rounds) == 3 and all(len(r) == 4 for r in s.rounds)
    for a, b in (p for r in s.rounds for p in r):
        assert nodes[a] != nodes[b] and a % 2 == b % 2  # same local rank, other node
    node_pairs = {(nodes[a], nodes[b]) for r in s.rounds for a, b in r}
    assert node_pairs == set(itertools.combinations(range(4), 2))
    assert "3 round(s), 12 of 28 pairs" in s.cost(9, 4 << 20)


def test_groups_of_nodes_and_rails():
    nodes = (0, 1, 0, 1)
    assert node_groups(nodes) == [(0, 2), (1, 3)]
    assert rail_groups(nodes) == [(0, 1), (2, 3)]
    with pytest.raises(UsageError, match="different numbers of ranks"):
        rail_groups((0, 0, 1))
    with pytest.raises(UsageError, match="at least 2 ranks"):
        build("all", (0,))


# ---------------------------------------------------------------- outliers


def test_robust_z_is_iglewicz_hoaglin_with_a_floored_mad():
    m, mad = robust([1.0, 2.0, 3.0, 4.0, 100.0])
    assert (m, mad) == (3.0, 1.0)
    ratio, z, out = judge(0.5, 1.0, 0.0, Rule())  # MAD 0: floored at 5% of the median
    assert ratio == 0.5 and z == pytest.approx(-0.5 / (1.4826 * 0.05)) and out
    assert not judge(0.8, 1.0, 0.0, Rule())[2]  # 20% low: above the 0.7 ratio
    assert not judge(0.5, 1.0, 0.3, Rule())[2]  # spread peers: z = -1.1


def _cluster(nodes: int, per: int, rate, noise: float = 0.0, seed: int = 0):
    """All pairs of nodes x per ranks; pair bandwidth = rate(a, b) x (1 +- noise); intra pairs
    are 10x faster."""
    rng = random.Random(seed)
    n = nodes * per
    info = [RankInfo(f"h{r // per}", r % per, f"dev{r}") for r in range(n)]
    samples = []
    for a, b in itertools.combinations(range(n), 2):
        cls = "intra" if a // per == b // per else "inter"
        bw = rate(a, b) * (10 if cls == "intra" else 1) * (1 + rng.uniform(-noise, noise))
        samples.append(Sample("sendrecv pairs", (a, b), cls, bw))
    return samples, info


def _judge(samples, info) -> Judgement:
    j = Judgement()
    outliers.pairs(samples, info, Rule(), j)
    return j


def test_a_node_at_half_rate_is_named_and_nothing_else():
    slow = lambda a, b: 0.5 if 2 in (a // 2, b // 2) and a // 2 != b // 2 else 1.0  # noqa: E731
    samples, info = _cluster(4, 2, slow, 0.1)  # node 2's NICs: its intra pair is fine
    (f,) = _judge(samples, info).findings
    assert (f.level, f.where, f.ranks, f.link_class) == ("node", "h2", [4, 5], "inter")
    assert f.ratio == pytest.approx(0.5, abs=0.08) and f.devices == ["dev4", "dev5"]


@pytest.mark.parametrize("seed", range(20))
def test_equal_links_with_noise_name_nobody(seed):
    samples, info = _cluster(4, 2, lambda a, b: 1.0, noise=0.2, seed=seed)
    assert _judge(samples, info).findings == []


def test_a_slow_rank_on_a_node_of_two_is_named_with_its_device():
    nic = lambda a, b: 0.4 if 3 in (a, b) and a // 2 != b // 2 else 1.0  # noqa: E731
    samples, info = _cluster(4, 2, nic, 0.05)  # rank 3's NIC (its intra pair is fine)
    found = _judge(samples, info).findings
    assert [(f.level, f.ranks) for f in found] == [("rank", [3])]
    assert found[0].where == "rank 3 (h1 local 1, dev3)"


def test_one_slow_link_is_named_as_a_link():
    samples, info = _cluster(6, 1, lambda a, b: 0.3 if (a, b) == (1, 3) else 1.0)
    found = _judge(samples, info).findings
    assert [(f.level, f.ranks) for f in found] == [("link", [1, 3])]


def test_too_few_peers_is_a_note_not_a_verdict():
    samples, info = _cluster(2, 1, lambda a, b: 0.1)
    j = _judge(samples, info)
    assert j.findings == [] and "fewer than 3" in j.notes[0]


def test_a_slow_group_among_node_groups():
    info = [RankInfo(f"h{r // 2}", r % 2, "cpu") for r in range(8)]
    groups = [Sample("allreduce node", (2 * k, 2 * k + 1), "intra", 0.4 if k == 1 else 2.0)
              for k in range(4)]  # fmt: skip
    j = Judgement()
    outliers.groups(groups, info, Rule(), j)
    assert [(f.level, f.where) for f in j.findings] == [("group", "h1")]


# ---------------------------------------------------------------- expectations and verdicts


def test_thresholds_file_entries_and_the_most_specific_match():
    doc = {
        "min_pct": 90,
        "expect": [
            {"op": "sendrecv", "GBps": 1.0},
            {"op": "send_recv", "link_class": "inter", "GBps": 0.5, "min_pct": 50},
            {"op": "allreduce", "bytes": "4M", "GBps": 3.0},
        ],
    }
    ts = parse_thresholds(doc, "t.yaml")
    e, _ = expected("sendrecv", 1 << 22, 2, "inter", ts, None, 80)
    assert e is not None and (e.GBps, e.min_pct, e.source) == (0.5, 50, "t.yaml expect[1]")
    e, _ = expected("sendrecv", 1 << 22, 2, "intra", ts, None, 80)
    assert e is not None and (e.GBps, e.min_pct) == (1.0, 90)
    e, _ = expected("allreduce", 1 << 22, 4, "intra", ts, None, 80)
    assert e is not None and e.GBps == 3.0
    e, why = expected("allreduce", 1 << 20, 4, "intra", ts, None, 80)
    assert e is None and "no threshold" in why
    ts = parse_thresholds(doc, "t.yaml", min_pct=70)  # --min-pct: over the file's, not entries'
    assert [t.min_pct for t in ts] == [70, 50, 70]


@pytest.mark.parametrize(
    "doc,message",
    [
        ({"expect": []}, "needs `expect:`"),
        ({"expect": [{"op": "sendrecv"}]}, "needs op and GBps"),
        ({"expect": [{"op": "alltoall", "GBps": 1}]}, "check measures sendrecv"),
        ({"expect": [{"op": "sendrecv", "GBps": -1}]}, "GBps must be a positive number"),
        ({"expect": [{"op": "sendrecv", "GBps": 1, "rate": 2}]}, "unknown key"),
        ({"expect": [{"op": "sendrecv", "GBps": 1, "link_class": "nvlink"}]}, "intra or inter"),
        ({"expect": [{"op": "sendrecv", "GBps": 1}] * 2}, "the same op"),
        ({"expect": [{"op": "sendrecv", "GBps": 1}], "pct": 3}, "unknown key"),
    ],
)
def test_bad_thresholds_are_usage_errors(doc, message):
    with pytest.raises(UsageError, match=message):
        parse_thresholds(doc, "t.yaml")


def test_a_calibration_prices_what_no_threshold_covers():
    from commbench.plan.request import load_calibration

    cal = load_calibration(None)  # the shipped reference
    e, _ = expected("allreduce", 1 << 28, 8, "intra", [], cal, 80)
    t = cal.predict("allreduce", 1 << 28, 8, "intra", extrapolate=True)
    assert e is not None and e.GBps == pytest.approx((1 << 28) * 2 * 7 / 8 / t / 1e9)


def _record(ranks, gbps, test="pairs", op="sendrecv", link="inter", wrong=0) -> CheckRecord:
    t = (4 << 20) / (gbps * 1e9) * 1e6
    p = len(ranks)
    return CheckRecord(
        op=op, dtype="float32", bytes=4 << 20, count=1 << 20, axis=test, group_size=p, groups=1,
        stride=-1, hosts_spanned=p, link_class=link, world_size=4, iters=5, warmup=1, time_us=t,
        time_mean_us=t, time_min_us=t, time_p95_us=t, algbw_GBps=gbps, busbw_GBps=gbps,
        wrong=wrong, checked=True, timing="per-iteration", loop="python", isolated=False,
        per_group_us=[t], backend="mpi", test=test, round=0, ranks=list(ranks),
        hosts=[f"h{r}" for r in ranks], local_ranks=[0] * p, per_rank_us=[t] * p,
    )  # fmt: skip


DEVICES = [{"host": f"h{r}", "local_rank": 0, "device": "cpu"} for r in range(4)]


@pytest.mark.parametrize(
    "slow,expect_gbps,wrong,code",
    [
        (1.0, 0.5, 0, EXIT_PASS),
        (1.0, 2.0, 0, EXIT_BELOW),
        (0.5, 0.3, 0, EXIT_OUTLIER),
        (0.5, 0.9, 0, EXIT_BELOW),  # below threshold wins over the outlier
        (1.0, 0.5, 3, EXIT_BELOW),  # wrong data fails
    ],
)
def test_exit_status(slow, expect_gbps, wrong, code):
    recs = [
        _record((a, b), slow if 3 in (a, b) else 1.0, wrong=wrong if (a, b) == (0, 1) else 0)
        for a, b in itertools.combinations(range(4), 2)
    ]
    ts = parse_thresholds({"expect": [{"op": "sendrecv", "GBps": expect_gbps}]}, "t")
    s = summarize(recs, DEVICES, thresholds=ts)
    assert s.exit_code == code, s.verdict()
    doc = json.loads(json.dumps(s.to_json()))
    assert doc["exit_code"] == code and doc["pair_matrix_GBps"][0][3] == slow
    if code == EXIT_OUTLIER:
        assert [o["where"] for o in doc["outliers"]] == ["h3"]


def test_a_group_measured_twice_counts_once_by_its_better_attempt():
    first = _record((0, 1, 2, 3), 0.2, test="node", op="allreduce", link="intra")
    again = _record((0, 1, 2, 3), 0.9, test="node", op="allreduce", link="intra")
    again.round = 1
    s = summarize([first, again, _record((0, 1), 1.0)], DEVICES)
    assert [(r.test, r.GBps) for r in s.results] == [("node", 0.9), ("pairs", 1.0)]


# ---------------------------------------------------------------- the command, before any talk


def test_dry_run_says_the_schedule_and_its_cost():
    job = run_single("check", "--dry-run", "--world", "8", "--schedule", "sampled", "--peers", "2")
    assert job.returncode == 0, job.output
    assert "sampled pairs: 2 round(s), 8 of 28 pairs" in job.stdout
    assert [ln.split(":")[0] for ln in job.stdout.splitlines()[1:]] == ["round 1", "round 2"]


@pytest.mark.parametrize(
    "args,message",
    [
        (("--dry-run", "--world", "8", "--schedule", "sampled"), "--peers between 1 and 7"),
        (("--dry-run",), "--dry-run needs --world"),
        ((), "at least 2 ranks"),
        (("--thresholds", "/nonexistent.yaml"), "--thresholds /nonexistent.yaml"),
        (("-b", "4Q"), "-b/--bytes"),
        (("--outlier-ratio", "1.5"), "must be below 1"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, message):
    job = run_single("check", *args)
    assert job.returncode == 2, job.output
    assert message in job.stderr and len(job.stderr.strip().splitlines()) == 1, job.stderr


def test_the_report_judges_a_run_by_its_own_outlier_rule(tmp_path):
    """check.json keeps the rule a run was judged by (`--outlier-ratio 0.01` on a loaded box):
    the report's second judgement uses it, not the default that would flag what the run did not."""
    import json
    from types import SimpleNamespace

    from commbench.check.summary import Summary
    from commbench.report.check_inputs import _rule

    loose = Rule(ratio=0.01)
    doc = Summary([], [], Judgement(), rule=loose).to_json()
    assert doc["outlier_rule"] == {"ratio": 0.01, "z": 3.5, "mad_floor": 0.05}
    (tmp_path / "check.json").write_text(json.dumps(doc))
    assert _rule(SimpleNamespace(path=tmp_path)) == loose
    (tmp_path / "check.json").write_text(json.dumps({"verdict": "PASS"}))  # an older run
    assert _rule(SimpleNamespace(path=tmp_path)) == Rule()
