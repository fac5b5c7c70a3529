"""`commbench report` on real runs made here: two `commbench run` sweeps and the smoke suite
under `mpirun -n 4`, a calibration fitted from them with `commbench fit`, a run cut short
(the smoke run's records up to the middle of a point, status `running`: what a killed job
leaves), a plan file in the planner's JSON contract; then every figure is a valid PNG, the
page is self-contained, and headless Chromium shows every image with no console error."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import report_browser
from report_checks import assert_png, assert_self_contained, embedded_images

from commbench import cli

from conftest import REPO, job_env, run_mpi, run_single

pytestmark = pytest.mark.mpi
ARTIFACTS = Path(
    os.environ.get("COMMBENCH_TEST_ARTIFACTS", REPO / "results" / "report-test-artifacts")
)


def _ok(job, what: str) -> None:
    assert job.returncode == 0, f"{what} failed ({job.returncode}):\n{job.output[-3000:]}"


@pytest.fixture(scope="module")
def lab(tmp_path_factory) -> Path:
    """results/ with sweep-ar, sweep-ag, smoke (all real), smoke-cut (partial) and cal.json."""
    root = tmp_path_factory.mktemp("lab")
    res = root / "results"
    sweep = ["-b", "8", "-e", "256K", "-f", "4", "--budget", "0.01", "--results", str(res)]
    _ok(run_mpi(4, "run", "allreduce", *sweep, "--run-id", "sweep-ar"), "allreduce sweep")
    _ok(run_mpi(4, "run", "allgather", "-g", "2", *sweep, "--run-id", "sweep-ag"), "allgather")
    _ok(run_mpi(4, "suite", "smoke", "--results", str(res), "--run-id", "smoke"), "smoke suite")
    fit = run_single(
        "fit", str(res / "sweep-ar"), str(res / "sweep-ag"), str(res / "smoke"), "-o",
        str(root / "cal.json"), "--bootstrap", "0",
    )  # fmt: skip
    _ok(fit, "fit")
    cut_short(res / "smoke", res / "smoke-cut", pattern="ep")
    return root


def cut_short(src: Path, dst: Path, pattern: str) -> None:
    """A copy of run `src` as a killed job leaves it: records up to the first step of the
    first `pattern` point (its point record and everything after it never written), meta
    status still `running`, no end time."""
    recs = [json.loads(line) for line in (src / "records.jsonl").read_text().splitlines()]
    first = next(i for i, r in enumerate(recs) if r["kind"] == "step" and r["pattern"] == pattern)
    kept = [{**r, "run_id": dst.name} for r in recs[: first + 1]]
    dst.mkdir()
    (dst / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in kept))
    meta = json.loads((src / "meta.json").read_text())
    meta.update(status="running", records=len(kept), run_id=dst.name)
    meta.pop("end_time", None)
    (dst / "meta.json").write_text(json.dumps(meta))


def write_plan(path: Path) -> Path:
    """A real plan: `commbench plan -o` on the shipped reference calibration."""
    assert cli.main(["plan", "--model", "llama-70b", "--gpus", "32", "--gpus-per-node", "8",
                     "--top", "3", "-o", str(path)]) == 0  # fmt: skip
    return path


def report(capsys, *args) -> tuple[int, str, str]:
    rc = cli.main(["report", *map(str, args)])
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.fixture(scope="module")
def full(lab, tmp_path_factory) -> Path:
    """The report of all four runs with the fitted calibration and a plan."""
    out = tmp_path_factory.mktemp("report")
    res = lab / "results"
    rc = cli.main(
        ["report", *(str(res / r) for r in ("sweep-ar", "sweep-ag", "smoke", "smoke-cut")),
         "--calibration", str(lab / "cal.json"), "--plan", str(write_plan(lab / "plan.json")),
         "-o", str(out)]
    )  # fmt: skip
    assert rc == 0
    return out


def test_every_figure_is_a_valid_png(full):
    names = {p.stem for p in (full / "figures").glob("*.png")}
    expected = {
        "busbw-allreduce", "latency-allreduce", "busbw-allgather", "latency-allgather",
        "strategy-step-time", "ep-imbalance", "pp-timeline-1", "plan-1", "validate",
    }  # fmt: skip
    assert expected <= names, f"missing figures: {expected - names}"
    for p in (full / "figures").glob("*.png"):
        assert_png(p)


def test_page_is_self_contained_and_says_what_it_shows(full):
    html = (full / "index.html").read_text()
    assert_self_contained(html)
    pngs = sorted(p.read_bytes() for p in (full / "figures").glob("*.png"))
    assert sorted(embedded_images(html)) == pngs  # each figure embedded once, byte for byte
    for run in ("sweep-ar", "sweep-ag", "smoke", "smoke-cut"):
        assert f"<td>{run}</td>" in html
    assert "PARTIAL (running)" in html and "run smoke-cut is partial" in html
    assert "no point record: the run stopped inside it" in html
    assert "cal.json" in html and "plan.json" in html
    assert html.count("<figcaption>") == len(pngs)
    for unit in ("GB/s", "microseconds", "milliseconds"):
        assert unit in html
    assert "commbench run allreduce" in html  # the command line of each run
    assert "mpi4py" in html  # library versions


def test_browser_shows_every_image_and_no_console_error(full, tmp_path):
    if report_browser.chromium() is None:
        pytest.skip("chromium is not installed (make browser installs Debian's chromium)")
    page = full / "index.html"
    check = report_browser.check(page, tmp_path)
    n = len(list((full / "figures").glob("*.png")))
    assert check.images == n and check.loaded == n, check
    assert check.errors == "" and check.console == [], check
    shot = report_browser.screenshot(page, tmp_path / "report.png", 1280, min(check.height, 16000))
    w, h = assert_png(shot)
    assert w == 1280 and h > 2000
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    kept = shutil.copy(shot, ARTIFACTS / "report-screenshot.png")
    shutil.copy(page, ARTIFACTS / "index.html")
    print(f"\nreport screenshot: {kept} ({w}x{h}); page: {ARTIFACTS / 'index.html'}")


def test_browser_check_catches_broken_images_and_console_errors(tmp_path):
    """The browser check itself: a page with a broken image and a console error fails it."""
    if report_browser.chromium() is None:
        pytest.skip("chromium is not installed (make browser installs Debian's chromium)")
    page = tmp_path / "bad.html"
    page.write_text(
        "<!DOCTYPE html><html><head><title>x</title></head><body>"
        '<img src="data:image/png;base64,iVBORw0KGgo=">'
        "<script>console.error('boom')</script></body></html>"
    )
    check = report_browser.check(page, tmp_path)
    assert check.images == 1 and check.loaded == 0
    assert "failed to load IMG" in check.errors
    assert any("boom" in line for line in check.console)


def test_partial_run_alone(lab, tmp_path, capsys):
    rc, out, _ = report(capsys, lab / "results" / "smoke-cut", "--no-fit", "-o", tmp_path)
    assert rc == 0
    assert "1 partial: smoke-cut" in out
    html = (tmp_path / "index.html").read_text()
    assert "PARTIAL (running)" in html
    assert "point 8 (ep) has 1 step record(s) but no point record" in html
    assert "Calibration: none (--no-fit given)." in html
    assert "no calibration (--no-fit given): fitted lines" in html
    assert (tmp_path / "figures" / "strategy-step-time.png").is_file()
    assert not (tmp_path / "figures" / "ep-imbalance.png").exists()  # its point never finished
    assert "no EP suite point" in html


def test_empty_run_is_reported_as_empty(tmp_path, capsys):
    run = tmp_path / "empty"
    run.mkdir()
    (run / "records.jsonl").write_text("")
    (run / "meta.json").write_text(json.dumps({"run_id": "empty", "status": "running"}))
    rc, out, _ = report(capsys, run, "-o", tmp_path / "out")
    assert rc == 0 and "0 figure(s)" in out
    html = (tmp_path / "out" / "index.html").read_text()
    assert "run empty has no records" in html and "PARTIAL (running)" in html
    assert "<img" not in html


def test_not_a_run_directory_exits_2(lab, tmp_path, capsys):
    (tmp_path / "stuff").mkdir()
    rc, out, err = report(capsys, tmp_path / "stuff", "-o", tmp_path / "out")
    assert rc == 2 and out == ""
    assert (
        err
        == f"commbench: error: {tmp_path / 'stuff'}: not a run directory (no records.jsonl or meta.json)\n"
    )
    rc, _, err = report(capsys, lab / "results", "-o", tmp_path / "out")
    assert rc == 2 and err.count("\n") == 1
    assert "it holds 4 run(s)" in err and "--results" in err
    rc, _, err = report(capsys, tmp_path / "nope", "-o", tmp_path / "out")
    assert rc == 2 and "no such run directory" in err
    rc, _, err = report(capsys, "--results", tmp_path / "stuff", "-o", tmp_path / "out")
    assert rc == 2 and "holds no run" in err
    assert not (tmp_path / "out" / "index.html").exists()


def test_bad_plan_file_exits_2(lab, tmp_path, capsys):
    bad = tmp_path / "plan.json"
    bad.write_text(json.dumps({"configs": [{"label": "a", "time_s": {"tp": "fast"}}]}))
    rc, _, err = report(capsys, lab / "results" / "sweep-ar", "--plan", bad, "-o", tmp_path)
    assert rc == 2
    assert (
        err
        == f"commbench: error: {bad}: configs[0].time_s.tp: must be a non-negative number of seconds, got 'fast'\n"
    )


def test_calibration_without_a_matching_series(lab, tmp_path, capsys):
    cal = tmp_path / "ag-only.json"
    _ok(
        run_single("fit", str(lab / "results" / "sweep-ag"), "-o", str(cal), "--bootstrap", "0"),
        "fit",
    )
    rc, out, _ = report(
        capsys, lab / "results" / "sweep-ar", "--calibration", cal, "-o", tmp_path / "o"
    )
    assert rc == 0
    html = (tmp_path / "o" / "index.html").read_text()
    assert f"no fit for 1 series (not fitted in {cal})" in html
    assert "allreduce p=4 intra float32 mpi per-iteration" in html
    assert "No fit drawn: not fitted in" in html  # the latency caption says why
    for name in ("busbw-allreduce", "latency-allreduce"):
        assert_png(tmp_path / "o" / "figures" / f"{name}.png")


def test_default_picks_the_newest_run_of_each_kind(lab, tmp_path, capsys):
    res = tmp_path / "results"
    res.mkdir()
    for name in ("sweep-ar", "sweep-ag"):
        shutil.copytree(lab / "results" / name, res / name)
    shutil.copytree(lab / "results" / "sweep-ar", res / "sweep-ar-older")
    meta = json.loads((res / "sweep-ar-older" / "meta.json").read_text())
    meta["start_time"] -= 3600  # the same sweep an hour earlier
    (res / "sweep-ar-older" / "meta.json").write_text(json.dumps(meta))
    rc, out, _ = report(capsys, "--results", res)
    assert rc == 0 and "2 run(s)" in out
    html = (res / "report" / "index.html").read_text()
    assert "the newest run of each kind" in html
    assert (
        "sweep-ar-older (run allreduce p=4 stride 1 intra, mpi world 4; superseded by sweep-ar)"
        in html
    )
    rc, out, _ = report(capsys, "--results", res, "--all", "-o", tmp_path / "all")
    assert rc == 0 and "3 run(s)" in out


def test_report_imports_no_transport(lab, tmp_path):
    """The report reads records only: building one imports no transport, MPI or torch (the
    CLI's parser, which loads every command's flags, is left out of this check)."""
    code = (
        "import sys\nfrom pathlib import Path\n"
        "from commbench.report import ReportOptions, build_report\n"
        f"runs = [Path({str(lab / 'results' / 'smoke')!r})]\n"
        f"rep = build_report(ReportOptions(runs=runs, out=Path({str(tmp_path)!r})))\n"
        "bad = [m for m in sys.modules if m.startswith(('commbench.measure.transport', 'mpi4py', 'torch'))]\n"
        "print(len(rep.figures) > 5, bad)\n"
    )
    p = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env=job_env(),
        cwd=REPO,
    )
    assert p.stdout.strip().splitlines()[-1] == "True []", p.stdout + p.stderr
