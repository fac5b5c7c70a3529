"""What `commbench trace` prints and writes: the text summary, the --json object (the issue's
schema: `ops` rows, per-axis totals, comm_share, exposed_share) and the --emit-suite file that
replays the traced communication with `commbench suite` (pattern collectives, one run per
distinct op, size, group size and placement)."""

from __future__ import annotations

import io
from pathlib import Path

from commbench.dtypes import DTYPE_SIZES
from commbench.sizes import format_size
from commbench.tables import Column, Table
from commbench.trace.ops import CommOp
from commbench.trace.stats import Stats


def op_row(op: CommOp) -> dict:
    """One `ops` row of --json: null where the trace does not say."""
    return {
        "rank": op.rank,
        "op": op.op,
        "bytes": op.bytes,
        "dtype": op.dtype,
        "group_ranks": list(op.group_ranks) if op.group_ranks is not None else None,
        "axis": op.axis,
        "duration_us": round(op.duration_us, 3),
        "algorithm": op.algorithm,
        "protocol": op.protocol,
        "step": op.step,
        "phase": op.phase,
        "start_us": round(op.start_us, 3),
        "predicted_us": None if op.predicted_us is None else round(op.predicted_us, 3),
    }


def as_json(ops: list[CommOp], st: Stats, head: dict, findings: list[str]) -> dict:
    return {
        **head,
        "ops": [op_row(o) for o in ops],
        "axes": {a: t.as_json() for a, t in sorted(st.axes.items())},
        "phases": {f"{a}/{p}": t.as_json() for (a, p), t in sorted(st.phases.items())},
        "steps": st.steps,
        "step_us": round(st.step_us, 3),
        "comm_share": None if st.comm_share is None else round(st.comm_share, 6),
        "exposed_share": None if st.exposed_share is None else round(st.exposed_share, 6),
        "skew": st.skew[:20],
        "calibration": calibration_summary(ops),
        "findings": findings,
    }


def calibration_summary(ops: list[CommOp]) -> dict | None:
    """Each rated op's time as % of its prediction, and the whole step's: the rated ops' times
    summed per rank and step against their predictions summed (the mean over ranks and
    steps), as `plan --explain` adds a step's priced ops."""
    rated = [o for o in ops if o.predicted_us]
    if not rated:
        return None
    pct = sorted(100 * o.duration_us / (o.predicted_us or 1) for o in rated)
    per: dict[tuple, list[float]] = {}
    for o in rated:
        got = per.setdefault((o.rank, o.step), [0.0, 0.0])
        got[0] += o.duration_us
        got[1] += o.predicted_us or 0.0
    n = len(per)
    return {
        "ops_rated": len(rated),
        "median_pct": round(pct[len(pct) // 2], 1),
        "min_pct": round(pct[0], 1),
        "max_pct": round(pct[-1], 1),
        "step_traced_us": round(sum(v[0] for v in per.values()) / n, 3),
        "step_predicted_us": round(sum(v[1] for v in per.values()) / n, 3),
    }


PHASES = (
    Column("axis", "", 8),
    Column("phase", "", 10),
    Column("count", "", 6),
    Column("bytes", "", 10),
    Column("time", "(ms)", 10, ".3f"),
    Column("exposed", "(ms)", 10, ".3f"),
    Column("busbw", "(GB/s)", 10, ".3f"),
)


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"


def text(ops: list[CommOp], st: Stats, head: dict, findings: list[str]) -> str:
    lines = [f"# trace: {head['files']} file(s), world {head['world']}, backend {head['backend']}"]
    lines.append(f"# layout: {head['layout'] or 'unknown'} ({head['layout_how']})")
    lines += [f"# note: {n}" for n in head["notes"]]
    lines.append(
        f"# steps {st.steps or 'none marked'}: comm {_pct(st.comm_share)} of the step, "
        f"exposed {_pct(st.exposed_share)} ({st.step_us / 1e3:.2f} ms of steps over all ranks)"
    )
    buf = io.StringIO()
    table = Table(PHASES, buf)
    table.header()
    for (axis, phase), t in sorted(st.phases.items()):
        table.row(axis, phase, t.count, format_size(t.bytes) if t.sized else None,
                  t.time_us / 1e3, t.exposed_us / 1e3, t.busbw_gbps)  # fmt: skip
    lines += buf.getvalue().splitlines()
    if st.skew:
        s = st.skew[0]
        lines.append(f"# most skewed: {s['op']} on {s['axis']} group {s['group_ranks']}: rank "
                     f"{s['slowest_rank']} started {s['skew_us']:.0f} us after the first")  # fmt: skip
    cal = calibration_summary(ops)
    if cal:
        lines.append(
            f"# calibration: {cal['ops_rated']} ops rated, median {cal['median_pct']:.0f}% of the "
            f"predicted time (min {cal['min_pct']:.0f}%, max {cal['max_pct']:.0f}%); a step's "
            f"rated ops take {cal['step_traced_us'] / 1e3:.3f} ms against "
            f"{cal['step_predicted_us'] / 1e3:.3f} ms predicted (per rank and step, summed)"
        )
    lines += [f"# finding: {f}" for f in findings]
    if not findings:
        lines.append("# no finding: nothing on the checklist fired")
    return "\n".join(lines)


def suite_runs(ops: list[CommOp], world: int) -> tuple[list[dict], list[str]]:
    """One collectives run per distinct (op, S, dtype, group size, placement) of rank order
    ops; groups neither contiguous nor world/g apart are replayed contiguous (said so)."""
    seen: dict[tuple, int] = {}
    skipped = []
    for o in ops:
        if o.bytes is None or not o.group_ranks or o.op == "barrier":
            skipped.append(f"rank {o.rank} op {o.seq} {o.op}: size or group unknown")
            continue
        g = sorted(o.group_ranks)
        p = len(g)
        steps = {b - a for a, b in zip(g, g[1:])}
        strided = 1 < p < world and steps == {world // p}
        placement = "strided" if strided else "contiguous"
        dtype = o.dtype if o.dtype in DTYPE_SIZES else ("float32" if o.bytes % 4 == 0 else "int8")
        key = (o.op, o.bytes, dtype, p, placement, o.axis)
        seen[key] = seen.get(key, 0) + 1
    runs = []
    for (op, nbytes, dtype, p, placement, axis), n in sorted(seen.items(), key=str):
        runs.append({
            "pattern": "collectives",
            "name": f"trace-{axis or 'group'}-{op}-{nbytes}B-p{p}-x{n}",
            "options": {"ops": [op], "min_bytes": nbytes, "max_bytes": nbytes, "factor": 2,
                        "group_sizes": [p], "placements": [placement], "dtype": dtype},
        })  # fmt: skip
    return runs, skipped


def write_suite(path: str, ops: list[CommOp], world: int, source: str) -> tuple[int, list[str]]:
    """Write the suite file (YAML is a superset of JSON: written as JSON, read by load_suite)."""
    import json

    runs, skipped = suite_runs(ops, world)
    doc = {
        "description": f"replay of the communication traced in {source} (commbench trace)",
        "runs": runs,
    }
    try:
        Path(path).write_text(json.dumps(doc, indent=2) + "\n")
    except OSError as e:
        from commbench.errors import UsageError

        raise UsageError(f"--emit-suite {path}: cannot write ({e.strerror or e})") from None
    return len(runs), skipped
