"""A rank reaches its first collective without importing shutil (and the bz2 and lzma it
loads): argparse's formatters are sized by cli.terminal_columns and the mpicc is looked up by
native.which, each the same answer as shutil's."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from commbench import cli

from conftest import REPO, job_env


@pytest.mark.parametrize("columns", [None, "123", "0", "wide", "-5"])
def test_terminal_columns_are_shutils(monkeypatch, columns):
    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    assert cli.terminal_columns() == shutil.get_terminal_size().columns
    width = shutil.get_terminal_size().columns - 2
    assert cli.HelpFormatter("x")._width == cli.RawDescriptionHelpFormatter("x")._width == width


def test_help_text_is_argparses(monkeypatch):
    monkeypatch.setenv("COLUMNS", "97")
    parser, _ = cli.build_parser("suite")
    ours = parser.format_help()
    sub = parser._subparsers._group_actions[0].choices["suite"]  # type: ignore[union-attr]
    assert sub.formatter_class is cli.RawDescriptionHelpFormatter
    mine = sub.format_help()
    parser.formatter_class = cli.argparse.HelpFormatter
    sub.formatter_class = cli.argparse.RawDescriptionHelpFormatter
    assert (parser.format_help(), sub.format_help()) == (ours, mine)
    assert max(len(line) for line in mine.splitlines()) <= 95


def test_which_is_shutils(tmp_path, monkeypatch):
    tool, plain, folder = tmp_path / "tool", tmp_path / "plain", tmp_path / "folder.d"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    plain.write_text("")
    folder.mkdir()
    monkeypatch.setenv("PATH", os.pathsep.join([str(tmp_path), "/usr/bin", "/bin"]))
    from commbench.measure.transport import native

    names = ["tool", "plain", "folder.d", "sh", str(tool), str(plain), str(folder), "nosuch"]
    for name in names:
        assert native.which(name) == shutil.which(name), name
    assert native.which("tool") == str(tool)
    monkeypatch.chdir(tmp_path)
    assert native.which("./tool") == shutil.which("./tool") == "./tool"


def test_a_rank_reaches_its_mpicc_without_shutil():
    code = (
        "import sys\nfrom commbench.cli import build_parser\n"
        "parser, _ = build_parser('suite')\nparser.parse_args(['suite', 'smoke'])\n"
        "from commbench.measure.transport import native\nnative.find_mpicc()\n"
        "print('shutil' in sys.modules)\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=60, env=job_env(), cwd=REPO)  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["False"], p.stdout
