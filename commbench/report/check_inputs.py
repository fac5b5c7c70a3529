"""The report's input from `commbench check` runs: each run's check records judged again."""

from __future__ import annotations

from typing import TYPE_CHECKING

from commbench.results.rundir import Run

if TYPE_CHECKING:
    from commbench.check.outliers import Rule
    from commbench.check.summary import Summary


def checks(runs: list[Run]) -> tuple[list[tuple[str, Summary]], list[str]]:
    """(run id, check Summary) of every run with check records, judged again from its records
    and meta.json by the outlier rule of its check.json (`--outlier-ratio`, `--outlier-z`;
    the default rule when it has none); outliers only: the thresholds it was judged by are in
    its check.json."""
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
        out.append((run.path.name, summarize(recs, places(recs, devices), _rule(run))))
    return out, notes


def _rule(run: Run) -> Rule:
    """The outlier rule the run was judged by, from its check.json (older runs: the default)."""
    import json

    from commbench.check.outliers import Rule

    try:
        saved = json.loads((run.path / "check.json").read_text()).get("outlier_rule")
    except (OSError, ValueError):
        saved = None
    return Rule(**saved) if isinstance(saved, dict) else Rule()
