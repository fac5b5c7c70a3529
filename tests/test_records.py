"""Records as written by real runs: every one valid under record.schema.json, read back by its
dataclass to the same JSON; the schema and the dataclasses name the same fields; from_json
names the field it refuses."""

from __future__ import annotations

import dataclasses
import json

import pytest
from fit_samples import imb_log, nccl_tests_new, osu_latency

from commbench import cli
from commbench.errors import UsageError
from commbench.fit.collect import _RAW_KEY, FIT_FIELDS
from commbench.results.checkrecords import CheckRecord
from commbench.results.importrecords import ImportedRecord, ImportSource
from commbench.results.records import (
    MEASURED_FIELDS,
    REQUIRED_FIELDS,
    JsonRecord,
    LayoutConfig,
    OpShare,
    PointRecord,
    PointStep,
    StepRecord,
    SweepRecord,
)
from commbench.results.rundir import read_run
from commbench.results.tracerecords import TraceRecord
from commbench.results.validation import ValidationRow

from conftest import REPO, run_mpi

SCHEMA = REPO / "commbench" / "schemas" / "record.schema.json"
DEFS = {
    "sweep": SweepRecord,
    "imported": ImportedRecord,
    "step": StepRecord,
    "point": PointRecord,
    "layout_config": LayoutConfig,
    "op_share": OpShare,
    "point_step": PointStep,
    "import_source": ImportSource,
    "check": CheckRecord,
    "trace": TraceRecord,
}
TOP = ("sweep", "imported", "step", "point", "check", "trace")
RUN_HEAD = ("schema_version", "run_id")  # the writer's, not the record's


def schema() -> dict:
    return json.loads(SCHEMA.read_text())


def names(cls: type[JsonRecord]) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]


def typed(rec: dict) -> JsonRecord:
    cls = {"step": StepRecord, "point": PointRecord, "check": CheckRecord,
           "trace": TraceRecord}.get(rec["kind"])  # fmt: skip
    return (cls or (ImportedRecord if "source" in rec else SweepRecord)).from_json(rec)


def check_against_schema(records: list[dict], kind: str) -> None:
    """Valid under the schema, and the dataclass reads each back to the very same JSON."""
    import jsonschema

    validator = jsonschema.Draft202012Validator(schema())
    sub = jsonschema.Draft202012Validator({**schema(), "oneOf": [{"$ref": f"#/$defs/{kind}"}]})
    assert records
    for rec in records:
        errors = sorted(validator.iter_errors(rec), key=str)
        assert not errors, (rec, [e.message for e in errors])
        assert sub.is_valid(rec), rec
        back = typed(rec).to_json()
        assert json.dumps(back) == json.dumps({k: v for k, v in rec.items() if k not in RUN_HEAD})


def test_schema_and_dataclasses_name_the_same_fields():
    import jsonschema

    doc = schema()
    jsonschema.Draft202012Validator.check_schema(doc)
    assert set(doc["$defs"]) == set(DEFS)
    for name, cls in DEFS.items():
        props = doc["$defs"][name]["properties"]
        head = list(RUN_HEAD) if name in TOP else []
        assert list(props) == head + names(cls), name
        required = doc["$defs"][name]["required"]
        assert set(required) == set(props) - set(cls.OMIT_NONE), name
        assert doc["$defs"][name]["additionalProperties"] is False
    for name in TOP:
        fields = set(doc["$defs"][name]["properties"])
        assert set(REQUIRED_FIELDS) <= fields, name
        if name not in ("point", "trace"):  # a trace's op was run by the job, not measured
            assert set(MEASURED_FIELDS) <= fields, name
            assert set(FIT_FIELDS) | set(_RAW_KEY) - {"placement"} <= fields, name
    assert "placement" in names(ImportedRecord)


@pytest.mark.mpi
def test_sweep_records_match_the_schema(tmp_path):
    job = run_mpi(2, "run", "allreduce", "--sizes", "8,1K", "--iters", "3", "--warmup", "1",
                  "--backend", "mpi", "--results", str(tmp_path), "--run-id", "s")  # fmt: skip
    assert job.returncode == 0, job.output
    records = read_run(tmp_path / "s").records
    assert len(records) == 2 and {r["kind"] for r in records} == {"collective"}
    check_against_schema(records, "sweep")


@pytest.mark.mpi
def test_suite_records_match_the_schema(tmp_path):
    job = run_mpi(2, "suite", "smoke", "--iters", "2", "--warmup", "0", "--backend", "mpi",
                  "--results", str(tmp_path), "--run-id", "smoke", timeout=240)  # fmt: skip
    assert job.returncode == 0, job.output
    records = read_run(tmp_path / "smoke").records
    steps = [r for r in records if r["kind"] == "step"]
    points = [r for r in records if r["kind"] == "point"]
    assert steps and points and len(steps) + len(points) == len(records)
    check_against_schema(steps, "step")
    check_against_schema(points, "point")
    pp = [PointRecord.from_json(r) for r in points if r["pattern"] == "pp"]
    assert pp and all(p.bubble_measured is not None for p in pp)
    assert all("bubble_measured" not in r for r in points if r["pattern"] != "pp")


@pytest.mark.parametrize(
    "tool,text,flags",
    [
        ("nccl-tests", nccl_tests_new(), []),
        ("osu", osu_latency(), ["--link-class", "inter"]),
        ("imb", imb_log(alpha_us=2.0, GBps=3.0), ["--link-class", "intra"]),
    ],
)
def test_imported_records_match_the_schema(tmp_path, tool, text, flags):
    path = tmp_path / "log.txt"
    path.write_text(text)
    args = ["import", tool, str(path), *flags, "--results", str(tmp_path), "--run-id", "i"]
    assert cli.main(args) == 0
    records = read_run(tmp_path / "i").records
    check_against_schema(records, "imported")


def sample_step() -> dict:
    layout = LayoutConfig(world=2, tp=2, cp=1, ep=1, dp=1, pp=1, edp=1, order="tp-cp-ep-dp-pp",
                          label="tp2-cp1-ep1-dp1-pp1")  # fmt: skip
    return StepRecord(
        op="allreduce", dtype="float32", bytes=1024, count=256, axis="tp", group_size=2,
        groups=1, stride=1, hosts_spanned=1, link_class="intra", world_size=2, iters=5,
        warmup=1, time_us=10.0, time_mean_us=11.0, time_min_us=9.0, time_p95_us=12.0,
        algbw_GBps=0.1, busbw_GBps=0.1, wrong=0, checked=True, timing="per-iteration",
        loop="native", isolated=False, buffers="hugepage", per_group_us=[10.0],
        rank_min_us=9.5, rank_avg_us=11.0, rank_max_us=12.5, backend="mpi", suite="tp",
        run="tp", point=1, pattern="tp", model=None, config=layout, label="qkv",
        phases=["forward"], program_steps=[0], program_bytes=1024, program_dtype="float32",
        repeat=4, chunks=1, scale=1.0, extrapolated=False, note="", time_total_us=40.0,
    ).to_json()  # fmt: skip


def test_from_json_round_trips_and_keeps_ints():
    rec = sample_step()
    back = StepRecord.from_json({"schema_version": 1, "run_id": "r", **rec})
    assert back.config.label == "tp2-cp1-ep1-dp1-pp1" and back.to_json() == rec
    assert type(back.to_json()["repeat"]) is int  # a number field keeps what was written


@pytest.mark.parametrize(
    "edit,message",
    [
        (lambda r: r.pop("time_total_us"), "lacks field time_total_us"),
        (lambda r: r.update(bytes="1K"), "bytes must be an integer, not '1K'"),
        (lambda r: r.update(bytes=True), "bytes must be an integer, not True"),
        (lambda r: r.update(checked=1), "checked must be true or false, not 1"),
        (lambda r: r.update(kind="point"), "kind must be 'step', not 'point'"),
        (lambda r: r.update(model=3), "model must be a string, not 3"),
        (lambda r: r.update(phases="forward"), "phases must be a list, not 'forward'"),
        (lambda r: r.update(per_group_us=[1.0, "x"]), "per_group_us[1] must be a number"),
        (lambda r: r["config"].pop("edp"), "config lacks field edp"),
        (lambda r: r["config"].update(tp=2.5), "tp must be an integer, not 2.5"),
    ],
)
def test_from_json_names_the_field(edit, message):
    rec = sample_step()
    edit(rec)
    with pytest.raises(UsageError, match=message.replace("[", r"\[").replace("]", r"\]")):
        StepRecord.from_json(rec, "records.jsonl:3")
    with pytest.raises(UsageError, match="records.jsonl:3"):
        StepRecord.from_json(rec, "records.jsonl:3")


def test_from_json_refuses_what_is_not_an_object():
    with pytest.raises(UsageError, match="must be a JSON object"):
        SweepRecord.from_json([1, 2])


def test_validation_rows_name_the_keys_the_report_reads():
    keys = set(names(ValidationRow))
    assert {"pattern", "config", "model", "measured_s", "predicted_s", "rel_error", "status",
            "why", "run_id", "point", "steps", "abs_error", "options"} <= keys  # fmt: skip
