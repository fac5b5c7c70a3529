"""`commbench plan`'s text output: the header, the ranked table (training or inference), the
rejected configs and `--explain`'s Program steps."""

from __future__ import annotations


def _s(v) -> str:
    return "-" if v is None else f"{v:.4g}"


def placement_text(place: dict) -> str:
    """`tp8:i pp4:x`: group size and i(ntra)/x (inter) per axis."""
    return " ".join(
        f"{a}{d['size']}:{'i' if d['link_class'] == 'intra' else 'x'}"
        for a, d in place.items()
        if a in ("tp", "cp", "ep", "pp", "dp", "dp-cp", "edp") and d["size"] > 1
    )


def recompute_text(req) -> str:
    """`selective (core_attn,moe_act), fp8 e4m3`: the recompute and what it keeps in FP8."""
    text = req.recompute
    if req.recompute_modules:
        text += f" ({','.join(req.recompute_modules)})"
    return text + (f", activations fp8 {req.fp8}" if req.fp8 else "")


def header(result, out) -> None:

    req, cal = result.request, result.calibration
    pc = req.model.param_counts()
    w = out.write
    w(
        f"# commbench plan: {req.model.name} ({pc.total / 1e9:.2f}B params, {pc.active / 1e9:.2f}B "
        f"active) on {req.gpus} GPUs ({req.num_nodes} node(s) x {min(req.gpus, req.gpus_per_node)}"
        f"), {req.mode}\n"
    )
    kind = (
        "REFERENCE (published H100 + 400 Gb/s IB numbers; not a measurement of your cluster)"
        if cal.kind == "reference"
        else "measured"
    )
    w(f"# calibration: {cal.source} [{kind}]\n")
    w(
        f"# workload: seq {req.seq}, global batch {req.batch} seqs ({req.batch * req.seq:,} "
        f"tokens), micro-batch {','.join(map(str, req.micro_batch_sizes))}, ZeRO "
        f"{','.join(map(str, req.zero_stages))}, SP {'on' if req.sequence_parallel else 'off'}, "
        f"recompute {recompute_text(req)}, {req.gpu_memory_gb:g} GB per GPU\n"
    )
    for a in result.assumptions:
        w(f"# assumption: {a}\n")
    c = result.counts
    w(
        f"# {c['candidates']} candidate(s): {c['valid']} valid, {c['fit_memory']} fit in memory, "
        f"{c['ranked']} ranked, {c['rejected']} rejected"
        + ("" if c["rejected"] == 0 else " (--show-rejected says why)")
        + "\n"
    )


def infer_table(result, top: int, out) -> None:
    """--mode infer: prefill latency, time per output token and throughput per config."""
    from commbench.tables import Column, Table

    t = Table(
        [
            Column("rank", "", 5),
            Column("config", "", 22),
            Column("placement", "(i=intra x=inter)", 24),
            Column("mem", "(GB)", 6, ".1f"),
            Column("prefill", "(s)", 8),
            Column("TPOT", "(ms)", 8),
            Column("tok/s/GPU", "", 9, ".1f"),
            Column("HBM", "(ms)", 7),
            Column("tp", "(ms)", 7),
            Column("cp", "(ms)", 7),
            Column("ep", "(ms)", 7),
            Column("pp", "(ms)", 7),
            Column("comm", "(%)", 5),
            Column("flag", "", 6),
        ],
        out,
    )
    for e in result.ranked[:top]:
        inf, d = e.inference.as_dict(), e.inference.decode
        mem_s = inf["decode_memory_s"]
        t.row(
            e.rank,
            e.config.label + ("" if e.config.order == result.ranked[0].config.order else "@"),
            placement_text(e.placement) or "-",
            e.memory["total"] / 1e9,
            _s(inf["prefill_s"]),
            _s(1e3 * inf["tpot_s"]),
            inf["tokens_per_s_per_gpu"],
            "-" if mem_s is None else _s(1e3 * mem_s),
            *(_s(1e3 * d.in_layer.get(a, 0.0)) for a in ("tp", "cp", "ep")),
            _s(1e3 * d.pipeline),
            "-" if d.comm_share is None else f"{100 * d.comm_share:.0f}",
            ("COMM" if e.comm_bound else "") + ("*" if e.extrapolated else ""),
        )
    out.write(
        "# prefill: one replica's prompts; TPOT: time per output token of every sequence of the "
        "batch; HBM: the decode step's weight and KV-cache reads; tp/cp/ep/pp: the decode step's "
        "communication\n"
    )
    for line in result.findings:
        out.write(f"# finding: {line}\n")


def table(result, top: int, out) -> None:
    from commbench.tables import Column, Table

    if result.request.mode == "infer":
        infer_table(result, top, out)
        return

    t = Table(
        [
            Column("rank", "", 5),
            Column("config", "", 22),
            Column("b", "", 2),
            Column("m", "", 5),
            Column("z", "", 1),
            Column("placement", "(i=intra x=inter)", 24),
            Column("mem", "(GB)", 6, ".1f"),
            Column("compute", "(s)", 8),
            Column("bubble", "(s)", 8),
            Column("tp", "(s)", 8),
            Column("cp", "(s)", 8),
            Column("ep", "(s)", 8),
            Column("pp", "(s)", 8),
            Column("dp", "(s)", 8),
            Column("step", "(s)", 8),
            Column("comm", "(%)", 5),
            Column("flag", "", 6),
        ],
        out,
    )
    ties = tied_with_first(result.ranked[:top])
    for e in result.ranked[:top]:
        c, ti = e.config, e.times
        flags = ("COMM" if e.comm_bound else "") + ("*" if e.extrapolated else "")
        flags += "~" if e.rank in ties else ""
        t.row(
            e.rank,
            c.label + ("" if c.order == result.ranked[0].config.order else "@"),
            c.micro_batch,
            c.micro_batches,
            c.zero_stage,
            placement_text(e.placement) or "-",
            e.memory["total"] / 1e9,
            _s(ti["compute"]),
            _s(ti["bubble"]),
            _s(ti["tp"]),
            _s(ti["cp"]),
            _s(ti["ep"]),
            _s(ti["pp"]),
            _s(ti["dp_exposed"]),
            _s(e.step_s),
            "-" if e.comm_share is None else f"{100 * e.comm_share:.0f}",
            flags,
        )
    out.write(
        "# times per step per GPU: tp/cp/ep/pp/dp = predicted communication (pp: messages on "
        "the 1F1B critical path; dp: exposed gradient traffic); bubble = idle pipeline time\n"
    )
    out.write(
        "# flag COMM: communication > 30% of the step; *: a prediction extrapolated beyond the "
        "calibration; ~: within the band of #1's step; @: not the Megatron rank order (see "
        "--json for the order)\n"
    )
    first = result.ranked[0] if result.ranked else None
    if first is not None and first.step_band_s is not None:
        lo, hi = first.step_band_s
        out.write(
            f"# band: #1's step {_s(first.step_s)} s lies between {_s(lo)} and {_s(hi)} s, its "
            "ops over more nodes than the calibration measured at their band's ends"
            + (
                f"; {len(ties)} config(s) ranked below it reach into that band (~): the "
                "calibration cannot order them, measure at the target's node count"
                if ties
                else "; no config below it reaches into that band"
            )
            + "\n"
        )
    notes = sorted({n for e in result.ranked[:top] for n in e.notes})
    for n in notes:
        out.write(f"# note: {n}\n")
    for line in result.findings:
        out.write(f"# finding: {line}\n")


def tied_with_first(ranked: list) -> set[int]:
    """Ranks below #1 whose step (its band's low end, where it has one) is within #1's band:
    configs the calibration's uncertainty cannot put behind #1."""
    if not ranked or ranked[0].step_band_s is None:
        return set()
    top_hi = ranked[0].step_band_s[1]
    return {
        e.rank
        for e in ranked[1:]
        if (e.step_band_s[0] if e.step_band_s is not None else e.step_s) <= top_hi
    }


def rejected_lines(result, out) -> None:
    out.write(f"# rejected ({len(result.rejected)}):\n")
    for c in result.rejected:
        out.write(f"  {c.config.full_label:<36} {c.stage:<8} {'; '.join(c.reasons)}\n")


def inference_lines(ev, w) -> None:
    """--explain in inference: prefill latency, TPOT and throughput, and what bounds decode."""
    inf = ev.inference.as_dict()
    d = ev.inference.decode
    comm = {a: v for a, v in {**d.in_layer, "pp": d.pipeline}.items() if v}
    w(
        f"# inference at batch {inf['batch']}: prefill {_s(inf['prefill_s'])} s, TPOT "
        f"{_s(1e3 * inf['tpot_s'])} ms, {inf['tokens_per_s']:.4g} tokens/s "
        f"({inf['tokens_per_s_per_gpu']:.4g} per GPU)\n"
    )
    if inf["decode_memory_s"] is not None:
        bound = "HBM reads" if inf["decode_memory_s"] >= inf["decode_flops_s"] else "FLOPs"
        w(
            f"# decode pass: weights + KV-cache reads {_s(1e3 * inf['decode_memory_s'])} ms, "
            f"FLOPs {_s(1e3 * inf['decode_flops_s'])} ms (compute bound by {bound}); "
            "communication "
            + (", ".join(f"{a} {_s(1e3 * v)} ms" for a, v in comm.items()) or "none")
            + "\n"
        )


def axis_bands(ev) -> dict[str, tuple[float, float, float]]:
    """Per axis whose priced ops carry a band (groups spanning more nodes than measured):
    (their total seconds, the sum of the bands' low ends, of their high ends)."""
    out: dict[str, tuple[float, float, float]] = {}
    for est in ev.estimates.values():
        for s in est.steps:
            if s.band_s is not None and s.total_s is not None:
                t, lo, hi = out.get(s.axis, (0.0, 0.0, 0.0))
                out[s.axis] = (t + s.total_s, lo + s.band_s[0], hi + s.band_s[1])
    return out


def explain_text(ev, req, cal, out) -> None:
    from commbench.calibration.band import plan_note
    from commbench.sizes import format_size
    from commbench.traffic import patterns
    from commbench.traffic.patterns import Role

    w = out.write
    c = ev.config
    step_s = None if any(e.error for e in ev.estimates.values()) else ev.step_s
    w(
        f"# commbench plan --explain: {c.full_label} for {req.model.name} on {req.gpus} GPUs "
        f"({req.num_nodes} node(s)); calibration {cal.source} [{cal.kind}]\n"
    )
    for line in ev.chosen:
        w(f"# chose: {line}\n")
    if not ev.fits:
        w(
            f"# NOTE: does not fit in {req.gpu_memory_gb:g} GB per GPU "
            f"(needs {ev.memory['total'] / 1e9:.1f} GB)\n"
        )
    w(
        "# placement: "
        + ", ".join(
            f"{a} size {d['size']} {d['link_class']} ({d['hosts_spanned']} host(s), stride "
            f"{d['stride']})"
            for a, d in ev.placement.items()
        )
        + "\n"
    )
    bands = axis_bands(ev)
    for a, d in ev.placement.items():
        if a in bands:
            t, lo, hi = bands[a]
            w(
                f"# band: {a} communication {_s(t)} s, between {_s(lo)} and {_s(hi)} s: its "
                f"groups span {d['hosts_spanned']} hosts, more than its {d['link_class']} link "
                "was measured at (each op's band, calibration/band.py)\n"
            )
        elif note := plan_note(cal.doc, a, d["link_class"], d["hosts_spanned"]):
            w(f"# band: {note}\n")
    w(
        "# memory per GPU (GB): "
        + ", ".join(f"{k} {v / 1e9:.2f}" for k, v in ev.memory.items())
        + "\n"
    )
    if ev.inference is not None:
        inference_lines(ev, w)
    w(
        ("# decode pass (s): " if ev.inference is not None else "# time per step (s): ")
        + ", ".join(f"{k} {_s(v)}" for k, v in {**ev.times, "step": step_s}.items())
        + (
            ""
            if ev.comm_share is None
            else f"; communication {100 * ev.comm_share:.1f}% of the step"
            + (" (communication-bound)" if ev.comm_bound else "")
        )
        + "\n"
    )
    for name, est in ev.estimates.items():
        w(
            f"\n## {name}: {len(est.steps)} step(s), {_s(est.total_s)} s"
            + (
                f" (1F1B makespan with compute; messages on the critical path {_s(est.comm_s)} s)"
                if patterns.get(name).role is Role.PIPELINE
                else ""
            )
            + "\n"
        )
        w(
            f"#   {'#':>3} {'phase':<16} {'op':<14} {'axis':<6} {'group':>5} {'link':<5} "
            f"{'bytes':>10} {'repeat':>8} {'per op (us)':>12} {'total (s)':>10} "
            f"{'comm (s)':>10}  method\n"
        )
        for s in est.steps:
            per = "-" if s.per_op_s is None else f"{s.per_op_s * 1e6:.2f}"
            w(
                f"    {s.index:>3} {s.phase:<16} {s.op:<14} {s.axis:<6} {s.group_size:>5} "
                f"{s.link_class:<5} {format_size(s.nbytes):>10} {s.repeat:>8g} {per:>12} "
                f"{_s(s.total_s):>10} {_s(s.comm_s):>10}  {s.error or s.method}"
                + (" [extrapolated]" if s.extrapolated else "")
                + (f" ({'; '.join(s.notes)})" if s.notes else "")
                + "\n"
            )
