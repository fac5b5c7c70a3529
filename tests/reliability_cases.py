"""The table of bad inputs: each must end the job with status 2 and one clear line from rank 0.

To cover a new command, append BadInput rows (argv starts with the subcommand; `{tmp}` is a
scratch directory that `setup` may fill; ranks=1 runs a plain process). Rows whose command is
not in this checkout are skipped, so rows can land before their command does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from commbench.transport import cuda_present


@dataclass(frozen=True)
class BadInput:
    """One invalid invocation: what to run, on how many ranks, what the error must say."""

    id: str
    argv: tuple[str, ...]  # after `commbench`; "{tmp}" becomes a scratch directory
    match: str  # regex the single error line must match (re.search)
    ranks: int = 2  # 1: a plain process; >1: under mpirun
    before_communication: bool = True  # fails before MPI/torch start (checked rank by rank)
    setup: Callable[[Path], None] | None = None  # prepares {tmp}
    env: dict[str, str] = field(default_factory=dict)
    skip: str | None = None  # reason to skip on this machine

    @property
    def command(self) -> str:
        return self.argv[0]

    def resolve(self, tmp: Path) -> list[str]:
        return [a.replace("{tmp}", str(tmp)) for a in self.argv]


def _existing_run(tmp: Path) -> None:
    (tmp / "taken").mkdir()


def _results_is_file(tmp: Path) -> None:
    (tmp / "afile").write_text("not a directory\n")


S = ("--sizes", "8,64")  # keeps a row that would run, tiny
R = ("--results", "{tmp}")

RUN: list[BadInput] = [
    # what to run
    BadInput("unknown-op", ("run", "allreduse"), r"unknown op 'allreduse': choose from allreduce"),
    BadInput("schedule-op", ("run", "p2p_schedule"), r"p2p_schedule is built by the pp pattern"),
    BadInput("missing-op", ("run",), r"the following arguments are required: op"),
    BadInput("unknown-command", ("frobnicate",), r"invalid choice: 'frobnicate'"),
    BadInput("unknown-flag", ("run", "allreduce", "--frobnicate"), r"unrecognized arguments"),
    # backend and dtype
    BadInput("unknown-backend", ("run", "allreduce", "--backend", "ucc"), r"invalid choice: 'ucc'"),
    BadInput(
        "nccl-without-gpu",
        ("run", "allreduce", "--backend", "nccl"),
        r"backend nccl needs an NVIDIA GPU",
        skip="a GPU is present" if cuda_present() else None,
    ),
    BadInput("unknown-dtype", ("run", "allreduce", "-d", "fp8"), r"unknown dtype 'fp8': choose"),
    BadInput(
        "bf16-allreduce-on-mpi",
        ("run", "allreduce", "-d", "bf16", "--backend", "mpi"),
        r"MPI has no bfloat16 reduction.*use float32, or --backend gloo/nccl",
    ),
    BadInput(
        "fp16-reduce-scatter-on-mpi",
        ("run", "reduce_scatter", "-d", "fp16", "--backend", "mpi"),
        r"MPI has no float16 reduction",
        ranks=4,
    ),
    # sizes
    BadInput("size-12Q", ("run", "allreduce", "-b", "12Q"), r"-b/--minbytes '12Q' does not parse"),
    BadInput("size-negative", ("run", "allreduce", "-b", "-1"), r"'-1' does not parse"),
    BadInput("size-zero", ("run", "allreduce", "-b", "0"), r"-b/--minbytes '0' must be positive"),
    BadInput("max-size-zero", ("run", "allreduce", "-e", "0"), r"--maxbytes '0' must be positive"),
    BadInput(
        "min-above-max",
        ("run", "allreduce", "-b", "1M", "-e", "1K"),
        r"min size 1 MiB is larger than max size 1 KiB",
    ),
    BadInput("sizes-empty", ("run", "allreduce", "--sizes", ","), r"--sizes is empty"),
    BadInput("sizes-word", ("run", "allreduce", "--sizes", "8,abc"), r"'abc' does not parse"),
    BadInput("size-fraction", ("run", "allreduce", "--sizes", "1.5"), r"not a whole number"),
    BadInput("factor-one", ("run", "allreduce", "-f", "1"), r"size factor 1.0 must be"),
    BadInput("factor-nan", ("run", "allreduce", "-f", "nan"), r"size factor nan must be a finite"),
    BadInput("factor-word", ("run", "allreduce", "-f", "x2"), r"invalid float value: 'x2'"),
    BadInput("step-zero", ("run", "allreduce", "-i", "0"), r"-i/--stepbytes '0' must be positive"),
    # groups, placement, peers
    BadInput(
        "group-not-dividing",
        ("run", "allreduce", "-g", "3"),
        r"group size 3 does not divide the world size 4",
        ranks=4,
    ),
    BadInput(
        "group-not-dividing-8",
        ("run", "alltoall", "-g", "3"),
        r"group size 3 does not divide the world size 8",
        ranks=8,
    ),
    BadInput("group-zero", ("run", "allreduce", "-g", "0"), r"'0' must be at least 1"),
    BadInput(
        "pingpong-on-4",
        ("run", "pingpong", "-g", "4"),
        r"pingpong needs a group of 2 ranks; this one has 4",
        ranks=4,
    ),
    BadInput(
        "pingpong-on-3",
        ("run", "pingpong"),
        r"group size 2 does not divide the world size 3",
        ranks=3,
    ),
    BadInput(
        "pingpong-alone",
        ("run", "pingpong"),
        r"group size 2 does not divide the world size 1",
        ranks=1,
    ),
    BadInput(
        "placement-unknown",
        ("run", "allreduce", "--placement", "diagonal"),
        r"invalid choice: 'diagonal'",
    ),
    BadInput(
        "ranks-per-node-not-dividing",
        ("run", "allreduce", "--ranks-per-node", "3"),
        r"--ranks-per-node 3 does not divide the world size 4",
        ranks=4,
    ),
    BadInput(
        "peer-is-self",
        ("run", "sendrecv", "--peer", "4"),
        r"--peer 4: sendrecv in a group of 4 needs a peer offset between 1 and 3",
        ranks=4,
    ),
    BadInput("peer-zero", ("run", "sendrecv", "--peer", "0"), r"--peer 0: sendrecv in a group"),
    # timing
    BadInput("iters-zero", ("run", "allreduce", "--iters", "0"), r"'0' must be at least 1"),
    BadInput("iters-word", ("run", "allreduce", "--iters", "many"), r"'many' is not an integer"),
    BadInput("iters-fraction", ("run", "allreduce", "-n", "2.5"), r"'2.5' is not an integer"),
    BadInput("warmup-negative", ("run", "allreduce", "-w", "-1"), r"'-1' must be 0 or more"),
    BadInput("budget-zero", ("run", "allreduce", "--budget", "0"), r"'0' must be a positive"),
    BadInput("timing-unknown", ("run", "allreduce", "--timing", "fancy"), r"invalid choice"),
    BadInput("timeout-zero", ("run", "allreduce", "--timeout", "0"), r"'0' must be a positive"),
    BadInput("timeout-negative", ("run", "allreduce", "--timeout", "-5"), r"'-5' must be a pos"),
    BadInput("timeout-inf", ("run", "allreduce", "--timeout", "inf"), r"'inf' must be a positive"),
    BadInput("timeout-nan", ("run", "allreduce", "--timeout", "nan"), r"'nan' must be a positive"),
    BadInput("timeout-huge", ("run", "allreduce", "--timeout", "1e9"), r"at most 1e\+06 seconds"),
    BadInput("timeout-word", ("run", "allreduce", "--timeout", "soon"), r"'soon' is not a number"),
    # where results go
    BadInput("run-id-escapes", ("run", "allreduce", "--run-id", "../x"), r"--run-id '../x': use"),
    BadInput("run-id-empty", ("run", "allreduce", "--run-id", ""), r"--run-id '': use letters"),
    BadInput("run-id-space", ("run", "allreduce", "--run-id", "a b"), r"--run-id 'a b': use"),
    BadInput(
        "run-id-exists",
        ("run", "allreduce", *S, *R, "--run-id", "taken"),
        r"run directory .*/taken already exists: pick another --run-id",
        ranks=4,
        before_communication=False,
        setup=_existing_run,
    ),
    BadInput(
        "results-is-a-file",
        ("run", "allreduce", *S, "--results", "{tmp}/afile"),
        r"results directory .*/afile is a file, not a directory",
        before_communication=False,
        setup=_results_is_file,
    ),
    BadInput(
        "results-unwritable",
        ("run", "allreduce", *S, "--results", "/proc/commbench-results"),
        r"cannot create a run directory under /proc/commbench-results",
        before_communication=False,
    ),
    BadInput(
        "run-id-exists-alone",
        ("run", "allreduce", *S, *R, "--run-id", "taken"),
        r"already exists",
        ranks=1,
        before_communication=False,
        setup=_existing_run,
    ),
    # the test hook itself rejects a bad plan (before anything starts)
    BadInput(
        "fault-spec-bad",
        ("run", "allreduce", *S, *R),
        r"COMMBENCH_FAULT='rank=1,kind=melt': needs point",
        env={"COMMBENCH_FAULT": "rank=1,kind=melt"},
    ),
]

# Every command's rows; suite, fit, import, plan, validate and report append theirs here.
BAD_INPUTS: list[BadInput] = [*RUN]
