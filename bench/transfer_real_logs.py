"""Transfer across node counts on real clusters' nccl-tests logs: fit the small node counts,
predict each larger one, per set and op, scored against the issue's targets.

    python bench/transfer_real_logs.py                     # every set in ../shared/real-logs
    python bench/transfer_real_logs.py --set abci-v        # one set (repeats come with it)
    python bench/transfer_real_logs.py --json out.json     # the rows as JSON too
    python bench/transfer_real_logs.py --logs my-logs/     # yours: a folder per cluster

The logs (`../shared/real-logs`, read in place: the repo does not copy them; its README says
where each comes from) are named `<gpu>_<nodes>x<gpus per node>_<op>_<set>.txt`; a set
`X-rep0` is a repeat of set `X`. Your own logs (`--logs DIR`) may have any names: each log's
op and shape are read from it by `commbench import`, its set is its folder (one per cluster
and setting), and a second log of one op and shape in a folder is a repeat. Per set, op and GPUs per node, with inter-node counts
n1 < n2 < ...: fit n1 and predict n2, and fit n1 + n2 together and predict every larger
count; the logs of the fitted counts (and their repeats) go through `commbench import
nccl-tests`, `commbench fit`, and `commbench validate --extrapolate --json` against each
target log, in this process (the CLI's own entry point, no subprocess per step).

Scored over sizes >= 1 MiB, both placements: the median and max |predicted / measured - 1|;
where the target has repeats, the error of a point is its distance to the interval the
repeats span (0 inside it: a prediction is judged against the repeats' spread, not one run).
The band: the share of points whose measured time lies inside the prediction's stated band
(`band` on validate's rows, when the calibration states one), and its median half-width;
then the same held out: per cluster (a set's machine: Polaris' sets are one), the band's
prior chosen on the other clusters' points from the terms each row states (`band_terms`),
scored on the held-out one (leave-one-cluster-out). Targets (issue 29): median
within 10% when the target is at most 4x the largest fitted node count, within 20% beyond.
Last, twins: two sets of one cluster whose logs agree at the fitted counts and differ at a
target bound what any prediction from those fits can reach there (`twins`).
Exit 1 when any row fails.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import re
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from statistics import median

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from commbench import cli  # noqa: E402
from commbench.calibration.band import BandTerms, Priors  # noqa: E402
from commbench.errors import UsageError  # noqa: E402
from commbench.formats import nccl_tests  # noqa: E402
from commbench.formats.common import Hints  # noqa: E402
from commbench.results.rundir import RECORDS, read_records  # noqa: E402

LOGS = REPO.parent / "shared" / "real-logs"
LARGE = 1 << 20
NEAR, FAR, REACH = 0.10, 0.20, 4  # median |error| within NEAR up to REACH x the fitted nodes
_NAME = re.compile(r"^(?P<gpu>[a-z0-9]+)_(?P<n>\d+)x(?P<g>\d+)_(?P<op>[a-z]+)_(?P<set>.+)\.txt$")


@dataclass(frozen=True)
class Log:
    path: Path
    nodes: int
    per_node: int
    op: str
    set: str  # without the -repN suffix
    repeat: str  # "" for the first run, "rep0", ...


@dataclass
class Row:
    set: str
    op: str
    per_node: int
    fitted: list[int]
    target: int
    points: int = 0
    median: float | None = None
    max: float | None = None
    repeats: int = 1
    band: float | None = None  # median half-width of the stated band (relative)
    covered: float | None = None  # share of points inside the band
    goal: float = NEAR
    status: str = "FAIL"
    why: str = ""
    methods: list[str] = field(default_factory=list)
    axis: str = "nodes"  # per_node and fitted/target are nodes; "gpus": the reverse
    # per banded point: the half-width that would just cover it, and the band's terms (for
    # scoring other priors on the same predictions: --loco)
    needs: list[tuple[list[float], dict]] = field(default_factory=list)


def discover(root: Path = LOGS, notes: list[str] | None = None) -> list[Log]:
    """The logs under `root`: named `<gpu>_<nodes>x<g>_<op>_<set>.txt` (shared/real-logs), or
    any other `.txt`/`.log`/`.out` file, whose op and shape are read from the log itself
    (`commbench import`) and whose set is its folder (one folder per cluster and setting; a
    second log of one op and shape there is a repeat). `notes` gets a line per file left out."""
    out = []
    probed: dict[tuple, list[Path]] = {}
    for path in sorted(p for p in root.rglob("*") if p.suffix in (".txt", ".log", ".out")):
        m = _NAME.match(path.name)
        if m is not None and path.parent == root:
            rep = re.search(r"-(rep\d+)$", m["set"])
            out.append(
                Log(
                    path,
                    int(m["n"]),
                    int(m["g"]),
                    m["op"],
                    m["set"][: rep.start()] if rep else m["set"],
                    rep.group(1) if rep else "",
                )
            )
        elif path.name.lower() != "readme.txt" and (shape := _probe(path, notes)) is not None:
            name = path.parent.name if path.parent != root else root.name
            probed.setdefault((name, *shape), []).append(path)
    for (name, op, nodes, per_node), paths in sorted(probed.items()):
        for i, path in enumerate(paths):  # the first is the run, the others its repeats
            out.append(Log(path, nodes, per_node, op, name, f"rep{i - 1}" if i else ""))
    return out


def _probe(path: Path, notes: list[str] | None) -> tuple[str, int, int] | None:
    """(op, nodes, GPUs per node) of one nccl-tests log, as `commbench import` reads it; None,
    with a note, for a file that is not one or that holds several ops or shapes."""
    try:
        records = nccl_tests.parse(path, Hints()).records
    except UsageError as e:  # the import's own reason
        if notes is not None:
            notes.append(f"# left out: {e}")
        return None
    shapes = {(r["op"], r["hosts_spanned"], r["group_size"]) for r in records}
    why = None
    if len(shapes) != 1:
        why = f"{len(shapes)} ops or shapes in one log: give one file per test"
    elif (shape := shapes.pop())[1] is None:
        why = "it names no hosts (no '#  Rank ... on HOST' lines): its node count is unknown"
    if why is not None:
        if notes is not None:
            notes.append(f"# left out: {path}: {why}")
        return None
    op, nodes, ranks = shape
    return op, nodes, ranks // nodes


def commbench(*args: str) -> str:
    """One commbench command in this process; its stdout (a failure raises, with stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = cli.main(list(args))
    if rc != 0:
        raise RuntimeError(f"commbench {' '.join(args)}: exit {rc}: {err.getvalue().strip()}")
    return out.getvalue()


class Workspace:
    """Imported run directories, one per log, made once."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.runs: dict[Path, Path] = {}

    def run(self, log: Log) -> Path:
        if log.path not in self.runs:
            run_id = f"{len(self.runs)}-{log.path.stem}"  # one stem may sit in two folders
            commbench("import", "nccl-tests", str(log.path), "--results", str(self.root),
                      "--run-id", run_id)  # fmt: skip
            self.runs[log.path] = self.root / run_id
        return self.runs[log.path]


def cases(logs: list[Log]) -> list[tuple[str, str, int, list[int], int, str]]:
    """(set, op, fixed, fitted, target, axis) of every transfer: axis "nodes" fixes the GPUs
    per node and varies the node count (n1 -> n2, n1 + n2 -> each larger); axis "gpus" fixes
    a node count measured at three or more GPUs per node and varies those (the two smallest
    -> each larger: xxrjun-c01's all_reduce at 10 x 1, 2 -> 10 x 4, 8)."""
    out = []
    for key in sorted({(x.set, x.op, x.per_node) for x in logs}):
        counts = sorted({x.nodes for x in logs if (x.set, x.op, x.per_node) == key and x.nodes > 1})
        if len(counts) >= 2:
            out.append((*key, counts[:1], counts[1], "nodes"))
        for target in counts[2:]:
            out.append((*key, counts[:2], target, "nodes"))
    for key in sorted({(x.set, x.op, x.nodes) for x in logs if x.nodes > 1}):
        gpus = sorted({x.per_node for x in logs if (x.set, x.op, x.nodes) == key})
        for target in gpus[2:] if len(gpus) >= 3 else ():
            out.append((*key, gpus[:2], target, "gpus"))
    return out


def _shape(x: Log, axis: str) -> tuple[int, int]:
    """(the fixed dimension, the varied one) of a log's shape on `axis`."""
    return (x.per_node, x.nodes) if axis == "nodes" else (x.nodes, x.per_node)


def score(
    rows_by_repeat: list[list[dict]],
) -> tuple[list[float], list[bool], list[float], set, list[tuple[list[float], dict]]]:
    """Per point (bytes, placement) >= LARGE: the error against the repeats' interval, whether
    the band covered a measured value, the band's relative half-width; the methods used; per
    banded point its repeats' measured / predicted and the band's terms (band.BandTerms)."""
    points: dict[tuple, list[dict]] = {}
    for rows in rows_by_repeat:
        for r in rows:
            if r["status"] == "ok" and r["bytes"] >= LARGE:
                points.setdefault((r["bytes"], r["placement"]), []).append(r)
    errs, covered, widths, methods, needs = [], [], [], set(), []
    for group in points.values():
        pred = group[0]["predicted_s"]
        lo, hi = min(r["measured_s"] for r in group), max(r["measured_s"] for r in group)
        errs.append(0.0 if lo <= pred <= hi else min(abs(pred / lo - 1), abs(pred / hi - 1)))
        methods.add(group[0]["method"])
        band = group[0].get("band")
        if band:
            b_lo, b_hi = band
            covered.append(any(b_lo <= r["measured_s"] <= b_hi for r in group))
            widths.append((b_hi - b_lo) / 2 / pred)
            if group[0].get("band_terms"):
                needs.append(([r["measured_s"] / pred for r in group], group[0]["band_terms"]))
    return errs, covered, widths, methods, needs


def transfer(logs: list[Log], case: tuple, ws: Workspace) -> Row:
    name, op, fixed, fitted, target, axis = case
    row = Row(name, op, fixed, fitted, target, axis=axis)
    row.goal = NEAR if target <= REACH * max(fitted) else FAR
    mine = [x for x in logs if (x.set, x.op, _shape(x, axis)[0]) == (name, op, fixed)]
    fit_runs = [str(ws.run(x)) for x in mine if _shape(x, axis)[1] in fitted]
    cal = ws.root / f"cal-{name}-{op}-{axis}{fixed}-{'+'.join(map(str, fitted))}.json"
    if not cal.exists():
        commbench("fit", *fit_runs, "-o", str(cal))
    rows = []
    for x in (x for x in mine if _shape(x, axis)[1] == target):
        out = commbench("validate", "--calibration", str(cal), str(ws.run(x)), "--extrapolate",
                        "--min-bytes", str(LARGE), "--json")  # fmt: skip
        rows.append(json.loads(out)["rows"])
    row.repeats = len(rows)
    errs, covered, widths, methods, row.needs = score(rows)
    row.points, row.methods = len(errs), sorted(methods)
    if not errs:
        row.status, row.why = "FAIL", "no predicted point >= 1 MiB"
        return row
    row.median, row.max = median(errs), max(errs)
    if covered:
        row.covered, row.band = sum(covered) / len(covered), median(widths)
    row.status = "PASS" if row.median <= row.goal else "FAIL"
    return row


def pct(x: float | None, width: int = 6) -> str:
    return f"{'-':>{width}}" if x is None else f"{100 * x:{width}.1f}%"


def table(rows: list[Row]) -> str:
    head = (
        f"{'set':<22} {'op':<14} {'fitted':>9} {'target':>7} {'pts':>4} {'median':>7} "
        f"{'max':>8} {'band+-':>7} {'covered':>8}  verdict"
    )
    lines = [head]
    for r in rows:
        if r.axis == "nodes":
            fitted, target = (
                "+".join(map(str, r.fitted)) + f"x{r.per_node}",
                f"{r.target}x{r.per_node}",
            )
        else:  # GPUs per node at one node count
            fitted, target = (
                f"{r.per_node}x" + "+".join(map(str, r.fitted)),
                f"{r.per_node}x{r.target}",
            )
        lines.append(
            f"{r.set:<22} {r.op:<14} {fitted:>9} {target:>7} {r.points:4d} "
            f"{pct(r.median)} {pct(r.max, 7)} {pct(r.band)} {pct(r.covered, 7)}  {r.status} "
            f"at {r.goal:.0%}{' (vs ' + str(r.repeats) + ' repeats)' if r.repeats > 1 else ''}"
            f"{' ' + r.why if r.why else ''}"
        )
    covered = [r.covered for r in rows if r.covered is not None]
    passed = sum(r.status == "PASS" for r in rows)
    lines.append(f"# {passed} of {len(rows)} rows PASS")
    if covered:
        banded = [r for r in rows if r.covered is not None]
        pooled = sum(r.covered * r.points for r in banded) / sum(r.points for r in banded)
        needs = [p for r in banded for p in r.needs]
        width = f", median half-width {_coverage(needs, Priors())[1]:.0%}" if needs else ""
        lines.append(
            f"# band coverage: {pooled:.0%} of {sum(r.points for r in banded)} predicted points "
            f"(target >= 80%){width}; median over rows {median(covered):.0%}"
        )
    for split, rule in ((False, "one prior per doubling"), (True, "bytes/latency priors apart")):
        got = loco(rows, split)
        if got is not None:
            lines.append(
                f"# leave-one-cluster-out ({rule}): {got[0]:.0%} covered, median half-width "
                f"{got[1]:.0%}: {'; '.join(got[2])}"
            )
    return "\n".join(lines)


def cluster(name: str) -> str:
    """The machine a set ran on: Polaris' sets differ by NCCL version and settings only."""
    return re.sub(r"-nccl\d.*$", "", name)


def _coverage(points: list[tuple[list[float], dict]], priors: Priors) -> tuple[float, float]:
    """(share of points whose band under `priors` holds a repeat, median half-width)."""
    covered, widths = 0, []
    for ratios, terms in points:
        w = BandTerms(**terms).width(priors)
        covered += any(1 / (1 + w) <= x <= 1 + w for x in ratios)
        widths.append(((1 + w) - 1 / (1 + w)) / 2)
    return covered / len(points), median(widths)


GRID = [x / 20 for x in range(1, 21)]  # priors per doubling scanned: 0.05 .. 1.00


def loco(rows: list[Row], split: bool = False) -> tuple[float, float, list[str]] | None:
    """Leave-one-cluster-out: per cluster, the priors chosen on the others' points (the
    narrowest on GRID whose band covers >= 80% of them), scored on the held-out one; (pooled
    coverage, median half-width, a part per cluster). One prior per doubling, or with
    `split` bytes and latency apart (band.py's blend by NCCL's latency share)."""
    by: dict[str, list] = {}
    for r in rows:
        by.setdefault(cluster(r.set), []).extend(r.needs)
    if len(by) < 2:
        return None
    pairs = [(a, b) for a in GRID for b in GRID] if split else [(a, a) for a in GRID]
    hits, widths, parts = 0.0, [], []
    for held, test in sorted(by.items()):
        train = [p for c, pts in by.items() if c != held for p in pts]
        if not test or not train:
            continue
        fits = []
        for a, b in pairs:
            cov, width = _coverage(train, Priors(a, b))
            if cov >= 0.8:
                fits.append((width, a, b))
        if not fits:
            parts.append(f"{held} none covers 80% of the others")
            continue
        _, a, b = min(fits)
        cov, width = _coverage(test, Priors(a, b))
        hits += cov * len(test)
        widths += [_coverage([p], Priors(a, b))[1] for p in test]
        prior = f"{a:.2f}" if not split else f"{a:.2f}/{b:.2f}"
        parts.append(f"{held} {cov:.0%} (+-{width:.0%}, prior {prior})")
    if not widths:
        return None
    return hits / len(widths), median(widths), parts


def untransferred(logs: list[Log]) -> list[str]:
    """A line per (set, op) with fewer than two inter-node counts at one node shape: nothing
    to predict across node counts (xxrjun-c01: 1 and 10 nodes; 1 is another link)."""
    done = {(c[0], c[1]) for c in cases(logs)}  # either axis
    out = []
    for name, op in sorted({(x.set, x.op) for x in logs} - done):
        shapes = sorted({f"{x.nodes}x{x.per_node}" for x in logs if (x.set, x.op) == (name, op)})
        out.append(f"# {name} {op}: measured at {', '.join(shapes)}: nothing to transfer")
    return out


def _times(run_dir: Path) -> dict[int, float]:
    """Out-of-place time (s) per size >= LARGE of an imported log."""
    records = read_records(run_dir / RECORDS).records
    return {
        r["bytes"]: r["time_us"] / 1e6
        for r in records
        if r["placement"] == "out-of-place" and r["bytes"] >= LARGE
    }


def twins(logs: list[Log], ws: Workspace) -> list[str]:
    """Where two sets' logs agree at the node counts a transfer fits (median |time ratio - 1|
    over sizes >= 1 MiB within 3%, the run-to-run noise of these logs) but differ at a
    target: no prediction made from those fits can come close to both. Per target size the
    best single prediction misses one of them by |r - 1| / (r + 1) (r their time ratio, the
    prediction 2ab / (a + b)); a line per such pair with that bound's median and max."""
    out = []
    first = [x for x in logs if not x.repeat]
    for name, op, fixed, fitted, target, axis in cases(first):
        for other in sorted(
            {x.set for x in first if x.set > name and cluster(x.set) == cluster(name)}
        ):
            pair: dict[tuple[str, int], Path] = {}
            for x in first:
                if x.set in (name, other) and x.op == op and _shape(x, axis)[0] == fixed:
                    pair[(x.set, _shape(x, axis)[1])] = ws.run(x)
            if not all((s, n) in pair for s in (name, other) for n in [*fitted, target]):
                continue
            fit_gap = 0.0
            for n in fitted:
                a, b = _times(pair[(name, n)]), _times(pair[(other, n)])
                fit_gap = max(fit_gap, median(abs(b[s] / a[s] - 1) for s in a if s in b))
            a, b = _times(pair[(name, target)]), _times(pair[(other, target)])
            bound = [abs(r - 1) / (r + 1) for r in (b[s] / a[s] for s in a if s in b)]
            if fit_gap <= 0.03 and median(bound) > 0.05:
                out.append(
                    f"# {name} and {other} {op}: their logs at {'+'.join(map(str, fitted))} "
                    f"agree within {fit_gap:.1%} (median), at {target} they do not: a "
                    f"prediction from those fits misses one of them by >= {median(bound):.1%} "
                    f"(median over sizes >= 1 MiB; max {max(bound):.1%})"
                )
    return out


def run(sets: list[str] | None = None, root: Path = LOGS) -> list[Row]:
    logs = [x for x in discover(root) if sets is None or x.set in sets]
    with tempfile.TemporaryDirectory(prefix="cb-real-logs-") as tmp:
        ws = Workspace(Path(tmp))
        return [transfer(logs, c, ws) for c in cases(logs)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", action="append", help="one set (e.g. abci-v); default: every set")
    ap.add_argument(
        "--logs",
        type=Path,
        default=LOGS,
        help=f"the logs (default {LOGS}): named <gpu>_<nodes>x<g>_<op>_<set>.txt, or any "
        "names in one folder per cluster and setting (op and shape read from each log)",
    )
    ap.add_argument("--json", type=Path, help="also write the rows here")
    args = ap.parse_args()
    if not args.logs.is_dir():
        print(f"{args.logs}: no such folder (the real logs live beside the repo)", file=sys.stderr)
        return 2
    rows = run(args.set, args.logs)
    if not rows:
        print("no set with two inter-node counts to transfer between", file=sys.stderr)
        return 2
    print("# fit the small node counts, predict the larger (median/max |error| >= 1 MiB)")
    print(table(rows))
    notes: list[str] = []
    chosen = [x for x in discover(args.logs, notes) if not args.set or x.set in args.set]
    for line in notes:
        print(line)
    for line in untransferred(chosen):
        print(line)
    with tempfile.TemporaryDirectory(prefix="cb-real-logs-") as tmp:
        for line in twins(chosen, Workspace(Path(tmp))):
            print(line)
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in rows], indent=1, default=str))
    return 0 if all(r.status == "PASS" for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
