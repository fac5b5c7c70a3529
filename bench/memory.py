"""Memory: peak RSS per rank of commbench on the mpi backend against the C floor's.

For each op at S (default 256 MiB) on 2 ranks: `commbench run OP -b S -e S` (peak RSS from
COMMBENCH_DIAG_DIR, max over ranks) and bench/floor.c on the same point (its own peak RSS,
i.e. the two buffers plus whatever MPI allocates itself). A sweep from S/256 to S in one run
shows buffers are allocated once at the largest size and reused as views. Goal: at
most 2 x the largest buffer + 100 MB per rank; MPI's own temporaries (Open MPI's allreduce
keeps a scratch buffer) are shown by the floor column.

    python bench/memory.py --size 256M [--json rows.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _util import Row, build_floor, commbench, json_lines, mpirun, write_rows  # noqa: E402

MB = 1e6
MiB = 1 << 20


def parse_size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1].upper()] if text[-1].upper() in units else int(text)


def commbench_rss(n: int, op: str, lo: int, hi: int, timeout: float) -> tuple[float, int]:
    """(max peak RSS over ranks, points measured) of one `commbench run` sweep lo..hi (x4)."""
    with tempfile.TemporaryDirectory(prefix="cb-memory-") as tmp:
        diag = Path(tmp) / "diag"
        argv = commbench(
            "run", op, "-b", str(lo), "-e", str(hi), "-f", "4", "--iters", "3", "--warmup", "1",
            "--backend", "mpi", "--results", str(Path(tmp) / "results"), "--run-id", "m",
        )  # fmt: skip
        mpirun(n, argv, timeout, {"COMMBENCH_DIAG_DIR": str(diag)})
        rss = max(json.loads(f.read_text())["maxrss_bytes"] for f in diag.glob("rank-*.json"))
        records = (Path(tmp) / "results" / "m" / "records.jsonl").read_text().splitlines()
        assert all(json.loads(r)["wrong"] == 0 for r in records)
    return rss, len(records)


def floor_rss(n: int, op: str, size: int, timeout: float) -> float:
    out = mpirun(n, [str(build_floor()), f"{op}:{size}:3:1"], timeout)
    return next(r["maxrss_bytes"] for r in json_lines(out) if "maxrss_bytes" in r)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="256M")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--ops", default="allreduce,alltoall,sendrecv,allgather")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    size, n = parse_size(args.size), args.ranks
    limit = 2 * size + 100 * MB
    print(f"# peak RSS per rank (max over {n} ranks), S = {size / MiB:g} MiB, "
          f"goal <= 2 S + 100 MB = {limit / MiB:.0f} MiB")  # fmt: skip
    head = ("op", "points", "commbench MiB", "C floor MiB", "cb - C MiB", "goal")
    print("#" + "".join(f"{h:>15}" for h in head)[1:])
    rows = []
    for op in args.ops.split(","):
        c = floor_rss(n, op, size, args.timeout) if op != "allgather" else None
        for lo, label in ((size, "one point"), (size // 256, "sweep")):
            rss, points = commbench_rss(n, op, lo, size, args.timeout)
            ok = rss <= limit
            cells = [
                f"{rss / MiB:>15.0f}",
                f"{c / MiB:>15.0f}" if c else f"{'-':>15}",
                f"{(rss - c) / MiB:>15.0f}" if c else f"{'-':>15}",
                f"{'ok' if ok else 'over':>15}",
            ]
            print(f"{op:>15}{points:>15}" + "".join(cells) + f"  ({label})")
            name = f"{op} {size // MiB} MiB, {n} ranks, {label}: peak RSS"
            rows.append(Row("memory", name, rss / MiB, "MiB", f"<= {limit / MiB:.0f}", ok))
            if c:
                over = (rss - c) / MiB
                rows.append(Row("memory", f"{name} minus C floor's", over, "MiB",
                                f"<= {100 * MB / MiB:.0f}", over <= 100 * MB / MiB))  # fmt: skip
    print("# allgather: S is the gathered output; the floor program does not time allgather")
    write_rows(args.json, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
