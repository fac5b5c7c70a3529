"""Every line of the README's "Everyday use" block runs as written, from a fresh folder.

The README's own settings apply (its `export` lines: oversubscribe on a small box); the folder
holds `examples/` as a clone does; `results/<name-run>` stands for the folder the last line
naming `name` printed (`results: ...`), as a reader copies it. `check` may also end 4 or 5
(below a threshold, an outlier named: a loaded box), which is the check working. Every
measuring line's last line says the next step (`next: ...`).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, job_env

PLACEHOLDER = re.compile(r"results/<([a-z-]+)-run>")
MEASURING = ("run", "suite", "check", "import")


def readme_lines() -> list[str]:
    """The Everyday use block's commands: continuations joined, comments and blanks dropped."""
    text = (REPO / "README.md").read_text()
    block = text[text.index("## Everyday use") :]
    block = block[block.index("```bash") + 7 : block.index("\n```", block.index("```bash"))]
    joined = re.sub(r"\\\n\s*", " ", block)
    return [ln for ln in (raw.split(" #")[0].strip() for raw in joined.splitlines()) if ln
            and not ln.startswith("#")]  # fmt: skip


def _env(lines: list[str]) -> dict[str, str]:
    env = job_env()
    env.pop("OMPI_MCA_rmaps_base_oversubscribe", None)
    env.pop("PRTE_MCA_rmaps_default_mapping_policy", None)  # the README's own line sets it
    for ln in lines:
        if ln.startswith("export "):
            for kv in shlex.split(ln)[1:]:
                k, _, v = kv.partition("=")
                env[k] = v
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    return env


def _run(ln: str, cwd: Path, env: dict, printed: dict[str, str]) -> subprocess.CompletedProcess:
    def resolve(m: re.Match) -> str:
        name = m.group(1)
        assert name in printed, f"{ln}: no earlier line wrote a {name} run"
        return printed[name]

    cmd = PLACEHOLDER.sub(resolve, ln)
    p = subprocess.run(
        shlex.split(cmd), cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )
    word = next(w for w in shlex.split(cmd) if w != "commbench" and not w.startswith("-")
                and not w.isdigit() and w != "mpirun")  # fmt: skip
    ok = (0, 4, 5) if word == "check" else (0,)
    assert p.returncode in ok, f"{ln}\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}"
    if word in MEASURING and "--dry-run" not in ln:
        last = p.stdout.strip().splitlines()[-1]
        assert last.startswith("next: commbench "), (ln, last)
        run = re.search(r"^results: (\S+)$", p.stdout, re.M)
        assert run, ln
        for w in re.findall(r"[a-z][a-z-]*", ln):
            printed[w] = run.group(1)
    return p


def _folder(tmp_path: Path) -> Path:
    (tmp_path / "examples").symlink_to(REPO / "examples")
    return tmp_path


def test_the_readme_names_only_files_that_ship():
    for ln in readme_lines():
        for word in shlex.split(ln):
            if word.startswith("examples/"):
                path = REPO / word  # a file, or a folder of them (a job's traces)
                assert path.is_file() or any(path.glob("*")), (
                    f"{ln}: {word} is not in the repository"
                )
    assert len(readme_lines()) >= 15


def test_readme_lines_without_a_launcher(tmp_path):
    """The lines that need no mpirun and no measured run: list, dry-run, plan from the
    reference, the imports of the shipped example logs."""
    folder, lines = _folder(tmp_path), readme_lines()
    env, printed = _env(lines), {}
    offline = [ln for ln in lines if ln.startswith("commbench ") and "calibration.json" not in ln
               and not PLACEHOLDER.search(ln)]  # fmt: skip
    assert any(" import " in ln for ln in offline) and any("--dry-run" in ln for ln in offline)
    for ln in offline:
        _run(ln, folder, env, printed)


@pytest.mark.slow
@pytest.mark.mpi
def test_every_readme_line_in_order(tmp_path):
    folder, lines = _folder(tmp_path), readme_lines()
    env, printed = _env(lines), {}
    for ln in lines:
        if ln.startswith(("source ", "export ")):
            continue
        _run(ln, folder, env, printed)
    assert (folder / "results" / "report" / "index.html").exists()
    assert (folder / "network.yml").exists() and (folder / "plan.json").exists()
