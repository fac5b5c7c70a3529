"""Harness overhead: commbench's reported median over a C floor and a bare mpi4py floor.

All implementations time the same points the same way (per iteration: barrier, clock, op,
clock; max over ranks; median over iterations; float32; same iteration and warmup counts;
buffers allocated alike) inside one MPI job per rank count (overhead_job.py), interleaved
block by block in rotating order: the C floor (floor.c), the bare mpi4py loop
(floor_mpi4py.py), commbench's Runner with the native loop, and with the Python loop
(the COMMBENCH_NATIVE=0 fallback). A ratio is taken between blocks of the same round; the
median over blocks is quoted, for the median over iterations (the goal) and for the minimum
(which shrugs off other load on a shared machine). Goal, mpi backend, 2 ranks:
commbench <= 1.10x the C floor at 8 B and <= 1.02x at 4 MiB.

    python bench/overhead.py --ranks 2,4 --blocks 11 --iters 200 [--json rows.json]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _util import Row, build_floor, json_lines, median, mpirun, write_rows  # noqa: E402

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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", default="2,4")
    ap.add_argument("--ops", default="allreduce,alltoall,sendrecv")
    ap.add_argument("--sizes", default="8,64K,4M")
    ap.add_argument("--blocks", type=int, default=11, help="interleaved blocks per point")
    ap.add_argument("--iters", type=int, default=200, help="timed iterations per block")
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--timeout", type=float, default=1200)
    ap.add_argument("--json", default=None, help="write the headline rows here")
    args = ap.parse_args()
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    lib = build_floor(library=True)
    # cells[(n, op, size)][impl] = [(median us, min us) per block]
    cells: dict[tuple, dict[str, list[tuple[float, float]]]] = {}
    for n in (int(x) for x in args.ranks.split(",")):
        argv = [sys.executable, "bench/overhead_job.py", str(lib), "--ops", args.ops]
        argv += ["--sizes", ",".join(map(str, sizes)), "--iters", str(args.iters)]
        argv += ["--warmup", str(args.warmup), "--blocks", str(args.blocks)]
        for rec in json_lines(mpirun(n, argv, args.timeout)):
            cell = cells.setdefault((n, rec["op"], rec["size"]), {i: [] for i in IMPLS})
            cell[rec["impl"]].append((rec["time_us"], rec["time_min_us"], rec["bytes"]))

    print(
        f"# harness overhead: one MPI job per rank count, {args.blocks} interleaved blocks of "
        f"{args.iters} iterations ({args.warmup} warmup) per implementation and point, float32;"
    )
    print("# times: median over blocks of the median over iterations of the max over ranks;")
    print("# ratios: median over blocks of the within-block ratio (min: same with minima)")
    head = ("ranks", "op", "size", "C us", "mpi4py us", "cb us", "cb-py us")
    head += ("cb/C", "cb/mpi4py", "cb-py/C", "min cb/C", "goal")
    print("#" + "".join(f"{h:>11}" for h in head)[1:])
    rows: list[Row] = []
    for (n, op, size), cell in sorted(cells.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        assert len({b for i in IMPLS for _, _, b in cell[i]}) == 1, cell  # same message

        def ratio(a: str, b: str, which: int = 0, cell=cell) -> float:
            return median([x[which] / y[which] for x, y in zip(cell[a], cell[b])])

        med = {i: median([t for t, _, _ in v]) for i, v in cell.items()}
        r_c, r_py, r_pyc = ratio("native", "c"), ratio("native", "mpi4py"), ratio("python", "c")
        r_min = ratio("native", "c", 1)
        goal = GOALS.get(size) if n == 2 else None
        ok = None if goal is None else r_c <= goal
        mark = "" if goal is None else f"<={goal:.2f} {'ok' if ok else 'MISS'}"
        vals = [med["c"], med["mpi4py"], med["native"], med["python"], r_c, r_py, r_pyc, r_min]
        line = f"{n:>11}{op:>11}{human(size):>11}" + "".join(f"{v:>11.3f}" for v in vals)
        print(line + f"{mark:>12}")
        label = f"{op} {human(size)}, {n} ranks"
        rows.append(Row("overhead", f"{label}: commbench / C floor", r_c, "x",
                        f"<= {goal:.2f}" if goal else "", ok))  # fmt: skip
        rows.append(Row("overhead", f"{label}: commbench / C floor, minima", r_min, "x"))
        rows.append(Row("overhead", f"{label}: commbench / mpi4py floor", r_py, "x"))
        rows.append(Row("overhead", f"{label}: Python-loop fallback / C floor", r_pyc, "x"))
    write_rows(args.json, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
