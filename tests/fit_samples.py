"""Sample logs for the importer tests, in each tool's own printf layout.

The numbers are synthetic: times come from a stated alpha-beta line per op (given below and by
each caller), with algbw/busbw derived as the tools derive them, so tests can check that an
import followed by a fit recovers the stated alpha and beta. Nothing here was measured.
"""

from __future__ import annotations


def nccl_time_us(op: str, size: int, p: int, alpha_us: float, busbw_GBps: float) -> float:
    """Ring-model time of a nccl-tests row: alpha + S x busfactor / busbw (synthetic)."""
    return alpha_us + size * _factor(op, p) / (busbw_GBps * 1e3)


def _factor(op: str, p: int) -> float:
    if op == "allreduce":
        return 2 * (p - 1) / p
    if op in ("broadcast", "reduce", "sendrecv"):
        return 1.0
    return (p - 1) / p


def nccl_tests_new(
    op: str = "allreduce",
    ranks: int = 8,
    hosts: int = 1,
    alpha_us: float = 20.0,
    busbw_GBps: float = 150.0,
    sizes: tuple[int, ...] = tuple(8 << k for k in range(0, 25)),
    binary: str | None = "all_reduce_perf",
    redop: str = "sum",
    root: int = -1,
    wrong_at: int | None = None,
    inplace_factor: float = 1.05,
) -> str:
    """Current layout (nccl-tests 2.13+): `# nThread` header, Group in rank lines, root and
    #wrong columns, NCCL INFO lines interleaved as NCCL_DEBUG=INFO prints them."""
    lines = []
    if binary:
        lines.append(f"+ mpirun -np {ranks} --bind-to numa ./build/{binary} -b 8 -e 128M -f 2 -g 1")
    lines += [
        "# nThread 1 nGpus 1 minBytes 8 maxBytes 134217728 step: 2(factor) warmup iters: 5 "
        "iters: 20 agg iters: 1 validation: 1 graph: 0",
        "#",
        "# Using devices",
    ]
    per_host = ranks // hosts
    for r in range(ranks):
        host = f"dgx-a{r // per_host:02d}"
        lines.append(
            f"#  Rank {r:2d} Group  0 Pid {41000 + r:6d} on {host:>10s} device {r % per_host:2d} "
            f"[0000:{0x07 + r:02x}:00] NVIDIA H100 80GB HBM3"
        )
    lines += [
        "dgx-a00:41000:41000 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>",
        "dgx-a00:41000:41000 [0] NCCL INFO NCCL version 2.21.5+cuda12.4",
        "dgx-a00:41000:41000 [0] NCCL INFO NCCL_PROTO set by environment to Simple",
        "#",
        "#                                                              out-of-place          "
        "             in-place          ",
        "#       size         count      type   redop    root     time   algbw   busbw #wrong "
        "    time   algbw   busbw #wrong",
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)        "
        "    (us)  (GB/s)  (GB/s)       ",
    ]
    f = _factor(op, ranks)
    for i, s in enumerate(sizes):
        cells = [f"{s:12d}  {s // 4:12d}  {'float':>8s}  {redop:>6s}  {root:6d}"]
        for k, mult in enumerate((1.0, inplace_factor)):
            t = nccl_time_us(op, s, ranks, alpha_us, busbw_GBps) * mult
            algbw = s / t / 1e3
            wrong = 3 if (wrong_at == i and k == 0) else 0
            cells.append(f"  {t:7.2f}  {algbw:6.2f}  {algbw * f:6.2f}  {wrong:5d}")
        lines.append("".join(cells))
    lines += [
        "# Out of bounds values : 0 OK",
        "# Avg bus bandwidth    : 42.1234 ",
        "#",
        "",
    ]
    return "\n".join(lines)


def nccl_tests_old(
    ranks: int = 4,
    alpha_us: float = 30.0,
    busbw_GBps: float = 10.0,
    bad_error_at: int | None = None,
) -> str:
    """Older layout (2018-2019): no Group, no root, `error` columns with the max deviation."""
    lines = [
        "# nThread 1 nGpus 4 minBytes 8 maxBytes 33554432 step: 2(factor) warmup iters: 5 "
        "iters: 20 validation: 1 ",
        "#",
        "# Using devices",
    ]
    for r in range(ranks):
        lines.append(
            f"#   Rank {r:2d} Pid  12345 on    gpubox device {r:2d} [0x{0x1A + r:02x}] Tesla V100-SXM2-16GB"
        )
    lines += [
        "#",
        "#                                                     out-of-place                  "
        "     in-place          ",
        "#       size         count    type   redop     time   algbw   busbw  error     time   "
        "algbw   busbw  error",
        "#        (B)    (elements)                     (us)  (GB/s)  (GB/s)            (us)  "
        "(GB/s)  (GB/s)       ",
    ]
    f = 2 * (ranks - 1) / ranks
    for i, s in enumerate(8 << k for k in range(0, 23)):
        cells = [f"{s:12d}  {s // 4:12d}  {'float':>6s}  {'sum':>6s}"]
        for _ in range(2):
            t = alpha_us + s * f / (busbw_GBps * 1e3)
            algbw = s / t / 1e3
            err = 2e-1 if bad_error_at == i else (1e-7 if s > 64 else 0.0)
            cells.append(f"  {t:7.2f}  {algbw:5.2f}  {algbw * f:5.2f}  {err:5.0e}")
        lines.append("".join(cells))
    lines += [" Out of bounds values : 0 OK", " Avg bus bandwidth    : 3.21 ", ""]
    return "\n".join(lines)


def osu_collective(
    name: str = "Allreduce",
    alpha_us: float = 3.0,
    GBps: float = 2.0,
    full: bool = True,
    datatype: str | None = "MPI_CHAR",
    version: str = "7.3",
    sizes: tuple[int, ...] = tuple(1 << k for k in range(0, 21)),
) -> str:
    """osu_<coll> [-f]: `# OSU MPI <Name> Latency Test`, optional `# Datatype:`, then the
    size/latency table (%-10d then %18.2f columns; Iterations %12d)."""
    lines = [f"# OSU MPI {name} Latency Test v{version}"]
    if datatype:
        lines.append(f"# Datatype: {datatype}.")
    header = f"{'# Size':<10s}{'Avg Latency(us)':>18s}"
    if full:
        header += f"{'Min Latency(us)':>18s}{'Max Latency(us)':>18s}{'Iterations':>12s}"
    lines.append(header)
    for s in sizes:
        t = alpha_us + s / (GBps * 1e3)
        row = f"{s:<10d}{t:18.2f}"
        if full:
            row += f"{t * 0.9:18.2f}{t * 1.1:18.2f}{1000 if s < 8192 else 100:12d}"
        lines.append(row)
    lines.append("")
    return "\n".join(lines)


def osu_latency(alpha_us: float = 1.5, GBps: float = 10.0) -> str:
    """osu_latency (OMB 5.x layout): `# Size          Latency (us)`."""
    lines = ["", "# OSU MPI Latency Test v5.6.2", f"{'# Size':<10s}{'Latency (us)':>18s}"]
    for k in range(0, 23):
        s = 0 if k == 0 else 1 << (k - 1)
        lines.append(f"{s:<10d}{alpha_us + s / (GBps * 1e3):18.2f}")
    return "\n".join(lines) + "\n"


def osu_bw(GBps: float = 10.0, alpha_us: float = 0.5) -> str:
    """osu_bw: `# Size      Bandwidth (MB/s)` (MB = 1e6 B)."""
    lines = ["# OSU MPI Bandwidth Test v5.6.2", f"{'# Size':<10s}{'Bandwidth (MB/s)':>18s}"]
    for k in range(0, 23):
        s = 1 << k
        t_us = alpha_us + s / (GBps * 1e3)
        lines.append(f"{s:<10d}{s / t_us:18.2f}")
    return "\n".join(lines) + "\n"


def imb_log(alpha_us: float = 2.0, GBps: float = 3.0) -> str:
    """IMB-MPI1 PingPong, Allreduce (2 and 4 processes) and Alltoall blocks."""
    out = [
        "#------------------------------------------------------------",
        "#    Intel(R) MPI Benchmarks 2021.7, MPI-1 part",
        "#------------------------------------------------------------",
        "# Date                  : Mon Mar  4 10:12:01 2024",
        "# Machine               : x86_64",
        "# System                : Linux",
        "# MPI Version           : 3.1",
        "",
        "# Calling sequence was: ",
        "",
        "# ./IMB-MPI1 PingPong Allreduce Alltoall -npmin 2",
        "",
        "# Minimum message length in bytes:   0",
        "# Maximum message length in bytes:   4194304",
        "#",
        "# MPI_Datatype                   :   MPI_BYTE ",
        "# MPI_Datatype for reductions    :   MPI_FLOAT ",
        "# MPI_Op                         :   MPI_SUM  ",
        "#",
        "",
        "# List of Benchmarks to run:",
        "",
        "# PingPong",
        "# Allreduce",
        "# Alltoall",
        "",
    ]

    def sizes():
        return [0] + [1 << k for k in range(0, 23)]

    def block(name, procs, waiting, pingpong=False, per_peer=False):
        lines = [
            "#----------------------------------------------------------------",
            f"# Benchmarking {name} ",
            f"# #processes = {procs} ",
        ]
        if waiting:
            lines.append(f"# ( {waiting} additional processes waiting in MPI_Barrier)")
        lines.append("#----------------------------------------------------------------")
        if pingpong:
            lines.append("       #bytes #repetitions      t[usec]   Mbytes/sec")
        else:
            lines.append("       #bytes #repetitions  t_min[usec]  t_max[usec]  t_avg[usec]")
        for s in sizes():
            S = s * procs if per_peer else s
            t = alpha_us * (procs - 1) + S / (GBps * 1e3)
            reps = 1000 if s < 65536 else 100
            if pingpong:
                lines.append(f"{s:13d}{reps:13d}{t:13.2f}{s / t if t else 0:13.2f}")
            else:
                lines.append(f"{s:13d}{reps:13d}{t * 0.8:13.2f}{t:13.2f}{t * 0.9:13.2f}")
        lines.append("")
        return lines

    out += block("PingPong", 2, 2, pingpong=True)
    out += block("Allreduce", 2, 2)
    out += block("Allreduce", 4, 0)
    out += block("Alltoall", 4, 0, per_peer=True)
    out += ["", "# All processes entering MPI_Finalize", ""]
    return "\n".join(out)


def write_run(root, run_id: str, records: list[dict], status: str = "complete", meta=None):
    """A run directory as commbench run leaves it, holding `records` (synthetic)."""
    from commbench.results.rundir import RunWriter

    w = RunWriter.create(
        root,
        "run",
        {
            "backend": "mpi",
            "hosts": ["synthetic-host"],
            "world_size": 8,
            "num_hosts": 1,
            "env": {"NCCL_ALGO": "Ring"},
            "libraries": {"numpy": "test"},
            **(meta or {}),
        },
        run_id,
    )
    for r in records:
        w.write(r)
    if status == "running":  # killed: meta.json still says running
        w._f.close()
    else:
        w.finish(status)
    return w.path


def collective_records(
    op: str,
    p: int,
    alpha: float,
    beta: float,
    link: str = "intra",
    dtype: str = "float32",
    sizes=tuple(8 << k for k in range(20)),
    noise: float = 0.0,
    seed: int = 0,
    backend: str = "mpi",
    time_of=None,
) -> list[dict]:
    """Records of one op sweep with time = alpha + beta * bytes, or time_of(bytes) seconds,
    times (1 + noise): synthetic."""
    import numpy as np

    rng = np.random.default_rng(seed)
    out = []
    for s in sizes:
        t = (time_of(s) if time_of else alpha + beta * s) * (1 + noise * rng.standard_normal())
        out.append(
            {
                "kind": "collective",
                "op": op,
                "backend": backend,
                "dtype": dtype,
                "bytes": s,
                "count": s // 4,
                "group_size": p,
                "world_size": 8,
                "link_class": link,
                "iters": 10,
                "warmup": 2,
                "time_us": t * 1e6,
                "time_mean_us": t * 1e6,
                "time_min_us": t * 1e6,
                "time_p95_us": t * 1e6,
                "algbw_GBps": s / t / 1e9,
                "busbw_GBps": s / t / 1e9,
                "wrong": 0,
                "timing": "per-iteration",
            }
        )
    return out
