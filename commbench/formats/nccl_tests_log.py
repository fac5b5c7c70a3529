"""The structure of a nccl-tests log: its invocations (sections: `# nThread` line, `#  Rank`
lines, column header, rows), the binary each ran and what the log says about NCCL (version,
NCCL_* settings). nccl_tests.py turns the sections into records.
"""

from __future__ import annotations

import re
from pathlib import Path

from commbench.formats.common import is_count
from commbench.formats.nccl_tuning import TUNING
from commbench.nccl_names import REGIME_SETTINGS

BINARY = re.compile(
    r"(?<![A-Za-z])(all_reduce|all_gather|reduce_scatter|alltoallv|alltoall|broadcast|"
    r"reduce|sendrecv|gather|scatter|hypercube)_perf"
)
_NTHREAD = re.compile(
    r"^#\s*nThread\s+(\d+)\s+nGpus\s+(\d+).*?warmup iters:\s*(\d+)\s+iters:\s*(\d+)"
    r"(?:.*?validation:\s*(\d+))?"
)
_RANK = re.compile(
    r"^#\s+Rank\s+(\d+)\s+(?:Group\s+(\d+)\s+)?Pid\s+(\d+)\s+on\s+(\S+)\s+device\s+(\d+)"
    r"(?:\s+\[[^\]]*\])?\s*(.*)$"
)
_HEADER = re.compile(r"^#\s+size\s+count\s+type\b")
_STARTING = re.compile(r"^#\s*Collective test starting:\s*(\w+)_perf\b")
_VERSION = re.compile(r"NCCL version (\S+)")
# a version named in a comment line (`# software: NCCL 2.21.5 ...`), used when no NCCL line says it
_MENTION = re.compile(r"^#.*?\bNCCL (\d+\.\d+(?:\.[0-9x]+)?)")
_LIBRARY = re.compile(r"\bnccl-library=(\d{4,6})\b")  # nccl-tests >= 2.13: 22902 = 2.29.2
_ENV = re.compile(r"\b(NCCL_[A-Z0-9_]+) set by environment to (\S+)")
# `NCCL_X=v` / `FI_X=v` written on a comment or command line (a job script echoed in the log)
_ENV_STATED = re.compile(r"(?<![A-Za-z0-9_])((?:NCCL|FI)_[A-Z0-9_]+)=('[^']*'|\S+)")


def _placements(line: str) -> list[str]:
    found = sorted(
        (i, name) for name in ("out-of-place", "in-place") if (i := line.find(name)) >= 0
    )
    return [name for _, name in found]


class Section:
    """One nccl-tests invocation in the log."""

    def __init__(self, start: int, binary: str | None) -> None:
        self.start = start
        self.binary = binary
        self.iters: int | None = None
        self.warmup: int | None = None
        self.check = True
        self.blocking = False
        self.ranks: list[tuple[int, int, str, str]] = []  # rank, group, host, device
        self.header: list[str] | None = None
        self.placements: list[str] = ["out-of-place", "in-place"]
        self.rows: list[tuple[int, list[str]]] = []
        self.tuning: list[tuple[int, re.Match]] = []  # (line, nccl_tuning.TUNING match)
        self.concluded = False  # its `Out of bounds values` footer came: the sweep ran to its end


def split_sections(path: Path, lines: list[str]) -> tuple[list[Section], dict, dict]:
    """The log's nccl-tests invocations, its meta, and the line of each NCCL_* setting."""
    sections: list[Section] = []
    pending_binary = None
    meta: dict = {"env": {}}
    stated: dict[str, str] = {}
    env_lines: dict[str, int] = {}
    cur: Section | None = None
    for n, line in enumerate(lines, 1):
        s = line.strip()
        if m := TUNING.search(s):  # NCCL prints them once it runs: inside a section
            if cur is not None:
                cur.tuning.append((n, m))
            continue
        if m := _VERSION.search(s):
            meta.setdefault("nccl_version", m.group(1))
        elif m := _LIBRARY.search(s):
            code = int(m.group(1))  # NCCL_VERSION_CODE: major*10000 + minor*100 + patch
            meta.setdefault("nccl_version", f"{code // 10000}.{code // 100 % 100}.{code % 100}")
        elif m := _MENTION.search(s):
            meta.setdefault("nccl_version_mentioned", m.group(1))
        if m := _ENV.search(s):
            meta["env"][m.group(1)] = m.group(2)
            env_lines[m.group(1)] = n
        elif (s.startswith("#") or BINARY.search(s)) and not s[:1].isdigit():
            for key, value in _ENV_STATED.findall(s):
                stated.setdefault(key, value.strip("'"))
                env_lines.setdefault(key, n)
        if not s.startswith("#") and (m := BINARY.search(s)) and not s[:1].isdigit():
            pending_binary = m.group(1)
            meta.setdefault("command", s)
            continue
        if m := _STARTING.match(s):  # nccl-tests >= 2.17 names the binary of each test
            pending_binary = m.group(1)
            continue
        if m := _NTHREAD.match(s):
            cur = Section(n, pending_binary)
            pending_binary = None
            sections.append(cur)
            cur.warmup, cur.iters = int(m.group(3)), int(m.group(4))
            cur.check = m.group(5) != "0"
            continue
        if cur is None and (_HEADER.match(s) or _RANK.match(s)):
            cur = Section(n, pending_binary)  # a log without the `# nThread` line
            pending_binary = None
            sections.append(cur)
        if cur is None:
            continue
        if "Blocking Enabled" in s:
            cur.blocking = True
        elif "Out of bounds values" in s:
            cur.concluded = True
        elif m := _RANK.match(s):
            rank, group, host, dev = int(m.group(1)), int(m.group(2) or 0), m.group(4), m.group(6)
            cur.ranks.append((rank, group, host, dev.strip()))
        elif s.startswith("#") and ("out-of-place" in s or "in-place" in s):
            cur.placements = _placements(s)
        elif _HEADER.match(s):
            cur.header = s.lstrip("#").split()
        elif s and is_count(s.split()[0]) and cur.header is not None:
            cur.rows.append((n, s.split()))
    meta["env"] = {**stated, **meta["env"]}  # what NCCL says it was set to wins
    mentioned = meta.pop("nccl_version_mentioned", None)
    if mentioned is not None:
        meta.setdefault("nccl_version", mentioned)
    # what NCCL was told to run (NCCL_DEBUG=INFO's "NCCL_ALGO set by environment to Ring")
    for name, key in REGIME_SETTINGS.items():
        if key in meta["env"]:
            meta[name] = meta["env"][key]
    return sections, meta, env_lines
