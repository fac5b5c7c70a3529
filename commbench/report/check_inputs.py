"""The report's input from `commbench check` runs: each run's check records judged again."""

from __future__ import annotations

from typing import TYPE_CHECKING

from commbench.results.rundir import Run

if TYPE_CHECKING:
    from commbench.check.summary import Summary


def checks(runs: list[Run]) -> tuple[list[tuple[str, Summary]], list[str]]:
    """(run id, check Summary) of every run with check records, judged again from its records
    and meta.json (outliers only: the thresholds a run was judged by are in its check.json)."""
    from commbench.check.summary import places, summarize
    from commbench.results.checkrecords import CheckRecord

    out: list[tuple[str, Summary]] = []
    notes: list[str] = []
    for run in runs:
        recs = [CheckRecord.from_json(r) for r in run.records if r.get("kind") == "check"]
        if not recs:
            continue
        devices = run.meta.get("devices") or []
        if len(devices) != recs[0].world_size:
            notes.append(f"{run.path.name}: meta.json has no device map for every rank")
            devices = [{"device": "?"} for _ in range(recs[0].world_size)]
        out.append((run.path.name, summarize(recs, places(recs, devices))))
    return out, notes
