"""Every exporter on the shipped reference and on measured calibrations (with and without virtual
nodes), read back by the consumer's own rules.

Format checks follow the consumers' source, read for this test (no code copied):
- ASTRA-sim analytical (astra-network-analytical NetworkParser): topology / npus_count /
  bandwidth / latency lists, one entry per dimension, Ring | FullyConnected | Switch.
- Calculon (calculon/network.py Network.__init__): exactly the seven keys, ops p2p /
  reduce_scatter / all_gather / all_reduce as [scalar > 0, offset] (offset None only for p2p),
  0 < efficiency <= 1, 0 <= processor_usage < 1; time = latency + S x scalar x (1 + offset/p)
  / (bandwidth 1e9 x efficiency).
- SimAI (astra-sim-alibabacloud workload/Workload.cc initialize_workload; AstraParamParse.hh
  parseYaml of SimAI 1.0): header tokens `key: value`, a row count, rows of 12 fields; busbw.yaml
  a title line, `SECTION:` lines and `op,: value` lines.
- Galvatron (galvatron/utils/config_utils.py read_allreduce_bandwidth_config(gpu_num=W) and
  read_p2p_bandwidth_config): the keys it indexes.
- llm-analysis 0.2.2 (llm_analysis/config.py GPUConfig): its real parser and analysis where the
  `consumers` extra is installed (COMMBENCH_CONSUMERS_PYTHON, `make test-all`).
The consumers themselves (marker `consumers`), where present: llm-analysis, Calculon from a
checkout (COMMBENCH_CALCULON_SRC), SimAI-Analytical from a build (COMMBENCH_SIMAI_ANALYTICAL).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path

import pytest
import yaml
from fit_samples import collective_records, write_run

from commbench import calibration, cli
from commbench.calibration.costmodels import model_time
from commbench.fit import calibrate
from commbench.fit.collect import collect, read_fit_runs
from commbench.fit.options import FitOptions

from conftest import run_single

GIB = float(1 << 30)
# Calculon's systems/h100_80g_nvl8.json, keys and value types (numbers made up): what --base needs
CALCULON_BASE = {
    "matrix": {"float16": {"tflops": 989, "gflops_efficiency": [[1, 0.5]]}},
    "vector": {"float16": {"tflops": 60, "gflops_efficiency": [[1, 0.5]]}},
    "datatypes": ["float16"],
    "processing_mode": "no_overlap",
    "mem1": {"GiB": 80, "GBps": 3000, "MB_efficiency": [[1, 0.9]], "GBps_efficiency": [[1, 0.9]]},
    "mem2": {"GiB": 512, "GBps": 100, "MB_efficiency": [[1, 0.9]], "GBps_efficiency": [[1, 0.9]]},
    "networks": [
        {"bandwidth": 450, "efficiency": 0.8, "size": 8, "latency": 1e-5,
         "ops": {"p2p": [1.0, None], "reduce_scatter": [1.0, -1], "all_gather": [1.0, -1],
                 "all_reduce": [2.0, -1]}, "must_be_filled": False, "processor_usage": 0.15},
        {"bandwidth": 50, "efficiency": 0.9, "size": 65536, "latency": 2e-5,
         "ops": {"p2p": [1.0, None], "reduce_scatter": [1.0, -1], "all_gather": [1.0, -1],
                 "all_reduce": [2.0, -1]}, "must_be_filled": False, "processor_usage": 0.03},
        {"bandwidth": 10, "efficiency": 0.9, "size": 131072, "latency": 5e-5,
         "ops": {"p2p": [1.0, None], "reduce_scatter": [1.0, -1], "all_gather": [1.0, -1],
                 "all_reduce": [2.0, -1]}, "must_be_filled": False, "processor_usage": 0.0},
    ],
}  # fmt: skip
# llm-analysis 0.2.2 gpu_configs/h100-sxm-80gb.json: GPUConfig's fields and types
LLM_ANALYSIS_BASE = {
    "name": "h100-sxm-80gb",
    "mem_per_GPU_in_GB": 80,
    "hbm_bandwidth_in_GB_per_sec": 3350,
    "intra_node_bandwidth_in_GB_per_sec": 450,
    "intra_node_min_message_latency": 8e-06,
    "peak_fp16_TFLOPS": 989,
    "peak_i8_TFLOPS": 1979,
    "peak_i4_TFLOPS": 3958,
    "inter_node_bandwidth_in_GB_per_sec": 400,
}


def _fit(root: Path, name: str, recs: list[dict], meta: dict) -> Path:
    run = write_run(root, name, recs, meta=meta)
    doc, _, _ = calibrate.build(collect(read_fit_runs([run])), FitOptions(bootstrap=0))
    path = root / f"{name}.json"
    calibration.save(doc, path)
    return path


def _records(model: str, links) -> list[dict]:
    recs = []
    for link, a, bw, sizes in links:
        for p in sizes:
            for op in ("allreduce", "allgather"):
                recs += collective_records(
                    op, p, 0, 0, link=link,
                    time_of=lambda s, op=op, p=p, a=a, bw=bw: model_time(model, op, p, s, a, 1 / bw),
                )  # fmt: skip
    return recs


@pytest.fixture(scope="module")
def virtual(tmp_path_factory) -> Path:
    """4 ranks on one host as 2 virtual nodes of 2 (--ranks-per-node 2): intra groups of 2,
    inter groups up to the whole world (4)."""
    root = tmp_path_factory.mktemp("virt")
    recs = _records("ring", (("intra", 2e-6, 50e9, (2,)), ("inter", 9e-6, 5e9, (2, 4))))
    meta = {"world_size": 4, "num_hosts": 1, "ranks_per_node": 2, "ranks_per_node_override": True}
    return _fit(root, "virt", recs, meta)


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    """Two hosts of 4, every op timed by the tree model: the link table's best model is tree."""
    root = tmp_path_factory.mktemp("tree")
    recs = _records("tree", (("intra", 3e-6, 80e9, (2, 4)), ("inter", 1e-5, 10e9, (2, 8))))
    return _fit(root, "tree", recs, {"world_size": 8, "num_hosts": 2, "ranks_per_node": 4})


def _export(*argv: str) -> int:
    return cli.main(["export", *argv])


def _astra(path: Path) -> dict:
    net = yaml.safe_load(path.read_text())
    n = len(net["topology"])
    assert n >= 1 and all(len(net[k]) == n for k in ("npus_count", "bandwidth", "latency"))
    assert set(net["topology"]) <= {"Ring", "FullyConnected", "Switch"}
    assert all(isinstance(v, int) and v >= 2 for v in net["npus_count"])
    assert all(v > 0 for v in net["bandwidth"]) and all(v >= 0 for v in net["latency"])
    return net


def _calculon(path: Path) -> dict:
    doc = json.loads(path.read_text())
    keys = {"bandwidth", "efficiency", "size", "latency", "ops", "must_be_filled",
            "processor_usage"}  # fmt: skip
    for net in doc["networks"]:
        assert set(net) == keys
        assert set(net["ops"]) == {"p2p", "reduce_scatter", "all_gather", "all_reduce"}
        for op, (scalar, offset) in net["ops"].items():
            assert scalar > 0 and ((offset is None) == (op == "p2p"))
        assert net["bandwidth"] > 0 and 0 < net["efficiency"] <= 1 and net["size"] >= 0
        assert 0 <= net["processor_usage"] < 1
    return doc


def calculon_time(net: dict, op: str, nbytes: float, p: int) -> float:
    """Calculon's Network.time, from its documented formula."""
    scalar, offset = net["ops"][op]
    size = nbytes * scalar
    size += size / p * (offset or 0)
    return net["latency"] + size / (net["bandwidth"] * 1e9 * net["efficiency"])


def test_reference_exports_without_npus(tmp_path, capsys):
    """The reference says 8 GPUs per node: no --npus needed (it used to fail)."""
    out = tmp_path / "network.yml"
    assert _export("astra-sim", "reference", "-o", str(out)) == 0
    assert _astra(out)["npus_count"] == [8, 2]
    assert "2 nodes (pass --gpus" in capsys.readouterr().out
    assert _export("astra-sim", "reference", "--gpus", "32", "-o", str(out)) == 0
    assert _astra(out)["npus_count"] == [8, 4]


def test_virtual_nodes_count_nodes_not_the_largest_group(virtual, tmp_path):
    """4 ranks as 2 nodes of 2: 2 x 2 NPUs (the old export wrote 2 x 4 = 8 for a 4-rank world)."""
    out = tmp_path / "net.yml"
    assert _export("astra-sim", str(virtual), "-o", str(out)) == 0
    assert _astra(out)["npus_count"] == [2, 2]
    base = tmp_path / "base.json"
    base.write_text(json.dumps(CALCULON_BASE))
    sysf = tmp_path / "system.json"
    assert _export("calculon", str(virtual), "--base", str(base), "-o", str(sysf)) == 0
    assert [n["size"] for n in _calculon(sysf)["networks"]] == [2, 4, 131072]


def test_calculon_needs_a_base_and_keeps_its_extra_tiers(tmp_path, capsys):
    assert _export("calculon", "reference", "-o", str(tmp_path / "s.json")) == 2
    assert "calculon needs --base" in capsys.readouterr().err
    base = tmp_path / "base.json"
    base.write_text(json.dumps(CALCULON_BASE))
    out = tmp_path / "system.json"
    assert _export("calculon", "reference", "--base", str(base), "-o", str(out)) == 0
    doc = _calculon(out)
    assert doc["matrix"] == CALCULON_BASE["matrix"] and doc["mem2"] == CALCULON_BASE["mem2"]
    nets = doc["networks"]
    assert len(nets) == 3 and nets[2] == CALCULON_BASE["networks"][2]  # not measured: kept
    assert nets[0]["bandwidth"] == pytest.approx(370.0) and nets[1]["bandwidth"] == 48.0
    assert "kept the base's 1 network tier(s)" in capsys.readouterr().out


def test_calculon_tree_model_prices_as_tree(tree, tmp_path, capsys):
    """A tree link model's all-reduce at the tier's size, as commbench prices it (the ring
    factors it used to write made it 25% too fast at p = 4), and the latency note names tree."""
    base = tmp_path / "base.json"
    base.write_text(json.dumps(CALCULON_BASE))
    out = tmp_path / "system.json"
    assert _export("calculon", str(tree), "--base", str(base), "-o", str(out)) == 0
    printed = capsys.readouterr().out
    cal = calibration.load(tree)
    intra = next(e for e in cal.doc["link_table"] if e["link_class"] == "intra")
    assert intra["best_model"] == "tree"
    m = intra["models"]["tree"]
    net = _calculon(out)["networks"][0]
    S, p = 1 << 26, net["size"]
    assert p == 4
    want = model_time("tree", "allreduce", p, S, 0.0, m["beta_s_per_byte"])
    got = calculon_time(net, "all_reduce", S, p) - net["latency"]
    assert got == pytest.approx(want, rel=1e-6)
    assert "the tree model 2 times for an all-reduce" in printed


def test_large_model_error_is_refused_without_force(tmp_path, capsys):
    """A link whose series follow no single line: exporting its model needs --force."""
    recs = []
    for p in (2, 4, 8):  # per-p bandwidth a ring model cannot follow: a large median error
        recs += collective_records(
            "allreduce", p, 0, 0, time_of=lambda s, p=p: 1e-6 * p**3 + s / (1e9 / p**2)
        )
    path = _fit(tmp_path, "bad", recs, {"world_size": 8, "ranks_per_node": 8})
    err = calibration.load(path).doc["link_table"][0]["models"]
    best = min(v.get("median_rel_err") or 0 for v in err.values())
    assert best > 0.25, best
    assert _export("astra-sim", str(path)) == 2
    assert "pass --force" in capsys.readouterr().err
    assert _export("astra-sim", str(path), "--force", "-o", str(tmp_path / "n.yml")) == 0
    assert "warning: the intra" in capsys.readouterr().err


def read_simai_workload(text: str) -> tuple[dict, list[list[str]]]:
    """SimAI's reader: header tokens `key: value`, the row count, then 12 fields per row."""
    lines = text.splitlines()
    tokens = lines[0].split()
    assert tokens[0] == "HYBRID_TRANSFORMER_FWD_IN_BCKWD"
    header = {tokens[i].rstrip(":"): int(tokens[i + 1]) for i in range(1, len(tokens) - 1, 2)}
    n = int(lines[1])
    rows = [ln.split() for ln in lines[2:]]
    assert len(rows) == n and all(len(r) == 12 for r in rows)
    types = {"NONE"} | {f"{op}{g}" for op in ("ALLREDUCE", "ALLGATHER", "REDUCESCATTER",
                                               "ALLTOALL") for g in ("", "_EP", "_DP_EP")}  # fmt: skip
    for r in rows:
        assert r[1] == "-1" and {r[3], r[6], r[9]} <= types
        assert all(int(r[i]) >= 0 for i in (2, 4, 5, 7, 8, 10, 11))
    return header, rows


def read_busbw_yaml(text: str) -> dict:
    """SimAI 1.0's parseYaml: skip the title line; `SECTION:` opens a section; `op,: value`."""
    out: dict = {}
    section = None
    for line in text.splitlines()[1:]:
        line = line.strip()
        if line.endswith(":"):
            section = line[:-1]
            out[section] = {}
            continue
        key, value = line.split(":")
        out[section][key.split(",")[0]] = None if value.strip() == "null" else float(value)
    return out


def test_simai_workload_carries_the_step_programs_bytes(tmp_path, capsys):
    """llama-7b TP2 DP4: the rows hold the TP and DP bytes of the step Program `suite step
    --dry-run` prints for that config (the framework's embedding, LM head and cross entropy
    included; broadcasts SimAI cannot express left out)."""
    from commbench import plan
    from commbench.plan import verify

    out = tmp_path / "simai"
    args = ("--model", "llama-7b", "--gpus", "8", "--config", "tp=2,dp=4,z=0")
    assert _export("simai", "reference", *args, "-o", str(out)) == 0
    printed = capsys.readouterr().out
    header, rows = read_simai_workload((out / "workload.txt").read_text())
    assert header == {"model_parallel_NPU_group": 2, "ep": 1, "pp": 1, "vpp": 1, "ga": 256,
                      "all_gpus": 8, "checkpoints": 0, "checkpoint_initiates": 0, "pp_comm": 0}  # fmt: skip
    tp = sum(int(r[i + 1]) for r in rows for i in (3, 6) if r[i] != "NONE")
    dp = sum(int(r[10]) for r in rows if r[9] != "NONE")
    cal = plan.load_calibration(None)
    req = plan.request_from_flags(
        cal, model="llama-7b", gpus=8, gpus_per_node=None, gpu_memory_gb=None, seq_len=None,
        global_batch=None, micro_batch="1", zero_stage="0", sequence_parallel=False,
        mode="train", peak_tflops=None, mfu=None, recompute="selective", grad_dtype="float32",
        overlap_dp=False, orders="megatron", extrapolate=True, backend=None,
    )  # fmt: skip
    cfg = plan.explain(req, cal, "tp=2,dp=4,z=0").config
    step = verify.step_program(req, cfg)
    assert tp == sum(s.total_bytes for s in step.steps if s.axis == "tp" and s.op != "broadcast")
    assert dp == sum(s.total_bytes for s in step.steps if s.axis == "dp") > 0
    progs = plan.Planner(req, cal, exact=True).programs(cfg)
    assert tp > sum(s.total_bytes for s in progs["tp"].steps) > 0  # + embedding, head, CE
    dry = run_single(
        "suite", "step", "--dry-run", "--world", "8", "--model", "llama-7b", "--degree", "tp=2",
        "--degree", "pp=1", "--set", "seq_len=4096", "--set", "micro_batches=256",
        "--set", "sequence_parallel=false",
    )  # fmt: skip
    assert dry.returncode == 0, dry.output
    point = dry.stdout.split("## point ")[1]  # step-dense, tp2-dp4, DDP buckets
    assert "tp2-cp1-dp4-pp1" in point and "distributed_optimizer=False" in point
    lines = [ln.split() for ln in point.splitlines()[3:] if ln.strip()]
    printed_steps = [(w[2], w[3], float(w[10])) for w in lines]  # op, axis, repeat
    assert printed_steps == [(s.op, s.axis, s.repeat) for s in step.steps]  # the same Program
    assert "embedding output" in point and "cross entropy" in point
    bw = read_busbw_yaml((out / "busbw.yaml").read_text())
    assert set(bw) == {"TP", "DP", "EP", "PP"}
    assert set(bw["TP"]) == {"allreduce", "allgather", "reducescatter", "alltoall"}
    assert 0 < bw["TP"]["allreduce"] < 370e9 / GIB and bw["EP"]["alltoall"] is None
    assert "-nv 344.589" in printed and "-g 8 -g_p_s 8" in printed


def test_simai_pipeline_header_and_expert_groups(capsys, tmp_path):
    """PP: pp_comm holds the activation message; MoE: all-to-alls on the EP group."""
    out = tmp_path / "s"
    args = ("--model", "mixtral-8x7b", "--gpus", "32", "--config", "tp=2,ep=4,pp=4,dp=4,z=0")
    assert _export("simai", "reference", *args, "-o", str(out)) == 0
    header, rows = read_simai_workload((out / "workload.txt").read_text())
    assert header["pp"] == 4 and header["ep"] == 4 and header["pp_comm"] > 0
    assert any(r[3] == "ALLTOALL_EP" for r in rows) and any(r[6] == "ALLTOALL_EP" for r in rows)
    assert read_busbw_yaml((out / "busbw.yaml").read_text())["PP"]["busbw"] > 0


def test_galvatron_profiles_have_the_keys_its_reader_indexes(tmp_path):
    out = tmp_path / "hw"
    assert _export("galvatron", "reference", "--gpus", "16", "-o", str(out)) == 0
    ar = json.loads((out / "allreduce_bandwidth_2nodes_8gpus_per_node.json").read_text())
    want = {"allreduce_size_16_consec_1"} | {
        f"allreduce_size_{p}_consec_{c}" for p in (8, 4, 2) for c in (0, 1)
    }
    assert set(ar) == want
    # bus bandwidth in MB/ms (2^20 B): contiguous 8 stays in a node, strided 8 crosses nodes
    S = 64 << 20
    cal = calibration.load(Path(calibration.__file__).parent / "reference-h100-ib400.json")
    t = cal.predict("allreduce", S, 8, "intra", extrapolate=True)
    assert ar["allreduce_size_8_consec_1"] == pytest.approx(2 * 7 / 8 * S / (1 << 20) / (t * 1e3))
    assert ar["allreduce_size_8_consec_0"] < ar["allreduce_size_8_consec_1"] / 4
    p2p = json.loads((out / "p2p_bandwidth_2nodes_8gpus_per_node.json").read_text())
    assert set(p2p) == {"pp_size_2", "pp_size_4", "pp_size_8", "pp_size_16"}
    assert all(v > 0 and math.isfinite(v) for v in (*ar.values(), *p2p.values()))


def _llm_analysis_config(tmp_path: Path, cal: str) -> Path:
    base = tmp_path / "h100.json"
    base.write_text(json.dumps(LLM_ANALYSIS_BASE))
    out = tmp_path / "gpu.json"
    assert _export("llm-analysis", cal, "--base", str(base), "-o", str(out)) == 0
    doc = json.loads(out.read_text())
    assert set(doc) == set(LLM_ANALYSIS_BASE)
    assert all(isinstance(doc[k], type(v)) or isinstance(v, int) for k, v in
               LLM_ANALYSIS_BASE.items())  # fmt: skip
    return out


def test_llm_analysis_config_fields(tmp_path, virtual):
    doc = json.loads(_llm_analysis_config(tmp_path, "reference").read_text())
    assert doc["intra_node_bandwidth_in_GB_per_sec"] == pytest.approx(370.0)
    assert doc["inter_node_bandwidth_in_GB_per_sec"] == pytest.approx(48.0)
    assert doc["intra_node_min_message_latency"] == pytest.approx(14 * 1.0714285714285714e-06)
    assert doc["mem_per_GPU_in_GB"] == 80  # from the base
    doc = json.loads(_llm_analysis_config(tmp_path, str(virtual)).read_text())
    assert doc["inter_node_bandwidth_in_GB_per_sec"] == pytest.approx(5.0, rel=1e-3)


LLM_ANALYSIS_RUN = """
import json, sys
from llm_analysis.analysis import LLMAnalysis
from llm_analysis.config import GPUConfig, ParallelismConfig, get_model_config_by_name
gpu = GPUConfig(**json.load(open(sys.argv[1])))
a = LLMAnalysis(get_model_config_by_name("NousResearch_Llama-2-7b-hf"), gpu,
                parallelism_config=ParallelismConfig(tp_size=2, dp_size=4),
                intra_node_memory_efficiency=1.0, inter_node_memory_efficiency=1.0)
s = a.training(batch_size_per_gpu=1, seq_len=4096, gradient_accumulation_steps=1)
print(json.dumps({"tp": a.get_latency_fwd_per_layer_tp_comm(1, 4096, 2),
                  "step": s["latency_per_iter"], "hidden": a.model_config.hidden_dim}))
"""


@pytest.mark.consumers
def test_llm_analysis_runs_on_the_exported_config(tmp_path):
    """llm-analysis 0.2.2's own GPUConfig and training analysis on the exported config; its TP
    all-reduce time is the calibration's bus-bandwidth term."""
    python = os.environ.get("COMMBENCH_CONSUMERS_PYTHON")
    if not python:
        pytest.skip("llm-analysis not installed: make consumers-venv, then make test-all")
    cfg = _llm_analysis_config(tmp_path, "reference")
    got = subprocess.run(
        [python, "-c", LLM_ANALYSIS_RUN, str(cfg)], capture_output=True, text=True, timeout=300
    )
    assert got.returncode == 0, got.stderr[-2000:]
    res = json.loads(got.stdout.strip().splitlines()[-1])
    S = res["hidden"] * 4096 * 2
    assert res["tp"] == pytest.approx(2 * 1 / 2 * S / 370e9, rel=1e-9)
    assert res["step"] > 0


@pytest.fixture(scope="module")
def two_hosts(tmp_path_factory) -> Path:
    """8 ranks on 2 real hosts of 4, ring-model links."""
    root = tmp_path_factory.mktemp("hosts")
    recs = _records("ring", (("intra", 2e-6, 60e9, (2, 4)), ("inter", 8e-6, 12e9, (2, 8))))
    return _fit(root, "hosts", recs, {"world_size": 8, "num_hosts": 2, "ranks_per_node": 4})


@pytest.mark.parametrize("which", ["reference", "virtual", "two_hosts"])
def test_every_export_of_every_calibration_reads_back(which, request, tmp_path):
    """The reference, virtual nodes (one host) and two real hosts, through all five exporters."""
    cal = which if which == "reference" else str(request.getfixturevalue(which))
    world = {"reference": 16, "virtual": 4, "two_hosts": 8}[which]
    per_node = {"reference": 8, "virtual": 2, "two_hosts": 4}[which]
    nodes = world // per_node
    base = tmp_path / "calculon.json"
    base.write_text(json.dumps(CALCULON_BASE))
    gpus = ("--gpus", str(world))
    assert _export("astra-sim", cal, *gpus, "-o", str(tmp_path / "n.yml")) == 0
    assert _astra(tmp_path / "n.yml")["npus_count"] == [per_node, nodes]
    assert _export("calculon", cal, *gpus, "--base", str(base), "-o", str(tmp_path / "s.json")) == 0
    assert [n["size"] for n in _calculon(tmp_path / "s.json")["networks"][:2]] == [per_node, world]
    _llm_analysis_config(tmp_path, cal)
    assert _export("galvatron", cal, *gpus, "-o", str(tmp_path / "g")) == 0
    ar = json.loads(
        (
            tmp_path / "g" / f"allreduce_bandwidth_{nodes}nodes_{per_node}gpus_per_node.json"
        ).read_text()
    )
    assert f"allreduce_size_{world}_consec_1" in ar and "allreduce_size_2_consec_0" in ar
    config = f"tp=2,dp={world // 2},z=0"
    args = ("--model", "llama-7b", *gpus, "--config", config, "-o", str(tmp_path / "simai"))
    assert _export("simai", cal, *args) == 0
    header, rows = read_simai_workload((tmp_path / "simai" / "workload.txt").read_text())
    assert header["all_gpus"] == world and rows
    read_busbw_yaml((tmp_path / "simai" / "busbw.yaml").read_text())


def test_readme_export_lines_run_as_written(two_hosts, tmp_path, monkeypatch, capsys):
    """Each `commbench export` line of docs/exports.md, in a directory holding the files it names."""
    import shlex

    readme = (Path(__file__).resolve().parents[1] / "docs" / "exports.md").read_text()
    lines = [ln.split("#")[0].strip() for ln in readme.splitlines()]
    lines = sorted({ln for ln in lines if ln.startswith("commbench export ")})
    assert {shlex.split(ln)[2] for ln in lines} == {
        "astra-sim", "calculon", "simai", "galvatron", "llm-analysis"
    }  # fmt: skip
    monkeypatch.chdir(tmp_path)
    (tmp_path / "calibration.json").write_text(two_hosts.read_text())
    examples = Path(__file__).resolve().parents[1] / "examples"
    (tmp_path / "examples").symlink_to(examples)  # the base files the lines name ship there
    assert json.loads((examples / "calculon-h100.json").read_text()) == CALCULON_BASE
    assert json.loads((examples / "llm-analysis-h100.json").read_text()) == LLM_ANALYSIS_BASE
    for ln in lines:
        assert cli.main(shlex.split(ln)[1:]) == 0, ln
        assert "wrote " in capsys.readouterr().out, ln


@pytest.mark.mpi
def test_a_real_virtual_node_run_exports_to_every_consumer(tmp_path, capsys):
    """4 real MPI ranks as 2 virtual nodes of 2 (one host): measure, fit, export everything.
    The dimensions are 2 x 2, not 2 x 4; on a shared CPU box the link models miss their points
    by far more than 25%, so every export needs --force (and warns)."""
    from conftest import run_mpi

    results = tmp_path / "results"
    for placement in ("contiguous", "strided"):  # intra pairs, then pairs across the nodes
        job = run_mpi(4, "run", "allreduce", "-b", "1K", "-e", "512K", "-f", "2",
                      "--group-size", "2", "--placement", placement, "--ranks-per-node", "2",
                      "--budget", "0.05", "--results", str(results))  # fmt: skip
        assert job.returncode == 0, job.output[-2000:]
    cal = tmp_path / "cal.json"
    assert cli.main(["fit", *map(str, sorted(results.iterdir())), "-o", str(cal)]) == 0
    doc = calibration.load(cal).doc
    assert {e["link_class"] for e in doc["link_table"]} == {"intra", "inter"}
    force = (
        () if _export("astra-sim", str(cal), "-o", str(tmp_path / "n.yml")) == 0 else ("--force",)
    )
    assert _export("astra-sim", str(cal), *force, "-o", str(tmp_path / "n.yml")) == 0
    assert _astra(tmp_path / "n.yml")["npus_count"] == [2, 2]
    base = tmp_path / "calculon.json"
    base.write_text(json.dumps(CALCULON_BASE))
    assert (
        _export("calculon", str(cal), *force, "--base", str(base), "-o", str(tmp_path / "s.json"))
        == 0
    )
    assert [n["size"] for n in _calculon(tmp_path / "s.json")["networks"]] == [2, 4, 131072]
    assert _export("galvatron", str(cal), *force, "-o", str(tmp_path / "g")) == 0
    assert (tmp_path / "g" / "p2p_bandwidth_2nodes_2gpus_per_node.json").exists()
    args = ("--model", "llama-7b", "--config", "tp=2,dp=2,z=0", "-o", str(tmp_path / "simai"))
    assert _export("simai", str(cal), *force, *args) == 0
    header, _ = read_simai_workload((tmp_path / "simai" / "workload.txt").read_text())
    assert header["all_gpus"] == 4 and header["model_parallel_NPU_group"] == 2
    lla = tmp_path / "lla.json"
    lla.write_text(json.dumps(LLM_ANALYSIS_BASE))
    assert (
        _export(
            "llm-analysis", str(cal), *force, "--base", str(lla), "-o", str(tmp_path / "x.json")
        )
        == 0
    )


def test_one_node_of_an_inter_only_calibration_is_refused(tmp_path, capsys):
    """--gpus within one node drops the inter link; with nothing left the export says why."""
    doc = json.loads((Path(calibration.__file__).parent / "reference-h100-ib400.json").read_text())
    doc["link_table"] = [e for e in doc["link_table"] if e["link_class"] == "inter"]
    path = tmp_path / "inter.json"
    path.write_text(json.dumps(doc))
    assert _export("astra-sim", str(path), "--gpus", "8") == 2
    assert "has only inter links, which a one-node system of 8 NPUs" in capsys.readouterr().err
    assert _export("astra-sim", str(path), "--gpus", "16", "-o", str(tmp_path / "n.yml")) == 0
    assert _astra(tmp_path / "n.yml")["npus_count"] == [2]


@pytest.mark.parametrize(
    "argv, says",
    [
        (("simai", "reference", "--model", "llama-7b", "--config", "tp=2", "-o", "{tmp}"),
         "does not say how many GPUs: pass --gpus N"),
        (("galvatron", "reference", "-o", "{tmp}"), "does not say its nodes: pass --gpus N"),
        (("astra-sim", "reference", "--sequence-parallel"), "--sequence-parallel is for simai"),
        (("llm-analysis", "reference", "-o", "{tmp}/x.json"), "llm-analysis needs --base"),
        (("astra-sim", "reference", "--gpus", "12"), "--gpus 12 is not a multiple of 8"),
        (("astra-sim", "reference", "--message-size", "1M"), "--message-size is for galvatron"),
    ],
)  # fmt: skip
def test_export_usage_errors(argv, says, tmp_path, capsys):
    assert _export(*(a.replace("{tmp}", str(tmp_path)) for a in argv)) == 2
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1


def test_galvatron_is_priced_per_op_so_not_gated(tmp_path):
    """A calibration whose link model is refused elsewhere still gives Galvatron profiles: they
    come from the per-op series, as plan prices."""
    recs = []
    for p in (2, 4, 8):
        recs += collective_records(
            "allreduce", p, 0, 0, time_of=lambda s, p=p: 1e-6 * p**3 + s / (1e9 / p**2)
        )
    path = _fit(tmp_path, "bad", recs, {"world_size": 8, "ranks_per_node": 8})
    assert _export("astra-sim", str(path)) == 2
    assert _export("galvatron", str(path), "-o", str(tmp_path / "g")) == 0
    ar = json.loads((tmp_path / "g" / "allreduce_bandwidth_1nodes_8gpus_per_node.json").read_text())
    S, p = 64 << 20, 4
    t = 1e-6 * p**3 + S / (1e9 / p**2)  # the measured series, not the (bad) link model
    assert ar["allreduce_size_4_consec_1"] == pytest.approx(
        2 * 3 / 4 * S / (1 << 20) / (t * 1e3), rel=0.05
    )


@pytest.mark.consumers
def test_simai_analytical_prices_the_workload_as_plan_does(tmp_path):
    """SimAI-Analytical itself (a build of a SimAI that reads -busbw, e.g. aliyun/SimAI d44c48bb:
    COMMBENCH_SIMAI_ANALYTICAL=path/to/SimAI_analytical) on the llama-7b TP2 DP4 export: its
    exposed TP and DP communication (no overlap, 1 ns compute) are plan's tp and dp times."""
    binary = os.environ.get("COMMBENCH_SIMAI_ANALYTICAL")
    if not binary:
        pytest.skip("no SimAI_analytical: set COMMBENCH_SIMAI_ANALYTICAL to a -busbw build")
    from commbench import plan

    out = tmp_path / "simai"
    args = ("--model", "llama-7b", "--gpus", "8", "--config", "tp=2,dp=4,z=0", "-o", str(out))
    assert _export("simai", "reference", *args) == 0
    (out / "results" / "r").mkdir(parents=True)
    cmd = [binary, "-w", "workload.txt", "-g", "8", "-g_p_s", "8", "-r", "r/x-", "-busbw",
           "busbw.yaml"]  # fmt: skip
    got = subprocess.run(cmd, cwd=out, capture_output=True, text=True, timeout=300)
    assert got.returncode == 0, got.stdout[-2000:]
    row = (out / "results" / "r" / "x-EndToEnd.csv").read_text().splitlines()[1].split(",")
    exposed_us = {k: float(row[i].split()[0]) for k, i in (("dp", 1), ("tp", 3))}
    req = plan.request_from_flags(
        plan.load_calibration(None), model="llama-7b", gpus=8, gpus_per_node=None,
        gpu_memory_gb=None, seq_len=None, global_batch=None, micro_batch="1", zero_stage="0",
        sequence_parallel=False, mode="train", peak_tflops=None, mfu=None,
        recompute="selective", grad_dtype="float32", overlap_dp=False, orders="megatron",
        extrapolate=True, backend=None,
    )  # fmt: skip
    ev = plan.explain(req, plan.load_calibration(None), "tp=2,dp=4,z=0")
    assert exposed_us["tp"] / 1e6 == pytest.approx(ev.time.in_layer["tp"], rel=0.01)
    assert exposed_us["dp"] / 1e6 == pytest.approx(ev.time.gradient, rel=0.05)


CALCULON_RUN = """
import json, logging, sys
from calculon.llm import Llm
from calculon.network import Network
from calculon.system import System
system = System(json.load(open(sys.argv[1])))
nets = json.load(open(sys.argv[1]))["networks"]
exe = json.load(open(sys.argv[2]))
m = Llm(Llm.Application(json.load(open(sys.argv[3]))), logging.getLogger())
m.compile(system, Llm.Execution.from_json(exe))
m.run(system)
print(json.dumps({"sizes": [n.size for n in system.networks],
                  "ar8": Network(nets[0]).time("all_reduce", 1 << 26, 8),
                  "total": m.get_stats_json(False)["total_time"]}))
"""
CALCULON_EXECUTION = {  # keys and types of Calculon's examples/3072_t4_p64_d12_mbs4_full.json
    "num_procs": 32, "tensor_par": 8, "pipeline_par": 4, "data_par": 1, "tensor_par_net": 0,
    "pipeline_par_net": 1, "data_par_net": 1, "batch_size": 64, "microbatch_size": 1,
    "datatype": "float16", "fused_activation": True, "attention_type": "multihead",
    "activation_recompute": "full", "pipeline_interleaving": 1, "optimizer_sharding": False,
    "tensor_par_comm_type": "rs_ag", "tensor_par_overlap": "none", "seq_par_ag_redo": False,
    "data_par_overlap": False, "weight_offload": False, "activations_offload": False,
    "optimizer_offload": False, "training": True,
}  # fmt: skip


@pytest.mark.consumers
def test_calculon_runs_an_llm_step_on_the_export(tmp_path):
    """Calculon itself (a checkout: COMMBENCH_CALCULON_SRC, run by the consumers venv's Python)
    loads the system file filled into its own systems/h100_80g_nvl8.json and runs megatron-22B
    TP8 PP4 on 32 NPUs; its all-reduce time is commbench's ring link model, alpha once."""
    src, python = (
        os.environ.get("COMMBENCH_CALCULON_SRC"),
        os.environ.get("COMMBENCH_CONSUMERS_PYTHON"),
    )
    if not (src and python):
        pytest.skip("no Calculon: set COMMBENCH_CALCULON_SRC and COMMBENCH_CONSUMERS_PYTHON")
    out, exe = tmp_path / "system.json", tmp_path / "exe.json"
    base = Path(src) / "systems" / "h100_80g_nvl8.json"
    assert (
        _export("calculon", "reference", "--gpus", "32", "--base", str(base), "-o", str(out)) == 0
    )
    exe.write_text(json.dumps(CALCULON_EXECUTION))
    model = Path(src) / "models" / "megatron-22B.json"
    got = subprocess.run(
        [python, "-c", CALCULON_RUN, str(out), str(exe), str(model)], capture_output=True,
        text=True, timeout=300, env={**os.environ, "PYTHONPATH": src},
    )  # fmt: skip
    assert got.returncode == 0, got.stderr[-2000:]
    res = json.loads(got.stdout.strip().splitlines()[-1])
    assert res["sizes"][:2] == [8, 32] and res["total"] > 0
    cal = calibration.load(Path(calibration.__file__).parent / "reference-h100-ib400.json")
    ring = cal.doc["link_table"][0]["models"]["ring"]
    want = ring["alpha_s"] + model_time("ring", "allreduce", 8, 1 << 26, 0, ring["beta_s_per_byte"])
    assert res["ar8"] == pytest.approx(want, rel=1e-9)
