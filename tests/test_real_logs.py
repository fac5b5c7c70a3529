"""Real nccl-tests logs of four public clusters (`../shared/real-logs`, read in place, never copied):
every file imports, with the op its name says where the log names no binary, zero-size rows
kept as they were printed, and UCX warning lines skipped. Skips with a reason without the
shared folder."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from statistics import median

import pytest
from fit_samples import nccl_tests_new

from commbench.calibration.band import Priors
from commbench.errors import UsageError
from commbench.formats import nccl_tests
from commbench.formats.common import Hints

REAL_LOGS = Path(__file__).resolve().parent.parent.parent / "shared" / "real-logs"
NEEDS_LOGS = pytest.mark.skipif(
    not REAL_LOGS.is_dir(), reason=f"{REAL_LOGS} absent (the real logs are not in the repo)"
)
# file-name op word -> commbench op
NAME_OPS = {
    "allreduce": "allreduce",
    "allgather": "allgather",
    "reducescatter": "reduce_scatter",
    "alltoall": "alltoall",
    "sendrecv": "sendrecv",
}
_NAME = re.compile(r"^[a-z0-9]+_(\d+)x(\d+)_([a-z]+)_(.+)\.txt$")


def real_logs() -> list[Path]:
    return sorted(REAL_LOGS.glob("*.txt")) if REAL_LOGS.is_dir() else []


@NEEDS_LOGS
def test_every_real_log_imports_with_the_shape_and_op_its_name_says():
    logs = real_logs()
    assert len(logs) >= 50
    for path in logs:
        m = _NAME.match(path.name)
        assert m, path.name
        nodes, per_node, op_word = int(m.group(1)), int(m.group(2)), m.group(3)
        imp = nccl_tests.parse(path, Hints())
        recs = imp.records
        assert recs, path.name
        assert {r["op"] for r in recs} == {NAME_OPS[op_word]}, path.name
        assert {r["group_size"] for r in recs} == {nodes * per_node}, path.name
        assert {r["hosts_spanned"] for r in recs} == {nodes}, path.name
        assert {r["link_class"] for r in recs} == {"inter" if nodes > 1 else "intra"}
        assert imp.meta.get("nccl_version"), path.name  # for the mixed-settings warning
        assert all(r["time_us"] is not None and r["time_us"] >= 0 for r in recs)


@NEEDS_LOGS
def test_real_logs_zero_size_rows_and_warning_lines():
    """Polaris all_gather prints sizes below 4 x ranks as 0: kept, never divided by (algbw
    None or 0, no inf); ABCI V starts with UCX WARN lines that are no rows."""
    imp = nccl_tests.parse(REAL_LOGS / "a100_2x4_allgather_polaris-nccl221-env5.txt", Hints())
    zero = [r for r in imp.records if r["bytes"] == 0]
    assert len(zero) == 10  # 5 rows x 2 placements
    assert all(not r["algbw_GBps"] for r in zero)
    assert any("op allgather taken from the file name" in n for n in imp.notes)
    v100 = nccl_tests.parse(REAL_LOGS / "v100_2x4_allreduce_abci-v.txt", Hints())
    assert min(r["bytes"] for r in v100.records) == 4 and len(v100.records) == 48
    assert not v100.problems.warnings


def test_op_from_a_file_name_without_perf_and_the_flag_wins(tmp_path):
    """No binary in the log, `allgather` in the file name: that op, with a note saying so
    (all_gather and reduce_scatter share a bus factor); --op overrides the name; a name with
    two op words says nothing."""
    text = nccl_tests_new(op="allgather", binary=None, redop="none")
    path = tmp_path / "h100_2x4_allgather_mycluster.txt"
    path.write_text(text)
    imp = nccl_tests.parse(path, Hints())
    assert imp.records[0]["op"] == "allgather"
    assert any("from the file name" in n for n in imp.notes)
    assert nccl_tests.parse(path, Hints(op="alltoall")).records[0]["op"] == "alltoall"
    both = tmp_path / "allgather_vs_alltoall.txt"
    both.write_text(text)
    with pytest.raises(Exception, match="pass --op"):
        nccl_tests.parse(both, Hints())


@NEEDS_LOGS
def test_a_real_job_log_rewritten_as_users_keep_it(tmp_path):
    """The H100 job log saved with a BOM, CRLF and srun --label prefixes imports record for
    record as the file itself; cut after its third row it keeps those and says the run was cut
    short; as eight one-rank processes (no MPI=1) it is refused."""
    real = REAL_LOGS / "h100_1x8_allreduce_xxrjun-c01.txt"
    lines = real.read_text().splitlines()
    want = [
        (r["op"], r["bytes"], r["placement"], r["time_us"])
        for r in nccl_tests.parse(real, Hints()).records
    ]
    saved = tmp_path / "saved.txt"
    saved.write_text("\r\n".join(f"0: {line}" for line in lines), encoding="utf-8-sig")
    got = nccl_tests.parse(saved, Hints())
    assert [(r["op"], r["bytes"], r["placement"], r["time_us"]) for r in got.records] == want
    assert not got.problems.warnings
    rows = [n for n, line in enumerate(lines) if line.strip()[:1].isdigit()]
    cut = tmp_path / "cut.txt"
    cut.write_text("\n".join(lines[: rows[3]]))
    imp = nccl_tests.parse(cut, Hints())
    assert imp.records and "the run was cut short" in imp.problems.warnings[0]
    alone = [line for line in lines if not line.startswith("#  Rank") or " Rank  0 " in line]
    lone = tmp_path / "lone.txt"
    lone.write_text("\n".join(alone * 8))
    with pytest.raises(UsageError, match="the run has one rank"):
        nccl_tests.parse(lone, Hints())


def test_nccl_version_from_nccl_tests_library_line(tmp_path):
    """nccl-tests >= 2.13 prints `nccl-library=22902` (NCCL_VERSION_CODE): 2.29.2."""
    text = "# nccl-tests version 2.17.8 nccl-headers=22902 nccl-library=22902\n" + nccl_tests_new()
    path = tmp_path / "x.log"
    path.write_text(text)
    assert nccl_tests.parse(path, Hints()).meta["nccl_version"] == "2.29.2"


@NEEDS_LOGS
def test_transfer_bench_on_one_set():
    """bench/transfer_real_logs.py on one set: fit 2 nodes -> predict 8, fit 2 + 8 -> predict
    540, each row scored over its points >= 1 MiB against the 10% / 20% targets."""
    bench = _bench()
    rows = bench.run(["polaris-nccl218-env5"])
    assert [(r.fitted, r.target, r.goal) for r in rows] == [([2], 8, 0.10), ([2, 8], 540, 0.20)]
    for r in rows:
        assert r.points == 22 and 0 <= r.median <= r.max
        assert r.status == ("PASS" if r.median <= r.goal else "FAIL")
        assert r.covered is not None and 0 < r.band  # every point beyond 2 nodes has a band
        # the band's terms rescore it: under the calibration's own priors, the same coverage
        assert len(r.needs) == r.points
        assert bench._coverage(r.needs, Priors())[0] == pytest.approx(r.covered)
    assert "polaris-nccl218-env5" in bench.table(rows)


@NEEDS_LOGS
def test_transfer_bench_reads_your_own_logs_by_what_they_hold(tmp_path):
    """A user's folder of logs named anyhow (copies made here, in tmp): each log's op and
    shape come from the log, its set from its folder, a second log of one shape is a repeat;
    a file that is not a log is left out with the import's own reason."""
    import shutil

    bench = _bench()
    mine = tmp_path / "our-cluster"
    mine.mkdir()
    for n, name in (
        (2, "monday_alltoall.log"),
        (8, "job-77_alltoall.out"),
        (256, "big_alltoall.txt"),
    ):
        shutil.copy(REAL_LOGS / f"a100_{n}x4_alltoall_polaris-nccl221-env5.txt", mine / name)
    shutil.copy(
        REAL_LOGS / "a100_8x4_alltoall_polaris-nccl221-env5.txt", mine / "again_alltoall.log"
    )
    (mine / "notes.txt").write_text("what we ran on Monday\n")
    notes: list[str] = []
    logs = bench.discover(tmp_path, notes)
    assert sorted((x.set, x.op, x.nodes, x.per_node, bool(x.repeat)) for x in logs) == [
        ("our-cluster", "alltoall", 2, 4, False), ("our-cluster", "alltoall", 8, 4, False),
        ("our-cluster", "alltoall", 8, 4, True), ("our-cluster", "alltoall", 256, 4, False),
    ]  # fmt: skip
    (note,) = notes
    assert note.startswith("# left out: ") and "notes.txt: not a nccl-tests log" in note
    rows = bench.run(root=tmp_path)
    assert [(r.set, r.fitted, r.target, r.repeats) for r in rows] == [
        ("our-cluster", [2], 8, 2), ("our-cluster", [2, 8], 256, 1),
    ]  # fmt: skip
    assert all(r.status == "PASS" for r in rows), [(r.target, r.median) for r in rows]


@NEEDS_LOGS
def test_allgather_and_alltoall_transfer_to_hundreds_of_nodes():
    """Polaris (NCCL 2.21.5, 4 GPUs per node): fit 2 + 8 nodes, predict 256 and 540 (x32 and
    x67 the largest fitted count): all-gather and all-to-all within the issue's 20% (median
    over >= 1 MiB), at the same per-peer chunk (hierarchy.chunk_ratio); 2 -> 8 within 15%
    (the 8-node mid sizes run a flat ~1 ms that 2 nodes do not show). Before it the fitted
    ring's steps missed by 58-62% (all-gather) and 38-39% (all-to-all) at 256-540 nodes."""
    rows = _bench().run(["polaris-nccl221-env5"])
    far = [r for r in rows if r.op in ("allgather", "alltoall") and r.target >= 256]
    assert sorted((r.op, r.target) for r in far) == [
        ("allgather", 256), ("allgather", 540), ("alltoall", 256), ("alltoall", 540)
    ]  # fmt: skip
    for r in far:
        assert r.median is not None and r.median <= 0.20, (r.op, r.target, r.median)
        assert any("same per-peer chunk" in m for m in r.methods)
    near = [r for r in rows if r.op in ("allgather", "alltoall") and r.target == 8]
    assert len(near) == 2 and all(r.median is not None and r.median <= 0.15 for r in near)
    # all-reduce: the ring's sizes at the chunk, the tree's (NCCL's model, hundreds of nodes)
    # by the model's steps: both kinds at 8 nodes, the tree alone at 256 and 540
    (ar8,) = [r for r in rows if r.op == "allreduce" and r.target == 8]
    assert any("runs the ring there" in m for m in ar8.methods)
    assert any("(tree) by NCCL's ring/tree model" in m for m in ar8.methods)
    for r in (r for r in rows if r.op == "allreduce" and r.target >= 256):
        assert all("per-peer chunk" not in m for m in r.methods)


@NEEDS_LOGS
def test_v100_nodes_run_the_ring_where_nccl_s_tree_correction_says():
    """ABCI V (4 x V100, 2 x EDR): fit 2 + 4 nodes, predict 8, 16, 32. NCCL's tuner prices the
    tree at its medium-size correction (0.5-0.8 of its bandwidth at 1-32 MiB), so it runs the
    ring there, and the predictions take the ring's per-peer chunk: within the issue's 10% at
    8 and 16 nodes and 20% at 32 (26% and 36% at 16 and 32 with the bare tree)."""
    rows = [r for r in _bench().run(["abci-v"]) if r.fitted == [2, 4]]
    assert [(r.target, r.goal) for r in rows] == [(8, 0.10), (16, 0.10), (32, 0.20)]
    for r in rows:
        assert r.median is not None and r.median <= r.goal, (r.target, r.median)
        assert any("runs the ring there" in m for m in r.methods)


@NEEDS_LOGS
def test_hundreds_of_nodes_run_the_tree_where_nccl_no_longer_corrects_it():
    """Polaris env4 (NCCL 2.21.5): fit 2 + 8 nodes, predict 256. NCCL corrects the tree's
    bandwidth below 512 MiB only (tuning.cc: logSize < 23), so from 512 MiB its tree beats the
    ring's 510 inter-node steps: the prediction takes the tree there, 0.90 of the measured
    time, and the row is within the issue's 20% (19.8%). With the correction carried to 512
    MiB the ring won at a 0.5 MiB chunk, 2.2x the measured time, and the row missed (21.1%)."""
    rows = _bench().run(["polaris-nccl221-env4"])
    (row,) = [r for r in rows if r.op == "allreduce" and r.target == 256]
    assert row.median is not None and row.median <= 0.20, row.median


@NEEDS_LOGS
def test_the_fit_prices_nccl_with_the_release_its_logs_name(tmp_path):
    """Logs naming one NCCL release (its header, or the file's `# software:` line) give a
    calibration that keeps it beside NCCL's model; logs of two releases keep none (the
    newest release's constants then). With 2.21.5's NVLink/network step (a tree's NVLink step
    costs its network one, 28 / 28 us) Polaris' all-reduce at 540 nodes is within the issue's
    20% (20.2% at the newest release's 4 / 14)."""
    bench = _bench()
    ws = bench.Workspace(tmp_path)
    logs = {
        (x.set, x.nodes): x
        for x in bench.discover()
        if x.op == "allreduce" and x.set.endswith("env5") and x.nodes in (2, 8)
    }

    def library(name: str, *keys: tuple[str, int]) -> dict:
        cal = tmp_path / name
        bench.commbench("fit", *(str(ws.run(logs[k])) for k in keys), "-o", str(cal))
        (link,) = json.loads(cal.read_text())["link_table"]
        return link["library"]

    new, old = "polaris-nccl221-env5", "polaris-nccl218-env5"
    assert library("one.json", (new, 2), (new, 8))["version"] == "2.21.5"
    assert "version" not in library("two.json", (new, 8), (old, 8))
    rows = bench.run([new])
    (far,) = [r for r in rows if r.op == "allreduce" and r.target == 540]
    assert far.median is not None and far.median <= 0.20, far.median
    assert any("NCCL 2.21.5's NVLink/network latency" in m for m in far.methods)


@NEEDS_LOGS
def test_twin_sets_bound_what_any_prediction_can_reach(tmp_path):
    """Polaris' NCCL 2.18 and 2.21.5 all-reduce logs agree within 2% at 2 and 8 nodes and
    differ 1.3-1.9x at 540: whatever a fit to 2 + 8 nodes predicts, it misses one of them by
    about 19% (median), which the bench prints as the bound of that row."""
    bench = _bench()
    logs = [x for x in bench.discover() if x.set.startswith("polaris-nccl2")]
    (line,) = [t for t in bench.twins(logs, bench.Workspace(tmp_path)) if "allreduce" in t]
    assert line.startswith("# polaris-nccl218-env5 and polaris-nccl221-env5 allreduce")
    got = float(line.split(">= ")[1].split("%")[0])
    assert 15 < got < 25, line


def _bench():
    import importlib.util

    path = Path(__file__).resolve().parent.parent / "bench" / "transfer_real_logs.py"
    spec = importlib.util.spec_from_file_location("transfer_real_logs", path)
    assert spec and spec.loader
    bench = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = bench  # its dataclasses look their module up
    spec.loader.exec_module(bench)
    return bench


def test_leave_one_cluster_out_picks_the_prior_on_the_other_clusters():
    """loco: per held-out cluster the narrowest prior covering 80% of the others' points,
    scored on the held-out one. Two clusters need 0.25 per doubling over 2 doublings (measured
    1.5x the prediction), a third 0.35 (1.7x): held out, it is not covered; the others are."""
    bench = _bench()

    def row(name: str, ratio: float) -> object:
        terms = {"measured": 0.0, "reach": 2.0, "latency_share": 0.0}
        return bench.Row(name, "allreduce", 4, [2], 8, needs=[([ratio], terms)] * 10)

    rows = [row("abci-a", 1.5), row("polaris-nccl221-env5", 1.5), row("xxrjun-c01", 1.7)]
    assert bench.cluster("polaris-nccl218-env4") == "polaris"
    coverage, width, parts = bench.loco(rows)
    assert coverage == pytest.approx(2 / 3)  # xxrjun-c01 held out: 0.25 from the others
    assert parts[2] == "xxrjun-c01 0% (+-42%, prior 0.25)"
    assert parts[0].startswith("abci-a 100%") and "prior 0.25" not in parts[0]
    assert width > 0.4
    assert bench.loco(rows[:1]) is None  # one cluster: nothing to hold out


def test_runs_of_different_settings_fitted_together_warn_naming_both():
    from commbench.fit.settings import mixed_settings

    a = {"run_id": "a", "backend": "nccl", "libraries": {"nccl": "2.18.x"}, "env": {}}
    b = {"run_id": "b", "backend": "nccl", "libraries": {"nccl": "2.21.5"},
         "env": {"FI_CXI_RDZV_PROTO": "alt_read", "OMP_NUM_THREADS": "4"}}  # fmt: skip
    (w,) = mixed_settings([a, b])
    assert "runs a and b" in w and w.index("nccl version 2.18.x vs 2.21.5") < w.index("FI_")
    assert "OMP_NUM_THREADS" not in w
    assert mixed_settings([a, dict(a, run_id="c")]) == []
    assert mixed_settings([a, dict(b, backend="mpi")]) == []  # other backends: not compared
    # NCCL_ALGO / NCCL_PROTO that pin a name (for any collective) key series apart: no blend;
    # a list or an exclusion lets NCCL choose, so the runs do blend
    c = dict(a, run_id="c")
    for pin in ("Ring", "allreduce:Tree", "allgather:Ring;allreduce:Tree"):
        assert mixed_settings([a, dict(c, env={"NCCL_ALGO": pin})]) == [], pin
    assert mixed_settings([a, dict(c, env={"NCCL_PROTO": "LL128"})]) == []
    for free in ("Ring,Tree", "^Tree"):
        (w,) = mixed_settings([a, dict(c, env={"NCCL_ALGO": free})])
        assert f"NCCL_ALGO unset vs {free}" in w


@NEEDS_LOGS
def test_polaris_settings_read_from_the_logs_tell_env4_from_env5():
    env = {}
    for name in ("env4", "env5"):
        path = REAL_LOGS / f"a100_2x4_allreduce_polaris-nccl221-{name}.txt"
        env[name] = nccl_tests.parse(path, Hints()).meta["env"]
    assert env["env5"]["FI_CXI_RDZV_PROTO"] == "alt_read"
    assert "FI_CXI_RDZV_PROTO" not in env["env4"]
    assert env["env4"]["NCCL_NET"] == env["env5"]["NCCL_NET"] == "AWS Libfabric"


@NEEDS_LOGS
def test_fit_warns_when_nccl_versions_are_mixed(tmp_path, capsys):
    from commbench import cli

    runs = []
    for name in (
        "a100_2x4_allreduce_polaris-nccl218-env5",
        "a100_2x4_allreduce_polaris-nccl221-env5",
    ):
        args = ["import", "nccl-tests", str(REAL_LOGS / f"{name}.txt"), "--results", str(tmp_path)]
        assert cli.main([*args, "--run-id", name]) == 0
        runs.append(str(tmp_path / name))
    capsys.readouterr()
    assert cli.main(["fit", *runs, "-q"]) == 0
    err = capsys.readouterr().err
    assert "warning: runs a100_2x4_allreduce_polaris-nccl218-env5 and" in err
    assert "nccl version 2.18.x vs 2.21.5" in err


@NEEDS_LOGS
def test_a_calibration_records_its_band_and_predicts_with_it(tmp_path):
    """fit writes `node_band` (the priors) and the settings note; a prediction beyond the
    measured node count (all-to-all, 2 x 4 -> 8 x 4) carries a band from those priors."""
    import json

    from commbench import cli
    from commbench.calibration.document import validate
    from commbench.calibration.predict import Calibration

    name = "a100_2x4_alltoall_polaris-nccl221-env5"
    log = str(REAL_LOGS / f"{name}.txt")
    assert (
        cli.main(["import", "nccl-tests", log, "--results", str(tmp_path), "--run-id", name]) == 0
    )
    out = tmp_path / "cal.json"
    assert cli.main(["fit", str(tmp_path / name), "-q", "-o", str(out)]) == 0
    doc = json.loads(out.read_text())
    validate(doc)
    assert Priors.of(doc) == Priors()

    def band(d: dict) -> tuple[float, float, float]:
        got = Calibration(d).explain(
            "alltoall", 1 << 30, 32, "inter", "float32", "nccl", True, nodes=8
        )
        assert got.band is not None
        return got.band[0], got.seconds, got.band[1]

    lo, t, hi = band(doc)
    assert lo < t < hi
    wide = dict(doc, node_band={"bytes_per_doubling": 1.0, "latency_per_doubling": 1.0,
                                "floor": 0.05})  # fmt: skip
    lo2, t2, hi2 = band(wide)
    assert t2 == t and hi2 > hi and lo2 < lo


def polaris_calibration(tmp_path: Path) -> Path:
    """A calibration fitted on Polaris' 2 + 8 node logs (NCCL 2.21.5, setting 5)."""
    from commbench import cli

    runs = []
    for n in (2, 8):
        for op in ("allgather", "allreduce", "alltoall"):
            log = REAL_LOGS / f"a100_{n}x4_{op}_polaris-nccl221-env5.txt"
            assert cli.main(["import", "nccl-tests", str(log), "--results", str(tmp_path),
                             "--run-id", log.stem]) == 0  # fmt: skip
            runs.append(str(tmp_path / log.stem))
    cal = tmp_path / "cal.json"
    assert cli.main(["fit", *runs, "-o", str(cal)]) == 0
    return cal


@NEEDS_LOGS
def test_plan_ranks_with_each_step_s_band_and_flags_the_configs_it_cannot_order(tmp_path, capsys):
    """Ranking on 256 nodes from 2 + 8: each config whose ops span more nodes than measured
    carries its step's band (every banded op at its band's ends) around its step; the table
    flags `~` exactly the configs below #1 whose band reaches into #1's, and the JSON plan
    keeps the bands."""
    from commbench import cli
    from commbench.results.planfile import PlanFile

    cal = polaris_calibration(tmp_path)
    capsys.readouterr()
    args = ["plan", "--model", "llama-7b", "--gpus", "1024", "--gpus-per-node", "4",
            "--gpu-memory", "40", "--calibration", str(cal), "--extrapolate", "--top", "12"]  # fmt: skip
    assert cli.main([*args, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    configs = PlanFile.from_json(doc, "plan").configs
    banded = [c for c in configs if c.step_band_s is not None]
    assert banded, "no config priced beyond the measured 8 nodes"
    for c in banded:
        lo, hi = c.step_band_s
        assert lo < c.time_s.step < hi, c.label
    top_hi = configs[0].step_band_s[1] if configs[0].step_band_s else None
    tied = {
        c.rank
        for c in configs[1:]
        if top_hi is not None and (c.step_band_s[0] if c.step_band_s else c.time_s.step) <= top_hi
    }
    assert cli.main(args) == 0
    text = capsys.readouterr().out
    rows = [line.split() for line in text.splitlines() if line[:5].strip().isdigit()]
    assert tied and {int(r[0]) for r in rows if r[-1].endswith("~")} == tied
    (line,) = [x for x in text.splitlines() if x.startswith("# band: #1's step")]
    assert ("reach into that band" in line) == bool(tied)


@NEEDS_LOGS
def test_plan_prices_a_group_of_256_nodes_from_2_and_8(tmp_path, capsys):
    """`plan --explain` on a calibration of Polaris' 2 + 8 node logs: a data-parallel group of
    1024 GPUs on 256 nodes is priced at the same per-peer chunk, from the 8-node series, and
    the axis says its band (each op's, summed) instead of the prior alone."""
    from commbench import cli

    cal = polaris_calibration(tmp_path)
    capsys.readouterr()
    assert cli.main(["plan", "--model", "llama-7b", "--gpus", "1024", "--gpus-per-node", "4",
                     "--explain", "tp1-cp1-dp1024-pp1-z0", "--calibration", str(cal),
                     "--extrapolate"]) == 0  # fmt: skip
    text = capsys.readouterr().out
    assert "dp size 1024 inter (256 host(s)" in text
    assert "at the same per-peer chunk" in text
    (band,) = [line for line in text.splitlines() if line.startswith("# band: dp communication")]
    m = re.search(r"communication ([\d.]+) s, between ([\d.]+) and ([\d.]+) s", band)
    assert m, band
    t, lo, hi = (float(x) for x in m.groups())
    assert lo < t < hi


@NEEDS_LOGS
def test_size_0_rows_are_not_scaled_by_steps(tmp_path, capsys):
    """nccl-tests prints sizes under 4 x ranks bytes as 0 (Polaris' all-gather at 256 nodes: 26
    rows): NCCL moves nothing for them at any group size, so 8 nodes' 0-byte time is 256
    nodes' too, not 33x it by the ring's steps (it was: +3350% on each)."""
    from commbench import cli

    runs = []
    for n in (2, 8, 256):
        log = REAL_LOGS / f"a100_{n}x4_allgather_polaris-nccl221-env5.txt"
        assert cli.main(["import", "nccl-tests", str(log), "--results", str(tmp_path),
                         "--run-id", f"n{n}"]) == 0  # fmt: skip
        runs.append(str(tmp_path / f"n{n}"))
    cal = tmp_path / "cal.json"
    assert cli.main(["fit", *runs[:2], "-o", str(cal)]) == 0
    capsys.readouterr()
    assert cli.main(["validate", "--calibration", str(cal), runs[2], "--extrapolate",
                     "--json"]) == 0  # fmt: skip
    rows = json.loads(capsys.readouterr().out)["rows"]
    zero = [r for r in rows if r["bytes"] == 0]
    assert len(zero) >= 20 and all(r["abs_error"] < 0.5 for r in zero), zero[:2]
    assert all(r["method"].startswith("0 bytes: nothing moves") for r in zero)
    assert median(r["abs_error"] for r in rows) < 0.10
