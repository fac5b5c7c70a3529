"""`commbench trace`: real GPU traces (../shared/real-traces), a real gloo job traced under
torch.profiler (tests/trace_job.py, one torchrun launch shared by the tests), a hand-computed
synthetic trace for the shares, the findings, --json, --emit-suite and bad input."""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from commbench.trace.pipeline import analyse

from conftest import REPO, job_env, run_single

REAL = REPO.parent / "shared" / "real-traces"
CAL = REPO / "commbench" / "calibration" / "reference-h100-ib400.json"


def real(name: str) -> Path:
    path = REAL / name
    if not path.exists():
        pytest.skip(f"{path} absent")
    return path


def test_real_nccl_trace_with_metadata_finds_every_collective():
    path = real("hta_2gpu_allreduce_broadcast_rank0.json.gz")
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    rpc = [e for e in events if e.get("name") == "record_param_comms"]
    comm = [e for e in rpc if e["args"].get("Collective name") not in ("wait",)]
    job = analyse([str(path)], None, None)
    ops = job.ops_flat
    assert len(ops) == len(comm) == 21  # 27 events less the 6 `wait`s, which move nothing
    assert {(o.op, o.algorithm, o.protocol) for o in ops} == {
        ("allreduce", "RING", "LL"), ("broadcast", "RING", "LL")}  # fmt: skip
    first = next(o for o in ops if o.op == "allreduce")
    assert first.bytes == 2049000 * 4 and first.dtype == "float32" and first.group_ranks == (0, 1)
    assert first.source == "kernel" and first.axis == "dp"  # the whole world of a DDP job
    assert job.stats.steps == [4, 5, 6]


@pytest.mark.parametrize("name, kernels", [
    ("hta_8gpu_allreduce_sendrecv_rank3.json.gz", 60),
    ("hta_128gpu_sendrecv_sampled_rank0.json.gz", 10),
])  # fmt: skip
def test_real_trace_without_metadata_counts_nccl_kernels(name, kernels):
    path = real(name)
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    nccl = [e for e in events if e.get("cat") == "kernel" and e["name"].startswith("nccl")]
    job = analyse([str(path)], None, None)
    assert len(job.ops_flat) == len(nccl) == kernels
    assert all(o.bytes is None and o.algorithm == "RING" for o in job.ops_flat)
    assert any("sizes unknown" in n for n in job.head["notes"])


@pytest.fixture(scope="module")
def gloo_job(tmp_path_factory):
    """One torchrun launch of tests/trace_job.py (4 ranks, gloo): OUT/tpdp, OUT/pp, OUT/ops."""
    pytest.importorskip("torch")
    out = tmp_path_factory.mktemp("trace_job")
    torchrun = Path(sys.executable).parent / "torchrun"
    cmd = [str(torchrun), "--nproc-per-node", "4", "--master-port", "29761",
           str(REPO / "tests" / "trace_job.py"), str(out)]  # fmt: skip
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=job_env(), cwd=REPO)
    assert p.returncode == 0, p.stderr[-2000:]
    return out


def logged(out: Path, part: str) -> dict[int, list]:
    return {r: [op for step in json.loads((out / "ops" / f"{part}{r}.json").read_text())
                for op in step] for r in range(4)}  # fmt: skip


@pytest.mark.parametrize(
    "part, layout", [("tpdp", "tp2-cp1-ep2-dp2-pp1"), ("pp", "tp1-cp1-dp2-pp2")]
)
def test_gloo_job_ops_land_on_their_true_groups_and_axes(gloo_job, part, layout):
    job = analyse([str(gloo_job / part)], None, None)
    assert job.head["layout"] == layout and job.head["layout_how"] == "inferred"
    for rank, want in logged(gloo_job, part).items():
        got = [[o.op, o.bytes, sorted(o.group_ranks or ()), o.axis] for o in job.ops[rank]]
        assert got == [[op, nbytes, sorted(g), axis] for op, nbytes, g, axis in want], rank
    assert {o.phase for o in job.ops_flat} <= {"forward", "backward", "optimizer"}
    assert job.stats.steps == [1, 2]


def test_gloo_job_findings_fire(gloo_job):
    tpdp = run_single("trace", str(gloo_job / "tpdp"), "--ranks-per-node", "1",
                      "--calibration", str(CAL))  # fmt: skip
    assert tpdp.returncode == 0, tpdp.output
    findings = [line for line in tpdp.stdout.splitlines() if line.startswith("# finding:")]
    text = "\n".join(findings)
    for words in ("communication is", "TP groups span nodes", "gradient traffic exposed",
                  "EP all-to-alls latency-bound", "far below their calibrated speed"):  # fmt: skip
        assert words in text, tpdp.stdout
    assert "pipeline bubble" not in text
    pp = run_single("trace", str(gloo_job / "pp"))
    assert "# finding: pipeline bubble: 2 micro-batches on 2 stages" in pp.stdout, pp.output
    two_nodes = run_single("trace", str(gloo_job / "tpdp"), "--ranks-per-node", "2")
    assert "TP groups span nodes" not in two_nodes.stdout


def test_json_has_the_issue_fields(gloo_job):
    got = run_single("trace", str(gloo_job / "tpdp"), "--json")
    assert got.returncode == 0, got.output
    doc = json.loads(got.stdout)
    keys = {"rank", "op", "bytes", "dtype", "group_ranks", "axis", "duration_us", "algorithm",
            "protocol"}  # fmt: skip
    assert doc["ops"] and all(keys <= set(row) for row in doc["ops"])
    assert set(doc["axes"]) == {"tp", "dp", "ep", "world"}
    assert doc["axes"]["tp"]["count"] == 4 * 3 * 2  # 4 ranks x 3 a step x 2 steps
    assert 0 < doc["exposed_share"] <= doc["comm_share"] <= 1


def test_emit_suite_replays_under_mpirun(gloo_job, tmp_path):
    suite = tmp_path / "replay.yaml"
    got = run_single("trace", str(gloo_job / "tpdp"), "--emit-suite", str(suite))
    assert got.returncode == 0 and suite.exists(), got.output
    runs = json.loads(suite.read_text())["runs"]
    # tp allreduce, dp allgather + reduce_scatter, ep alltoall, the world's loss allreduce
    assert sorted(r["options"]["ops"][0] for r in runs) == [
        "allgather", "allreduce", "allreduce", "alltoall", "reduce_scatter"]  # fmt: skip
    dry = run_single("suite", str(suite), "--dry-run", "--world", "4")
    assert dry.returncode == 0, dry.output
    for op in ("allgather", "reduce_scatter", "alltoall", "allreduce"):
        assert op in dry.stdout
    from conftest import run_mpi

    out = tmp_path / "res"
    ran = run_mpi(4, "suite", str(suite), "--results", str(out), "-n", "3", "-w", "1", timeout=180)
    assert ran.returncode == 0, ran.output[-3000:]
    (run_dir,) = out.iterdir()
    steps = [json.loads(line) for line in (run_dir / "records.jsonl").read_text().splitlines()]
    steps = [r for r in steps if r["kind"] == "step"]
    assert {(r["op"], r["bytes"], r["group_size"]) for r in steps} == {
        (r["options"]["ops"][0], r["options"]["min_bytes"], r["options"]["group_sizes"][0])
        for r in runs
    }
    assert all(r["checked"] and r["wrong"] == 0 for r in steps)  # the data came out right


def test_step_keeps_one_profiler_step(gloo_job):
    one = analyse([str(gloo_job / "tpdp")], None, 2)
    assert one.stats.steps == [2] and {o.step for o in one.ops_flat} == {2}
    assert one.stats.axes["tp"].count == 4 * 3  # one step's tp all-reduces on 4 ranks
    got = run_single("trace", str(gloo_job / "tpdp"), "--step", "99")
    assert got.returncode == 2 and "ProfilerStep#99" in got.stderr


def _synthetic(path: Path, events: list, info: dict | None = None) -> Path:
    doc = {"traceEvents": events}
    if info is not None:
        doc["distributedInfo"] = info
    path.write_text(json.dumps(doc))
    return path


def X(name, ts, dur, cat="cpu_op", tid=1, **args):  # noqa: N802
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur,
            "args": args}  # fmt: skip


def test_shares_match_a_hand_computation(tmp_path):
    """Step 0..1000 us; compute 0-400 and 700-750 (kernels); comm kernels 300-600 and
    740-900. Comm union 300 + 160 = 460 us -> 46%; exposed: 400-600 (200) + 750-900 (150)
    = 350 us -> 35%."""
    rpc = {"Collective name": "allreduce", "In msg nelems": 256, "Out msg nelems": 256,
           "dtype": "Float", "Process Group Ranks": "[0, 1]"}  # fmt: skip
    events = [
        X("ProfilerStep#3", 0, 1000, cat="user_annotation"),
        X("ProfilerStep#x", 280, 20, cat="user_annotation"),  # no step number: no step
        X("aten::mm", 0, 400, cat="kernel", tid=7),
        X("aten::mm", 700, 50, cat="kernel", tid=7),
        X("record_param_comms", 290, 5, **{"External id": 1}, **rpc),
        X("record_param_comms", 730, 5, **{"External id": 2}, **rpc),
        X("ncclDevKernel_AllReduce_Sum_f32_RING_LL128(x)", 300, 300, cat="kernel", tid=9,
          **{"External id": 1}),
        X("ncclDevKernel_AllReduce_Sum_f32_RING_LL128(x)", 740, 160, cat="kernel", tid=9,
          **{"External id": 2}),
    ]  # fmt: skip
    info = {"backend": "nccl", "rank": 0, "world_size": 2,
            "pg_config": [{"pg_name": "0", "ranks": [0, 1]}]}  # fmt: skip
    job = analyse([str(_synthetic(tmp_path / "r0.json", events, info))], None, None)
    assert job.stats.comm_share == pytest.approx(0.46)
    assert job.stats.exposed_share == pytest.approx(0.35)
    op = job.ops_flat[0]
    assert (op.algorithm, op.protocol, op.bytes, op.step) == ("RING", "LL128", 1024, 3)
    assert job.stats.axes["dp"].exposed_us == pytest.approx(200 + 150)


def test_bad_input_is_one_message_exit_2(tmp_path, gloo_job):
    trunc = tmp_path / "trunc.json.gz"
    trunc.write_bytes(gzip.compress(b'{"traceEvents": [')[:-6])
    bad = [
        ([str(trunc)], "trunc.json.gz"),
        ([str(_synthetic(tmp_path / "plain.json", [X("aten::mm", 0, 1)]))], "no distributedInfo"),
    ]
    other = tmp_path / "other"
    other.mkdir()
    shutil.copy(gloo_job / "tpdp" / "rank0.json", other / "rank0.json")
    doc = json.loads((gloo_job / "pp" / "rank1.json").read_text())
    doc["distributedInfo"]["world_size"] = 8
    (other / "rank1.json").write_text(json.dumps(doc))
    bad.append(([str(other)], "different jobs"))
    for paths, words in bad:
        got = run_single("trace", *paths)
        assert got.returncode == 2 and words in got.stderr, got.output
        assert "Traceback" not in got.output
    wrong = run_single("trace", str(gloo_job / "tpdp"), "--layout", "tp=4")
    assert wrong.returncode == 2 and "does not match the groups seen" in wrong.stderr
    # Megatron's other order puts dp fastest: tp2 x dp2 then has tp groups [0, 2]
    swapped = run_single("trace", str(gloo_job / "tpdp"), "--layout", "tp=2,order=dp-tp-cp-ep-pp")
    assert swapped.returncode == 0, swapped.output
    quiet = _synthetic(tmp_path / "quiet.json", [X("aten::mm", 0, 1)],
                       {"backend": "nccl", "rank": 0, "world_size": 1})  # fmt: skip
    got = run_single("trace", str(quiet))
    assert got.returncode == 0 and "no communication" in got.stdout
    got = run_single("trace", str(quiet), "--json")
    assert got.returncode == 0 and json.loads(got.stdout)["ops"] == []


def test_results_run_is_schema_valid_and_drawn_by_report(gloo_job, tmp_path):
    import jsonschema

    res = tmp_path / "results"
    got = run_single("trace", str(gloo_job / "tpdp"), "--results", str(res), "--run-id", "job")
    assert got.returncode == 0, got.output
    schema = json.loads((REPO / "commbench" / "schemas" / "record.schema.json").read_text())
    records = [
        json.loads(line) for line in (res / "job" / "records.jsonl").read_text().splitlines()
    ]
    assert len(records) == 4 * 2 * 7  # 4 ranks x 2 steps x 7 ops
    for rec in records:
        jsonschema.validate(rec, schema)
    assert {r["axis"] for r in records} == {"tp", "dp", "ep", "world"}
    spans = json.loads((res / "job" / "trace.json").read_text())
    assert spans["profiler_step"] == 1 and set(spans["ranks"]) == {"0", "1", "2", "3"}
    out = tmp_path / "report"
    rep = run_single("report", str(res / "job"), "-o", str(out), "--no-fit")
    assert rep.returncode == 0, rep.output
    html = (out / "index.html").read_text()
    assert "Traced jobs: one step by axis" in html and "trace-1.png" in html
    assert "finding: gradient traffic exposed" in html
    assert (out / "figures" / "trace-1.png").stat().st_size > 10_000


def test_validate_scores_a_calibration_against_in_job_ops(tmp_path):
    path = real("hta_2gpu_allreduce_broadcast_rank0.json.gz")
    res = tmp_path / "results"
    got = run_single("trace", str(path), "--results", str(res), "--run-id", "gpu2")
    assert got.returncode == 0, got.output
    val = run_single("validate", "--calibration", str(CAL), str(res / "gpu2"), "--json")
    assert val.returncode == 0, val.output
    doc = json.loads(run_single("trace", str(path), "--json", "--calibration", str(CAL)).stdout)
    cal = doc["calibration"]
    assert cal["ops_rated"] == 21 and cal["step_traced_us"] > cal["step_predicted_us"] > 0
    rows = json.loads(val.stdout)["rows"]
    assert len(rows) == 21 and {r["kind"] for r in rows} == {"trace"}
    assert all(r["status"] == "ok" and r["measured_s"] > 0 for r in rows)


def _inspector_line(comm, rank, n, host, pid, coll, sn, size, us, ts):
    return json.dumps({
        "header": {"id": comm, "rank": rank, "n_ranks": n, "nnodes": 1},
        "metadata": {"inspector_output_format_version": "v4.0", "git_rev": "",
                     "rec_mechanism": "nccl_profiler_interface", "dump_timestamp_us": ts,
                     "hostname": host, "pid": pid},
        "coll_perf": {"coll": coll, "coll_sn": sn, "coll_msg_size_bytes": size,
                      "coll_exec_time_us": us, "coll_timing_source": "kernel_gpu",
                      "coll_algobw_gbs": 1.0, "coll_busbw_gbs": 1.0,
                      "event_trace_ts": {"coll_start_ts": ts, "coll_stop_ts": ts + us}},
    })  # fmt: skip


def test_nccl_inspector_logs_give_groups_sizes_and_axes(tmp_path):
    """4 processes, the world communicator and tp communicators {0,1} {2,3} (process order
    differs from world rank order): each file one process, as the plugin writes them."""
    world_rank = {0: 2, 1: 0, 2: 3, 3: 1}  # file -> world rank
    for f, r in world_rank.items():
        tp, tp_rank = ("0xaa", r) if r < 2 else ("0xbb", r - 2)
        lines = [
            _inspector_line("0xw", r, 4, "h", 100 + f, "AllReduce", 1, 4096, 50, 1000),
            _inspector_line(tp, tp_rank, 2, "h", 100 + f, "AllGather", 1, 1024, 20, 1100),
            _inspector_line(tp, tp_rank, 2, "h", 100 + f, "ReduceScatter", 2, 512, 20, 1200),
        ]
        (tmp_path / f"proc{f}.log").write_text("\n".join(lines) + "\n")
    inferred = analyse([str(tmp_path)], None, None)
    assert inferred.head["layout_how"] == "inferred"  # contiguous pairs: tp2, or dp2 with pp2
    assert any("also fits" in n for n in inferred.head["notes"]), inferred.head["notes"]
    job = analyse([str(tmp_path)], "tp=2", None)
    assert job.world == 4 and sorted(job.ops) == [0, 1, 2, 3]
    ag = next(o for o in job.ops[3] if o.op == "allgather")
    assert ag.group_ranks == (2, 3) and ag.bytes == 2 * 1024 and ag.axis == "tp"
    rs = next(o for o in job.ops[0] if o.op == "reduce_scatter")
    assert rs.group_ranks == (0, 1) and rs.bytes == 2 * 512
    ar = job.ops[1][0]
    assert (ar.op, ar.bytes, ar.group_ranks, ar.duration_us) == (
        "allreduce",
        4096,
        (0, 1, 2, 3),
        50,
    )
    assert job.head["layout"] == "tp2-cp1-dp2-pp1"
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "p.log").write_text(_inspector_line("0xw", 0, 2, "h", 1, "AllReduce", 1, 8, 1, 1)[:-20])
    got = run_single("trace", str(bad))
    assert got.returncode == 2 and "p.log" in got.stderr, got.output


def test_device_mesh_names_the_axis_of_a_whole_world_group(tmp_path):
    """A 1-D TP mesh over the whole world reuses the default group's ranks: the groups alone
    read dp (tp said to fit as well); DeviceMesh's `mesh_tp` description names it tp."""
    from commbench.trace.axes import mesh_axis

    assert [mesh_axis(d) for d in ("mesh_tp", "mesh_dp_shard", "mesh_cp", "default_pg")] == [
        "tp", "dp", "cp", None]  # fmt: skip
    rpc = {"Collective name": "allreduce", "In msg nelems": 8, "Out msg nelems": 8,
           "dtype": "Float", "Process Group Ranks": "[0, 1]", "External id": 1}  # fmt: skip
    pgs = [{"pg_name": "0", "pg_desc": "default_pg", "ranks": [0, 1]}]
    plain = _synthetic(tmp_path / "plain.json", [X("record_param_comms", 0, 5, **rpc)],
                       {"backend": "nccl", "rank": 0, "world_size": 2, "pg_config": pgs})  # fmt: skip
    job = analyse([str(plain)], None, None)
    assert job.ops_flat[0].axis == "dp"
    assert any("also fits: tp2" in n for n in job.head["notes"]), job.head["notes"]
    pgs = pgs + [{"pg_name": "1", "pg_desc": "mesh_tp", "ranks": [0, 1]}]
    named = _synthetic(tmp_path / "named.json", [X("record_param_comms", 0, 5, **rpc)],
                       {"backend": "nccl", "rank": 0, "world_size": 2, "pg_config": pgs})  # fmt: skip
    job = analyse([str(named)], None, None)
    assert job.ops_flat[0].axis == "tp" and job.head["layout"] == "tp2-cp1-dp1-pp1"


def test_model_sets_the_trace_beside_plan_explain(gloo_job):
    from commbench.trace import plancompare

    got = run_single("trace", str(gloo_job / "pp"), "--model", "llama-7b:layers=2", "--json")
    assert got.returncode == 0, got.output
    cmp = json.loads(got.stdout)["plan"]
    assert cmp["config"].startswith("tp1-cp1-dp2-pp2")
    assert cmp["predicted_s"]["pp"] > 0 and cmp["traced_s"]["pp"] > 0
    assert cmp["traced_comm_share"] == pytest.approx(json.loads(got.stdout)["comm_share"])
    assert cmp["priced_as"] == "megatron"
    titan = run_single("trace", str(gloo_job / "pp"), "--model", "llama-7b:layers=2",
                       "--framework", "torchtitan", "--json")  # fmt: skip
    assert titan.returncode == 0, titan.output
    other = json.loads(titan.stdout)["plan"]
    # priced by plan --framework torchtitan (its pipeline schedules by their torch names)
    assert other["priced_as"] == "torchtitan" and other["traced_s"] == cmp["traced_s"]
    assert "llama-7b:layers=2, torchtitan," in plancompare.text(other)
    dense_ep = run_single("trace", str(gloo_job / "tpdp"), "--model", "llama-7b:layers=2")
    assert dense_ep.returncode == 2 and "ep=2" in dense_ep.stderr  # llama has no experts


def test_report_axis_table_leaves_unknown_sizes_unsummed():
    """An op the trace gave no size (older PyTorch) is no 0 bytes in the report's axis table;
    the slow column counts ops over SLOW_FACTOR x their prediction."""
    from commbench.report.trace_inputs import TracedJob, axis_rows
    from commbench.results.tracerecords import TraceRecord

    def rec(axis: str, nbytes: int | None, time_us: float, predicted: float | None) -> TraceRecord:
        return TraceRecord(
            op="allreduce", backend="nccl", dtype="float32", bytes=nbytes or 0,
            sized=nbytes is not None, group_size=2, time_us=time_us, rank=0, world_size=4,
            axis=axis, phase=None, step=1, start_us=0.0, exposed_us=0.0, group_ranks=[0, 1],
            algorithm=None, protocol=None, link_class="intra", predicted_us=predicted,
            layout=None,
        )  # fmt: skip

    ops = [rec("tp", None, 300.0, 100.0), rec("tp", None, 100.0, 100.0),
           rec("dp", 1024, 100.0, None), rec("dp", None, 50.0, 10.0)]  # fmt: skip
    rows = axis_rows(TracedJob("job", {}, ops, 1))
    assert rows == [["tp", 2, None, pytest.approx(0.4), 0.0, 1],
                    ["dp", 2, 1024, pytest.approx(0.15), 0.0, 1]]  # fmt: skip
