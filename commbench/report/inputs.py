"""What the report draws, taken from runs, a calibration and plan files (records only, no
transport): which runs to show, measured series with their fits, suite points, EP loads,
validation rows and planner configs. Each extractor returns plain data plus what is missing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from commbench.calibration.series_key import SeriesKey
from commbench.errors import UsageError
from commbench.fit.collect import collect
from commbench.report.step_timeline import point_key
from commbench.results.planfile import PlanFile
from commbench.results.records import PointRecord, StepRecord
from commbench.results.rundir import RECORDS, Run, is_run_dir, read_run
from commbench.traffic import patterns
from commbench.traffic.patterns.base import Role, options_label

if TYPE_CHECKING:
    from commbench.calibration import Calibration, SeriesModel

# suite options shown short in labels (as `commbench suite` prints them)


# ---- which runs ----------------------------------------------------------------------------
def run_started(run: Run) -> float:
    """When a run started: meta start_time, else the directory's modification time."""
    t = run.meta.get("start_time")
    return float(t) if isinstance(t, (int, float)) else run.path.stat().st_mtime


def run_kind(run: Run) -> str:
    """What a run measured, so that a newer run of the same kind supersedes an older one:
    `suite NAME`, `run OP p=N`, `import TOOL OP p=N`, plus backend and world size."""
    first = run.records[0] if run.records else {}
    sub = run.meta.get("subcommand") or ("import" if run.meta.get("source") else "run")
    backend = run.meta.get("backend") or first.get("backend", "?")
    world = run.meta.get("world_size") or first.get("world_size", "?")
    where = f"{backend} world {world}"
    if sub == "trace":  # each traced job is its own
        return f"trace {run.path.name}, {where}"
    if sub == "check":  # one kind whatever its first pair's link class
        return f"check, {where}"
    if sub == "suite":
        words = (run.meta.get("command") or "").split()
        name = first.get("suite") or (words[2] if len(words) > 2 else "?")
        return f"suite {name}, {where}"
    if first:
        stride = f" stride {first['stride']}" if first.get("stride") else ""
        what = f"{first.get('op')} p={first.get('group_size')}{stride} {first.get('link_class')}"
        tool = (first.get("source") or {}).get("tool") if sub == "import" else None
        return f"{sub}{' ' + tool if tool else ''} {what}, {where}"
    return f"{sub} (no records) {run.meta.get('command', run.path.name)}"


def check_run_dirs(paths: list[Path]) -> None:
    """Refuse a directory that is not a run, saying so (and when it holds runs, which)."""
    for p in paths:
        if p.is_dir() and not is_run_dir(p):
            inner = sorted(q.name for q in p.iterdir() if q.is_dir() and is_run_dir(q))
            hint = (
                f" (it holds {len(inner)} run(s), e.g. {', '.join(inner[:3])}: pass those, "
                f"or --results {p} for the newest of each kind)"
                if inner
                else ""
            )
            raise UsageError(f"{p}: not a run directory (no records.jsonl or meta.json){hint}")


def select_runs(root: Path, every: bool = False) -> tuple[list[Run], list[str]]:
    """The newest run of each kind under `root` (every run with `every`), newest first, and
    a line per superseded run."""
    if not root.is_dir():
        raise UsageError(f"{root}: no results directory (run `commbench run` or `suite` first)")
    runs = [read_run(p) for p in sorted(root.iterdir()) if p.is_dir() and is_run_dir(p)]
    if not runs:
        raise UsageError(
            f"{root}: holds no run (run `mpirun -n 4 commbench suite smoke` or `make report`)"
        )
    runs.sort(key=run_started, reverse=True)
    if every:
        return runs, []
    chosen: dict[str, Run] = {}
    skipped = []
    for r in runs:
        k = run_kind(r)
        if k in chosen:
            skipped.append(f"{r.path.name} ({k}; superseded by {chosen[k].path.name})")
        else:
            chosen[k] = r
    return list(chosen.values()), skipped


# ---- measured series and their fits ------------------------------------------------------
@dataclass
class Curve:
    """One measured series (as the fitter groups records) and its fit, when there is one."""

    key: SeriesKey
    x: np.ndarray  # bytes
    t: np.ndarray  # seconds
    model: SeriesModel | None = None  # the calibration's series of the same key
    missing: str = ""  # why there is no fit
    run_of: np.ndarray | None = None  # the run id of each point (x, t)

    def lines(self) -> list[tuple[str, np.ndarray, np.ndarray]]:
        """(run, sizes, median seconds) per run: a measured line joins one run's points only."""
        runs = self.run_of if self.run_of is not None else np.full(len(self.x), "")
        out = []
        for run in dict.fromkeys(runs.tolist()):
            mine = runs == run
            sizes = np.unique(self.x[mine])
            meds = np.array([np.median(self.t[mine][self.x[mine] == s]) for s in sizes])
            out.append((run, sizes, meds))
        return out

    def fitted(self, nbytes: float | np.ndarray) -> np.ndarray:
        """Seconds the fit predicts at each size (the segment holding it)."""
        assert self.model is not None
        return np.array([self.model.at(float(b)) for b in np.atleast_1d(nbytes)])

    def residuals(self) -> tuple[np.ndarray, np.ndarray]:
        """(bytes, (measured - fitted) / fitted) of the points within the fit's range."""
        m = self.model
        assert m is not None
        keep = (self.x >= m.bytes_min) & (self.x <= m.bytes_max)
        x, t = self.x[keep], self.t[keep]
        pred = self.fitted(x)
        return x, (t - pred) / pred


def curves(runs: list[Run], cal: Calibration | None = None) -> tuple[list[Curve], list[str]]:
    """Measured primitive-op series of `runs` (collective and suite step records, as `commbench
    fit` groups them; wrong > 0 left out) matched to `cal`'s series of the same key."""
    collected = collect([(r, []) for r in runs])
    per_run = [(r, collect([(r, [])]).series) for r in runs]  # which run each point is from
    models = {s.key: s for s in cal.series} if cal is not None else {}
    skipped = {}
    if cal is not None:
        for s in cal.doc.get("skipped", []):
            skipped[SeriesKey.from_dict(s)] = s.get("reason", "")
    out, notes = [], []
    for key in sorted(collected.series):
        data = collected.series[key]
        if not data.x:
            notes.append(
                f"{key.label()}: no usable point ({data.excluded_wrong} with wrong data, "
                f"{data.excluded_time} without a time)"
            )
            continue
        x, t = data.arrays()
        model = models.get(key)
        missing = ""
        if cal is None:
            missing = "no calibration"
        elif model is None:
            why = skipped.get(key)
            missing = f"not fitted in {cal.source}" + (f": {why}" if why else "")
        run_of = np.concatenate(
            [np.full(len(s[key].x), r.run_id) for r, s in per_run if key in s and s[key].x]
        )
        out.append(Curve(key, x, t, model, missing, run_of if len(run_of) == len(x) else None))
    return out, notes


# ---- suite points ------------------------------------------------------------------------
@dataclass(kw_only=True)
class PointRow:
    """A suite point: its configuration and its communication time split by op@axis."""

    run_id: str
    index: int
    pattern: str
    model: str
    config: str
    options: str
    time_us: float
    breakdown: dict[str, float]  # op@axis -> microseconds
    bytes: int | None = None
    busbw_GBps: float | None = None
    wrong: int = 0
    extrapolated: bool = False
    complete: bool = True  # False: the point record is missing, built from its step records
    record: dict | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        opts = f" [{self.options}]" if self.options not in ("", "-") else ""
        return f"{self.model} {self.config}{opts}"


def points(runs: list[Run]) -> tuple[list[PointRow], list[str]]:
    """Suite points: from `point` records, or from the `step` records of a point whose own
    record never came (a run cut short), marked incomplete."""
    rows, notes = [], []
    for run in runs:
        where = str(run.path / RECORDS)
        seen = set()
        for rec in run.records:
            if rec.get("kind") != "point":
                continue
            pt = PointRecord.from_json(rec, f"{where}: point {rec.get('point')!r}")
            seen.add(point_key(rec))
            rows.append(
                PointRow(
                    run_id=run.path.name,
                    index=pt.point,
                    pattern=pt.pattern,
                    model=pt.model or "-",
                    config=pt.config.label,
                    options=options_label(pt.swept),
                    time_us=float(pt.time_us),
                    breakdown={k: float(v.time_us) for k, v in pt.breakdown.items()},
                    bytes=pt.bytes,
                    busbw_GBps=pt.busbw_GBps,
                    wrong=pt.wrong,
                    extrapolated=pt.extrapolated,
                    complete=True,
                    record=rec,
                )
            )
        orphans: dict[tuple, list[StepRecord]] = {}  # by point_key
        for rec in run.records:
            if rec.get("kind") == StepRecord.kind and point_key(rec) not in seen:
                st = StepRecord.from_json(rec, f"{where}: step of point {rec.get('point')!r}")
                orphans.setdefault(point_key(rec), []).append(st)
        for (_, _, idx), steps in orphans.items():
            first = steps[0]
            bd: dict[str, float] = {}
            for s in steps:
                key = f"{s.op}@{s.axis}"
                bd[key] = bd.get(key, 0.0) + float(s.time_total_us)
            rows.append(
                PointRow(
                    run_id=run.path.name,
                    index=idx,
                    pattern=first.pattern,
                    model=first.model or "-",
                    config=first.config.label,
                    options="-",
                    time_us=sum(bd.values()),
                    breakdown=bd,
                    wrong=sum(s.wrong for s in steps),
                    extrapolated=any(s.extrapolated for s in steps),
                    complete=False,
                    notes=[f"{len(steps)} measured step(s), no point record (run cut short)"],
                )
            )
            notes.append(
                f"{run.path.name}: point {idx} ({first.pattern}) has {len(steps)} step "
                "record(s) but no point record: the run stopped inside it; its bar shows the "
                "steps measured"
            )
    return rows, notes


def role(pattern: str) -> Role | None:
    """A point's pattern's role in a training step; None for a name the registry lacks."""
    spec = patterns.PATTERNS.get(pattern)
    return spec.role if spec is not None else None


# ---- EP ------------------------------------------------------------------------------------
@dataclass
class EPLoad:
    """Tokens per expert and per destination EP rank of one EP point's router."""

    label: str
    experts: list[int]  # tokens routed to each expert (after capacity), one MoE layer
    per_rank: list[int]  # tokens each destination EP rank receives
    imbalance: float  # max/mean tokens per expert after capacity
    router_imbalance: float | None
    dropped: float | None
    capacity: int | None


def ep_loads(rows: list[PointRow]) -> list[EPLoad]:
    """From each point record whose meta carries an expert load (tokens per expert of an MoE
    router; ranks own contiguous blocks of E/ep experts, Megatron's local experts)."""
    out = []
    for r in rows:
        meta = (r.record or {}).get("meta") or {}
        load = meta.get("expert_load")
        if not load:
            continue
        ep = int(((r.record or {}).get("config") or {}).get("ep") or 1)
        per_rank = np.asarray(load).reshape(ep, -1).sum(axis=1).tolist() if ep > 1 else [sum(load)]
        router = ((r.record or {}).get("options") or {}).get("router", "?")
        others = " ".join(x for x in r.options.split() if not x.startswith("router=") and x != "-")
        out.append(
            EPLoad(
                f"{router}: {r.model} {r.config}" + (f" [{others}]" if others else ""),
                [int(v) for v in load],
                [int(v) for v in per_rank],
                float(meta.get("imbalance") or max(load) / (sum(load) / len(load))),
                meta.get("router_imbalance"),
                meta.get("dropped_fraction"),
                meta.get("capacity"),
            )
        )
    return out


# ---- validation (commbench.calibration.accuracy) ---------------------------------------
def validation(runs: list[Run], cal) -> tuple[list[dict], list[dict], str]:
    """(rows, summary, why empty) from commbench.calibration.accuracy: compare(runs, calibration,
    extrapolate=False) -> rows with pattern, config, model, measured_s, predicted_s, rel_error,
    status; summarize(rows) -> per pattern points, median_abs_error, max_abs_error. The one
    place the report depends on that module's contract."""
    from commbench.calibration import accuracy as validate

    if cal is None:
        return [], [], "no calibration"
    try:
        rows = validate.compare(runs, cal, extrapolate=False)
    except UsageError as e:
        return [], [], f"validate: {e}"
    if not rows:
        return [], [], "no suite point to compare"
    return rows, validate.summarize(rows), ""


def predicted_pairs(rows: list[dict]) -> list[dict]:
    """Rows that carry both a measured and a predicted positive time."""

    def ok(v) -> bool:
        return (
            isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0
        )

    return [r for r in rows if ok(r.get("measured_s")) and ok(r.get("predicted_s"))]


# ---- planner output ----------------------------------------------------------------------
@dataclass
class PlanConfig:
    """One ranked config of a plan: label and seconds per part (axis comm, compute, bubble)."""

    rank: int
    label: str
    comm_s: dict[str, float]
    compute_s: float | None
    bubble_s: float | None
    step_s: float | None

    @property
    def comm_total(self) -> float:
        return sum(self.comm_s.values())


@dataclass
class Plan:
    """A plan file: its configs in rank order and the header fields it carries."""

    source: str
    configs: list[PlanConfig]
    header: dict


def load_plan(path: str | Path) -> Plan:
    """A `commbench plan -o` file (results.planfile, schema commbench.plan/1): configs best
    first, each labelled with its ZeRO stage when > 0, its communication on the critical path
    per axis (tp, cp, ep, pp, exposed dp), compute, bubble and step; the file's top-level
    scalars are the plan's header. Errors name the file and the field."""
    doc = PlanFile.read(path)
    configs = [
        PlanConfig(
            i + 1,
            c.label + (f" z{c.zero_stage}" if c.zero_stage else ""),
            c.time_s.comm,
            c.time_s.compute,
            c.time_s.bubble,
            c.time_s.step,
        )
        for i, c in enumerate(doc.configs)
    ]
    return Plan(str(Path(path)), configs, doc.header)
