"""The traced step beside `commbench plan --explain` of the same config: with `--model`, the
planner prices the job's layout for that model on the same world (plan's own defaults for
batch, sequence and ZeRO, and its flags' meaning: `--calibration`, else the reference), and
the traced communication per axis and share of the step is set against the prediction."""

from __future__ import annotations

from commbench.trace.stats import Stats

AXES = ("tp", "cp", "ep", "pp", "dp")


def traced_per_step(st: Stats) -> dict[str, float]:
    """Seconds of each axis's ops a rank spends in one step (mean over ranks and steps)."""
    n = max(1, len(st.windows))
    out = {a: 0.0 for a in AXES}
    for axis, t in st.axes.items():
        key = "dp" if axis in ("dp", "edp", "world") else axis
        if key in out:
            out[key] += t.time_us / 1e6 / n
    return out


def compare(model: str, world: int, gpus_per_node: int, calibration: str | None,
            layout: str, st: Stats, framework: str = "megatron") -> dict:  # fmt: skip
    """`plan --explain LAYOUT` for MODEL on WORLD GPUs against the trace (a dict for --json),
    the traffic priced as `framework` makes it (plan --framework)."""
    from commbench import plan
    from commbench.cli import Parser
    from commbench.commands import plan as plan_cmd

    parser = Parser(prog="commbench plan")
    plan_cmd.add_arguments(parser)
    argv = ["--model", model, "--gpus", str(world), "--gpus-per-node", str(gpus_per_node),
            "--framework", framework]  # fmt: skip
    args = parser.parse_args(argv + (["--calibration", calibration] if calibration else []))
    cal = plan.load_calibration(args.calibration)
    ev = plan.explain(plan_cmd.request_from_args(args, cal), cal, layout)
    predicted = {a: ev.times.get(a) or 0.0 for a in AXES}
    traced = traced_per_step(st)
    return {
        "config": ev.config.label,
        "model": model,
        "priced_as": framework,
        "calibration": cal.source,
        "predicted_s": {a: round(v, 6) for a, v in predicted.items()},
        "traced_s": {a: round(v, 6) for a, v in traced.items()},
        "predicted_comm_share": ev.comm_share,
        "traced_comm_share": st.comm_share,
    }


def text(cmp: dict) -> str:
    axes = [a for a in AXES if cmp["predicted_s"][a] or cmp["traced_s"][a]]
    parts = ", ".join(
        f"{a} {1e3 * cmp['traced_s'][a]:.3f} ms traced / {1e3 * cmp['predicted_s'][a]:.3f} ms "
        "predicted"
        for a in axes
    )
    p, t = cmp["predicted_comm_share"], cmp["traced_comm_share"]
    share = (
        f"; comm {100 * t:.1f}% of the step traced / {100 * p:.1f}% predicted" if p and t else ""
    )
    return (f"# plan --explain {cmp['config']} ({cmp['model']}, {cmp['priced_as']}, "
            f"{cmp['calibration']}): "
            f"per step and rank {parts or 'no communication'}{share}")  # fmt: skip
