"""Export a calibration to a simulator's or planner's input.

    commbench export astra-sim cal.json -o network.yml
    commbench export calculon cal.json --base h100_80g_nvl8.json -o system.json
    commbench export simai cal.json --model llama-7b --gpus 8 --config tp=2,dp=4 -o simai/
    commbench export galvatron cal.json --gpus 16 -o hardware_configs/
    commbench export llm-analysis cal.json --base h100-sxm-80gb.json -o gpu.json

CAL is a calibration from `commbench fit`, or `reference` for the shipped one. ASTRA-sim and
Calculon get one dimension (tier) per link class from the link table's best algorithm model,
llm-analysis its intra/inter bandwidth and latency; SimAI a config's step Program with the bus
bandwidths its ops get, Galvatron its all-reduce and p2p profiles (both priced as `plan` prices).
What the target cannot express is listed in the output. A link line (the one alpha-beta per
link the export writes, not the per-op terms `plan` prices from) that misses its measured
points by a median over 25% is refused without --force where the export carries it (not
galvatron).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from commbench.commands.argtypes import positive_int

HELP = "export a calibration for ASTRA-sim, Calculon, SimAI, Galvatron or llm-analysis"
FORMATS = ("astra-sim", "calculon", "simai", "galvatron", "llm-analysis")
DIRECTORY_OUTPUT = ("simai", "galvatron")  # -o names a directory: several files


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("format", choices=FORMATS, help="target")
    p.add_argument("calibration", metavar="CAL", help="calibration JSON, or 'reference'")
    p.add_argument(
        "-o", "--output", default=None, help="output file; a directory for simai and galvatron"
    )
    p.add_argument("--backend", default=None, help="which backend's link table to export")
    p.add_argument("--timing", default=None, help="which timing mode's link table to export")
    p.add_argument(
        "--npus",
        default=None,
        help="NPUs per dimension, e.g. intra=8,inter=4 (default: ranks per node and nodes of "
        "the runs, virtual nodes included; the reference: its GPUs per node and 2 nodes)",
    )
    p.add_argument(
        "--gpus", type=positive_int, default=None, help="NPUs of the exported system in all"
    )
    p.add_argument(
        "--force", action="store_true", help="export a link model with a large error (warns)"
    )
    p.add_argument(
        "--topology",
        default=None,
        help="astra-sim: topology per dimension, e.g. intra=Switch,inter=Switch "
        "(default: from the best model: ring=Ring, pairwise=FullyConnected, tree=Switch)",
    )
    p.add_argument(
        "--base",
        type=Path,
        default=None,
        help="calculon: the system JSON to fill in; llm-analysis: the GPU config to fill in",
    )
    g = p.add_argument_group("simai: the training step")
    g.add_argument("--model", default=None, help="a preset (commbench list models) or shape")
    g.add_argument("--config", default=None, help="the config, e.g. tp=2,dp=4 or tp8-pp4-z0")
    g.add_argument("--seq-len", type=positive_int, default=None, help="(default: the model's)")
    g.add_argument("--global-batch", type=positive_int, default=None, help="sequences per step")
    g.add_argument("--sequence-parallel", action="store_true", help="Megatron sequence parallel")
    p.add_argument(
        "--message-size",
        default=None,
        help="galvatron: the message the bandwidths are priced at (default: 64M)",
    )


def _positive(text: str) -> int:
    value = int(text)
    if value < 2:
        raise ValueError(text)
    return value


def _only_exported(flag: str, given: dict, chosen) -> None:
    """A per-link flag naming a link class the export does not have is a typo, not a no-op."""
    from commbench.errors import UsageError

    exported = [t.link_class for t in chosen]
    unknown = sorted(set(given) - set(exported))
    if unknown:
        raise UsageError(
            f"{flag} {unknown[0]}: not a link class of the exported link table "
            f"(it has {', '.join(exported)})"
        )


def _only_for(args: argparse.Namespace) -> None:
    """Flags of one format given to another are mistakes: say so."""
    from commbench.errors import UsageError

    owners = {
        "base": ("calculon", "llm-analysis"),
        "topology": ("astra-sim",),
        "model": ("simai",),
        "config": ("simai",),
        "seq_len": ("simai",),
        "global_batch": ("simai",),
        "sequence_parallel": ("simai",),
        "message_size": ("galvatron",),
    }
    for name, formats in owners.items():
        if getattr(args, name) not in (None, False) and args.format not in formats:
            raise UsageError(f"--{name.replace('_', '-')} is for {' and '.join(formats)}")
    if args.format in ("calculon", "llm-analysis") and args.base is None:
        example = "h100_80g_nvl8.json" if args.format == "calculon" else "h100-sxm-80gb.json"
        raise UsageError(
            f"{args.format} needs --base: its own system file (e.g. {example}), whose compute "
            "and memory commbench does not measure; the export fills in the network"
        )
    if args.format == "simai" and not (args.model and args.config):
        raise UsageError("simai needs --model and --config (e.g. --model llama-7b --config tp=2)")
    if args.format in DIRECTORY_OUTPUT and not args.output:
        raise UsageError(f"{args.format} writes several files: pass -o DIRECTORY")


def _pricer(cal, backend: str | None):
    """(op, S, p, link) -> seconds, as plan prices a message (extrapolating where needed)."""

    def price(op: str, nbytes: int, p: int, link: str) -> float:
        return cal.predict(op, nbytes, p, link, backend=backend, extrapolate=True)

    return price


def _simai(args, cal, chosen) -> tuple[dict[str, str], list[str], str]:
    """workload.txt and busbw.yaml for the config's step, and SimAI's command line."""
    from commbench import plan
    from commbench.errors import UsageError
    from commbench.formats import simai
    from commbench.formats.exportbase import cluster

    gpus = args.gpus or cluster(cal).gpus
    if gpus is None:
        raise UsageError(f"{cal.source} does not say how many GPUs: pass --gpus N")
    req = plan.request_from_flags(
        cal, model=args.model, gpus=gpus,
        gpus_per_node=cluster(cal, args.gpus).per_node, gpu_memory_gb=None,
        seq_len=args.seq_len, global_batch=args.global_batch, micro_batch="1",
        zero_stage=None, sequence_parallel=args.sequence_parallel, mode="train",
        peak_tflops=None, mfu=None, recompute="selective", grad_dtype="float32",
        overlap_dp=False, orders="megatron", extrapolate=True, backend=args.backend,
    )  # fmt: skip
    from commbench.plan import verify

    cfg = plan.explain(req, cal, args.config).config
    planner = plan.Planner(req, cal, exact=True)
    layout = cfg.layout(req.gpus, ())  # planner.where places it from the strides
    step = verify.step_program(req, cfg)  # the Program `suite step` measures
    steps = [st for st in step.steps if st.schedule is None]
    pp_bytes = max((a.nbytes for st in step.steps for acts in st.schedule or () for a in acts
                    if a.kind == "send"), default=0)  # fmt: skip
    rows, notes = simai.rows(steps)
    text = simai.workload_text(
        rows, tp=cfg.tp, ep=cfg.ep, pp=cfg.pp, micro_batches=cfg.micro_batches,
        gpus=req.gpus, pp_bytes=pp_bytes,
    )  # fmt: skip
    placed = planner.where(layout)

    def where(axis: str) -> tuple[int, str]:
        size, link, _ = placed(axis)  # (group size, link class, hosts spanned)
        return size, link

    yaml_text = simai.busbw_yaml(
        steps, where, _pricer(cal, args.backend), pp_bytes, where("pp") if cfg.pp > 1 else None
    )
    by = {t.link_class: t for t in chosen}
    nv = by["intra"].busbw_Bps / simai.GIB if "intra" in by else None
    nic = by["inter"].busbw_Bps / simai.GIB if "inter" in by else None
    per_node = req.gpus_per_node
    cmd = (f"SimAI_analytical -w workload.txt -g {req.gpus} -g_p_s {per_node} -n_p_s {per_node}"
           + (f" -nv {nv:.6g}" if nv else "") + (f" -nic {nic:.6g}" if nic else "")
           + f" -r {cfg.label}-")  # fmt: skip
    notes += [
        f"config {cfg.full_label}: {len(rows)} rows from the step Program (suite step's, "
        f"{len(step.steps)} steps)",
        "context parallelism, broadcasts and the 1F1B schedule are not expressible: SimAI "
        "prices pipeline messages as 2 x vpp x ga x pp_comm / PP busbw and the bubble itself",
        "compute times are 1 ns (commbench has no per-layer compute); -nic assumes one NIC per "
        "GPU (-n_p_s = GPUs per node), as commbench measures per-rank inter bandwidth",
        "busbw.yaml is for SimAI versions with -busbw; the current binary takes -nv/-nic",
    ]
    return {"workload.txt": text, "busbw.yaml": yaml_text}, notes, cmd


def main(args: argparse.Namespace) -> int:
    from commbench import plan
    from commbench.errors import UsageError
    from commbench.formats import astra_sim, calculon, galvatron, llm_analysis
    from commbench.formats.exportbase import check_error, cluster, parse_assignments, tiers
    from commbench.sizes import parse_size

    _only_for(args)
    cal = plan.load_calibration(None if args.calibration == "reference" else args.calibration)
    npus = parse_assignments(args.npus, "--npus", _positive)
    chosen = tiers(cal, args.backend, args.timing, npus, args.gpus)
    _only_exported("--npus", npus, chosen)
    # galvatron's profiles are priced per op as plan prices; the others carry the link model
    warnings = [] if args.format == "galvatron" else check_error(chosen, args.force)
    files: dict[str, str] = {}
    cmd = None
    if args.format == "astra-sim":
        topo = parse_assignments(args.topology, "--topology")
        _only_exported("--topology", topo, chosen)
        bad = [v for v in topo.values() if v not in astra_sim.TOPOLOGIES]
        if bad:
            raise UsageError(
                f"--topology {bad[0]!r}: choose from {', '.join(astra_sim.TOPOLOGIES)}"
            )
        text, notes = astra_sim.export(cal, chosen, topo)
    elif args.format == "calculon":
        text, notes = calculon.export(cal, chosen, calculon.read_base(args.base))
    elif args.format == "llm-analysis":
        name = f"commbench-{Path(cal.source).stem}"
        text, notes = llm_analysis.export(chosen, llm_analysis.read_base(args.base), name)
    elif args.format == "simai":
        files, notes, cmd = _simai(args, cal, chosen)
    else:
        where = cluster(cal, args.gpus)
        if not where.per_node or not where.nodes:
            raise UsageError(f"{cal.source} does not say its nodes: pass --gpus N")
        nbytes = parse_size(args.message_size or "64M", "--message-size")
        files = galvatron.export(where.nodes, where.per_node, nbytes, _pricer(cal, args.backend))
        notes = [f"bandwidths priced at {nbytes} B messages on {where.nodes} node(s) of "
                 f"{where.per_node} ({where.source})"]  # fmt: skip
    if cal.kind == "reference" and not args.gpus and "inter" not in npus:
        notes.append("the reference has no cluster size: 2 nodes (pass --gpus or --npus inter=N)")
    for w in warnings:
        print(f"warning: {w}", file=sys.stderr)
    if files:
        out = Path(args.output)
        try:
            out.mkdir(parents=True, exist_ok=True)
            for name, body in files.items():
                (out / name).write_text(body)
        except OSError as e:
            raise UsageError(f"cannot write {out}: {e.strerror or e}") from None
        for n in notes:
            print(f"# not expressed: {n}")
        print(f"wrote {', '.join(str(out / n) for n in files)} ({args.format})")
        if cmd:
            print(f"run: cd {out} && {cmd}")
        return 0
    if args.output:
        out = Path(args.output)
        try:
            out.write_text(text)
        except OSError as e:
            raise UsageError(f"cannot write {out}: {e.strerror or e}") from None
        for n in notes:
            print(f"# not expressed: {n}")
        print(f"wrote {out} ({args.format}, {len(chosen)} dimension(s))")
    else:
        sys.stdout.write(text)
        for n in notes:
            print(f"# not expressed: {n}", file=sys.stderr)
    return 0
