"""Hypothesis strategies and checked readers for fuzzing the user files commbench reads:
suite files, nccl-tests / OSU / IMB logs and calibration JSON.

Each strategy produces a file's bytes: mostly files built from the real grammar (suite keys,
pattern options, model fields, the tools' own log layouts from fit_samples, a fitted
calibration) with random values and edits, so the fuzzing reaches past the first check, plus
raw byte damage. Each reader takes the file's path and must either return a result that
holds what its consumers rely on, or raise a one-line UsageError: anything else (another
exception, a result that a later command would refuse or crash on) is a bug.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import io
import json
import math
from pathlib import Path

import yaml
from hypothesis import strategies as st

from commbench import calibration
from commbench.errors import UsageError
from commbench.fit.collect import FIT_FIELDS, collect
from commbench.ops import OPS
from commbench.results.rundir import Run, _check_record
from commbench.traffic import patterns
from commbench.traffic.model import ModelShape
from commbench.traffic.suitefile import DEGREE_AXES, RUN_KEYS, SUITE_KEYS

# ---- shared ----


def one_line(e: UsageError) -> None:
    """A usage error is one non-empty line (rank 0 prints it as `commbench: error: ...`)."""
    text = str(e)
    assert text.strip() and "\n" not in text, repr(text)


JUNK = st.sampled_from(["", "x", "-1", "nan", "1e999", "N/A", "inf", "0x10", "🙂", "a b", "12Q"])
NUMBERS = st.sampled_from([0, 1, 2, 3, 4, 6, 8, 16, -1, 2**31, 2**63, 0.5, 1.5, -0.0])
SPECIAL_FLOATS = st.sampled_from([math.inf, -math.inf, math.nan, 1e308, 5e-324])


def _scalar():
    return (
        st.none()
        | st.booleans()
        | NUMBERS
        | SPECIAL_FLOATS
        | st.integers(-5, 100)
        | st.floats(allow_nan=True, allow_infinity=True)
        | JUNK
        | st.text(max_size=6)
    )


def _json_values():
    return st.recursive(
        _scalar(),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner),
        max_leaves=6,
    )


@st.composite
def _damaged(draw, data: bytes) -> bytes:
    """Byte-level damage: cuts, flips, inserted junk, a duplicated span."""
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(["cut", "flip", "insert", "dup"]))
        pos = draw(st.integers(0, len(data)))
        if op == "cut":
            data = data[:pos]
        elif op == "flip" and data:
            i = min(pos, len(data) - 1)
            data = data[:i] + bytes([draw(st.integers(0, 255))]) + data[i + 1 :]
        elif op == "insert":
            data = data[:pos] + draw(st.binary(max_size=12)) + data[pos:]
        else:
            data = data[:pos] + data[pos : pos + draw(st.integers(1, 80))] + data[pos:]
    return data


# ---- suite files ----

TINY = {
    "name": "tiny",
    "layers": 4,
    "hidden": 256,
    "ffn_hidden": 512,
    "heads": 8,
    "kv_heads": 4,
    "vocab": 1024,
    "seq_len": 256,
}
TINY_MOE = {**TINY, "name": "tiny-moe", "layers": 2, "experts": 8, "top_k": 2}
MODEL_FIELDS = [f.name for f in dataclasses.fields(ModelShape)]
# small positive values keep every valid suite small to expand; the rest are edge cases
MODEL_VALUES = st.sampled_from([1, 2, 3, 4, 6, 8, 12, 16, 64, 100, 128, 0, -8, True, None, 2.5])
OPTION_VALUES = st.sampled_from(
    [1, 2, 4, 8, 0, -1, 0.5, 1.25, 25.0, True, False, None, "uniform", "zipf", "dirichlet",
     "bfloat16", "float16", "fp8", "1K", "64K", "1M", "12Q", ["allreduce", "alltoall"],
     ["allreduse"], [2, 4], [3], ["contiguous"], ["diagonal"], [], math.inf, math.nan]
)  # fmt: skip
DEGREE_VALUES = st.sampled_from(
    [1, 2, 3, 4, 8, 0, -2, [1, 2], [2, 4], [], [2, "x"], "auto", "max", "2,4", "two",
     {"min": 1, "max": 4}, {"min": 2}, {"max": 0}, {"lo": 2}, 2.0, True, None]
)  # fmt: skip


# values a valid suite uses for each option (by name); other options by their type
GOOD_OPTIONS = {
    "min_bytes": [8, 64, "1K"],
    "max_bytes": [64, "4K", "64K"],
    "factor": [2, 4, 16],
    "router": ["uniform", "zipf", "dirichlet"],
    "dtype": ["float32", "bfloat16", "float16"],
    "grad_dtype": ["float32", "bfloat16"],
    "ops": [["allreduce"], ["allgather", "alltoall"], ["sendrecv", "broadcast", "reduce"]],
    "placements": [["contiguous"], ["strided"], ["contiguous", "strided"]],
    "group_sizes": [[2], [2, 4]],
    "stage": [1, 2, 3],
    "seq_len": [None, 16, 64, 128],
    "micro_batches": [1, 2, 4],
    "micro_batch": [1, 2],
    "bucket_mb": [0.5, 1.0, 25.0],
    "first_bucket_mb": [0.125, 1.0],
    "compute_ms": [0.0, 0.5],
    "capacity_factor": [None, 1.0, 1.25],
    "top_k": [None, 1, 2],
    "dispatch": ["bf16", "fp8"],
    "groups": [1, 2],
    "group_limit": [None, 1],
}
BY_TYPE = {bool: [True, False], int: [0, 1, 2, 3], float: [0.5, 1.0, 2.0]}


def _good_option(name: str, tp) -> st.SearchStrategy:
    if name in GOOD_OPTIONS:
        return st.sampled_from(GOOD_OPTIONS[name])
    return st.sampled_from(BY_TYPE.get(tp, [None]))


@st.composite
def _model(draw, moe: bool):
    """A small model: a shape (sometimes from a preset, a field changed) or a preset name."""
    kind = draw(st.integers(0, 5))
    if kind == 0:
        return draw(st.sampled_from(["mixtral-8x7b"] if moe else ["llama-7b", "llama3-8b"]))
    shape = dict(TINY_MOE if moe else TINY)
    if kind == 1:
        key = draw(st.sampled_from(["layers", "heads", "kv_heads", "seq_len", "experts", "top_k"]))
        shape[key] = draw(st.sampled_from([1, 2, 3, 4, 6, 8, 12]))
    return shape


@st.composite
def _good_run(draw) -> dict:
    """A run the grammar accepts: a pattern, models it can take, small degrees, options and
    sweeps of plausible values (whether they fit a world is for expand to say)."""
    spec = patterns.PATTERNS[draw(st.sampled_from(list(patterns.PATTERNS)))]
    hints = {f.name: f.type for f in dataclasses.fields(spec.Options)}
    import typing

    types_ = typing.get_type_hints(spec.Options)
    run: dict = {"pattern": spec.name}
    if spec.needs_model:
        run["models"] = draw(st.lists(_model(spec.needs_moe), min_size=1, max_size=2))
    if spec.axis is not None and draw(st.booleans()):
        axes = st.sampled_from([str(a) for a in DEGREE_AXES])  # as a user writes them
        values = st.sampled_from([1, 2, 4, [1, 2], [2, 4], "auto", "max", {"min": 1, "max": 4}])
        run["degrees"] = draw(st.dictionaries(axes, values, max_size=2))
    names = st.sampled_from(sorted(hints))
    if draw(st.booleans()):
        keys = draw(st.lists(names, max_size=3, unique=True))
        run["options"] = {k: draw(_good_option(k, types_[k])) for k in keys}
    if draw(st.integers(0, 2)) == 0:
        k = draw(names)
        run["sweep"] = {k: draw(st.lists(_good_option(k, types_[k]), min_size=1, max_size=2))}
    if draw(st.integers(0, 4)) == 0:
        run["order"] = draw(st.sampled_from(["tp-cp-ep-dp-pp", "pp-dp-ep-cp-tp"]))
    if draw(st.integers(0, 4)) == 0:
        run["quick"] = {"degrees": {"tp": 2}} if spec.axis else {"options": {}}
    return run


@st.composite
def _good_suite(draw) -> dict:
    doc: dict = {"description": "fuzz"}
    if draw(st.booleans()):
        doc["timing"] = {"iters": draw(st.integers(1, 3)), "budget": 0.01}
    if draw(st.integers(0, 3)) == 0:
        doc["max_bytes"] = draw(st.sampled_from(["4K", "1M", 64]))
    if draw(st.integers(0, 4)) == 0:
        doc["quick"] = {"timing": {"iters": 1}, "max_bytes": "4K"}
    if draw(st.integers(0, 7)) == 0:
        doc["include"] = ["smoke"]
    doc["runs"] = draw(st.lists(_good_run(), min_size=1, max_size=3))
    return doc


def _corrupt(draw, doc: dict) -> None:
    """One edit anywhere in the document: a value replaced by an odd one, a key dropped or
    a junk key added."""
    paths = list(_paths(doc))[1:]
    if not paths:
        return
    *head, key = draw(st.sampled_from(paths))
    parent = functools.reduce(lambda node, k: node[k], head, doc)
    op = draw(st.sampled_from(["value", "value", "drop", "junk-key"]))
    if op == "value":
        pool = OPTION_VALUES | DEGREE_VALUES | MODEL_VALUES | _scalar() | _json_values()
        parent[key] = copy.deepcopy(draw(pool))  # strategies share their values: never edit them
    elif op == "drop":
        del parent[key]
    elif isinstance(parent, dict):
        parent[draw(st.sampled_from(["colour", *RUN_KEYS, *SUITE_KEYS, *MODEL_FIELDS]))] = 1


@st.composite
def suite_texts(draw) -> bytes:
    """A suite file: mostly a valid suite with a few odd edits (so fuzzing reaches expansion,
    plans and dry runs), sometimes none, sometimes YAML or byte damage."""
    doc = copy.deepcopy(draw(_good_suite()))
    for _ in range(draw(st.sampled_from([0, 0, 1, 1, 2, 3]))):
        _corrupt(draw, doc)
    data = yaml.safe_dump(doc, sort_keys=False, allow_unicode=True).encode()
    if draw(st.integers(0, 7)) == 0:
        data = draw(_damaged(data))
    return data


def check_points(points, world: int) -> None:
    """What `commbench suite` relies on once a suite expanded: whole layouts, traffic, a
    measurable plan for every point, and a dry-run listing."""
    from commbench.commands.suite import max_bytes_for
    from commbench.traffic.execution import plan

    assert points
    for pt in points:
        lay = pt.layout
        assert lay.world == world and lay.tp * lay.cp * lay.dp * lay.pp == world
        assert pt.program.steps and all(s.op in OPS for s in pt.program.steps)
        measured = plan(pt.program, lay, "mpi", max_bytes_for(pt, None))
        covered = sorted(i for m in measured for i in m.indices)
        assert covered == list(range(len(pt.program.steps)))


def read_suite(path: Path) -> None:
    """load_suite (plain and --quick), then expand on 2, 4 and 8 ranks, plan and dry-run each:
    a UsageError anywhere is fine, anything else is a crash."""
    from commbench.commands.suite import dry_run
    from commbench.traffic.points import expand
    from commbench.traffic.suitefile import load_suite

    for quick in (False, True):
        try:
            suite = load_suite(path, quick)
        except UsageError as e:
            one_line(e)
            continue
        for world in (2, 4, 8):
            try:
                points = expand(suite, world)
            except UsageError as e:
                one_line(e)
                continue
            check_points(points, world)
            dry_run(suite, points, None, "mpi", out=io.StringIO())


# ---- logs ----


@functools.cache
def _sample_logs() -> dict[str, list[str]]:
    """Each importer's sample logs, in the tools' own layouts (fit_samples: synthetic
    numbers from stated alpha/beta)."""
    import fit_samples as fs

    return {
        "nccl-tests": [fs.nccl_tests_new(), fs.nccl_tests_old(), fs.nccl_tests_new(hosts=2)],
        "osu": [fs.osu_collective(), fs.osu_latency(), fs.osu_bw()],
        "imb": [fs.imb_log()],
    }


TOKENS = st.sampled_from(
    ["0", "-1", "8", "N/A", "nan", "inf", "1e400", "x", "#", "", "0.00", "-3.5", "99999999999999",
     "float", "half", "int8", "sum", "none", "-1", "out-of-place", "Rank", "Group", "on",
     "²", "١٢"]
)  # fmt: skip


@st.composite
def log_texts(draw, tool: str) -> bytes:
    """One of the tool's sample logs with line edits (drop, duplicate, swap, a token replaced,
    a cell appended or removed, a line from another tool's log), sometimes byte damage."""
    lines = draw(st.sampled_from(_sample_logs()[tool])).splitlines()
    others = [x for logs in _sample_logs().values() for log in logs for x in log.splitlines()]
    for _ in range(draw(st.integers(1, 6))):
        if not lines:
            break
        i = draw(st.integers(0, len(lines) - 1))
        op = draw(st.sampled_from(["drop", "dup", "swap", "token", "cell+", "cell-", "foreign"]))
        if op == "drop":
            del lines[i]
        elif op == "dup":
            lines.insert(i, lines[i])
        elif op == "swap":
            j = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
        elif op in ("token", "cell+", "cell-"):
            tok = lines[i].split()
            if op == "cell+":
                tok.insert(draw(st.integers(0, len(tok))), draw(TOKENS))
            elif tok:
                k = draw(st.integers(0, len(tok) - 1))
                if op == "cell-":
                    del tok[k]
                else:
                    tok[k] = draw(TOKENS | st.text(max_size=4))
            lines[i] = " ".join(tok)
        else:
            lines.insert(i, draw(st.sampled_from(others)))
    data = "\n".join(lines).encode("utf-8", "surrogatepass")
    if draw(st.integers(0, 5)) == 0:
        data = draw(_damaged(data))
    return data


def check_imported(records: list[dict]) -> None:
    """Imported records must be what the rest of commbench reads: JSON lines that
    results.read_run accepts (with the schema_version and run_id RunWriter adds), carrying
    what fit needs, and that fitdata.collect groups into series without an error."""
    for rec in records:
        line = json.dumps({"schema_version": 1, "run_id": "fuzz", **rec})
        _check_record(json.loads(line))
        assert all(k in rec for k in FIT_FIELDS), rec
    collect([(Run(Path("fuzz"), {"status": "complete"}, records), [])])


def read_log(tool: str):
    """A reader for `tool`'s logs: import with the flags the log may lack (--group-size 8,
    --link-class intra), as `commbench import` does."""
    from commbench.formats import IMPORTERS
    from commbench.formats.common import Hints

    def reader(path: Path) -> None:
        import importlib

        parser = importlib.import_module(IMPORTERS[tool])
        hints = Hints(group_size=None if tool == "nccl-tests" else 8, link_class="intra")
        try:
            imported = parser.parse(path, hints)
        except UsageError as e:
            one_line(e)
            return
        check_imported(imported.records)

    return reader


# Lines the tools and their launchers print when a run fails or warns: a log holding one is a
# failed (or partial) run, never a complete one.
FAILURE_LINES = {
    "nccl-tests": [
        "dgx-a00: Test NCCL failure common.cu:1023 'unhandled system error / connect failed'",
        "dgx-a00: Test CUDA failure common.cu:892 'out of memory'",
        "# Out of bounds values : 12 FAILED",
    ],
    "mpi": [
        "MPI_ABORT was invoked on rank 1 in communicator MPI_COMM_WORLD",
        "prterun noticed that process rank 3 with PID 4242 on node cn01 exited on",
        "mpirun noticed that process rank 0 with PID 17 on node n1 exited on signal 9 (Killed).",
        "[cn01:04242] *** Process received signal ***",
        "Abort(1) on node 2 (rank 2 in comm 0): Fatal error in PMPI_Allreduce: Other MPI error",
        "srun: error: cn01: task 3: Exited with exit code 1",
    ],
}
WARNING_LINES = ["dgx-a03:41003:41090 [3] NCCL WARN NET/IB : Got completion with error 12"]


@st.composite
def failed_log_texts(draw, tool: str) -> bytes:
    """A sample log cut after some row, with one failure or warning line put in somewhere
    after that (how a run that failed or warned ends), sometimes edited further."""
    lines = draw(st.sampled_from(_sample_logs()[tool])).splitlines()
    rows = [i for i, x in enumerate(lines) if x.strip()[:1].isdigit()]
    cut = draw(st.sampled_from(rows)) + 1 if rows and draw(st.booleans()) else len(lines)
    lines = lines[:cut]
    pool = FAILURE_LINES["mpi"] + (FAILURE_LINES[tool] if tool in FAILURE_LINES else [])
    extra = draw(st.sampled_from(pool + WARNING_LINES))
    lines.insert(draw(st.integers(0, len(lines))), extra)
    return "\n".join(lines).encode()


def read_failed_log(tool: str):
    """A reader for `tool`'s logs that hold a failure or warning line: the import must say so
    (Imported.problems, naming the line), or refuse the log in one line."""
    from commbench.formats import IMPORTERS
    from commbench.formats.common import Hints

    def reader(path: Path) -> None:
        import importlib

        parser = importlib.import_module(IMPORTERS[tool])
        hints = Hints(group_size=None if tool == "nccl-tests" else 8, link_class="intra")
        lines = path.read_text().splitlines()
        failed = [n for n, x in enumerate(lines, 1) if x.strip() in sum(FAILURE_LINES.values(), [])]
        warned = [n for n, x in enumerate(lines, 1) if x.strip() in WARNING_LINES]
        try:
            imported = parser.parse(path, hints)
        except UsageError as e:
            one_line(e)
            return
        check_imported(imported.records)
        found = imported.problems
        if failed:
            assert found.failure and found.failure.startswith(f"{path}:{failed[0]}:"), found
        elif warned:
            assert found.warnings and found.warnings[0].startswith(f"{path}:{warned[0]}:"), found

    return reader


# ---- calibrations ----


@functools.cache
def _calibration_doc() -> dict:
    """A calibration fitted from synthetic runs (fit_samples: stated alpha/beta; two links,
    three ops, several group sizes), so mutations hit series, segments and the link table."""
    import tempfile

    from fit_samples import collective_records, write_run

    from commbench.fit import calibrate
    from commbench.fit.collect import read_fit_runs
    from commbench.fit.options import FitOptions

    recs = []
    for op, p, link in (("allreduce", 2, "intra"), ("allreduce", 4, "intra"),
                        ("allgather", 4, "intra"), ("allreduce", 8, "inter")):  # fmt: skip
        recs += collective_records(op, p, 5e-6 * p, 1e-9 * p, link=link, noise=0.01)
    with tempfile.TemporaryDirectory() as tmp:
        run = write_run(Path(tmp), "cal", recs)
        doc, _, _ = calibrate.build(collect(read_fit_runs([run])), FitOptions(bootstrap=0))
    calibration.validate(doc)
    return doc


def _paths(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, (*prefix, i))


def _is_number_at(doc, path) -> bool:
    node = functools.reduce(lambda n, k: n[k], path, doc)
    return isinstance(node, (int, float)) and not isinstance(node, bool)


@st.composite
def calibration_texts(draw) -> bytes:
    """The fitted calibration with JSON edits (a value replaced, a key or item dropped, an
    item duplicated), sometimes byte damage."""
    doc = json.loads(json.dumps(_calibration_doc()))
    paths = list(_paths(doc))[1:]
    numbers = [p for p in paths if _is_number_at(doc, p)]
    for _ in range(draw(st.integers(0, 4))):
        if draw(st.booleans()):  # a number made odd: the fields predict() computes with
            *head, key = draw(st.sampled_from(numbers))
            value = draw(SPECIAL_FLOATS | NUMBERS | st.floats())
            try:
                functools.reduce(lambda node, k: node[k], head, doc)[key] = value
            except (KeyError, IndexError, TypeError):
                pass  # an earlier edit removed or replaced this path
            continue
        path = draw(st.sampled_from(paths))
        parent = doc
        try:
            for k in path[:-1]:
                parent = parent[k]
            key = path[-1]
            op = draw(st.sampled_from(["set", "drop", "dup"]))
            if op == "set":
                parent[key] = copy.deepcopy(draw(_json_values()))
            elif op == "drop":
                del parent[key]
            elif isinstance(parent, list):
                parent.append(json.loads(json.dumps(parent[key])))
        except (KeyError, IndexError, TypeError):
            continue  # an earlier edit removed or replaced this path
    data = json.dumps(doc, allow_nan=True).encode()
    if draw(st.integers(0, 4)) == 0:
        data = draw(_damaged(data))
    return data


def read_calibration(path: Path) -> None:
    """calibration.load, then what plan/validate/report and export do with a loaded one:
    predict (strict and extrapolating) for its ops and links, describe, and both exporters."""
    from commbench.formats import astra_sim, calculon
    from commbench.formats.exportbase import tiers

    try:
        cal = calibration.load(path)
    except UsageError as e:
        one_line(e)
        return
    cal.describe()
    cal.coverage()
    for s in cal.series[:3]:
        for nbytes in (0, s.bytes_min, s.bytes_max * 4):
            for extrapolate in (False, True):
                try:
                    t = cal.predict(
                        s.key.op, nbytes, s.key.group_size * 2, s.key.link_class,
                        dtype=s.key.dtype, backend=s.key.backend, extrapolate=extrapolate,
                    )  # fmt: skip
                except UsageError as e:
                    one_line(e)
                    continue
                assert isinstance(t, float) and math.isfinite(t) and t >= 0, t
    try:
        chosen = tiers(cal, npus={t: 4 for t in cal.link_classes})
        astra_sim.export(cal, chosen, {})
        calculon.export(cal, chosen, {"networks": []})
    except UsageError as e:
        one_line(e)
