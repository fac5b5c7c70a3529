"""Harness overhead: commbench's reported median over a C floor and a bare mpi4py floor.

All three time the same points the same way (per iteration: barrier, clock, op, clock; max
over ranks; median over iterations; float32; same iteration and warmup counts). Each round
launches, back to back and in rotating order, the C floor (bench/floor.c), the mpi4py floor
(bench/floor_mpi4py.py), `commbench run` (native loop) and `commbench run` with
COMMBENCH_NATIVE=0 (Python loop); a ratio is taken within a round, then the median over
rounds is quoted (also for the minimum over iterations, which shrugs off other load on the
machine). Goal (issue 8), mpi backend, 2 ranks: <= 1.10x the C floor at 8 B and
<= 1.02x at 4 MiB.

    python bench/overhead.py --ranks 2,4 --rounds 3 [--json rows.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _util import Row, build_floor, commbench, json_lines, median, mpirun, write_rows  # noqa: E402

IMPLS = ("c", "mpi4py", "native", "python")
GOALS = {8: 1.10, 4 << 20: 1.02}  # 2 ranks, vs the C floor


def parse_size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1].upper()] if text[-1].upper() in units else int(text)


def human(nbytes: int) -> str:
    for unit, size in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= size and nbytes % size == 0:
            return f"{nbytes // size} {unit}"
    return f"{nbytes} B"


def run_impl(impl: str, n: int, ops: list[str], sizes: list[int], args, tmp: Path) -> dict:
    """{(op, requested size): (bytes, median us)} of one launch per op (one for the floors)."""
    points = [f"{op}:{s}:{args.iters}:{args.warmup}" for op in ops for s in sizes]
    timeout = args.timeout
    if impl in ("c", "mpi4py"):
        argv = [str(build_floor())] if impl == "c" else [sys.executable, "bench/floor_mpi4py.py"]
        recs = [r for r in json_lines(mpirun(n, argv + points, timeout)) if "op" in r]
        keys = [(op, s) for op in ops for s in sizes]
        return {k: (r["bytes"], r["time_us"], r["time_min_us"]) for k, r in zip(keys, recs)}
    out = {}
    env = {"COMMBENCH_NATIVE": "0"} if impl == "python" else {}
    for op in ops:
        run_id = f"{impl}-{n}-{op}-{len(list(tmp.iterdir()))}"
        argv = commbench(
            "run", op, "--sizes", ",".join(map(str, sizes)), "--iters", str(args.iters),
            "--warmup", str(args.warmup), "--backend", "mpi", "--results", str(tmp),
            "--run-id", run_id,
        )  # fmt: skip
        mpirun(n, argv, timeout, env)
        recs = [json.loads(x) for x in (tmp / run_id / "records.jsonl").read_text().splitlines()]
        for s, rec in zip(sizes, recs):
            assert rec["wrong"] == 0 and rec["loop"] == impl, rec
            out[(op, s)] = (rec["bytes"], rec["time_us"], rec["time_min_us"])
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", default="2,4")
    ap.add_argument("--ops", default="allreduce,alltoall,sendrecv")
    ap.add_argument("--sizes", default="8,64K,4M")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iters", type=int, default=1000)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--json", default=None, help="write the headline rows here")
    args = ap.parse_args()
    ranks = [int(x) for x in args.ranks.split(",")]
    ops = args.ops.split(",")
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    # times[(n, op, size)][impl] = [median us per round]; mins likewise with the minimum
    times: dict[tuple, dict[str, list[float]]] = {}
    mins: dict[tuple, dict[str, list[float]]] = {}
    with tempfile.TemporaryDirectory(prefix="cb-overhead-") as tmpdir:
        tmp = Path(tmpdir)
        for rnd in range(args.rounds):
            for n in ranks:
                order = IMPLS[rnd % len(IMPLS) :] + IMPLS[: rnd % len(IMPLS)]
                got = {impl: run_impl(impl, n, ops, sizes, args, tmp) for impl in order}
                for key in got["c"]:
                    nbytes = {got[i][key][0] for i in IMPLS}
                    assert len(nbytes) == 1, (key, nbytes)  # all measured the same message
                    cell = times.setdefault((n, *key), {i: [] for i in IMPLS})
                    low = mins.setdefault((n, *key), {i: [] for i in IMPLS})
                    for impl in IMPLS:
                        cell[impl].append(got[impl][key][1])
                        low[impl].append(got[impl][key][2])
            print(f"# round {rnd + 1}/{args.rounds} done", file=sys.stderr, flush=True)

    rows: list[Row] = []
    print(
        f"# harness overhead: median over iterations of the max over ranks, {args.iters} iters, "
        f"{args.warmup} warmup, float32; ratios taken within a round, median of "
        f"{args.rounds} rounds"
    )
    head = ("ranks", "op", "size", "C us", "mpi4py us", "cb us", "cb-py us")
    head += ("cb/C", "cb/mpi4py", "cb-py/C", "min cb/C", "goal")
    print("#" + "".join(f"{h:>11}" for h in head)[1:])
    for (n, op, size), cell in sorted(times.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        med = {i: median(v) for i, v in cell.items()}

        def ratio(a: str, b: str, cell=cell) -> float:
            return median([x / y for x, y in zip(cell[a], cell[b])])

        r_c, r_py, r_pyc = ratio("native", "c"), ratio("native", "mpi4py"), ratio("python", "c")
        r_min = ratio("native", "c", mins[(n, op, size)])
        goal = GOALS.get(size) if n == 2 else None
        ok = None if goal is None else r_c <= goal
        mark = "" if goal is None else f"<={goal:.2f} {'ok' if ok else 'MISS'}"
        vals = [med["c"], med["mpi4py"], med["native"], med["python"], r_c, r_py, r_pyc, r_min]
        print(
            f"{n:>11}{op:>11}{human(size):>11}"
            + "".join(f"{v:>11.3f}" for v in vals)
            + f"{mark:>11}"
        )
        label = f"{op} {human(size)}, {n} ranks"
        rows.append(Row("overhead", f"{label}: commbench / C floor", r_c, "x",
                        f"<= {goal:.2f}" if goal else "", ok))  # fmt: skip
        rows.append(Row("overhead", f"{label}: commbench / mpi4py floor", r_py, "x"))
        rows.append(Row("overhead", f"{label}: commbench / C floor, minima", r_min, "x"))
    write_rows(args.json, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
