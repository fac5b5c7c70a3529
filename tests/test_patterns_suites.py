"""Suite files (loading, validation, adapting to the world), the execution plan (chunking,
dtype substitution, dedup), and `commbench suite` / `commbench list` end to end, including
real mpirun jobs on the mpi and gloo backends."""

import json
import subprocess
import sys
import textwrap

import pytest

from commbench.errors import UsageError
from commbench.results.records import MEASURED_FIELDS
from commbench.results.rundir import read_run
from commbench.traffic import patterns
from commbench.traffic.execution import fit_budget, plan
from commbench.traffic.layout import ParallelLayout
from commbench.traffic.overrides import Overrides, apply_overrides
from commbench.traffic.points import expand
from commbench.traffic.presets import get_model
from commbench.traffic.program import Step
from commbench.traffic.suitefile import load_suite, parse_degree, suite_names

from conftest import REPO, job_env, needs_torch, run_mpi, run_single

BUILT_IN = ["all", "collectives", "cp", "dp", "ep", "infer", "pp", "smoke", "step", "tp", "zero"]


def write(tmp_path, text: str, name="s.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


# ---- loading and adapting ----
def test_built_in_suites_exist_and_the_top_level_link():
    assert suite_names() == BUILT_IN
    assert (REPO / "suites").resolve() == (REPO / "commbench" / "traffic" / "suites").resolve()


@pytest.mark.parametrize("name", BUILT_IN)
@pytest.mark.parametrize("quick", [False, True])
def test_built_in_suites_adapt_to_the_world(name, quick):
    suite = load_suite(name, quick)
    counts = {}
    for world in (2, 4, 6, 8, 16, 32):
        try:
            points = expand(suite, world)
        except UsageError as e:
            assert "no configuration" in str(e)
            continue
        counts[world] = len(points)
        for pt in points:
            lay = pt.layout
            assert lay.tp * lay.cp * lay.dp * lay.pp == world
            assert pt.program.steps
            if pt.model is not None:
                assert not patterns.violations(lay, pt.model, pt.options.seq(pt.model), False)
    assert counts.get(8, 0) >= 1 and counts.get(16, 0) >= 1


def test_tp_suite_sweeps_divisors_the_model_allows():
    points = expand(load_suite("tp"), 16)
    by_model = {}
    for pt in points:
        by_model.setdefault(pt.model.name, set()).add(pt.layout.tp)
    assert by_model == {"llama-7b": {2, 4, 8, 16}, "llama-13b": {2, 4, 8}, "llama-70b": {2, 4, 8}}
    assert {pt.options.sequence_parallel for pt in points} == {False, True}
    quick = expand(load_suite("tp", quick=True), 16)
    assert {pt.model.name for pt in quick} == {"llama-7b"} and len(quick) < len(points)


def test_all_is_every_strategy_suite():
    runs = load_suite("all").runs
    assert [r.pattern for r in runs] == [
        "tp",
        "dp",
        "dp",
        "zero",
        "pp",
        "pp",
        "cp",
        "ep",
        "ep",
        "prefill",
        "prefill",
        "decode",
        "decode",
        "decode",
        "step",
        "step",
        "step",
        "framework",
        "collectives",
    ]


def test_degree_specs():
    assert parse_degree(4, "d").candidates(16) == [4]
    assert parse_degree("auto", "d").candidates(12) == [2, 3, 4, 6, 12]
    assert parse_degree({"min": 1, "max": 4}, "d").candidates(16) == [1, 2, 4]
    assert parse_degree("2,4", "d").values == (2, 4)
    with pytest.raises(UsageError, match="d: expected a non-empty list of integers"):
        parse_degree([2, "x"], "d")


@pytest.mark.parametrize(
    "text,message",
    [
        (
            "runs: [{pattern: tp, models: [llama-7b], colour: red}]",
            r"runs\[0\].colour: unknown key",
        ),
        (
            "runs: [{pattern: tensor, models: [llama-7b]}]",
            r"runs\[0\].pattern: unknown pattern 'tensor'",
        ),
        (
            "runs: [{pattern: tp, models: [llama-9b]}]",
            r"runs\[0\].models\[0\]: unknown model 'llama-9b'",
        ),
        ("runs: [{pattern: tp}]", r"runs\[0\].models: pattern tp needs a list of models"),
        ("runs: [{pattern: tp, models: llama-7b}]", r"runs\[0\].models: expected a non-empty list"),
        (
            "runs: [{pattern: ep, models: [llama-7b]}]",
            r"runs\[0\].models\[0\]: pattern ep needs an MoE model",
        ),
        (
            "runs: [{pattern: tp, models: [llama-7b], options: {sequence_parallel: 1}}]",
            r"runs\[0\].options.sequence_parallel: expected bool",
        ),
        (
            "runs: [{pattern: tp, models: [llama-7b], options: {seqlen: 1}}]",
            r"runs\[0\].options.seqlen: unknown option",
        ),
        (
            "runs: [{pattern: tp, models: [llama-7b], sweep: {sequence_parallel: true}}]",
            r"runs\[0\].sweep.sequence_parallel: expected a non-empty list",
        ),
        (
            "runs: [{pattern: tp, models: [llama-7b], degrees: {dp: 2}}]",
            r"runs\[0\].degrees.dp: dp is derived",
        ),
        (
            "runs: [{pattern: tp, models: [llama-7b], degrees: {tp: two}}]",
            r"runs\[0\].degrees.tp: 'two' is not a degree",
        ),
        (
            "runs: [{pattern: collectives, models: [llama-7b]}]",
            r"runs\[0\].models: pattern collectives takes no models",
        ),
        (
            "runs: [{pattern: tp, models: [{name: x, layers: 2}]}]",
            r"runs\[0\].models\[0\]: missing hidden",
        ),
        ("timing: {budget: fast}\nruns: []", r"timing.budget: expected a positive float"),
        (
            "runs: [{pattern: tp, models: [llama-7b]}]\nmax_bytes: lots",
            r"max_bytes 'lots' does not parse",
        ),
        ("runs: {pattern: tp}", r"runs: expected a list of runs"),
        ("include: [nosuch]", r"unknown suite 'nosuch'"),
        ("runs: [{pattern: tp, models: [llama-7b]]", r"not valid YAML at line 1"),
        ("[1, 2]", r"s.yaml: expected a mapping"),
        ("description: nothing", r"no runs"),
        (
            "runs: [{pattern: tp, models: [llama-7b], order: tp-cp-dp-pp}]",
            r"runs\[0\].order: 'tp-cp-dp-pp' is not a permutation of tp-cp-ep-dp-pp",
        ),
        (
            "runs: [{pattern: tp, models: [llama-7b], order: [tp, cp, ep, dp, pp]}]",
            r"runs\[0\].order: \['tp', 'cp', 'ep', 'dp', 'pp'\] is not a permutation",
        ),
    ],
)
def test_suite_file_errors_name_the_field(tmp_path, text, message):
    with pytest.raises(UsageError, match=message):
        load_suite(write(tmp_path, text))


@pytest.mark.parametrize(
    "degrees,world,message",
    [
        ("{tp: 3}", 8, r"degrees.tp: tp\*cp\*pp = 3\*1\*1 = 3 does not divide the world size 8"),
        ("{tp: 16}", 16, r"degrees.tp: tp=16 does not divide the 8 KV heads of llama-70b"),
        ("{pp: 3}", 6, r"degrees.pp: pp=3 does not divide the 80 layers of llama-70b"),
        ("{cp: 3}", 6, r"degrees.cp: cp=3 does not divide the sequence length 4096"),
    ],
)
def test_degrees_that_do_not_fit(tmp_path, degrees, world, message):
    path = write(tmp_path, f"runs: [{{pattern: tp, models: [llama-70b], degrees: {degrees}}}]")
    with pytest.raises(UsageError, match=message):
        expand(load_suite(path), world)


def test_experts_by_ep_and_quick_sections(tmp_path):
    path = write(
        tmp_path,
        """
        timing: {budget: 0.5}
        quick: {timing: {budget: 0.01}, max_bytes: 1M}
        runs:
          - pattern: ep
            models: [{preset: mixtral-8x7b, name: mx6, experts: 6}]
            degrees: {ep: 4}
            quick: {degrees: {ep: 2}, options: {seq_len: 128}}
        """,
    )
    with pytest.raises(UsageError, match=r"degrees.ep: ep=4 does not divide the 6 experts"):
        expand(load_suite(path), 8)
    quick = load_suite(path, quick=True)
    assert quick.runs[0].timing == {"budget": 0.01} and quick.runs[0].max_bytes == 1 << 20
    (pt,) = expand(quick, 8)
    assert pt.layout.ep == 2 and pt.options.seq_len == 128


def test_overrides(tmp_path):
    suite = load_suite("smoke")
    ov = Overrides(options={"micro_batches": 2})
    smoke = expand(apply_overrides(suite, ov), 8)
    assert {pt.options.micro_batches for pt in smoke} == {2}
    with pytest.raises(UsageError, match="--set colour: no run of suite smoke"):
        apply_overrides(suite, Overrides(options={"colour": 1}))
    with pytest.raises(UsageError, match="--set"):
        apply_overrides(suite, Overrides(options={"router": "random"}))
    tp = load_suite("tp")
    pts = expand(
        apply_overrides(
            tp,
            Overrides(models=(get_model("llama-70b"),), degrees={"tp": parse_degree("max", "d")}),
        ),
        16,
    )
    assert [(p.model.name, p.layout.tp) for p in pts] == [("llama-70b", 8)] * 2


# ---- execution plan ----
def test_plan_measures_identical_steps_once():
    lay = ParallelLayout(8, tp=8)
    prog = patterns.build("tp", lay, get_model("llama-7b"), {"sequence_parallel": True})
    pl = plan(prog, lay, "gloo", None)
    assert [m.indices for m in pl] == [(0, 2), (1, 3)]
    assert pl[0].repeat == prog.steps[0].repeat + prog.steps[2].repeat
    assert all(m.scale == 1 and not m.extrapolated for m in pl)
    # MPI has no bf16 reduction: the reduce-scatter moves the same bytes as float32
    pl = plan(prog, lay, "mpi", None)
    assert pl[1].step.dtype == "float32" and pl[1].step.nbytes == prog.steps[1].nbytes
    assert pl[0].step.dtype == "bfloat16"


def test_max_bytes_measures_a_chunk_and_scales():
    MiB = 1 << 20
    step = Step(op="allreduce", nbytes=32 * MiB, axis="tp", repeat=64)
    small, scale, chunks, extrap = fit_budget(step, 4, 16 * MiB)
    assert extrap and chunks == 4 and small.nbytes == 8 * MiB and scale == 4
    ag = Step(op="allgather", nbytes=30 * MiB, axis="dp", repeat=1)
    small, scale, chunks, extrap = fit_budget(ag, 3, 8 * MiB)
    assert small.nbytes * scale == pytest.approx(30 * MiB) and small.nbytes % (3 * 2) == 0
    assert fit_budget(step, 4, 64 * MiB) == (step, 1.0, 1, False)
    # all-to-all-v: every entry shrinks; the scale restores the total
    lay = ParallelLayout(8, ep=8)
    prog = patterns.build("ep", lay, get_model("mixtral-8x7b"), {"router": "zipf"})
    (m0, m1) = plan(prog, lay, "mpi", 4 * MiB)
    total = sum(map(sum, prog.steps[0].split))
    assert m0.extrapolated and sum(map(sum, m0.step.split)) * m0.scale == pytest.approx(total)
    # pipeline schedules keep every byte: messages split into pieces, compute untouched
    lay = ParallelLayout(4, pp=4)
    prog = patterns.build("pp", lay, get_model("llama-7b"), {"micro_batches": 2, "compute_ms": 1})
    (m,) = plan(prog, lay, "mpi", 8 * MiB)
    assert not m.extrapolated and m.scale == 1 and m.chunks == 8
    orig = prog.steps[0].schedule
    for before, after in zip(orig, m.step.schedule):
        for kind in ("send", "recv"):
            assert sum(a.nbytes for a in after if a.kind == kind) == sum(
                a.nbytes for a in before if a.kind == kind
            )
        assert [a for a in after if a.kind == "compute"] == [
            a for a in before if a.kind == "compute"
        ]
    from commbench.traffic.patterns.pp import simulate

    simulate(m.step.schedule)  # still deadlock-free, every piece matched


# ---- the commands ----
def test_dry_run_without_mpirun():
    job = run_single(
        "suite", "tp", "--dry-run", "--world", "16", "--ranks-per-node", "8", "--quick"
    )
    assert job.returncode == 0, job.output
    out = job.stdout
    assert "world 16 (2 host(s))" in out and "## point 1: tp llama-7b tp2-cp1-dp8-pp1" in out
    assert "allreduce" in out and "intra" in out and "16 MiB" in out
    job = run_single("suite", "ep", "--dry-run", "--world", "8", "--quick")
    assert job.returncode == 0 and "split (bytes src->dst)" in job.stdout


def test_list_command():
    job = run_single("list")
    assert job.returncode == 0, job.output
    for word in [
        "llama-70b",
        "mixtral-8x7b",
        "46.70B",
        "512KiB",
        "smoke",
        "zero",
        "reduce_scatter",
        "router",
    ]:
        assert word in job.stdout, word


@pytest.mark.parametrize(
    "args,message",
    [
        (["nosuch", "--dry-run"], "unknown suite 'nosuch'"),
        (
            ["tp", "--dry-run", "--world", "8", "--degree", "tp=3"],
            "degrees.tp: tp*cp*pp = 3*1*1 = 3",
        ),
        (["tp", "--dry-run", "--model", "llama-9b"], "unknown model 'llama-9b'"),
        (["tp", "--dry-run", "--set", "colour=red"], "--set colour"),
        (["tp"], "no configuration with traffic fits a world of 1"),
    ],
)
def test_usage_errors_exit_2_with_one_line(args, message):
    job = run_single("suite", *args)
    assert job.returncode == 2, job.output
    assert message in job.stderr and "Traceback" not in job.output


@pytest.mark.mpi
def test_bad_suite_under_mpirun_exits_2_on_every_rank(tmp_path):
    path = write(tmp_path, "runs: [{pattern: tp, models: [llama-70b], degrees: {tp: 16}}]")
    job = run_mpi(4, "suite", path, "--results", str(tmp_path), timeout=60)
    assert job.returncode == 2, job.output
    assert job.stderr.count("does not divide the world size 4") == 1  # rank 0 only


def check_records(run_dir, backend, world):
    run = read_run(run_dir)
    assert run.status == "complete"
    steps = [r for r in run.records if r["kind"] == "step"]
    points = [r for r in run.records if r["kind"] == "point"]
    assert steps and points
    for r in steps:
        for f in MEASURED_FIELDS + ("pattern", "axis", "config", "extrapolated", "program_steps"):
            assert f in r, f
        assert r["wrong"] == 0 and r["backend"] == backend and r["world_size"] == world
    for r in points:
        assert r["wrong"] == 0 and r["time_us"] > 0
        layout, model, options, prog = patterns.rebuild(r)
        assert len(prog.steps) == r["steps_total"] == len(r["steps"])
        assert layout.world == world and options.to_dict() == r["options"]
        assert r["time_us"] == pytest.approx(sum(s["total_us"] for s in r["steps"]))
        for s, st in zip(r["steps"], prog.steps):
            assert (s["op"], s["axis"], s["repeat"]) == (st.op, st.axis, st.repeat)
    return run, steps, points


@pytest.mark.mpi
def test_smoke_suite_mpi(tmp_path):
    job = run_mpi(
        8, "suite", "smoke", "--backend", "mpi", "--results", str(tmp_path), "--run-id", "s"
    )
    assert job.returncode == 0, job.output
    assert "Points with wrong data : 0 of" in job.stdout and "bubble measured" in job.stdout
    run, steps, points = check_records(tmp_path / "s", "mpi", 8)
    assert {p["pattern"] for p in points} == set(patterns.PATTERNS)
    ep_pts = [p for p in points if p["pattern"] == "ep"]
    assert all("imbalance" in p["meta"] for p in ep_pts)


@pytest.mark.mpi
def test_infer_suite_quick_on_8_ranks(tmp_path):
    """Prefill and decode of Llama 3 and DeepSeek-V3 (FP8 dispatch, node-limited routing)
    under mpirun on 8 ranks, every point checked exactly; decode's TP all-reduce grows with
    the batch."""
    job = run_mpi(
        8, "suite", "infer", "--quick", "--backend", "mpi", "--results", str(tmp_path),
        "--run-id", "i", timeout=240,
    )  # fmt: skip
    assert job.returncode == 0, job.output
    assert "Points with wrong data : 0 of 9" in job.stdout
    run, steps, points = check_records(tmp_path / "i", "mpi", 8)
    assert {p["pattern"] for p in points} == {"prefill", "decode"}
    assert {s["op"] for s in steps} == {"allreduce", "alltoallv", "allgather", "p2p_schedule"}
    tp_bytes = {
        p["options"]["micro_batch"]: p["steps"][0]["bytes"]
        for p in points
        if p["pattern"] == "decode" and p["config"]["tp"] == 8
    }
    assert tp_bytes == {1: 4096 * 2, 16: 16 * 4096 * 2}


@pytest.mark.mpi
@needs_torch
def test_smoke_suite_gloo(tmp_path):
    job = run_mpi(
        8,
        "suite",
        "smoke",
        "--backend",
        "gloo",
        "--results",
        str(tmp_path),
        "--run-id",
        "g",
        timeout=240,
    )
    assert job.returncode == 0, job.output
    run, steps, points = check_records(tmp_path / "g", "gloo", 8)
    assert {p["pattern"] for p in points} == set(patterns.PATTERNS)
    assert any(s["op"] == "reduce_scatter" and s["dtype"] == "bfloat16" for s in steps)


@pytest.mark.mpi
def test_all_quick_mpi_with_extrapolation(tmp_path):
    """Every strategy suite (via `all`) end to end; a small --max-bytes exercises chunking."""
    job = run_mpi(
        8, "suite", "all", "--quick", "--backend", "mpi", "--iters", "1", "--warmup", "0",
        "--max-bytes", "2M", "--results", str(tmp_path), "--run-id", "a", timeout=240,
    )  # fmt: skip
    assert job.returncode == 0, job.output
    run, steps, points = check_records(tmp_path / "a", "mpi", 8)
    assert {p["suite"] for p in points} == {"all"}
    assert {p["pattern"] for p in points} == set(patterns.PATTERNS)
    big = [s for s in steps if s["extrapolated"]]
    assert big and all(
        s["bytes"] * s["scale"] == pytest.approx(s["program_bytes"], rel=0.01)
        for s in big
        if s["op"] != "alltoallv"
    )
    assert all(s["bytes"] * 2 <= 2 << 20 for s in steps if s["op"] in ("allreduce", "sendrecv"))


@pytest.mark.mpi
def test_mpi_path_never_imports_torch(tmp_path):
    code = (
        "import runpy, sys; sys.argv = ['commbench'] + sys.argv[1:]\n"
        "try:\n    runpy.run_module('commbench', run_name='__main__')\n"
        "except SystemExit:\n    pass\n"
        "bad = [m for m in ('torch', 'pandas', 'scipy', 'matplotlib', 'seaborn') if m in sys.modules]\n"
        "print('HEAVY', bad, flush=True)\n"
    )
    from conftest import mpirun_path

    cmd = [mpirun_path(), "-n", "2", "--oversubscribe", sys.executable, "-c", code, "suite", "smoke",
           "--backend", "mpi", "--results", str(tmp_path), "--iters", "1"]  # fmt: skip
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=job_env(), cwd=REPO)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.count("HEAVY []") == 2, p.stdout


def test_point_record_json_roundtrip(tmp_path):
    """Point records are plain JSON (no numpy scalars) so validate can rebuild them."""
    pts = expand(load_suite("smoke"), 8)
    for pt in pts:
        json.dumps(pt.program.meta)
        json.dumps(pt.options.to_dict())


def test_model_seq_len_wins_over_suite_seq_len():
    """`--model NAME:seq_len=N` is the sequence the user asked for: the suite's own seq_len
    option (step.yaml sets 2048) yields to it, unless --set seq_len says otherwise."""
    from commbench.traffic.presets import parse_model_arg

    suite = load_suite("step")
    text = "llama-7b:layers=2,seq_len=128"
    ov = Overrides(models=(parse_model_arg(text),), model_seq_len=True)
    pts = expand(apply_overrides(suite, ov), 4)
    assert pts and {pt.options.seq(pt.model) for pt in pts} == {128}
    both = Overrides(models=ov.models, model_seq_len=True, options={"seq_len": 256})
    pts = expand(apply_overrides(suite, both), 4)
    assert {pt.options.seq(pt.model) for pt in pts} == {256}
    # a --model without seq_len keeps the suite's
    plain = Overrides(models=(parse_model_arg("llama-7b:layers=2"),))
    kept = {pt.options.seq_len for pt in expand(apply_overrides(suite, plain), 4)}
    assert kept == {pt.options.seq_len for pt in expand(suite, 4)} and 128 not in kept
