"""Headless Chromium (Debian's `chromium`) for the report tests: load a page, count the images
that really decoded, catch console messages and page errors, and take a full-page screenshot.

No extra dependency: the page is copied with a small script that, on load, writes a marker
element (image count, decoded count, errors, page height) which `--dump-dom` prints; console
messages come from Chromium's own log (--enable-logging=stderr), lines with `:CONSOLE`.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
]
PROBE = """<script>
window.__errs = [];
window.addEventListener("error", function (e) {
  var t = e.target;
  window.__errs.push(t && t.tagName ? "failed to load " + t.tagName : String(e.message));
}, true);
window.addEventListener("load", function () {
  var im = document.images, ok = 0;
  for (var i = 0; i < im.length; i++) { if (im[i].complete && im[i].naturalWidth > 0) ok++; }
  var d = document.createElement("div");
  d.id = "__report_check";
  d.setAttribute("data-images", im.length);
  d.setAttribute("data-loaded", ok);
  d.setAttribute("data-height", document.documentElement.scrollHeight);
  d.setAttribute("data-errors", window.__errs.join(" | "));
  document.body.appendChild(d);
});
</script>"""
MARKER = re.compile(
    r'<div id="__report_check" data-images="(\d+)" data-loaded="(\d+)" '
    r'data-height="(\d+)" data-errors="([^"]*)"'
)


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@dataclass
class PageCheck:
    images: int
    loaded: int
    height: int
    errors: str  # page errors (scripts, failed loads) seen by the probe
    console: list[str]  # console messages Chromium logged for the original page


def _run(args: list[str], timeout: float = 120) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory(prefix="cb-chromium-") as profile:
        cmd = [chromium(), *FLAGS, f"--user-data-dir={profile}", *args]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def console_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if ":CONSOLE" in line]


def check(html: Path, workdir: Path, width: int = 1280) -> PageCheck:
    """Open a copy of `html` with the probe in a window `width` CSS pixels wide; report images,
    errors and the page height at that width. Then open the original itself with logging on
    and collect any console message it makes."""
    text = html.read_text(encoding="utf-8")
    probe = workdir / "probe.html"
    probe.write_text(text.replace("<head>", "<head>" + PROBE, 1), encoding="utf-8")
    p = _run(
        [
            f"--window-size={width},1000",
            "--virtual-time-budget=15000",
            "--dump-dom",
            probe.resolve().as_uri(),
        ]
    )
    m = MARKER.search(p.stdout)
    assert m, f"no probe marker in the DOM (chromium rc {p.returncode}): {p.stderr[-2000:]}"
    q = _run(
        [
            "--enable-logging=stderr",
            "--v=0",
            "--virtual-time-budget=15000",
            "--dump-dom",
            html.resolve().as_uri(),
        ]
    )
    return PageCheck(int(m[1]), int(m[2]), int(m[3]), m[4], console_lines(q.stderr))


def screenshot(html: Path, out: Path, width: int = 1280, height: int = 2000) -> Path:
    """A PNG of the page at `width` x `height` CSS pixels (pass the page height for all of it)."""
    _run(
        [
            f"--window-size={width},{height}",
            "--virtual-time-budget=15000",
            f"--screenshot={out.resolve()}",
            html.resolve().as_uri(),
        ]
    )
    assert out.is_file(), f"chromium wrote no screenshot to {out}"
    return out
