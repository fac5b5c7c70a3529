"""Variants of the logs real users hand `commbench import`, built from fit_samples.py (synthetic
numbers in each tool's own layout): a byte-order mark, nccl-tests' option-driven layouts
(-d all / -o all, a build without MPI, -c with huge #wrong counts), a job killed mid-table, and
the Slurm lines that say a job never ran."""

from __future__ import annotations

from collections import Counter

import pytest
from fit_samples import imb_log, nccl_tests_new, osu_collective

from commbench.errors import UsageError
from commbench.formats import imb, nccl_tests, osu
from commbench.formats.common import Hints


def write(tmp_path, name: str, text: str, encoding: str = "utf-8"):
    path = tmp_path / name
    path.write_text(text, encoding=encoding)
    return path


@pytest.mark.parametrize("encoding", ["utf-8-sig", "utf-16"])
def test_a_byte_order_mark_hides_no_first_line(tmp_path, encoding):
    """An editor's UTF-8 BOM (or PowerShell's UTF-16) before the `# nThread` line or the OSU
    title: the line still reads (iters and warmup kept; the OSU table found)."""
    text = nccl_tests_new(binary=None)
    imp = nccl_tests.parse(write(tmp_path, "all_reduce_perf.log", text, encoding), Hints())
    assert (imp.records[0]["iters"], imp.records[0]["warmup"]) == (20, 5)
    path = write(tmp_path, "osu_allreduce.txt", osu_collective(), encoding)
    imp = osu.parse(path, Hints(group_size=4, link_class="intra"))
    assert len(imp.records) == 21


def _rows_cut_after(text: str, kept: int) -> list[str]:
    """The log's lines up to its `kept`-th row: a job stopped there."""
    lines, rows = [], 0
    for line in text.splitlines():
        rows += line.strip()[:1].isdigit()
        if rows > kept:
            break
        lines.append(line)
    return lines


def test_slurm_ending_the_job_marks_the_run_failed(tmp_path):
    """A job ended by its time limit (or scancel, preemption, the OOM killer) mid-table: rows
    kept, the run failed at Slurm's line; a log that is only Slurm's refusal to start the job
    is an error naming that line."""
    cancelled = "slurmstepd: error: *** JOB 81 ON dgx-a00 CANCELLED AT 2024-05-01T10:00:00 DUE TO TIME LIMIT ***"
    lines = [*_rows_cut_after(nccl_tests_new(), 10), cancelled]
    imp = nccl_tests.parse(write(tmp_path, "all_reduce_perf.log", "\n".join(lines)), Hints())
    assert len(imp.records) == 20
    assert imp.problems.failure is not None and "DUE TO TIME LIMIT" in imp.problems.failure
    oom = "slurmstepd: error: Detected 1 oom_kill event in StepId=81.0. Some of the step tasks have been OOM Killed."
    imp = nccl_tests.parse(write(tmp_path, "oom.log", nccl_tests_new() + oom + "\n"), Hints())
    assert imp.problems.failure is not None and "oom_kill" in imp.problems.failure
    refused = (
        "srun: error: Unable to allocate resources: Requested node configuration is not available\n"
    )
    with pytest.raises(
        UsageError, match=r"slurm.err:1: srun: error: Unable to allocate .* before printing any row"
    ):
        nccl_tests.parse(write(tmp_path, "slurm.err", refused), Hints())


def test_a_table_without_its_footer_was_cut_short(tmp_path):
    """A job killed mid-table whose stdout holds no reason (it went to stderr): the rows are
    kept, the run is partial at the last row, not complete (nccl-tests: no table footer; IMB:
    no MPI_Finalize line); a whole log warns nothing."""
    lines = _rows_cut_after(nccl_tests_new(), 12)
    imp = nccl_tests.parse(write(tmp_path, "all_reduce_perf.log", "\n".join(lines)), Hints())
    assert len(imp.records) == 24 and imp.problems.failure is None
    assert imp.problems.warnings[0].endswith(
        f"all_reduce_perf.log:{len(lines)}: the table stops here without nccl-tests' "
        "'Out of bounds values' footer: the run was cut short (or the log copied without its end)"
    )
    whole = nccl_tests.parse(write(tmp_path, "whole.log", nccl_tests_new()), Hints())
    assert not whole.problems.warnings
    hints = Hints(link_class="intra")
    lines = _rows_cut_after(imb_log(), 30)  # inside IMB's second block
    imp = imb.parse(write(tmp_path, "IMB-MPI1.out", "\n".join(lines)), hints)
    assert len(imp.records) == 30
    assert imp.problems.warnings == [
        f"{tmp_path}/IMB-MPI1.out:{len(lines)}: the table stops here without IMB's "
        "'# All processes entering MPI_Finalize' line: the run was cut short (or the log "
        "copied without its end)"
    ]
    assert not imb.parse(write(tmp_path, "whole.out", imb_log()), hints).problems.warnings


def test_a_wrong_count_past_six_digits_reads_in_g_notation(tmp_path):
    """nccl-tests prints #wrong with `%6g`: 1048576 wrong elements read `1.04858e+06`, a count
    (the record is wrong), not a refused cell; a fraction is still no count."""
    text = nccl_tests_new(wrong_at=3)
    row = next(line for line in text.splitlines() if line.lstrip().startswith("64 "))
    many = text.replace(row, row.replace(" 3 ", " 1.04858e+06 ", 1))
    imp = nccl_tests.parse(write(tmp_path, "all_reduce_perf.log", many), Hints())
    assert [r["wrong"] for r in imp.records if r["wrong"]] == [1048580]
    with pytest.raises(UsageError, match=r":23: #wrong '2.5' is not a count of elements"):
        half = text.replace(row, row.replace(" 3 ", " 2.5 ", 1))
        nccl_tests.parse(write(tmp_path, "all_reduce_perf.log", half), Hints())


def _lone_process(text: str, rank: int) -> list[str]:
    """What process `rank` of a build without MPI=1 prints: a job of one rank (its own Rank 0
    line), busbw 0 as nccl-tests' factor 2(n-1)/n is at n = 1."""
    lines = []
    for line in text.splitlines():
        if line.startswith("#  Rank"):
            if line.startswith("#  Rank  0 "):
                lines.append(line.replace("Pid  41000", f"Pid  {41000 + rank}"))
            continue
        lines.append(line)
    return lines


def test_a_build_without_mpi_started_as_n_processes_is_refused(tmp_path):
    """srun -n 8 of nccl-tests built without MPI=1: eight one-rank jobs whose tables come one
    after another, or line by line under srun --label; neither measures a collective."""
    one = nccl_tests_new(binary="all_reduce_perf")
    tables = [_lone_process(one, rank) for rank in range(8)]
    after = write(tmp_path, "after.log", "\n".join(sum(tables, [])))
    with pytest.raises(UsageError, match=r"after.log:2: the run has one rank, so the table"):
        nccl_tests.parse(after, Hints())
    labelled = [f"{rank}: {t[i]}" for i in range(len(tables[0])) for rank, t in enumerate(tables)]
    path = write(tmp_path, "labelled.log", "\n".join(labelled))
    with pytest.raises(UsageError, match=r"rank 0 is listed 8 times: 8 processes each ran alone"):
        nccl_tests.parse(path, Hints())


def _sweeps(text: str, cells: list[tuple[str, str]]) -> str:
    """One header, the table's rows once per (type, redop) as -d all / -o all print them."""
    lines = text.splitlines()
    rows = [line for line in lines if line.strip()[:1].isdigit()]
    at = lines.index(rows[0])
    swept = [
        row.replace("   float     sum", f"{dtype:>8s}  {redop:>6s}", 1)
        for dtype, redop in cells
        for row in rows
    ]
    return "\n".join(lines[:at] + swept + lines[at + len(rows) :])


def test_sweeps_of_several_types_and_reductions_in_one_table(tmp_path):
    """-d all keeps each row's dtype (one series each); -o all keeps the sum rows only, with a
    note naming the reductions skipped: prod/max/min/avg at one size are other ops, not
    repeats of the sum a fit prices."""
    text = nccl_tests_new()
    types = _sweeps(text, [("half", "sum"), ("float", "sum"), ("double", "sum")])
    imp = nccl_tests.parse(write(tmp_path, "all_reduce_perf.log", types), Hints())
    assert Counter(r["dtype"] for r in imp.records) == {"float16": 50, "float32": 50, "float64": 50}
    redops = [("float", op) for op in ("sum", "prod", "max", "min", "avg")]
    imp = nccl_tests.parse(write(tmp_path, "all_reduce_perf.log", _sweeps(text, redops)), Hints())
    assert len(imp.records) == 50 and {r["source"]["columns"]["redop"] for r in imp.records} == {
        "sum"
    }
    assert imp.notes == [
        f"{tmp_path}/all_reduce_perf.log:2: the table sweeps reductions sum, prod, max, min, avg "
        "(-o all): the 100 rows of prod, max, min, avg skipped, as commbench fits sum"
    ]
