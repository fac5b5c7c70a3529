"""commbench beside the C tools OSU and IMB users know: the side-by-side ratio table.

    python bench/peers.py [--osu-bin DIR] [--imb-bin PATH] [--tools osu,imb] \
        [--ranks 2,4] [--rounds 5] [--buffers plain] [--max 4M] [--sizes-per-job 4] [--control]

Runs the OSU Micro-Benchmarks and IMB-MPI1 you have installed: HPC-X ships both
(`$HPCX_DIR/ompi/tests/osu-micro-benchmarks*`, `.../tests/imb`), MVAPICH ships OSU
(`$prefix/libexec/osu-micro-benchmarks/mpi/...`), Spack builds both (`spack load
osu-micro-benchmarks intel-mpi-benchmarks`, or `--osu-bin $(spack location -i
osu-micro-benchmarks)`). Each program is found by name (osu_latency, osu_allreduce,
osu_allgather, osu_alltoall, IMB-MPI1) under `--osu-bin` / `--imb-bin` (searched
SEARCH_DEPTH folders deep, so an install prefix will do), else on PATH; nothing is built or
downloaded. They must be built against the MPI whose `mpirun` launches commbench (`bench/_util`:
the one beside this Python, else PATH), or the comparison is of two MPIs. Then it runs rounds,
interleaved tool by tool (commbench, OSU, IMB, commbench, ...), of pingpong, allreduce,
allgather and alltoall from 8 B to 4 MiB on each rank count (the tools' order changing from
round to round: job_order), and prints, per (op, ranks, size), the median over rounds of
commbench's time divided by each tool's, both measured in the same round.

Like for like: the sizes are OSU's and IMB's (per rank for allgather/alltoall: commbench
runs `--per-rank-size`), bytes as int8 (MPI_CHAR/MPI_BYTE) except allreduce in float32
(OSU `-T mpi_float`, IMB's MPI_FLOAT reductions); the tools' average over iterations (and
ranks) against commbench's `rank_avg_us`, the same statistic: each rank's mean over
iterations, averaged over ranks (OSU's "Avg Latency", IMB's t_avg; `--stat time_mean_us` for
commbench's own mean of the max over ranks, which reads up to 1.5x higher at small sizes where
ranks leave the barrier apart); OSU's iteration counts (`--iters osu`: osu_latency 10000 + 100
warm-up up to 8 KiB, 1000 + 10 above; the collectives 1000 + 100 and 100 + 10), where the
adaptive count would time a different number of calls; pingpong timed back to back
(`--timing pipelined`), as osu_latency and IMB PingPong; commbench's buffers in the same mode
as the tools' own (`plain`: 4 KiB pages, what their page-aligned malloc gets under THP
`madvise`); the tools' malloc under commbench's own heap policy (`--peer-heap kept`: mmap off,
never trim, through GLIBC_TUNABLES; measure/transport/heap.py says why commbench keeps Open
MPI's per-call scratch warm), else a 2-rank 4 MiB allreduce read 0.85x of OSU over 30 rounds.
Left unlike: an installed OSU prints 2 decimals (FLOAT_PRECISION), a +-3% step of its own at
the 0.15 us of an 8 B ping-pong here (the median over rounds smooths it); osu_latency 7.4
reads MPI_Wtime twice per round trip (~30 ns a read here) where commbench's back-to-back loop
reads it twice per run, so at 8-256 B commbench reads 0.91-0.96x of OSU where OSU reads
1.00-1.03x of itself.

The noise, on a 2-vCPU KVM guest, is by job: a 2-rank 1 MiB allreduce reads ~170 us or ~700
us (4x) for a whole job, whichever tool runs it (20-40% of jobs slow), small sizes move
between ~0.2, ~0.3 and ~0.7 us likewise, and the state is drawn again across idle gaps (no
binding, coll, ASLR, THP, warm-up or pre-spin setting pinned it; with the guest's idle loop
polling, /dev/cpu_dma_latency 0, every job read slow). A round's ratio compares two such
draws, so few rounds leave the A/A control (`--control`) as wide as the comparison: 16 of 80
cells outside 0.9-1.1x over 6 rounds, 1 over 30, 0 over 60, and commbench / OSU 29, 2, 0
(x). So: `--rounds 60` where the control is wide (20 min on 2 ranks with the control).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _util import Row, commbench, mpirun, write_rows  # noqa: E402

from commbench.measure.transport.heap import TUNABLES  # noqa: E402

OPS = ("pingpong", "allreduce", "allgather", "alltoall")
OSU_PROGRAMS = {  # as OSU installs them (libexec/osu-micro-benchmarks/mpi/...) and HPC-X ships
    "pingpong": "osu_latency",
    "allreduce": "osu_allreduce",
    "allgather": "osu_allgather",
    "alltoall": "osu_alltoall",
}
IMB_PROGRAM = "IMB-MPI1"
SEARCH_DEPTH = 6  # prefix/libexec/osu-micro-benchmarks/mpi/pt2pt/standard/osu_latency: 5 down
OSU_TYPE = {"allreduce": ["-T", "mpi_float"]}  # the others move MPI_CHAR, as by default
IMB_BENCHMARKS = {"pingpong": "PingPong", "allreduce": "Allreduce"}
IMB_BENCHMARKS |= {"allgather": "Allgather", "alltoall": "Alltoall"}
DTYPE = {"allreduce": "float32"}  # commbench: the others as int8 bytes
PAUSE_S = 1.0  # between jobs: the previous one's processes gone
OSU_LARGE = 8192  # LARGE_MESSAGE_SIZE in OSU's osu_util.h: sizes above take the large counts
# (iterations, warm-up) below and above OSU_LARGE: LAT_LOOP_* / COLL_LOOP_* and *_SKIP_*
OSU_ITERS = {"pingpong": ((10000, 100), (1000, 10)), "collective": ((1000, 100), (100, 10))}
Key = tuple[str, str, int, int]  # (tool, op, ranks, size)


# ---- finding the installed tools -----------------------------------------------------------
def find_program(name: str, where: Path | None) -> Path | None:
    """The executable `name`: `where` itself if it is that file, else the first found under
    the folder `where` (SEARCH_DEPTH deep, folders in name order), else on PATH."""
    if where is None:
        found = shutil.which(name)
        return Path(found) if found else None
    if where.is_file():
        return where if where.name == name and os.access(where, os.X_OK) else None
    for folder, subs, files in os.walk(where):
        if len(Path(folder).relative_to(where).parts) >= SEARCH_DEPTH:
            subs.clear()
        subs.sort()
        if name in files and os.access(Path(folder) / name, os.X_OK):
            return Path(folder) / name
    return None


def find_tools(tools: list[str], osu_bin: Path | None, imb_bin: Path | None) -> dict:
    """{"osu": {op: program}, "imb": IMB-MPI1} for the tools asked for; exit 2 naming what is
    missing and where it was looked for."""
    found: dict = {}
    if "osu" in tools:
        progs = {op: find_program(name, osu_bin) for op, name in OSU_PROGRAMS.items()}
        missing = [OSU_PROGRAMS[op] for op, prog in progs.items() if prog is None]
        if missing:
            _not_found(missing, osu_bin, "--osu-bin DIR (an OSU install: HPC-X's "
                       "ompi/tests/osu-micro-benchmarks*, MVAPICH's or Spack's prefix)")  # fmt: skip
        found["osu"] = progs
    if "imb" in tools:
        imb = find_program(IMB_PROGRAM, imb_bin)
        if imb is None:
            _not_found([IMB_PROGRAM], imb_bin, "--imb-bin PATH (HPC-X's ompi/tests/imb, "
                       "Intel MPI's bin, a Spack intel-mpi-benchmarks prefix)")  # fmt: skip
        found["imb"] = imb
    return found


def _not_found(names: list[str], where: Path | None, hint: str) -> None:
    place = f"under {where}" if where is not None else "on PATH"
    print(f"peers: error: {', '.join(names)} not found {place}: give {hint}", file=sys.stderr)
    raise SystemExit(2)


# ---- parsing ---------------------------------------------------------------------------------
def parse_osu(text: str) -> dict[int, float]:
    """Size -> average latency (us) of an OSU latency or collective table."""
    out = {}
    for line in text.splitlines():
        cells = line.split()
        if len(cells) >= 2 and cells[0].isdigit():
            out[int(cells[0])] = float(cells[1])
    return out


def parse_imb(text: str) -> dict[str, dict[int, float]]:
    """Benchmark -> size -> time (us): PingPong's t[usec], a collective's t_avg[usec]."""
    out: dict[str, dict[int, float]] = {}
    bench, column = None, None
    for line in text.splitlines():
        if line.startswith("# Benchmarking "):
            bench, column = line.split()[2], None
            out.setdefault(bench, {})
        elif "#bytes" in line:
            heads = line.split()
            column = (
                heads.index("t_avg[usec]") if "t_avg[usec]" in heads else heads.index("t[usec]")
            )
        elif bench and column is not None:
            cells = line.split()
            if len(cells) > column and cells[0].isdigit() and int(cells[0]) > 0:
                out[bench][int(cells[0])] = float(cells[column])
    return out


# ---- one round ------------------------------------------------------------------------------
def run_commbench(op: str, n: int, lo: int, hi: int, args: argparse.Namespace) -> dict[int, float]:
    """Size (OSU's) -> commbench's time (us) at lo..hi: one sweep, or two with OSU's counts."""
    if args.iters == "adapt":
        return _commbench_sweep(op, n, lo, hi, [], args)
    small, large = OSU_ITERS["pingpong" if op == "pingpong" else "collective"]
    got: dict[int, float] = {}
    if lo <= OSU_LARGE:
        got |= _commbench_sweep(op, n, lo, min(hi, OSU_LARGE), _counts(small), args)
    if hi > OSU_LARGE:
        got |= _commbench_sweep(op, n, max(lo, 2 * OSU_LARGE), hi, _counts(large), args)
    return got


def _counts(iters_warmup: tuple[int, int]) -> list[str]:
    return ["-n", str(iters_warmup[0]), "-w", str(iters_warmup[1])]


def _commbench_sweep(
    op: str, n: int, lo: int, hi: int, counts: list[str], args: argparse.Namespace
) -> dict[int, float]:
    with tempfile.TemporaryDirectory() as tmp:
        argv = ["run", op, "-m", f"{lo}:{hi}", "--per-rank-size", "-d", DTYPE.get(op, "int8")]
        argv += ["--buffers", args.buffers, "--results", tmp, "--run-id", "r", *counts]
        argv += ["--timing", "pipelined"] if op == "pingpong" else []
        mpirun(n, commbench(*argv), timeout=900)
        records = [json.loads(line) for line in (Path(tmp) / "r" / "records.jsonl").open()]
    per = {r["op"]: r for r in records}
    assert len(per) == 1, per.keys()
    scale = n if op in ("allgather", "alltoall") else 1  # S = p x the per-rank size
    return {r["bytes"] // scale: float(r[args.stat]) for r in records if r["wrong"] == 0}


def size_chunks(lo: int, hi: int, per_job: int) -> list[tuple[int, int]]:
    """lo..hi (powers of 2) in runs of `per_job` sizes, one job per tool each (0: all in one)."""
    sizes = [1 << k for k in range(lo.bit_length() - 1, hi.bit_length())]
    step = per_job or len(sizes)
    return [
        (part[0], part[-1]) for part in (sizes[i : i + step] for i in range(0, len(sizes), step))
    ]


def one_round(
    osu: dict | None, imb: Path | None, ranks: list[int], hi: int, args, turn: int = 0
) -> dict:
    """Every (tool, op, ranks, size) once, tool by tool within each rank count, op and chunk of
    sizes (`--sizes-per-job`); the tools' order changes with `turn` and the chunk (job_order),
    and each job starts after a pause, so the previous job's exit (its ranks and mpirun
    leaving) lands on each tool alike rather than on the one after commbench (that put OSU's
    small sizes, measured first, 1.3-2x slow). Short chunks keep the tools' jobs on one size
    seconds apart (on this VM, 4 sizes a job did not bring the A/A control closer than
    whole-sweep jobs: a 2-rank all-reduce's state flips from job to job)."""
    got: dict[Key, float] = {}
    env = peer_env(args.peer_heap)
    for n in ranks:
        for op in OPS:
            if op == "pingpong" and n != 2:
                continue
            for c, (a, b) in enumerate(size_chunks(8, hi, args.sizes_per_job)):
                jobs = [("commbench", partial(run_commbench, op, n, a, b, args))]
                if osu is not None:
                    jobs.append(("osu", partial(run_osu, osu, op, n, a, b, env)))
                    if args.control:  # OSU a second time: the A/A control
                        jobs.append(("osu-again", partial(run_osu, osu, op, n, a, b, env)))
                if imb is not None:
                    jobs.append(("imb", partial(run_imb, imb, op, n, a, b, env)))
                for who, job in job_order(jobs, turn + c, control=args.control):
                    time.sleep(args.pause)
                    for size, t in job().items():
                        got[who, op, n, size] = t
    return got


def job_order(jobs: list, turn: int, control: bool) -> list:
    """The round's order: rotated by `turn`, so each tool takes each place in turn; with the
    control, commbench, OSU, OSU again (then IMB) forward and backward in turn instead, so that
    commbench and the second OSU job both sit next to the first OSU job in every round (on a
    machine whose state lasts seconds, neighbours share it: the A/A pair must be as near as
    the pair it controls for)."""
    if control:
        return jobs if turn % 2 == 0 else jobs[::-1]
    k = turn % len(jobs)
    return jobs[k:] + jobs[:k]


def peer_env(heap: str) -> dict[str, str]:
    """The C tools' environment: commbench's heap policy (heap.TUNABLES: mmap off, never trim)
    added to any glibc tunables set (`--peer-heap kept`), so Open MPI's per-call scratch is
    warm in every process, or glibc's default left as it is (`libc`). Under the default a
    2-rank 4 MiB osu_allreduce faulted in fresh scratch on some calls: median of 5 fast jobs
    713 us against 624 us kept, commbench 0.85x of OSU over 30 rounds."""
    if heap == "libc":
        return {}
    tunables = os.environ.get("GLIBC_TUNABLES")
    return {"GLIBC_TUNABLES": f"{tunables}:{TUNABLES}" if tunables else TUNABLES}


def run_osu(osu: dict, op: str, n: int, lo: int, hi: int, env: dict) -> dict[int, float]:
    argv = [str(osu[op]), "-m", f"{lo}:{hi}", *OSU_TYPE.get(op, [])]
    return parse_osu(mpirun(n, argv, timeout=900, env=env))


def run_imb(imb: Path, op: str, n: int, lo: int, hi: int, env: dict) -> dict[int, float]:
    argv = [str(imb), "-msglog", f"{lo.bit_length() - 1}:{hi.bit_length() - 1}", "-time", "60"]
    argv += ["-npmin", str(n), IMB_BENCHMARKS[op]]
    return parse_imb(mpirun(n, argv, timeout=900, env=env)).get(IMB_BENCHMARKS[op], {})


# ---- the table -------------------------------------------------------------------------------
def ratio_table(
    rounds: list[dict[Key, float]], peer: str, tool: str = "commbench"
) -> dict[tuple[str, int, int], float]:
    """(op, ranks, size) -> median over rounds of `tool` / `peer`, each ratio taken within
    one round (the load of a shared machine drifts between rounds)."""
    ratios: dict[tuple[str, int, int], list[float]] = {}
    for got in rounds:
        for (who, op, n, size), t in got.items():
            if who != peer or t <= 0 or (tool, op, n, size) not in got:
                continue
            ratios.setdefault((op, n, size), []).append(got[tool, op, n, size] / t)
    return {k: statistics.median(v) for k, v in sorted(ratios.items())}


def medians_table(
    rounds: list[dict[Key, float]], peer: str, tool: str = "commbench"
) -> dict[tuple[str, int, int], float]:
    """(op, ranks, size) -> `tool`'s median over rounds / `peer`'s median over rounds. On a
    VM whose small-message latency is bimodal by job (here a 2-rank job runs its whole sweep
    at ~0.2 us or at ~0.5 us, whichever tool it is), a round's ratio compares two draws of that
    state, so a few rounds' median of ratios is a coin toss; the ratio of medians compares each
    tool's typical job instead."""
    times: dict[tuple[str, tuple[str, int, int]], list[float]] = {}
    for got in rounds:
        for (who, op, n, size), t in got.items():
            times.setdefault((who, (op, n, size)), []).append(t)
    out = {}
    for (who, key), ts in sorted(times.items()):
        mine = times.get((tool, key))
        if who == peer and mine and statistics.median(ts) > 0:
            out[key] = statistics.median(mine) / statistics.median(ts)
    return out


def print_table(tables: dict[str, dict[tuple[str, int, int], float]], lo: float, hi: float) -> int:
    """One row per (op, ranks, size), one column per table; returns cells outside [lo, hi]."""
    peers = list(tables)
    keys = sorted({k for t in tables.values() for k in t})
    print(f"{'op':>10} {'ranks':>5} {'size(B)':>9} " + " ".join(f"{p:>8}" for p in peers))
    outside = 0
    for k in keys:
        cells = []
        for p in peers:
            r = tables[p].get(k)
            outside += r is not None and not lo <= r <= hi
            cells.append(f"{r:8.2f}" if r is not None else f"{'-':>8}")
        print(f"{k[0]:>10} {k[1]:>5} {k[2]:>9} " + " ".join(cells))
    return outside


def main() -> int:
    from commbench.sizes import parse_size

    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--osu-bin", type=Path, help="where OSU's programs are installed "
                    "(default: PATH)")  # fmt: skip
    ap.add_argument("--imb-bin", type=Path, help="IMB-MPI1, or a folder holding it "
                    "(default: PATH)")  # fmt: skip
    ap.add_argument("--tools", default="osu,imb", help="peers to run (default: %(default)s)")
    ap.add_argument("--ranks", default="2,4", help="rank counts (default: %(default)s)")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default: 5)")
    ap.add_argument("--max", default="4M", help="largest size, a power of 2 (default: 4M)")
    ap.add_argument("--buffers", choices=("plain", "hugepage"), default="plain")
    ap.add_argument(
        "--peer-heap",
        choices=("kept", "libc"),
        default="kept",
        help="the C tools' malloc: commbench's policy (mmap off, no trim) or glibc's default "
        "(default: %(default)s)",
    )
    ap.add_argument(
        "--stat", choices=("rank_avg_us", "time_mean_us", "time_us"), default="rank_avg_us"
    )
    ap.add_argument(
        "--iters", choices=("osu", "adapt"), default="osu", help="commbench's iteration counts"
    )
    ap.add_argument(
        "--control",
        action="store_true",
        help="run OSU twice a round and print OSU / OSU beside commbench / OSU: the A/A test "
        "of how many cells this machine's run-to-run noise alone puts outside the band",
    )
    ap.add_argument(
        "--sizes-per-job",
        type=int,
        default=0,
        help="sizes per job, the tools taking turns on each run of sizes (default: the whole "
        "sweep in one job per tool)",
    )
    ap.add_argument(
        "--pause", type=float, default=PAUSE_S, help="seconds between jobs (default: %(default)s)"
    )
    ap.add_argument("--json", default=None, help="write the headline rows here")
    ap.add_argument("--raw", default=None, help="write every round's times here (JSON)")
    args = ap.parse_args()
    tools = [name.strip() for name in args.tools.split(",") if name.strip()]
    if not tools or not set(tools) <= {"osu", "imb"}:
        ap.error(f"--tools {args.tools!r}: osu, imb or both")
    found = find_tools(tools, args.osu_bin, args.imb_bin)
    osu, imb = found.get("osu"), found.get("imb")
    for who, where in (("osu", osu and osu["pingpong"].parent), ("imb", imb)):
        if where is not None:
            print(f"# {who}: {where}", file=sys.stderr, flush=True)
    ranks = [int(r) for r in args.ranks.split(",")]
    hi = parse_size(args.max, "--max")
    rounds = []
    for i in range(args.rounds):
        print(f"# round {i + 1} of {args.rounds}", file=sys.stderr, flush=True)
        try:
            rounds.append(one_round(osu, imb, ranks, hi, args, turn=i))
        except SystemExit as e:  # a job failed (the launcher, under load): keep what finished
            print(f"# round {i + 1} stopped: {e}", file=sys.stderr, flush=True)
            break
    if not rounds:
        sys.exit("peers: no round finished")
    peers = {"osu": osu, "imb": imb}
    used = [p for p, where in peers.items() if where is not None]
    tables = {f"{p}/x": ratio_table(rounds, p) for p in used}
    tables |= {f"{p}/med": medians_table(rounds, p) for p in used}
    if args.control and osu is not None:  # same statistic, OSU's second job over its first
        tables["aa/x"] = ratio_table(rounds, "osu", tool="osu-again")
        tables["aa/med"] = medians_table(rounds, "osu", tool="osu-again")
    print(f"# commbench time / peer time ({args.stat}) over {len(rounds)} interleaved rounds: "
          "x = median of the ratios within a round, med = ratio of the medians over rounds; "
          f"buffers {args.buffers}, peers' heap {args.peer_heap}"
          + ("; aa = OSU's second job / its first (the A/A control)" if args.control else ""))  # fmt: skip
    print_table(tables, 0.9, 1.1)
    rows = []
    for name, t in tables.items():
        out = sum(not 0.9 <= r <= 1.1 for r in t.values())
        print(f"# {name}: {out} of {len(t)} cells outside 0.9-1.1x")
        if name == "aa/x" and out:
            print(f"# the A/A control misses the band in {out} cells: the machine's job-to-job "
                  f"noise alone; more rounds narrow it (--rounds {len(rounds)} now)")  # fmt: skip
        label = name if name.startswith("aa/") else f"commbench/{name}"
        if t:
            rows.append(Row("peers", f"{label} median", statistics.median(t.values()),
                            "x", "0.9-1.1"))  # fmt: skip
            rows.append(Row("peers", f"{label} cells outside 0.9-1.1x", out, "", "0"))
    write_rows(args.json, rows)
    if args.raw:  # every round's times, for other statistics later
        Path(args.raw).write_text(json.dumps([[[*k, t] for k, t in r.items()] for r in rounds]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
