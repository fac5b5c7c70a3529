"""Records -> calibration document: fit every series, derive the link table, state provenance.

The glue between fitdata (which records, which series), fit (segments and diagnostics),
linkfit (the joint link table) and calibration (the schema the result must pass).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from commbench import __version__
from commbench.calibration import SCHEMA_VERSION
from commbench.calibration.accuracy import rerun_spread
from commbench.calibration.algorithms import library_of
from commbench.calibration.band import Priors
from commbench.fit.collect import Collected, SeriesData
from commbench.fit.links import LinkEntry, LinkPoints, fit_link_table
from commbench.fit.options import FitOptions
from commbench.fit.series import SeriesFitResult, fit_series
from commbench.fit.settings import mixed_settings
from commbench.ops import bus_factor

# contiguous and strided groups of one series agree when their medians are this close (or
# within the runs' repeat spread)
PLACEMENT_AGREE = 0.2


@dataclass
class SeriesOutcome:
    """A fitted series: its data, its fit and the JSON row written for it."""

    data: SeriesData
    fit: SeriesFitResult
    row: dict


def _series_row(data: SeriesData, res: SeriesFitResult, x: np.ndarray) -> dict:
    key = data.key
    segs = [s.as_dict() for s in res.segments]
    factor = bus_factor(key.op, key.group_size)
    for s, seg, regime in zip(segs, res.segments, segment_regimes(data, res.segments)):
        if regime:  # the NCCL regime the log says every size of the segment ran in
            s["regime"] = regime
        bw = seg.bandwidth_GBps
        s["algbw_GBps"] = bw
        s["busbw_GBps"] = bw * factor if bw is not None else None
    loso = res.loso_rel_err[np.isfinite(res.loso_rel_err)]
    return {
        **key.as_dict(),
        "bytes_min": int(x.min()),
        "bytes_max": int(x.max()),
        "points": int(len(x)),
        "sizes": int(len(np.unique(x))),
        "outliers": res.outliers,
        "excluded_wrong": data.excluded_wrong,
        "excluded_time": data.excluded_time,
        "median_rel_err": float(np.median(res.rel_err)),
        "loso_median_rel_err": float(np.median(loso)) if loso.size else None,
        "runs": sorted(data.runs),
        "repeat_spread": float(np.median(spreads)) if (spreads := repeat_spreads(data)) else None,
        "placement_spread": float(np.median(apart))
        if (apart := repeat_spreads(data, data.stride_of))
        else None,
        "shapes": [{"nodes": n, "ranks_per_node": r} for n, r in sorted(data.shapes)],
        "segments": segs,
        "knots": [{"bytes": b, "seconds": t} for b, t in res.knots],
    }


def repeat_spreads(data: SeriesData, labels: Sequence[object] | None = None) -> list[float]:
    """Per size measured under two labels or more (default: runs): max / min - 1 of two
    labels' median times, the median over every pair of labels. Runs of the same sweep made
    apart (interleaved with other work) disagree by this much, so no prediction can be
    trusted closer; with strides as labels, it is how far contiguous and strided groups of
    one series disagree. Pairs, not the range of all runs: what one rerun shows, which the
    range over three runs or more overstates (it only grows with the runs)."""
    by: dict[float, dict[object, list[float]]] = {}
    for x, t, label in zip(data.x, data.t, data.run_of if labels is None else labels):
        by.setdefault(x, {}).setdefault(label, []).append(t)
    out = []
    for runs in by.values():
        spread = rerun_spread([float(np.median(v)) for v in runs.values()])
        if spread is not None:
            out.append(spread)
    return out


def noise_floor(outcomes: list[SeriesOutcome]) -> dict | None:
    """The calibration's stated noise floor: the median (and 90th percentile) of the repeat
    spreads of every series, or None when no size was measured in two runs."""
    spreads = [v for o in outcomes for v in repeat_spreads(o.data)]
    if not spreads:
        return None
    return {
        "median_rel": float(np.median(spreads)),
        "p90_rel": float(np.percentile(spreads, 90)),
        "sizes": len(spreads),
        "runs": len({r for o in outcomes for r in o.data.runs}),
    }


def regime_cuts(data: SeriesData, opts: FitOptions) -> list[float]:
    """Where the series' records say NCCL switched regime between two adjacent runs of sizes,
    each of min_sizes sizes or more (a shorter run cannot hold a segment of its own): a cut
    at the geometric mean of the two sizes around it; none where the segments would outnumber
    max_segments. Sizes with no regime said, or several, cut nothing."""
    runs = data.regime_runs()
    cuts = [
        math.sqrt(max(a[1][-1], 1.0) * b[1][0])
        for a, b in zip(runs, runs[1:])
        if a[0] and b[0] and min(len(a[1]), len(b[1])) >= opts.min_sizes
    ]
    return cuts if len(cuts) < opts.max_segments else []


def segment_regimes(data: SeriesData, segments: list) -> list[str]:
    """Per segment, the one NCCL regime every size in it says it ran in, else ""."""
    runs = data.regime_runs()
    out = []
    for seg in segments:
        inside = {r for r, sizes in runs for x in sizes if seg.bytes_min <= x <= seg.bytes_max}
        out.append(inside.pop() if len(inside) == 1 else "")
    return out


def fit_collected(
    collected: Collected, opts: FitOptions | None = None
) -> tuple[list[SeriesOutcome], list[dict]]:
    """Fit every series with enough distinct sizes; report the others with the reason."""
    opts = opts or FitOptions()
    outcomes, skipped = [], []
    for key in sorted(collected.series):
        data = collected.series[key]
        x, t = data.arrays()
        left_out = data.excluded_wrong + data.excluded_time
        if data.distinct_sizes < opts.min_sizes:
            why = (
                f"{data.distinct_sizes} distinct size(s) with usable points, need {opts.min_sizes}"
            )
            if left_out:
                why += (
                    f" ({data.excluded_wrong} point(s) with wrong > 0 and "
                    f"{data.excluded_time} with no positive time left out)"
                )
            skipped.append(
                {
                    **key.as_dict(),
                    "points": len(x),
                    "excluded_wrong": data.excluded_wrong,
                    "excluded_time": data.excluded_time,
                    "reason": why,
                }
            )
            continue
        res = fit_series(x, t, opts, regime_cuts(data, opts))
        outcomes.append(SeriesOutcome(data, res, _series_row(data, res, x)))
    return outcomes, skipped


def link_points(outcomes: list[SeriesOutcome]) -> list[LinkPoints]:
    """(key, bytes, seconds, weights, segments) of every fitted series, for the link table.
    The link table models the library's own algorithm choice: a series whose run pinned an
    NCCL algorithm or protocol joins it only on a link (backend, link class, timing) where
    no run let NCCL choose, else its curve would be blended into NCCL's."""
    out: list[LinkPoints] = []
    chose = {(k.backend, k.link_class, k.timing) for o in outcomes if not (k := o.data.key).regime}
    for o in outcomes:
        k = o.data.key
        if k.regime and (k.backend, k.link_class, k.timing) in chose:
            continue
        x, t = o.data.arrays()
        out.append((o.data.key, x, t, o.fit.weights, o.fit.segments))
    return out


def run_libraries(collected: Collected) -> dict[str, str]:
    """Per backend, the library whose algorithm choice calibration.algorithms knows, from the
    runs' meta.json (the MPI library mpi4py loaded); a backend whose runs disagree has none."""
    seen: dict[str, set] = {}
    for r in collected.runs:
        backend = str(r.get("backend"))
        seen.setdefault(backend, set()).add(library_of(backend, r.get("libraries")))
    return {b: libs.pop() for b, libs in seen.items() if len(libs) == 1 and None not in libs}


def run_library_versions(collected: Collected) -> dict[str, str]:
    """Per backend, the release of its library its runs name (meta.json `libraries`, e.g. nccl
    2.21.5), where they all name the same one: NCCL's tuner constants differ by release."""
    seen: dict[str, set] = {}
    for r in collected.runs:
        backend = str(r.get("backend"))
        seen.setdefault(backend, set()).add((r.get("libraries") or {}).get(backend))
    return {b: str(v.pop()) for b, v in seen.items() if len(v) == 1 and None not in v}


def build_doc(
    collected: Collected,
    outcomes: list[SeriesOutcome],
    skipped: list[dict],
    links: list[LinkEntry],
    link_skipped: list[dict],
    opts: FitOptions,
) -> dict:
    """The measured calibration document of fits already made (not yet validated)."""
    notes = []
    partial = collected.partial_runs
    if partial:
        notes.append(f"partial runs (status not complete): {', '.join(partial)}")
    for o in outcomes:
        spread = o.row["placement_spread"]
        floor = o.row["repeat_spread"] or 0.0
        if spread is not None and spread > max(PLACEMENT_AGREE, floor):
            notes.append(
                f"{o.data.key.label()}: contiguous and strided groups disagree by "
                f"{spread:.0%} (median over sizes), beyond {max(PLACEMENT_AGREE, floor):.0%}: "
                "they share the link class here, so measure them on hosts where they do not "
                "(or --ranks-per-node), or fit one placement"
            )
    pinned: dict[tuple, set[str]] = {}  # link -> regimes, where no run let NCCL choose
    for o in outcomes:
        k = o.data.key
        pinned.setdefault((k.backend, k.link_class, k.timing), set()).add(k.regime)
    for (backend, link, timing), regimes in sorted(pinned.items()):
        if "" not in regimes and len(regimes) > 1:
            notes.append(
                f"link {backend}/{link}/{timing}: every run pinned an NCCL regime "
                f"({', '.join(sorted(regimes))}) and none let NCCL choose: its link table "
                "blends them (the series keep them apart)"
            )
    for r in collected.runs:
        for o in r.get("oversubscribed") or ():
            notes.append(
                f"{r['run_id']}: {o['ranks']} ranks on {o['cores']} core(s) of {o['host']}: ranks "
                "waited for a core, so its times include the scheduler's"
            )
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": "measured",
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "generator": f"commbench {__version__} fit",
        "provenance": {"runs": collected.runs, "partial_runs": partial},
        "fit_options": opts.as_dict(),
        "series": [o.row for o in outcomes],
        "skipped": skipped,
        "ignored": dict(sorted(collected.ignored.items())),
        "link_table": [e.as_dict() for e in links],
        "link_skipped": link_skipped,
        "noise_floor": noise_floor(outcomes),
        "node_band": Priors().as_doc(),  # the band beyond the measured node counts
        "notes": notes + mixed_settings(collected.runs),
    }


def build(
    collected: Collected, opts: FitOptions | None = None
) -> tuple[dict, list[SeriesOutcome], list[LinkEntry]]:
    """Fit everything in `collected`: the calibration document, the fits and the link table."""
    opts = opts or FitOptions()
    outcomes, skipped = fit_collected(collected, opts)
    links, link_skipped = fit_link_table(
        link_points(outcomes), opts, run_libraries(collected), run_library_versions(collected)
    )
    return build_doc(collected, outcomes, skipped, links, link_skipped, opts), outcomes, links
