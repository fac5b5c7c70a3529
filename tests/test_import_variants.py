"""Variants of the logs real users hand `commbench import`, built from fit_samples.py (synthetic
numbers in each tool's own layout): a byte-order mark, nccl-tests' option-driven layouts
(-d all / -o all, a build without MPI, -c with huge #wrong counts), a job killed mid-table, and
the Slurm lines that say a job never ran."""

from __future__ import annotations

import pytest
from fit_samples import nccl_tests_new, osu_collective

from commbench.formats import nccl_tests, osu
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
