"""From run directories to fit series: which records are used, which are left out and why.

A series is (backend, op, link class, group size, dtype, timing mode, placement, buffers:
hugepage or plain pages, warm or off-cache, which differ 2x at 64 KiB and up, and the NCCL
algorithm / protocol its run pinned: an import's NCCL_ALGO=Ring is a curve of its own). Records of
kind `collective` (commbench run, commbench import) must carry what the fitter needs. Suite
records are used when they carry op/bytes/group_size/link_class/time_us for a primitive op:
a `step` record's bytes and time_us are the op the runner really measured (its `scale` and
`extrapolated` fields concern the Program step it stands for, not the measurement), so steps
are fitted like collectives; `point` records (op "program": a whole training step) and p2p
schedules are counted as ignored. Points with wrong > 0 or a non-positive time are left out
and counted per series; a time over MAX_TIME_S (the longest a point may run) is an error
naming the line. A record identical to an earlier one of its run (a file concatenated with
itself) and a run given twice (the same directory, or a copy: same run id and start time)
count once, the rest counted as ignored with why. Reads records only.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from commbench.calibration.reach import group_nodes
from commbench.calibration.series_key import (
    DEFAULT_BUFFERS,
    DEFAULT_PLACEMENT,
    DEFAULT_TIMING,
    KEY_FIELDS,
    REGIME_FIELDS,
    SeriesKey,
    regime_of,
)
from commbench.dtypes import canonical_dtype_name
from commbench.errors import UsageError
from commbench.nccl_names import label as regime_label
from commbench.ops import OPS, canonical_op
from commbench.results.rundir import RECORDS, Run, read_run

USED_KINDS = ("collective", "step", "point")
# fields a `collective` record must carry for the fitter, beyond records.REQUIRED_FIELDS
FIT_FIELDS = ("link_class", "wrong", "timing")
# the record fields a series key is made of (with kind, which decides whether it is used);
# the regime comes from algorithm / protocol where `forced` names them (regime_of)
_RAW_KEY = ("kind", *(k for k in KEY_FIELDS if k not in REGIME_FIELDS))
# the longest a point may run (--timeout's bound, commands/common.MAX_TIMEOUT_S): a time over
# it was not measured (a corrupt or hand-edited line) and would become a knot of its series
MAX_TIME_S = 1e6


@dataclass
class SeriesData:
    """The usable points of one series and what was left out of it."""

    key: SeriesKey
    x: list[float] = field(default_factory=list)
    t: list[float] = field(default_factory=list)
    excluded_wrong: int = 0
    excluded_time: int = 0
    runs: set[str] = field(default_factory=set)
    shapes: set[tuple[int, int]] = field(default_factory=set)  # (nodes, ranks per node) seen
    run_of: list[str] = field(default_factory=list)  # each point's run id
    stride_of: list[int] = field(default_factory=list)  # each point's group stride (1: contiguous)
    # each point's NCCL regime as its record says it ran (`RING/LL`, a tuning line's), "" unsaid
    regime_at: list[str] = field(default_factory=list)

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        return np.asarray(self.x, dtype=float), np.asarray(self.t, dtype=float)

    def regime_runs(self) -> list[tuple[str, list[float]]]:
        """(regime, sizes) of each run of adjacent sizes whose points all say they ran in one
        NCCL regime (regime "" where they say none, or several), in ascending size."""
        by: dict[float, set[str]] = {}
        for x, r in zip(self.x, self.regime_at):
            by.setdefault(x, set()).add(r)
        runs: list[tuple[str, list[float]]] = []
        for x in sorted(by):
            mine = next(iter(by[x])) if len(by[x]) == 1 else ""
            if runs and runs[-1][0] == mine:
                runs[-1][1].append(x)
            else:
                runs.append((mine, [x]))
        return runs

    @property
    def distinct_sizes(self) -> int:
        return len(set(self.x))


@dataclass
class Collected:
    """Everything the fitter takes from the runs."""

    series: dict[SeriesKey, SeriesData]
    ignored: Counter
    runs: list[dict]

    @property
    def partial_runs(self) -> list[str]:
        return [r["run_id"] for r in self.runs if r["partial"]]


def _line_numbers(path: Path) -> list[int]:
    """Line number of each record (results.iter_records skips blank lines)."""
    try:
        with open(path) as f:
            return [i for i, line in enumerate(f, 1) if line.strip()]
    except OSError:
        return []


def _int_field(rec: dict, name: str, where: str, minimum: int) -> int:
    v = rec.get(name)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != int(v) or v < minimum:
        raise UsageError(
            f"{where}: field {name} must be an integer >= {minimum}, got {v!r}"
        ) from None
    return int(v)


def _classify(rec: dict, where: str) -> tuple[SeriesKey | None, str]:
    """The record's series key, or None and why it is not used. Malformed records raise."""
    kind = rec.get("kind")
    if kind not in USED_KINDS:
        return None, f"kind {kind!r} (not a measured op)"
    if kind == "collective":
        missing = [k for k in FIT_FIELDS if k not in rec]
        if missing:
            raise UsageError(f"{where}: record lacks {', '.join(missing)} (needed to fit)")
    op = canonical_op(rec.get("op") or "")
    if op not in OPS or OPS[op].scheduled:
        return None, f"{kind} records of op {rec.get('op')!r} (not a primitive collective)"
    if not rec.get("link_class"):
        return None, f"{kind} records without link_class"
    key = SeriesKey(
        backend=str(rec["backend"]),
        op=op,
        link_class=str(rec["link_class"]),
        group_size=_int_field(rec, "group_size", where, 1),
        dtype=canonical_dtype_name(rec["dtype"]),
        timing=str(rec.get("timing") or DEFAULT_TIMING),
        placement=str(rec.get("placement") or DEFAULT_PLACEMENT),
        buffers=str(rec.get("buffers") or DEFAULT_BUFFERS),
        algorithm=(regime := regime_of(rec, where))[0],
        protocol=regime[1],
    )
    return key, ""


def read_fit_runs(paths: list[str | Path]) -> list[tuple[Run, list[int]]]:
    """Load run directories (results.read_run), refusing an empty one, with line numbers."""
    if not paths:
        raise UsageError("give at least one run directory to fit")
    out = []
    for p in paths:
        run = read_run(p)
        if not run.records:
            raise UsageError(f"{run.path}: empty run (no records in {RECORDS})")
        out.append((run, _line_numbers(run.path / RECORDS)))
    return out


def run_provenance(run: Run, used: int) -> dict:
    """What a calibration says about one input run, from its meta.json."""
    m = run.meta
    prov = {
        "run_id": str(m.get("run_id") or run.path.name),
        "path": str(run.path),
        "status": run.status,
        "partial": run.partial,
        "records": len(run.records),
        "records_used": used,
    }
    for k in (
        "command",
        "subcommand",
        "backend",
        "hosts",
        "num_hosts",
        "world_size",
        "ranks_per_node",
        "libraries",
        "env",
        "git_revision",
        "commbench_version",
        "start_time_iso",
        "timing",
        "source",
        "oversubscribed",
    ):
        if m.get(k) is not None:
            prov[k] = m[k]
    return prov


def _run_identity(run: Run) -> tuple:
    """What makes two run directories one run: its id and start and end times (a copy keeps
    them), else its resolved path."""
    rid, times = run.meta.get("run_id"), (run.meta.get("start_time"), run.meta.get("end_time"))
    if rid and any(times):
        return ("meta", rid, *times)
    return ("path", str(run.path.resolve()))


def _signature(rec: dict) -> object:
    """A hashable image of a record, equal for two copies of one line."""
    sig = tuple(rec.items())
    try:
        hash(sig)
    except TypeError:  # a nested value (an import's source): its text
        return repr(sig)
    return sig


def collect(runs: list[tuple[Run, list[int]]]) -> Collected:
    """Group the usable records of `runs` into series; count what is left out.

    The series key of a record is worked out once per distinct combination of its key fields
    (a cache), so 100k records cost little more than reading them."""
    series: dict[SeriesKey, SeriesData] = {}
    ignored: Counter = Counter()
    provenance = []
    seen_runs: dict[tuple, Path] = {}
    for run, lines in runs:
        used = 0
        path = run.path / RECORDS
        cache: dict[tuple, tuple[SeriesKey | None, str]] = {}
        first = seen_runs.setdefault(_run_identity(run), run.path)
        if first is not run.path:
            same = first.resolve() == run.path.resolve()
            why = f"run {run.path} " + (
                "given twice" if same else f"is a copy of {first} (same run id and times)"
            )
            ignored[why + ": counted once"] += len(run.records)
            provenance.append(run_provenance(run, 0))
            continue
        seen: set = set()

        def where(idx: int) -> str:
            return f"{path}:{lines[idx] if idx < len(lines) else idx + 1}"  # noqa: B023

        for idx, rec in enumerate(run.records):
            kind = rec.get("kind")
            if kind == "collective" and not all(k in rec for k in FIT_FIELDS):
                _classify(rec, where(idx))  # raises, naming the missing fields
            forced = rec.get("forced")
            raw = (
                *(rec.get(k) for k in _RAW_KEY),
                *(rec.get(k) for k in REGIME_FIELDS),
                tuple(forced) if isinstance(forced, list) else forced,
            )
            try:
                key, why = cache[raw]
            except KeyError:
                key, why = cache[raw] = _classify(rec, where(idx))
            except TypeError:  # an unhashable field value: classify without the cache
                key, why = _classify(rec, where(idx))
            if key is None:
                ignored[why] += 1
                continue
            sig = _signature(rec)
            if sig in seen:
                ignored["the same record as an earlier one of its run (written twice)"] += 1
                continue
            seen.add(sig)
            nbytes = rec["bytes"]
            if type(nbytes) is not int or nbytes < 0:
                nbytes = _int_field(rec, "bytes", where(idx), 0)
            t_us = rec["time_us"]
            if type(t_us) is not float and (
                isinstance(t_us, bool) or not isinstance(t_us, (int, float, type(None)))
            ):
                raise UsageError(f"{where(idx)}: field time_us must be a number, got {t_us!r}")
            if t_us is not None and MAX_TIME_S * 1e6 < t_us < math.inf:
                raise UsageError(
                    f"{where(idx)}: field time_us {t_us:g} is over {MAX_TIME_S * 1e6:g} us "
                    f"({MAX_TIME_S:g} s, the longest a point may run): not a measured time"
                )
            data = series.get(key)
            if data is None:
                data = series[key] = SeriesData(key)
            wrong = rec.get("wrong") or 0
            if type(wrong) is not int and (
                isinstance(wrong, bool) or not isinstance(wrong, (int, float))
            ):
                raise UsageError(f"{where(idx)}: field wrong must be a count, got {wrong!r}")
            if wrong > 0:
                data.excluded_wrong += 1
                continue
            if t_us is None or not t_us > 0 or t_us == math.inf:
                data.excluded_time += 1
                continue
            data.x.append(float(nbytes))
            data.t.append(t_us * 1e-6)
            data.run_of.append(str(rec.get("run_id") or run.path.name))
            stride = rec.get("stride")
            data.stride_of.append(stride if type(stride) is int else 1)
            data.runs.add(data.run_of[-1])
            ran = (rec.get("algorithm"), rec.get("protocol"))
            ok = all(isinstance(v, str) and v for v in ran)
            data.regime_at.append(regime_label(*ran) if ok else "")  # type: ignore[arg-type]
            nodes = group_nodes(rec, key.link_class)
            if nodes is not None:
                data.shapes.add((nodes, -(-key.group_size // nodes)))
            used += 1
        provenance.append(run_provenance(run, used))
    return Collected(series, ignored, provenance)
