"""Report pieces on data built here: the binary size axis, the 1F1B timeline replay against
the pipeline pattern's own numbers, EP loads against the Program's dispatch split, the
validate and plan figures from rows and plans in their documented contracts, plan file
errors, and HTML escaping. No timing is measured in this file."""

from __future__ import annotations

import json

import numpy as np
import pytest
from report_checks import PNG_SIGNATURE, png_size

from commbench.errors import UsageError
from commbench.report.figures import models, setup, size_axis
from commbench.report.html import Table, table_html
from commbench.report.inputs import PointRow, ep_loads, load_plan
from commbench.report.timeline import replay, timeline
from commbench.tables import Column, TableSpec
from commbench.traffic import patterns
from commbench.traffic.layout import ParallelLayout
from commbench.traffic.patterns import pp
from commbench.traffic.presets import get_model


def point_record(pattern: str, layout: ParallelLayout, model: str, options: dict) -> dict:
    """A suite point record's rebuild fields (what commands/suite.py writes) for a Program."""
    shape = get_model(model)
    opts = patterns.make_options(pattern, options)
    prog = patterns.build(pattern, layout, shape, opts)
    return {
        "kind": "point",
        "run_id": "built-here",
        "pattern": pattern,
        "model": shape.name,
        "model_shape": shape.to_dict(),
        "config": {
            "world": layout.world,
            "tp": layout.tp,
            "cp": layout.cp,
            "ep": layout.ep,
            "dp": layout.dp,
            "pp": layout.pp,
            "order": "-".join(layout.order),
            "label": layout.label(),
        },  # fmt: skip
        "options": opts.to_dict(),
        "swept": {},
        "meta": prog.meta,
    }


def tick_labels(lo: float, hi: float) -> list[str]:
    plt = setup()
    fig, ax = plt.subplots()
    ax.plot([lo, hi], [1, 2])
    size_axis(ax, lo, hi)
    fig.canvas.draw()
    labels = [t.get_text() for t in ax.get_xticklabels()]
    plt.close(fig)
    return labels


def test_size_axis_uses_binary_units_from_8_B_to_1_GiB():
    assert tick_labels(8, 1 << 30) == [
        "8 B", "64 B", "512 B", "4 KiB", "32 KiB", "256 KiB", "2 MiB", "16 MiB", "128 MiB",
        "1 GiB",
    ]  # fmt: skip
    mid = tick_labels(8, 16 << 20)
    assert mid[:3] == ["8 B", "64 B", "512 B"] and mid[-1] == "16 MiB" and len(mid) == 8
    assert tick_labels(8, 1 << 20) == ["8 B", "32 B", "128 B", "512 B", "2 KiB", "8 KiB",
                                      "32 KiB", "128 KiB", "512 KiB"]  # fmt: skip
    narrow = tick_labels(216.5 * 1024, 258.5 * 1024)  # an EP split: under 3 powers of two
    assert narrow[0] == "216.5 KiB" and narrow[-1] == "258.5 KiB" and len(narrow) == 4


@pytest.mark.parametrize("p,m", [(2, 1), (4, 4), (4, 8), (8, 3)])
def test_timeline_without_compute_shows_the_textbook_bubble(p, m):
    """No synthetic compute: passes in units of one forward, backward = 2; with instantaneous
    messages every stage idles exactly (p-1)/(m+p-1) of the time (Narayanan et al. 2021)."""
    rec = point_record(
        "pp", ParallelLayout(p, pp=p), "llama-7b", {"micro_batches": m, "seq_len": 512}
    )
    rec["time_us"] = 1234.0  # a measured time; unused without compute
    tl = timeline(rec)
    assert tl.unit == "forward" and tl.stages == p and tl.micro_batches == m
    assert len(tl.passes) == 2 * p * m
    assert tl.makespan == pytest.approx((m + p - 1) * 3.0)
    for s in range(p):
        assert tl.idle_fraction(s) == pytest.approx(pp.bubble_fraction(p, m))
        mine = sorted((x for x in tl.passes if x.stage == s), key=lambda x: x.start)
        warm = [x.direction for x in mine[: pp.warmup_forwards(p, s, m)]]
        assert warm == ["F"] * len(warm)  # 1F1B warm-up: p - s - 1 forwards first
        assert [x.micro_batch for x in mine if x.direction == "B"] == list(range(m))


def test_timeline_message_time_reproduces_the_measured_step():
    """With synthetic compute, the message time is solved so the replay lasts the measured
    step: a step made from a known message time (0.4 ms, stated here) gives it back, and the
    replay's makespan equals the pattern's own simulator's."""
    rec = point_record(
        "pp", ParallelLayout(4, pp=4), "llama-7b",
        {"micro_batches": 6, "compute_ms": 2.0, "seq_len": 512},
    )  # fmt: skip
    sched = patterns.rebuild(rec)[3].steps[0].schedule
    passes, makespan = replay(sched, 0.4e-3)
    assert makespan == pytest.approx(pp.simulate(sched, 0.4e-3)[0])
    rec["time_us"] = makespan * 1e6
    tl = timeline(rec)
    assert tl.unit == "s"
    assert tl.message_s == pytest.approx(0.4e-3, rel=1e-6)
    assert tl.makespan == pytest.approx(makespan)
    busy = sum(x.end - x.start for x in tl.passes if x.stage == 0)
    assert busy == pytest.approx(6 * (2.0 + 4.0) * 1e-3)  # m (f + b), backward = 2 x forward


def test_ep_loads_match_the_programs_dispatch_split():
    layout = ParallelLayout(8, ep=4)
    rec = point_record("ep", layout, "mixtral-8x7b", {"router": "zipf", "seq_len": 256})
    prog = patterns.rebuild(rec)[3]
    split = prog.steps[0].split  # dispatch: bytes[src][dst]
    token_bytes = get_model("mixtral-8x7b").hidden * 2
    row = PointRow(
        run_id="r",
        index=1,
        pattern="ep",
        model="mixtral-8x7b",
        config=layout.label(),
        options="router=zipf",
        time_us=1.0,
        breakdown={},
        record=rec,
    )
    (load,) = ep_loads([row])
    assert load.per_rank == [sum(col) // token_bytes for col in zip(*split)]
    assert sum(load.experts) == sum(load.per_rank)
    assert load.imbalance == pytest.approx(max(load.experts) / np.mean(load.experts))
    assert load.label.startswith("zipf: mixtral-8x7b")


def validation_rows() -> list[dict]:
    """Rows in validate.compare's contract. Constructed, not measured: measured_s spread over
    0.1..30 ms, predicted_s = measured_s x (1 + e) with the stated errors e."""
    rows = []
    errors = {"tp": [0.05, -0.1, 0.02], "dp": [0.3, 0.25, -0.15], "ep": [-0.4, 0.1, 0.0]}
    for k, (pat, errs) in enumerate(errors.items()):
        for i, e in enumerate(errs):
            m = 1e-4 * 10 ** (k + i / 2)
            rows.append(
                {"pattern": pat, "config": f"c{i}", "model": "tiny", "measured_s": m,
                 "predicted_s": m * (1 + e), "rel_error": e, "status": "ok"}
            )  # fmt: skip
    rows.append(
        {"pattern": "pp", "config": "c0", "model": "tiny", "measured_s": 0.01,
         "predicted_s": None, "rel_error": None, "status": "no sendrecv series"}
    )  # fmt: skip
    return rows


def test_predicted_vs_measured_figure():
    fig = models.predicted_vs_measured(validation_rows(), note="in-sample")
    w, h = png_size(fig.png)
    assert fig.png.startswith(PNG_SIGNATURE) and w > 400 and h > 300
    assert "9 point(s)" in fig.caption and "1 row(s) without a prediction" in fig.caption
    assert "+-20%" in fig.caption and "in-sample" in fig.caption
    with pytest.raises(AssertionError):
        models.predicted_vs_measured(validation_rows()[-1:])


def test_plan_contract_and_figure(tmp_path):
    path = tmp_path / "plan.json"
    path.write_text(
        json.dumps(
            {
                "model": "llama-70b",
                "gpus": 32,
                "calibration": {"kind": "reference"},  # nested header fields are not shown
                "configs": [
                    {"label": "tp8-pp4", "zero_stage": 1,
                     "time_s": {"pp": 0.03, "tp": 0.2, "dp_exposed": 0.05, "compute": 1.0,
                                "bubble": 0.1, "step": 1.3}},
                    {"label": "tp4-pp8", "time_s": {"tp": 0.3}},
                    {"label": "tp2-pp16"},
                ],
            }
        )
    )  # fmt: skip
    plan = load_plan(path)
    assert [c.label for c in plan.configs] == ["tp8-pp4 z1", "tp4-pp8", "tp2-pp16"]
    assert sum(plan.configs[2].comm_s.values()) == 0 and plan.configs[1].step_s is None
    assert plan.header == {"model": "llama-70b", "gpus": 32}
    assert models.axis_order(a for a, v in plan.configs[0].comm_s.items() if v) == [
        "tp",
        "dp",
        "pp",
    ]
    fig = models.plan_top(plan, "plan-1", top=2)
    assert png_size(fig.png)[0] > 400
    assert "best 2 of 3 configs" in fig.caption and "model llama-70b, gpus 32" in fig.caption


@pytest.mark.parametrize(
    "doc,message",
    [
        ([], "a plan must be a JSON object with a list 'configs'"),
        ({"configs": [{"time_s": {}}]}, "configs[0]: needs a string 'label'"),
        ({"configs": [{"label": "a", "time_s": [1]}]}, "configs[0].time_s: must map part"),
        (
            {"configs": [{"label": "a", "time_s": {"step": -1}}]},
            "configs[0].time_s.step: must be a non-negative",
        ),
    ],
)
def test_bad_plan_files(tmp_path, doc, message):
    path = tmp_path / "p.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(UsageError, match=f"^{tmp_path / 'p.json'}: .*"):
        load_plan(path)
    with pytest.raises(UsageError) as e:
        load_plan(path)
    assert message in str(e.value)
    path.write_text("{")
    with pytest.raises(UsageError, match=":1: not valid JSON"):
        load_plan(path)


def test_html_cells_are_escaped():
    html = table_html(Table(TableSpec((Column("a<b"),)), [["<script>alert(1)</script>"]]))
    assert "<script>" not in html and "&lt;script&gt;" in html and "a&lt;b" in html
