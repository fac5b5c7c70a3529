"""The front door: every registered command exists, is listed, and a missing one is an error.

The registry in commbench.cli is the list of commands; a command module that is missing from
an install must fail loudly, never vanish from `commbench --help`.
"""

from __future__ import annotations

import importlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from commbench import cli

from conftest import REPO, job_env


@pytest.mark.parametrize("name", sorted(cli.COMMANDS))
def test_every_command_module_has_the_command_interface(name):
    mod = importlib.import_module(cli.COMMANDS[name])
    assert isinstance(mod.HELP, str) and mod.HELP
    assert callable(mod.add_arguments) and callable(mod.main)
    assert mod.__doc__, f"{name}: the module docstring is the command's description"


def test_top_level_help_lists_every_command():
    p = subprocess.run([sys.executable, "-m", "commbench", "--help"], capture_output=True,
                       text=True, timeout=60, env=job_env(), cwd=REPO)  # fmt: skip
    assert p.returncode == 0, p.stderr
    listed = {
        line.split()[0]
        for line in p.stdout.splitlines()
        if line.startswith("    ") and not line.startswith("     ")
    }
    assert listed == set(cli.COMMANDS), listed


@pytest.fixture(scope="module")
def package_copy(tmp_path_factory) -> Path:
    """A copy of the package to delete command modules from."""
    root = tmp_path_factory.mktemp("copy")
    shutil.copytree(REPO / "commbench", root / "commbench",
                    ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    return root


@pytest.mark.parametrize("name", sorted(cli.COMMANDS))
def test_a_deleted_command_module_fails_loudly(package_copy, name):
    module = package_copy / Path(*cli.COMMANDS[name].split(".")).with_suffix(".py")
    hidden = module.with_suffix(".hidden")
    module.rename(hidden)
    try:
        env = job_env({"PYTHONPATH": str(package_copy)})
        p = subprocess.run([sys.executable, "-m", "commbench", "--help"], capture_output=True,
                           text=True, timeout=60, env=env, cwd=package_copy)  # fmt: skip
    finally:
        hidden.rename(module)
    assert p.returncode != 0, f"`commbench --help` without {module.name} passed:\n{p.stdout}"
    assert cli.COMMANDS[name] in p.stdout + p.stderr


def test_output_cut_short_by_a_reader_is_quiet(tmp_path):
    """`commbench ... | head`: when the reader leaves, commbench stops without a traceback or an
    'internal error' line (Python's BrokenPipeError)."""
    err = tmp_path / "stderr"
    cmd = f"{sys.executable} -m commbench suite all --dry-run --world 16 2>{err} | head -1"
    p = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=60,
                       env=job_env(), cwd=REPO)  # fmt: skip
    assert p.stdout.startswith("# commbench suite all --dry-run"), p.stdout
    assert err.read_text() == ""
