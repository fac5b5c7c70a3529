"""Layering: the analysis commands read records only, so loading them
pulls in no transport, no session and no MPI or torch."""

import subprocess
import sys

import pytest

from conftest import REPO, job_env

FORBIDDEN = (
    "commbench.measure.transport",
    "commbench.measure.session",
    "commbench.measure.runner",
    "mpi4py",
    "torch",
)


@pytest.mark.parametrize(
    "command", ["fit", "plan", "validate", "report", "import", "export", "trace"]
)
def test_analysis_commands_import_no_transport(command):
    code = (
        "import sys\nfrom commbench.cli import build_parser\n"
        f"build_parser({command!r})\n"
        f"print(sorted(m for m in sys.modules if m.startswith({FORBIDDEN!r})))\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=60, env=job_env(), cwd=REPO)  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "[]", p.stdout
