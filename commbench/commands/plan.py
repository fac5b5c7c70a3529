"""Rank parallel configs (TP, CP, EP, DP, PP, micro-batches, ZeRO) for a model on a cluster.

    commbench plan --model llama-70b --gpus 32 --gpus-per-node 8
    commbench plan --model llama-7b --gpus 8 --gpus-per-node 8 --calibration cal.json
    commbench plan --model mixtral-8x7b --gpus 64 --seq-len 65536 --zero-stage 1 --top 5
    commbench plan --model llama-70b --gpus 32 --explain tp8-pp4

Without --calibration the shipped reference calibration is used (H100 SXM on NVSwitch, one
400 Gb/s InfiniBand NIC per GPU, from published numbers: not a measurement; the output says
so). Every config is placed as the suites place it, checked for memory, and its traffic (the
Programs `commbench suite` runs) priced through the calibration; see commbench/plan/ for the
step-time model and its assumptions, which the output states.
"""

from __future__ import annotations

import argparse
import json
import sys

from commbench.commands.argtypes import positive_float, positive_int

HELP = "rank TP/CP/EP/DP/PP configs for a model on a cluster from a calibration"


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("model and cluster")
    g.add_argument(
        "--model",
        required=True,
        help="a preset (commbench list models), PRESET:key=value,... or a new shape",
    )
    g.add_argument("--gpus", type=positive_int, required=True, help="GPUs in the job")
    g.add_argument(
        "--gpus-per-node",
        type=positive_int,
        default=None,
        help="GPUs per node: groups inside a node are intra, across nodes inter "
        "(default: the calibration's device, else 8)",
    )
    g.add_argument(
        "--gpu-memory",
        type=positive_float,
        default=None,
        metavar="GB",
        help="memory per GPU in GB (default: the calibration's device, else 80)",
    )
    g.add_argument(
        "--calibration",
        default=None,
        metavar="FILE",
        help="calibration JSON (commbench fit); default: the shipped reference",
    )
    g.add_argument(
        "--backend", default=None, help="the calibration's backend to use (if it has several)"
    )
    w = p.add_argument_group("workload")
    w.add_argument("--mode", choices=("train", "infer"), default="train", help="(default: train)")
    w.add_argument("--seq-len", type=positive_int, default=None, help="(default: the model's)")
    w.add_argument(
        "--global-batch",
        type=positive_int,
        default=None,
        help="sequences per step (default: 4M tokens for train, 256K for infer)",
    )
    w.add_argument(
        "--micro-batch",
        default="1",
        help="micro-batch sizes to try: 1, 1,2,4 or auto (1,2,4,8) (default: 1)",
    )
    w.add_argument(
        "--zero-stage",
        default=None,
        help="ZeRO stages to try: 0, 1,2,3 or all (default: all for train, 0 for infer)",
    )
    w.add_argument(
        "--distributed-optimizer",
        action="store_true",
        help="Megatron's distributed optimizer: fp32 master weights and Adam moments sharded "
        "over the data-parallel ranks, i.e. --zero-stage 1",
    )
    w.add_argument(
        "--sequence-parallel", action="store_true", help="Megatron sequence parallel with TP"
    )
    w.add_argument(
        "--recompute",
        choices=("none", "selective", "full"),
        default="selective",
        help="activation recomputation (default: selective)",
    )
    w.add_argument(
        "--recompute-modules",
        default=None,
        help="with --recompute selective, what Megatron-Core recomputes (its --recompute-modules,"
        " comma-separated): core_attn, moe_act, layernorm, mla_up_proj, mlp, moe, "
        "shared_experts (default: core_attn; docs/pipeline.md)",
    )
    w.add_argument(
        "--fp8-format",
        choices=("e4m3", "hybrid"),
        default=None,
        help="FP8 training as Megatron's --fp8-format: GEMM inputs cached for the weight "
        "gradient in one byte (default: 16-bit activations)",
    )
    w.add_argument(
        "--framework",
        choices=("megatron", "torchtitan"),
        default="megatron",
        help="whose traffic to price: Megatron-Core's or PyTorch's own parallelism as "
        "torchtitan applies it (docs/frameworks.md; default: megatron)",
    )
    w.add_argument(
        "--pp-schedule",
        choices=("ScheduleGPipe", "Schedule1F1B", "ScheduleInterleaved1F1B"),
        default=None,
        help="with --framework torchtitan: torch.distributed.pipelining's schedule class "
        "(ScheduleInterleaved1F1B with --virtual-stages 2 or more; default: 1F1B, "
        "interleaved with --virtual-stages; docs/frameworks.md)",
    )
    w.add_argument(
        "--cp-comm-type",
        choices=("p2p", "all_gather", "a2a", "a2a+p2p", "torch_allgather", "torch_alltoall"),
        default=None,
        help="context parallelism's form, as Megatron's --cp-comm-type (p2p: the K/V ring; "
        "a2a: Ulysses; a2a+p2p: a2a inside a node, the ring across) or torchtitan's rotate "
        "method (torch_allgather, torch_alltoall); default: the framework's (p2p, "
        "torch_allgather)",
    )
    w.add_argument(
        "--kv-cache-dtype",
        choices=("bf16", "fp8", "int8"),
        default="bf16",
        help="--mode infer: the KV cache's element type, in memory and in decode's HBM reads "
        "(default: bf16)",
    )
    w.add_argument("--grad-dtype", default="float32", help="gradient dtype (default: float32)")
    w.add_argument(
        "--virtual-stages",
        default="1",
        help="interleaved 1F1B depths to try, Megatron's virtual pipeline stages: 1, 1,2,4 "
        "(default: 1, plain 1F1B; each depth must split every stage's layers, pp >= 3)",
    )
    m = p.add_argument_group("time model")
    m.add_argument(
        "--peak-tflops",
        type=positive_float,
        default=None,
        help="dense peak per GPU for compute time (default: the calibration's device; a "
        "measured calibration has none: communication-only ranking)",
    )
    m.add_argument(
        "--mfu", type=positive_float, default=None, help="model FLOPs utilisation (default: 0.4)"
    )
    m.add_argument(
        "--hbm-gbps",
        type=positive_float,
        default=None,
        metavar="GB/S",
        help="memory bandwidth per GPU for --mode infer's decode (default: the calibration's "
        "device, else 3350, H100 SXM)",
    )
    m.add_argument(
        "--overlap-dp",
        action="store_true",
        help="overlap gradient traffic with the backward compute (default: none)",
    )
    m.add_argument(
        "--orders",
        choices=("megatron", "all"),
        default="megatron",
        help="rank orders: Megatron's tp-cp-ep-dp-pp, or every distinct placement",
    )
    m.add_argument(
        "--extrapolate",
        action="store_true",
        help="let predictions extrapolate beyond what the calibration measured (marked)",
    )
    o = p.add_argument_group("output")
    o.add_argument("--top", type=positive_int, default=10, help="configs to show (default: 10)")
    o.add_argument(
        "--show-rejected", action="store_true", help="list the configs that cannot run and why"
    )
    o.add_argument("--json", action="store_true", help="print JSON instead of the table")
    o.add_argument("-o", "--output", default=None, help="also write the full plan as JSON here")
    o.add_argument(
        "--explain",
        default=None,
        metavar="CONFIG",
        help="list one config's Program steps with predicted times (tp8-pp4-dp1 or tp=8,pp=4)",
    )
    from commbench.commands import plan_verify

    plan_verify.add_arguments(p)


def request_from_args(args: argparse.Namespace, cal):
    """A PlanRequest from the flags, the calibration's device filling the defaults."""
    from commbench.plan import request_from_flags

    return request_from_flags(
        cal,
        model=args.model,
        gpus=args.gpus,
        gpus_per_node=args.gpus_per_node,
        gpu_memory_gb=args.gpu_memory,
        seq_len=args.seq_len,
        global_batch=args.global_batch,
        micro_batch=args.micro_batch,
        zero_stage=distributed_optimizer_stage(args),
        sequence_parallel=args.sequence_parallel,
        mode=args.mode,
        peak_tflops=args.peak_tflops,
        mfu=args.mfu,
        recompute=args.recompute,
        recompute_modules=args.recompute_modules,
        fp8=args.fp8_format,
        virtual_stages=args.virtual_stages,
        kv_cache_dtype=args.kv_cache_dtype,
        hbm_gbps=args.hbm_gbps,
        grad_dtype=args.grad_dtype,
        overlap_dp=args.overlap_dp,
        orders=args.orders,
        extrapolate=args.extrapolate,
        backend=args.backend,
        framework=args.framework,
        pp_schedule=args.pp_schedule,
        cp_comm_type=args.cp_comm_type,
    )


def distributed_optimizer_stage(args: argparse.Namespace) -> str | None:
    """--zero-stage as given, or 1 for --distributed-optimizer (which names that stage)."""
    from commbench.errors import UsageError

    if not args.distributed_optimizer:
        return args.zero_stage
    if args.zero_stage not in (None, "1"):
        raise UsageError("--distributed-optimizer is --zero-stage 1; give one of the two")
    return "1"


def main(args: argparse.Namespace) -> int:
    from commbench import plan
    from commbench.commands.plan_text import explain_text, header, rejected_lines, table
    from commbench.results.rundir import write_json_output

    cal = plan.load_calibration(args.calibration)
    req = request_from_args(args, cal)
    out = sys.stdout
    if args.explain:
        ev = plan.explain(req, cal, args.explain)
        doc = plan.explain_file(req, cal, ev).to_json()
        if args.output:
            write_json_output(args.output, doc)
        if args.json:
            json.dump(doc, out, indent=2)
            out.write("\n")
        else:
            explain_text(ev, req, cal, out)
        unpriced = [f"cannot price {n}: {e.error}" for n, e in ev.estimates.items() if e.error]
        if unpriced:
            from commbench.errors import UsageError

            raise UsageError(f"--explain {args.explain}: {unpriced[0]}")
        return 0
    if args.verify and args.calibration is None:
        import dataclasses

        # the reference only bounds --verify's quick sweep (memory, sizes): any backend prices
        req = dataclasses.replace(req, backend=None)
    result = plan.plan(req, cal)
    if args.verify:
        from commbench.commands import plan_verify

        return plan_verify.main(args, req, cal, result)
    if args.output:
        write_json_output(args.output, result.plan_file().to_json())
    if args.json:
        json.dump(result.plan_file(args.top).to_json(), out, indent=2)
        out.write("\n")
        return 0
    header(result, out)
    table(result, args.top, out)
    if args.show_rejected:
        rejected_lines(result, out)
    if args.output:
        out.write(f"plan: {args.output}\n")
    return 0
