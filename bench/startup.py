"""Start-up: launch to first collective, to first measured point, and total, on 16 ranks.

Runs `mpirun -n 16 --oversubscribe python -m commbench run allreduce -b 8 -e 8 --iters 5
--backend mpi` (and `commbench suite smoke --backend mpi` when the suite command exists) with
COMMBENCH_DIAG_DIR set, so every rank reports wall-clock milestones and its loaded modules;
a bare job (import numpy, import mpi4py.MPI, one barrier) is the floor. The package is
byte-compiled first (compileall), as an installed one is. Launch = just before
mpirun starts; each milestone is the slowest rank's. Goal: first collective within
3 s of launch. The environment passes through: `OMPI_MCA_btl=^ofi python bench/startup.py`
times jobs without Open MPI 5.0's libfabric BTL, whose close sleeps 1 s in every MPI_Init.

    python bench/startup.py --ranks 16 --rounds 3 [--json rows.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _util import REPO, Row, commbench, job_env, median, now, tool, write_rows  # noqa: E402

GOAL_S = 3.0
HEAVY = ("torch", "pandas", "seaborn", "matplotlib", "scipy")
BARE = (
    "import time, numpy; from mpi4py import MPI; MPI.COMM_WORLD.Barrier(); t = time.time(); "
    "t = MPI.COMM_WORLD.allreduce(t, op=MPI.MAX); "
    "MPI.COMM_WORLD.rank or print('{\"first_collective\": %r}' % t)"
)
# milestone -> what it means (diag marks, see commbench/measure/diag.py)
STAGES = (
    ("python", "process start"),
    ("main", "commbench main()"),
    ("parsed", "command module imported, arguments parsed"),
    ("open_world", "imports done, MPI init starts"),
    ("world", "first collective done (MPI up)"),
    ("first_point", "first measured point starts"),
)


def launch(n: int, argv: list[str], env: dict, timeout: float) -> tuple[float, float, str]:
    """(launch wall-clock time, total seconds, stdout) of one mpirun job."""
    cmd = [tool("mpirun"), "-n", str(n), "--oversubscribe", *argv]
    t0 = now()
    p = subprocess.run(
        cmd, capture_output=True, text=True, timeout=timeout, env=job_env(env), cwd=REPO
    )
    total = now() - t0
    if p.returncode:
        sys.exit(f"bench: {' '.join(cmd)} failed ({p.returncode}):\n{p.stdout}{p.stderr}")
    return t0, total, p.stdout


def measure(n: int, args: list[str], timeout: float) -> dict:
    """Milestones (seconds after launch, slowest rank) of one commbench job on n ranks."""
    with tempfile.TemporaryDirectory(prefix="cb-startup-") as tmp:
        diag, results = Path(tmp) / "diag", Path(tmp) / "results"
        argv = commbench(*args, "--backend", "mpi", "--results", str(results))
        t0, total, _ = launch(n, argv, {"COMMBENCH_DIAG_DIR": str(diag)}, timeout)
        ranks = [json.loads(f.read_text()) for f in sorted(diag.glob("rank-*.json"))]
    assert len(ranks) == n, f"{len(ranks)} diagnostics files for {n} ranks"
    out = {"total": total}
    for key, _ in STAGES:
        stamps = [d["process_start"] if key == "python" else d["marks"][key] for d in ranks]
        out[key] = max(stamps) - t0
    for key, _ in STAGES[1:]:  # CPU seconds a rank had used by then (median over ranks)
        out[f"cpu:{key}"] = median([d["cpu"][key] for d in ranks])
    heavy = sorted({m.split(".")[0] for d in ranks for m in d["modules"]} & set(HEAVY))
    out["heavy"] = heavy
    out["modules"] = max(len(d["modules"]) for d in ranks)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    # byte-compile first, as pip does at install: with PYTHONDONTWRITEBYTECODE set (it is on
    # some machines) an editable checkout never gets .pyc files and every rank compiles ~60
    # modules from source at each start (about 0.3 s of its 0.7 s to the suite's first point)
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "commbench")], check=True)
    jobs = {
        "run": ["run", "allreduce", "-b", "8", "-e", "8", "--iters", "5"],
        "suite smoke": ["suite", "smoke"],
    }
    got: dict[str, list[dict]] = {name: [] for name in ["bare", *jobs]}
    for _ in range(args.rounds):
        t0, total, out = launch(args.ranks, [sys.executable, "-c", BARE], {}, args.timeout)
        first = json.loads(out.strip().splitlines()[-1])["first_collective"] - t0
        got["bare"].append({"total": total, "world": first})
        for name, job in jobs.items():
            got[name].append(measure(args.ranks, job, args.timeout))

    print(
        f"# start-up on {args.ranks} ranks (--oversubscribe, this machine), seconds after launch,"
    )
    print(f"# slowest rank, median of {args.rounds} rounds; bare = numpy + mpi4py + one barrier")
    # Open MPI 5.0's libfabric BTL sleeps 1 s as it closes, in every MPI_Init of a machine it
    # finds no fabric on: OMPI_MCA_btl=^ofi in the environment takes that second off each job
    btl = os.environ.get("OMPI_MCA_btl")
    print(f"# OMPI_MCA_btl={btl}" if btl else "# OMPI_MCA_btl unset (Open MPI's default BTLs)")
    print("#" + "".join(f"{h:>14}" for h in ("job", *(k for k, _ in STAGES), "total"))[1:])
    rows = []
    for name, rounds in got.items():
        cells = []
        for key in [k for k, _ in STAGES] + ["total"]:
            vals = [r[key] for r in rounds if key in r]
            cells.append(f"{median(vals):>14.2f}" if vals else f"{'-':>14}")
        print(f"{name:>14}" + "".join(cells))
        first = median([r["world"] for r in rounds])
        total = median([r["total"] for r in rounds])
        ok = first <= GOAL_S if name != "bare" else None
        goal = f"<= {GOAL_S:g} s" if name != "bare" else ""
        rows.append(Row("startup", f"{name}, {args.ranks} ranks: first collective", first, "s",
                        goal, ok))  # fmt: skip
        rows.append(Row("startup", f"{name}, {args.ranks} ranks: total", total, "s"))
        if name != "bare":
            heavy = sorted({m for r in rounds for m in r["heavy"]})
            rows.append(Row("startup", f"{name}: heavy modules imported ({', '.join(HEAVY)})",
                            len(heavy), "", "0", not heavy))  # fmt: skip
            print(f"#   {name}: heavy modules imported: {', '.join(heavy) or 'none'}; "
                  f"modules loaded (max over ranks): {max(r['modules'] for r in rounds)}")  # fmt: skip
    print("# CPU seconds used by each rank at the milestones (median over ranks and rounds):")
    for name, rounds in got.items():
        if name != "bare":
            print(f"{name:>14}" + " " * 14 + "".join(
                f"{median([r['cpu:' + k] for r in rounds]):>14.3f}" for k, _ in STAGES[1:]
            ))  # fmt: skip
    print("# milestones: " + "; ".join(f"{k} = {v}" for k, v in STAGES))
    write_rows(args.json, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
