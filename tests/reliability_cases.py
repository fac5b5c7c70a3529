"""The table of bad inputs: each must end the job with status 2 and one clear line from rank 0.

To cover a new command, append BadInput rows (argv starts with the subcommand; `{tmp}` is a
scratch directory that `setup` may fill; ranks=1 runs a plain process). A row naming a command
that does not exist fails (test_every_row_names_a_command).
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from commbench.measure.launch import detect
from commbench.measure.transport.devices import nccl_problem, torch_build, visible_gpus

NCCL_PROBLEM = nccl_problem(detect({}), torch_build(), visible_gpus())


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
        r"backend nccl needs (a CUDA build of torch|an NVIDIA GPU|torch)",
        skip=None if NCCL_PROBLEM else "NCCL can run here",
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
    BadInput(
        "iters-over-bound",
        ("run", "allreduce", "-n", "1000000000"),
        r"'1000000000' is over the bound of 100000 \(iterations of one point",
    ),
    BadInput(
        "size-5000-digits",
        ("run", "allreduce", "-b", "9" * 5000),
        r"-b/--minbytes .*: a number of 5000 digits, over the bound of 20 digits",
    ),
    BadInput(
        "iters-5000-digits",
        ("run", "allreduce", "-n", "9" * 5000),
        r"-n/--iters: .*: a number of 5000 digits, over the bound of 20 digits",
    ),
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


# ---- suite and list ----
# Rows here are the end-to-end view (every rank, one line, under mpirun). The suite-file
# validators' own messages are tested in-process in test_patterns_suites.py; these rows pick
# other fields, axes and files rather than repeat those cases.


def _file(name: str, data: str | bytes) -> Callable[[Path], None]:
    """A setup that writes {tmp}/name (a suite file, a log, a calibration)."""

    def setup(tmp: Path) -> None:
        path = tmp / name
        path.write_bytes(data if isinstance(data, bytes) else data.encode())

    return setup


def _yaml(text: str) -> Callable[[Path], None]:
    return _file("s.yaml", text)


Y = "{tmp}/s.yaml"
TINY = "{name: l6, layers: 6, hidden: 256, ffn_hidden: 512, heads: 8}"

SUITE: list[BadInput] = [
    BadInput("suite-unknown", ("suite", "tpp"), r"unknown suite 'tpp': choose from all, "),
    BadInput("suite-file-missing", ("suite", "{tmp}/no.yaml"), r"suite file .*/no.yaml: no such"),
    BadInput(
        "suite-bad-yaml",
        ("suite", Y),
        r"s.yaml: not valid YAML at line 2",
        setup=_yaml("runs: [{pattern: tp, models: [llama-7b]\n"),
    ),
    BadInput(
        "suite-not-text",
        ("suite", Y),
        r"s.yaml: byte 0 \(line 1, 0xff\) is not UTF-8",
        setup=_file("s.yaml", b"\xff\xfe\x00runs"),
    ),
    BadInput(
        "suite-empty-file",
        ("suite", Y),
        r"s.yaml: no runs \(give runs: or include:\)",
        setup=_yaml(""),
    ),
    BadInput(
        "suite-unknown-top-key",
        ("suite", Y),
        r"s.yaml.repeat: unknown key; expected one of description, timing",
        setup=_yaml("runs: [{pattern: collectives}]\nrepeat: 3\n"),
    ),
    BadInput(
        "suite-unknown-quick-key",
        ("suite", Y, "--quick"),
        r"s.yaml.quick.runs: unknown key; expected one of timing, max_bytes",
        setup=_yaml("quick: {runs: []}\nruns: [{pattern: collectives}]\n"),
    ),
    BadInput(
        "suite-degree-list-type",
        ("suite", Y),
        r"runs\[0\].degrees.tp: expected a non-empty list of integers, got \[2, 4.5\]",
        setup=_yaml("runs: [{pattern: tp, models: [llama-7b], degrees: {tp: [2, 4.5]}}]\n"),
    ),
    BadInput(
        "suite-model-field-type",
        ("suite", Y),
        r"runs\[0\].models\[0\].layers: expected int, got 'two'",
        setup=_yaml(
            "runs: [{pattern: tp, models: [{name: x, layers: two, hidden: 256, "
            "ffn_hidden: 512, heads: 8}]}]\n"
        ),
    ),
    BadInput(
        "suite-timing-zero-iters",
        ("suite", Y),
        r"s.yaml.timing.iters: expected a positive int, got 0",
        setup=_yaml("timing: {iters: 0}\nruns: [{pattern: collectives}]\n"),
    ),
    BadInput(
        "suite-includes-itself",
        ("suite", Y),
        r"s.yaml: includes itself",
        setup=_yaml("include: [s.yaml]\n"),
    ),
    BadInput(
        "suite-pp-not-dividing-world",
        ("suite", Y),
        r"runs\[0\].degrees.pp: tp\*cp\*pp = 1\*1\*3 = 3 does not divide the world size 4",
        ranks=4,
        setup=_yaml(f"runs: [{{pattern: pp, models: [{TINY}], degrees: {{pp: 3}}}}]\n"),
    ),
    BadInput(
        "suite-heads-by-tp",
        ("suite", Y),
        r"runs\[0\].degrees.tp: tp=4 does not divide the 6 heads of h6",
        ranks=4,
        setup=_yaml(
            "runs: [{pattern: tp, models: [{name: h6, layers: 4, hidden: 384, "
            "ffn_hidden: 768, heads: 6}], degrees: {tp: 4}}]\n"
        ),
    ),
    BadInput(
        "suite-layers-by-pp",
        ("suite", Y),
        r"runs\[0\].degrees.pp: pp=4 does not divide the 6 layers of l6",
        ranks=4,
        setup=_yaml(f"runs: [{{pattern: pp, models: [{TINY}], degrees: {{pp: 4}}}}]\n"),
    ),
    BadInput(
        "suite-experts-by-ep",
        ("suite", Y),
        r"runs\[0\].degrees.ep: ep=2 does not divide the 3 experts of mx3",
        ranks=4,
        setup=_yaml(
            "runs: [{pattern: ep, models: [{preset: mixtral-8x7b, name: mx3, experts: 3}], "
            "degrees: {ep: 2}}]\n"
        ),
    ),
    BadInput(
        "suite-sequence-by-cp",
        ("suite", Y),
        r"runs\[0\].degrees.cp: cp=4 does not divide the sequence length 102",
        ranks=4,
        setup=_yaml(
            "runs: [{pattern: cp, models: [{name: s, layers: 4, hidden: 256, ffn_hidden: 512, "
            "heads: 8, seq_len: 102}], degrees: {cp: 4}}]\n"
        ),
    ),
    BadInput(
        "suite-unknown-model",
        ("suite", Y),
        r"runs\[0\].models\[0\]: unknown model 'gpt-5'; presets: llama-7b",
        setup=_yaml("runs: [{pattern: tp, models: [gpt-5]}]\n"),
    ),
    BadInput(
        "suite-unknown-pattern",
        ("suite", Y),
        r"runs\[0\].pattern: unknown pattern 'sharding'; choose from dp, zero, tp",
        setup=_yaml("runs: [{pattern: sharding, models: [llama-7b]}]\n"),
    ),
    BadInput(
        "suite-group-sizes-not-dividing",
        ("suite", Y),
        r"runs\[0\]: tp1-cp1-dp4-pp1: group_sizes: 3 does not divide the world size 4",
        ranks=4,
        setup=_yaml("runs: [{pattern: collectives, options: {group_sizes: [3]}}]\n"),
    ),
    BadInput(
        "suite-second-run-bad-sweep",
        ("suite", Y),
        r"runs\[1\].sweep.sequence_parallel: expected bool, got 3",
        setup=_yaml(
            "runs:\n  - {pattern: collectives}\n  - {pattern: tp, models: [llama-7b], "
            "sweep: {sequence_parallel: [true, 3]}}\n"
        ),
    ),
    # command-line overrides
    BadInput("suite-set-no-value", ("suite", "smoke", "--set", "micro_batches"), r"KEY=VALUE"),
    BadInput(
        "suite-set-bad-choice",
        ("suite", "smoke", "--set", "router=zipff"),
        r"--set: router 'zipff': choose from uniform, zipf, dirichlet",
    ),
    BadInput(
        "suite-set-wrong-type",
        ("suite", "smoke", "--set", "micro_batches=2.5"),
        r"--set.micro_batches: expected int, got 2.5",
    ),
    BadInput(
        "suite-degree-axis",
        ("suite", "tp", "--degree", "dp=2"),
        r"--degree 'dp=2': expected AXIS=VALUES with AXIS one of tp, cp, pp, ep",
    ),
    BadInput(
        "suite-degree-zero", ("suite", "tp", "--degree", "tp=0"), r"degrees must be at least 1"
    ),
    BadInput(
        "suite-degree-ep-not-dividing",
        ("suite", "ep", "--quick", "--degree", "ep=3"),
        r"suites/ep.yaml: runs\[0\].degrees.ep: ep=3 does not divide cp\*dp = 4",
        ranks=4,
    ),
    BadInput("suite-max-bytes-12Q", ("suite", "smoke", "--max-bytes", "12Q"), r"'12Q' does not"),
    BadInput("suite-max-bytes-zero", ("suite", "smoke", "--max-bytes", "0"), r"'0' must be pos"),
    BadInput(
        "suite-order-short",
        ("suite", "smoke", "--order", "tp-cp-ep-dp"),
        r"--order 'tp-cp-ep-dp' is not a permutation of tp-cp-ep-dp-pp",
    ),
    BadInput("suite-order-empty", ("suite", "smoke", "--order", ""), r"--order '' is not a perm"),
    BadInput(
        "suite-model-unknown-field",
        ("suite", "tp", "--model", "llama-7b:colour=red"),
        r"colour: unknown model field; choose from name, layers",
    ),
    BadInput(
        "suite-model-heads",
        ("suite", "tp", "--model", "llama-7b:heads=7"),
        r"model llama-7b: hidden 4096 is not a multiple of heads 7",
    ),
    # world size and dry runs
    BadInput(
        "suite-dry-run-needs-world",
        ("suite", "smoke", "--dry-run"),
        r"fits a world of 1 rank\(s\).*; pass --world N for a dry run without a launcher",
        ranks=1,
    ),
    BadInput(
        "suite-world-without-dry-run",
        ("suite", "smoke", "--world", "8"),
        r"--world sets the world size of --dry-run only",
        ranks=1,
    ),
    BadInput(
        "suite-world-differs",
        ("suite", "smoke", "--dry-run", "--world", "8"),
        r"--world 8 differs from the launched world 2",
    ),
    BadInput(
        "suite-dry-run-ranks-per-node",
        ("suite", "smoke", "--dry-run", "--world", "6", "--ranks-per-node", "4"),
        r"--ranks-per-node 4 does not divide the world size 6",
        ranks=1,
    ),
    # backend and run directory (the latter found by rank 0 after start-up, then agreed)
    BadInput(
        "suite-nccl-without-gpu",
        ("suite", "smoke", "--backend", "nccl"),
        r"backend nccl needs (a CUDA build of torch|an NVIDIA GPU|torch)",
        skip=None if NCCL_PROBLEM else "NCCL can run here",
    ),
    BadInput(
        "suite-run-id-exists",
        ("suite", "smoke", *R, "--run-id", "taken"),
        r"run directory .*/taken already exists",
        before_communication=False,
        setup=_existing_run,
    ),
]

LIST: list[BadInput] = [
    BadInput("list-unknown-section", ("list", "plugins"), r"invalid choice: 'plugins'", ranks=1),
    BadInput("list-extra-argument", ("list", "suites", "x"), r"unrecognized arguments: x", ranks=1),
]


# ---- fit, import, export: plain processes ----
def _run(name: str, edit: Callable[[list[dict]], None] | None = None, status="complete"):
    """A setup writing {tmp}/name: a run of 20 synthetic allreduce records (fit_samples:
    stated alpha/beta), after `edit` changed them."""

    def setup(tmp: Path) -> None:
        from fit_samples import collective_records, write_run

        recs = collective_records("allreduce", 4, 1e-5, 1e-9)
        if edit:
            edit(recs)
        write_run(tmp, name, recs, status=status)

    return setup


def _corrupt_middle(tmp: Path) -> None:
    _run("r")(tmp)
    _cut_line_10(tmp)


def _cut_line_10(tmp: Path) -> None:
    path = tmp / "r" / "records.jsonl"
    lines = path.read_text().splitlines(True)
    lines[9] = lines[9][:40] + "\n"  # line 10 of 20, cut mid-record
    path.write_text("".join(lines))


def _records_is_dir(tmp: Path) -> None:
    _run("r")(tmp)
    (tmp / "r" / "records.jsonl").unlink()
    (tmp / "r" / "records.jsonl").mkdir()


def _unreadable_run(tmp: Path) -> None:
    _run("r")(tmp)
    (tmp / "r").chmod(0)


def _drop(key: str, at: int):
    def edit(recs: list[dict]) -> None:
        del recs[at][key]

    return edit


def _all_wrong(recs: list[dict]) -> None:
    for r in recs:
        r["wrong"] = 1


def _calibration(tmp: Path) -> dict:
    """A calibration fitted from a synthetic run (fit_samples; no bootstrap), saved as
    {tmp}/cal.json; returns its document."""
    from commbench import calibration
    from commbench.fit import calibrate
    from commbench.fit.collect import collect, read_fit_runs
    from commbench.fit.options import FitOptions

    _run("r")(tmp)
    doc, _, _ = calibrate.build(collect(read_fit_runs([tmp / "r"])), FitOptions(bootstrap=0))
    calibration.save(doc, tmp / "cal.json")
    return doc


def _calibration_failing_schema(tmp: Path) -> None:
    doc = _calibration(tmp)
    doc["series"][0]["segments"][0]["alpha_s"] = "fast"
    (tmp / "cal.json").write_text(json.dumps(doc))


def _log(tool: str) -> Callable[[Path], None]:
    def setup(tmp: Path) -> None:
        import fit_samples

        text = {
            "nccl-tests": fit_samples.nccl_tests_new,
            "osu": fit_samples.osu_collective,
            "imb": fit_samples.imb_log,
        }[tool]()
        (tmp / f"{tool}.log").write_text(text)

    return setup


RUN_DIR = "{tmp}/r"
CAL = "{tmp}/cal.json"
ROOT_READS_ALL = "root reads a mode-000 directory anyway" if os.geteuid() == 0 else None

FIT: list[BadInput] = [
    BadInput("fit-no-run", ("fit",), r"the following arguments are required: RUN_DIR"),
    BadInput(
        "fit-run-is-a-file",
        ("fit", "{tmp}/afile"),
        r"afile: not a directory \(give a run directory holding records.jsonl\)",
        setup=_results_is_file,
    ),
    BadInput(
        "fit-unreadable-dir",
        ("fit", RUN_DIR),
        r"/r: directory is not readable",
        setup=_unreadable_run,
        skip=ROOT_READS_ALL,
    ),
    BadInput(
        "fit-records-unreadable",
        ("fit", RUN_DIR),
        r"cannot read .*/r/records.jsonl: Is a directory",
        setup=_records_is_dir,
    ),
    BadInput(
        "fit-corrupt-middle-line",
        ("fit", RUN_DIR),
        r"/r/records.jsonl:10: not a JSON record",
        setup=_corrupt_middle,
    ),
    BadInput(
        "fit-record-lacks-bytes",
        ("fit", RUN_DIR),
        r"/r/records.jsonl:4: record lacks bytes",
        setup=_run("r", _drop("bytes", 3)),
    ),
    BadInput(
        "fit-all-wrong",
        ("fit", RUN_DIR),
        r"no series could be fitted: allreduce p=4 intra: 0 distinct size\(s\) .*20 point\(s\) "
        r"with wrong > 0",
        setup=_run("r", _all_wrong),
    ),
    BadInput(
        "fit-output-unwritable",
        ("fit", RUN_DIR, "-o", "/proc/commbench-cal.json"),
        r"cannot write calibration /proc/commbench-cal.json",
        setup=_run("r"),
    ),
    BadInput(
        "fit-output-is-a-directory",
        ("fit", RUN_DIR, "-o", "{tmp}"),
        r"cannot write calibration .*: it is a directory",
        setup=_run("r"),
    ),
    BadInput("fit-min-sizes-2", ("fit", RUN_DIR, "--min-sizes", "2"), r"--min-sizes must be at"),
    BadInput("fit-penalty-nan", ("fit", RUN_DIR, "--penalty", "nan"), r"--penalty must be pos"),
]

IMPORT: list[BadInput] = [
    BadInput("import-no-log", ("import", "osu"), r"the following arguments are required: LOG"),
    BadInput(
        "import-unknown-tool",
        ("import", "nccl-test", "{tmp}/x.log"),
        r"invalid choice: 'nccl-test' \(choose from 'nccl-tests', 'osu', 'imb'\)",
    ),
    BadInput("import-log-is-a-dir", ("import", "imb", "{tmp}"), r": no such log file"),
    BadInput(
        "import-empty-log",
        ("import", "nccl-tests", "{tmp}/e.log"),
        r"e.log: not a nccl-tests log \(no '#  size  count  type ...' header line\)",
        setup=_file("e.log", ""),
    ),
    BadInput(
        "import-binary-log",
        ("import", "imb", "{tmp}/b.log", "--link-class", "intra"),
        r"b.log: not an IMB log",
        setup=_file("b.log", bytes(range(256)) * 4),
    ),
    BadInput(
        "import-nccl-log-as-osu",
        ("import", "osu", "{tmp}/nccl-tests.log", "--group-size", "8", "--link-class", "intra"),
        r"nccl-tests.log: not an OSU log \(no '# OSU MPI ... Test' title line\)",
        setup=_log("nccl-tests"),
    ),
    BadInput(
        "import-osu-log-as-imb",
        ("import", "imb", "{tmp}/osu.log", "--link-class", "intra"),
        r"osu.log: not an IMB log",
        setup=_log("osu"),
    ),
    BadInput(
        "import-link-class-conflict",
        ("import", "nccl-tests", "{tmp}/nccl-tests.log", "--link-class", "inter"),
        r"nccl-tests.log:2: the log says link-class intra but --link-class is inter",
        setup=_log("nccl-tests"),
    ),
    BadInput(
        "import-dtype-conflict",
        ("import", "imb", "{tmp}/imb.log", "--link-class", "intra", "--dtype", "float16"),
        r"imb.log:\d+: the log says dtype int8 but --dtype is float16",
        setup=_log("imb"),
    ),
    BadInput(
        "import-unknown-op-flag",
        ("import", "nccl-tests", "{tmp}/nccl-tests.log", "--op", "allreduse"),
        r"--op 'allreduse': choose from allreduce",
        setup=_log("nccl-tests"),
    ),
    BadInput(
        "import-results-unwritable",
        ("import", "nccl-tests", "{tmp}/nccl-tests.log", "--results", "/proc/commbench-x"),
        r"cannot create a run directory under /proc/commbench-x",
        setup=_log("nccl-tests"),
    ),
    BadInput(
        "import-run-id-escapes",
        ("import", "nccl-tests", "{tmp}/nccl-tests.log", "--run-id", "../x"),
        r"--run-id '../x': use letters",
        setup=_log("nccl-tests"),
    ),
]

EXPORT: list[BadInput] = [
    BadInput(
        "export-unknown-target",
        ("export", "astra", CAL),
        r"invalid choice: 'astra' \(choose from 'astra-sim', 'calculon', 'simai', 'galvatron', "
        r"'llm-analysis'\)",
    ),
    BadInput(
        "export-missing-calibration",
        ("export", "astra-sim", CAL),
        r"cannot read calibration .*/cal.json: No such file",
    ),
    BadInput(
        "export-corrupt-calibration",
        ("export", "calculon", CAL, "--base", CAL),
        r"cal.json:1: not valid JSON",
        setup=_file("cal.json", '{"schema_version": 1, "kind": '),
    ),
    BadInput(
        "export-calibration-fails-schema",
        ("export", "astra-sim", CAL),
        r"cal.json: calibration fails its schema at series\[0\].segments\[0\].alpha_s: "
        r"'fast' is not of type 'number'",
        setup=_calibration_failing_schema,
    ),
    BadInput(
        "export-records-as-calibration",
        ("export", "astra-sim", "{tmp}/r/records.jsonl"),
        r"records.jsonl:2: not valid JSON \(Extra data\)",
        setup=_run("r"),
    ),
    BadInput(
        "export-output-unwritable",
        ("export", "astra-sim", CAL, "-o", "/proc/commbench-net.yml"),
        r"cannot write /proc/commbench-net.yml",
        setup=_calibration,
    ),
    BadInput(
        "export-output-is-a-directory",
        ("export", "astra-sim", CAL, "-o", "{tmp}"),
        r"cannot write .*: Is a directory",
        setup=_calibration,
    ),
    BadInput(
        "export-npus-unknown-link",
        ("export", "astra-sim", CAL, "--npus", "rack=4"),
        r"--npus rack: not a link class of the exported link table \(it has intra\)",
        setup=_calibration,
    ),
    BadInput(
        "export-backend-not-in-calibration",
        ("export", "astra-sim", CAL, "--backend", "nccl"),
        r"no link table entry for backend nccl",
        setup=_calibration,
    ),
    BadInput(
        "export-base-for-astra-sim",
        ("export", "astra-sim", CAL, "--base", CAL),
        r"--base is for calculon",
        setup=_calibration,
    ),
    BadInput(
        "export-calculon-without-base",
        ("export", "calculon", CAL),
        r"calculon needs --base: its own system file",
        setup=_calibration,
    ),
    BadInput(
        "export-simai-without-config",
        ("export", "simai", CAL, "-o", "{tmp}/simai"),
        r"simai needs --model and --config",
        setup=_calibration,
    ),
    BadInput(
        "export-galvatron-without-directory",
        ("export", "galvatron", CAL),
        r"galvatron writes several files: pass -o DIRECTORY",
        setup=_calibration,
    ),
    BadInput(
        "export-llm-analysis-base-lacks-fields",
        ("export", "llm-analysis", CAL, "--base", CAL),
        r"--base .*cal.json: an llm-analysis GPU config needs name, mem_per_GPU_in_GB",
        setup=_calibration,
    ),
    BadInput(
        "export-model-for-astra-sim",
        ("export", "astra-sim", CAL, "--model", "llama-7b"),
        r"--model is for simai",
        setup=_calibration,
    ),
    BadInput(
        "export-base-missing",
        ("export", "calculon", CAL, "--base", "{tmp}/a100.json"),
        r"cannot read --base .*/a100.json: No such file",
        setup=_calibration,
    ),
]

# plan, validate and report landed after the rows above: these add what their own tests
# (test_plan_*.py, test_report_*.py) leave out, output paths and corrupt inputs mostly.
P7 = ("plan", "--model", "llama-7b", "--gpus", "8")
PLAN: list[BadInput] = [
    BadInput("plan-output-is-a-directory", (*P7, "-o", "{tmp}"), r"-o .*: is a directory"),
    BadInput(
        "plan-output-unwritable",
        (*P7, "-o", "/proc/commbench-plan.json"),
        r"-o /proc/commbench-plan.json: cannot write",
    ),
    BadInput(
        "plan-calibration-fails-schema",
        (*P7, "--calibration", CAL),
        r"cal.json: calibration fails its schema at series\[0\].segments\[0\].alpha_s",
        setup=_calibration_failing_schema,
    ),
    BadInput("plan-mfu-above-1", (*P7, "--mfu", "2"), r"--mfu 2.0 must be in \(0, 1\]"),
    BadInput(
        "plan-gpus-not-whole-nodes",
        ("plan", "--model", "llama-7b", "--gpus", "12", "--gpus-per-node", "8"),
        r"--gpus 12 is not a whole number of nodes of --gpus-per-node 8",
    ),
]
VALIDATE: list[BadInput] = [
    BadInput(  # a run sweep is validated op by op; a size that is not one is refused
        "validate-ops-bad-min-bytes",
        ("validate", RUN_DIR, "--calibration", CAL, "--ops", "--min-bytes", "0"),
        r"--min-bytes '0' must be positive",
        setup=_calibration,
    ),
    BadInput(
        "validate-corrupt-records",
        ("validate", RUN_DIR, "--calibration", CAL),
        r"/r/records.jsonl:10: not a JSON record",
        setup=lambda tmp: (_calibration(tmp), _cut_line_10(tmp)),
    ),
]
REPORT: list[BadInput] = [
    BadInput(
        "report-output-unwritable",
        ("report", RUN_DIR, "--no-fit", "-o", "/proc/commbench-report"),
        r"-o /proc/commbench-report: cannot write the report",
        setup=_run("r"),
    ),
    BadInput(
        "report-corrupt-records",
        ("report", RUN_DIR, "-o", "{tmp}/report"),
        r"/r/records.jsonl:10: not a JSON record",
        setup=_corrupt_middle,
    ),
    BadInput(
        "report-plan-not-a-plan",
        ("report", RUN_DIR, "--no-fit", "--plan", "{tmp}/plan.json", "-o", "{tmp}/report"),
        r"plan.json: a plan must be a JSON object with a list 'configs'",
        setup=lambda tmp: (_run("r")(tmp), (tmp / "plan.json").write_text("[1, 2]")),
    ),
    BadInput(
        "report-calibration-corrupt",
        ("report", RUN_DIR, "--calibration", CAL, "-o", "{tmp}/report"),
        r"cal.json:1: not valid JSON",
        setup=lambda tmp: (_run("r")(tmp), _file("cal.json", "{")(tmp)),
    ),
]

# Inputs that scale work or memory (issue 19): each has a stated bound, and a typo past it
# is one line at once, not an hour of work before the first header.


def _includes(depth: int) -> Callable[[Path], None]:
    """s.yaml includes i1.yaml, which includes i2.yaml, ... `depth` levels down."""

    def setup(tmp: Path) -> None:
        (tmp / "s.yaml").write_text("include: [i1.yaml]\n")
        for k in range(1, depth):
            (tmp / f"i{k}.yaml").write_text(f"include: [i{k + 1}.yaml]\n")
        (tmp / f"i{depth}.yaml").write_text("runs: [{pattern: collectives}]\n")

    return setup


DRY4 = ("--dry-run", "--world", "4")
BOUNDS: list[BadInput] = [
    BadInput(
        "bound-run-factor-near-1",
        ("run", "allreduce", "-b", "8", "-e", "16M", "-f", "1.0001"),
        r"8 B to 16 MiB times 1.0001 is over 1000 sizes \(the bound of one sweep\)",
    ),
    BadInput(
        "bound-run-stepbytes-small",
        ("run", "allreduce", "-b", "8", "-e", "16M", "-i", "8"),
        r"8 B to 16 MiB plus 8 B is over 1000 sizes \(the bound of one sweep\)",
    ),
    BadInput(
        "bound-run-explicit-sizes",
        ("run", "allreduce", "--sizes", ",".join(str(8 * (i + 1)) for i in range(1001))),
        r"--sizes: 1001 sizes, over 1000 \(the bound of one sweep\)",
    ),
    BadInput(
        "bound-suite-set-factor",
        ("suite", "collectives", *DRY4, "--set", "factor=1.0001"),
        r"is over 1000 sizes \(the bound of one sweep\)",
    ),
    BadInput(
        "bound-suite-sweep-product",
        ("suite", Y, *DRY4),
        r"s.yaml: runs\[0\].sweep: 1000 x 1000 = 1000000 combinations, over 1000",
        setup=lambda tmp: _yaml(
            "runs:\n- pattern: collectives\n  sweep:\n"
            f"    min_bytes: [{', '.join(str(i + 1) for i in range(1000))}]\n"
            f"    max_bytes: [{', '.join(str(2000 + i) for i in range(1000))}]\n"
        )(tmp),
    ),
    BadInput(
        "bound-suite-include-depth",
        ("suite", Y, *DRY4),
        r"i9.yaml: includes nested deeper than 8 levels",
        setup=_includes(10),
    ),
    BadInput(
        "bound-suite-file-size",
        ("suite", Y, *DRY4),
        r"s.yaml: 2.0 MiB, over the 1 MiB a suite file may have",
        setup=_yaml("# padding\n" * ((2 << 20) // 10) + "runs: [{pattern: collectives}]\n"),
    ),
    BadInput(
        "bound-suite-max-bytes-tiny",
        ("suite", "tp", *DRY4, "--max-bytes", "1"),
        r"--max-bytes 1: at least 64 KiB",
    ),
    BadInput(
        "bound-plan-gpus",
        ("plan", "--model", "llama-7b", "--gpus", "100000000"),
        r"--gpus 100000000: at most 65536",
    ),
    BadInput(
        "bound-model-layers",
        ("suite", "tp", *DRY4, "--model", "llama-7b:layers=1000000000"),
        r"model llama-7b: layers 1000000000 is over the bound of 4096",
    ),
    BadInput(
        "bound-model-seq-len",
        ("plan", "--model", "llama-7b:seq_len=100000000000", "--gpus", "8"),
        r"model llama-7b: seq_len 100000000000 is over the bound of 16777216",
    ),
    BadInput(
        "bound-suite-set-micro-batches",
        ("suite", "pp", *DRY4, "--set", "micro_batches=1000000"),
        r"--set.micro_batches: 1000000 is over the bound of 4096",
    ),
]

# Every command's rows; new commands append theirs here. fit, import, export, plan, validate
# and report never communicate: they run as one plain process.
BAD_INPUTS: list[BadInput] = [
    *RUN,
    *SUITE,
    *LIST,
    *(
        dataclasses.replace(row, ranks=1)
        for row in (*FIT, *IMPORT, *EXPORT, *PLAN, *VALIDATE, *REPORT, *BOUNDS)
    ),
]
