"""`make gpu-check`: commbench's GPU path on this machine, end to end, as one table.

On one GPU: versions, torch.cuda._sleep's measured rate, every op in bfloat16 through
`--backend nccl` at world size 1 with the exact check, per-iteration (pre-roll and enqueue
timers) against pipelined timing at 8 B-64 KiB (the host-overhead gap), CUDA-event time
against host time at 256 MiB, and two ranks on one GPU refused with a clear error. On two or
more GPUs also: every op across the GPUs, `suite pp --quick`, pingpong, and both launchers
(mpirun and torchrun). Prints one summary table; exits 1 if any check failed, 2 where there
is no usable GPU (or torch has no CUDA).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OPS = ("allreduce", "allgather", "reduce_scatter", "alltoall", "alltoallv", "broadcast", "reduce")
PAIR_OPS = ("sendrecv", "pingpong")
SMALL = "8,64,512,4K,64K"


@dataclass
class Check:
    """One line of the summary: what was checked, whether it held, the numbers behind it."""

    name: str
    ok: bool
    detail: str


def summary(checks: list[Check]) -> str:
    """The summary table: one row per check, PASS/FAIL, then a count."""
    width = max([len(c.name) for c in checks] + [5])
    lines = [f"{'check':<{width}}  result  detail", f"{'-' * width}  ------  ------"]
    lines += [f"{c.name:<{width}}  {'PASS' if c.ok else 'FAIL':<6}  {c.detail}" for c in checks]
    failed = sum(not c.ok for c in checks)
    lines.append(f"{len(checks) - failed} of {len(checks)} checks passed")
    return "\n".join(lines)


def env() -> dict[str, str]:
    out = dict(os.environ)
    out.update(
        OMPI_ALLOW_RUN_AS_ROOT="1",
        OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
        PYTHONPATH=os.pathsep.join([str(REPO), out.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        PYTHONUNBUFFERED="1",
    )
    return out


class Runner:
    """Runs commbench jobs into a scratch results directory and reads their records back."""

    def __init__(
        self, python: str, mpirun: list[str], torchrun: str, results: Path, timeout: float
    ):
        self.python, self.mpirun, self.torchrun = python, mpirun, torchrun
        self.results, self.timeout = results, timeout
        self.count = 0

    def job(self, ranks: int, args: list[str], launcher: str = "mpirun", extra: dict | None = None):
        """(returncode, output, records) of `commbench ARGS` on `ranks` ranks."""
        self.count += 1
        run_id = f"c{self.count}"
        cb = ["-m", "commbench", *args, "--results", str(self.results), "--run-id", run_id]
        if ranks == 1 and launcher == "mpirun":
            cmd = [self.python, *cb]
        elif launcher == "torchrun":
            cmd = [self.torchrun, "--standalone", f"--nproc-per-node={ranks}", *cb]
        else:
            cmd = [*self.mpirun, "-n", str(ranks), self.python, *cb]
        try:
            p = subprocess.run(
                cmd, capture_output=True, text=True, timeout=self.timeout,
                env={**env(), **(extra or {})}, cwd=REPO,
            )  # fmt: skip
            code, out = p.returncode, p.stdout + p.stderr
        except subprocess.TimeoutExpired as e:
            code, out = 124, f"timed out after {self.timeout:g} s: {e.stdout or ''}"
        path = self.results / run_id / "records.jsonl"
        records = [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []
        return code, out, records


def last_line(text: str) -> str:
    lines = [x for x in text.strip().splitlines() if x.strip()]
    return lines[-1][:160] if lines else ""


def ran_clean(name: str, code: int, out: str, records: list[dict], need: int = 1) -> Check:
    """A job that exited 0 with at least `need` records and no wrong element."""
    wrong = sum(r.get("wrong", 0) for r in records)
    ok = code == 0 and len(records) >= need and wrong == 0
    detail = (
        f"{len(records)} records, wrong={wrong}" if code == 0 else f"rc={code}: {last_line(out)}"
    )
    return Check(name, ok, detail)


def medians(records: list[dict]) -> dict[int, float]:
    return {r["bytes"]: r["time_us"] for r in records if r.get("kind", "sweep") != "step"}


def one_gpu_checks(r: Runner) -> list[Check]:
    import torch

    from commbench.measure.transport.torchdist import sleep_rate

    checks = [
        Check(
            "versions",
            True,
            f"torch {torch.__version__}, CUDA {torch.version.cuda}, NCCL "
            f"{'.'.join(map(str, torch.cuda.nccl.version()))}, {torch.cuda.get_device_name(0)}",
        )
    ]
    torch.cuda.set_device(0)
    rate = sleep_rate()
    checks.append(Check("_sleep rate", 0.3e9 < rate < 5e9, f"{rate / 1e9:.3f} G cycles/s"))
    for op in OPS:
        code, out, recs = r.job(
            1,
            ["run", op, "--backend", "nccl", "-d", "bf16", "--sizes", "8,64K,16M", "--iters", "5"],
        )
        checks.append(ran_clean(f"world 1 {op} bf16", code, out, recs, 3))
    timed = {}
    for label, flags in (
        ("pre-roll", ["--gpu-timer", "pre-roll"]),
        ("enqueue", ["--gpu-timer", "enqueue"]),
        ("pipelined", ["--timing", "pipelined"]),
    ):
        code, out, recs = r.job(
            1, ["run", "allreduce", "--backend", "nccl", "--sizes", SMALL, "--iters", "50", *flags]
        )
        checks.append(ran_clean(f"small allreduce {label}", code, out, recs, 5))
        timed[label] = medians(recs)
    if all(timed.values()):
        gap = {
            s: timed["enqueue"][s] - timed["pre-roll"][s]
            for s in timed["enqueue"]
            if s in timed["pre-roll"]
        }
        small = min(gap)
        checks.append(
            Check(
                "host-overhead gap 8 B",
                gap[small] > 0,
                f"enqueue {timed['enqueue'][small]:.1f} us, pre-roll {timed['pre-roll'][small]:.1f} us, "
                f"pipelined {timed['pipelined'].get(small, float('nan')):.1f} us",
            )
        )
    checks.append(event_vs_host(256 << 20))
    code, out, _ = r.job(
        2,
        ["run", "allreduce", "--backend", "nccl", "--sizes", "8"],
        extra={"CUDA_VISIBLE_DEVICES": "0"},
    )
    clear = code == 2 and "one GPU per rank" in out and "Traceback" not in out
    checks.append(Check("2 ranks on 1 GPU refused", clear, f"rc={code}: {last_line(out)}"))
    return checks


def event_vs_host(nbytes: int) -> Check:
    """One rank's 256 MiB all-reduce: CUDA-event time against host time (perf_counter around
    the call and a synchronize); at this size they should agree within 10%."""
    import torch
    import torch.distributed as dist

    from commbench.measure.transport.rendezvous import free_port

    dist.init_process_group(
        "nccl", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1,
        device_id=torch.device("cuda", 0),
    )  # fmt: skip
    try:
        x = torch.ones(nbytes // 4, device="cuda")
        for _ in range(3):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        events, hosts = [], []
        for _ in range(10):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            t0 = time.perf_counter()
            a.record()
            dist.all_reduce(x)
            b.record()
            b.synchronize()
            hosts.append(time.perf_counter() - t0)
            events.append(a.elapsed_time(b) / 1e3)
    finally:
        dist.destroy_process_group()
    ev, host = sorted(events)[5], sorted(hosts)[5]
    return Check(
        "event vs host 256 MiB",
        abs(host - ev) <= 0.1 * host,
        f"event {ev * 1e6:.0f} us, host {host * 1e6:.0f} us",
    )


def multi_gpu_checks(r: Runner, n: int) -> list[Check]:
    checks = []
    for op in (*OPS, "sendrecv"):
        code, out, recs = r.job(
            n, ["run", op, "--backend", "nccl", "--sizes", "8,64K,16M", "--iters", "5"]
        )
        checks.append(ran_clean(f"{n} GPUs {op}", code, out, recs, 3))
    code, out, recs = r.job(
        2, ["run", "pingpong", "--backend", "nccl", "--sizes", "8,64K", "--iters", "5"]
    )
    checks.append(ran_clean("2 GPUs pingpong", code, out, recs, 2))
    if n % 2 == 0:
        code, out, recs = r.job(n, ["suite", "pp", "--quick", "--backend", "nccl"])
        checks.append(ran_clean(f"{n} GPUs suite pp --quick", code, out, recs))
    code, out, recs = r.job(
        n, ["run", "allreduce", "--backend", "nccl", "--sizes", "8,1M"], launcher="torchrun"
    )
    checks.append(ran_clean(f"torchrun {n} GPUs allreduce", code, out, recs, 2))
    code, out, recs = r.job(n, ["run", "allgather", "--backend", "nccl", "--sizes", "8,1M"])
    checks.append(ran_clean(f"mpirun {n} GPUs allgather", code, out, recs, 2))
    return checks


def gpu_count() -> tuple[int, str]:
    """(usable GPUs, why none) from torch itself."""
    try:
        import torch
    except ImportError:
        return 0, "torch is not installed"
    if torch.version.cuda is None:
        return 0, f"torch {torch.__version__} is a CPU build (install a CUDA build of torch)"
    if not torch.cuda.is_available():
        return 0, "torch.cuda.is_available() is False: no NVIDIA GPU or driver visible"
    return torch.cuda.device_count(), ""


def main(argv: list[str] | None = None, count: Callable[[], tuple[int, str]] = gpu_count) -> int:
    ap = argparse.ArgumentParser(prog="gpu_check", description=__doc__.splitlines()[0])
    ap.add_argument("--python", default=sys.executable, help="the interpreter to run commbench")
    ap.add_argument(
        "--mpirun", default=None, help="mpirun command (default: beside --python, else PATH)"
    )
    ap.add_argument("--torchrun", default=None, help="torchrun (default: beside --python)")
    ap.add_argument("--gpus", type=int, default=None, help="GPUs to use (default: all visible)")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per job (default: 300)")
    ap.add_argument("--keep", type=Path, default=None, help="keep the runs under this directory")
    args = ap.parse_args(argv)
    if args.gpus is not None and args.gpus < 1:
        ap.error("--gpus must be 1 or more")
    n, why = count()
    if n == 0:
        print(f"gpu-check: no usable GPU: {why}", file=sys.stderr)
        return 2
    n = min(n, args.gpus or n)
    bindir = Path(args.python).parent
    mpirun = args.mpirun or (
        str(bindir / "mpirun")
        if (bindir / "mpirun").exists()
        else shutil.which("mpirun") or "mpirun"
    )
    torchrun = args.torchrun or str(bindir / "torchrun")
    results = args.keep or Path(tempfile.mkdtemp(prefix="gpu-check-"))
    r = Runner(args.python, [mpirun, "--oversubscribe"], torchrun, results, args.timeout)
    checks = one_gpu_checks(r)
    if n >= 2:
        checks += multi_gpu_checks(r, n)
    print(summary(checks))
    if args.keep is None:
        shutil.rmtree(results, ignore_errors=True)
    return 0 if all(c.ok for c in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
