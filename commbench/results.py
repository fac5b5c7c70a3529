"""Run directories: append-safe `records.jsonl` + atomic `meta.json`, and the reader.

Rank 0 writes one JSON object per line and flushes (and fsyncs) each point, so a killed
run keeps every finished point. `meta.json` carries the run's status: running, complete,
interrupted or failed. Records are the only input of fit, plan, validate and report.
"""

from __future__ import annotations

import json
import os
import secrets
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from commbench.errors import UsageError

SCHEMA_VERSION = 1
RECORDS = "records.jsonl"
META = "meta.json"
STATUSES = ("running", "complete", "interrupted", "failed")

# Fields every record carries, whatever made it.
REQUIRED_FIELDS = (
    "schema_version",
    "run_id",
    "kind",
    "op",
    "backend",
    "dtype",
    "bytes",
    "group_size",
    "time_us",
)
# Fields of a measured op (collective or suite step), per the foundation issue.
MEASURED_FIELDS = REQUIRED_FIELDS + (
    "count",
    "world_size",
    "link_class",
    "iters",
    "warmup",
    "time_mean_us",
    "time_min_us",
    "time_p95_us",
    "algbw_GBps",
    "busbw_GBps",
    "wrong",
    "timing",
)


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON to a temp file beside `path`, fsync, then rename over it."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w") as f:
        json.dump(data, f, indent=2, sort_keys=False, default=str)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def new_run_dir(root: Path, command: str, run_id: str | None = None) -> Path:
    """Create a fresh `<root>/<timestamp>-<command>-<random>` directory (mkdir is exclusive,
    so two runs never share one), or `<root>/<run_id>` when named (it must not exist yet)."""
    root.mkdir(parents=True, exist_ok=True)
    if run_id:
        path = root / run_id
        try:
            path.mkdir()
        except FileExistsError:
            raise UsageError(
                f"run directory {path} already exists: pick another --run-id"
            ) from None
        return path
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for _ in range(100):
        path = root / f"{stamp}-{command}-{secrets.token_hex(3)}"
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue
    raise RuntimeError(f"could not create a unique run directory under {root}")


class RunWriter:
    """Writes one run directory: meta.json (atomic, with status) and records.jsonl (append)."""

    def __init__(self, path: Path, meta: dict) -> None:
        self.path = path
        self.run_id = path.name
        self.meta = {
            "schema_version": SCHEMA_VERSION,
            "run_id": self.run_id,
            **meta,
            "status": "running",
            "records": 0,
        }
        self.count = 0
        self._lock = threading.Lock()
        write_json_atomic(path / META, self.meta)
        self._f = open(path / RECORDS, "a", buffering=1)

    @classmethod
    def create(cls, root: Path, command: str, meta: dict, run_id: str | None = None) -> RunWriter:
        return cls(new_run_dir(root, command, run_id), meta)

    def write(self, record: dict) -> None:
        """Append one record and make it durable before returning."""
        rec = {"schema_version": SCHEMA_VERSION, "run_id": self.run_id, **record}
        self._f.write(json.dumps(rec, default=_json_default) + "\n")
        self._f.flush()
        os.fsync(self._f.fileno())
        self.count += 1

    def mark(self, status: str, **fields: Any) -> None:
        """Rewrite meta.json with a new status (atomic; safe from the signal thread)."""
        assert status in STATUSES, status
        with self._lock:
            self.meta.update(status=status, records=self.count, **fields)
            write_json_atomic(self.path / META, self.meta)

    def finish(self, status: str, error: str | None = None) -> None:
        """Close records and stamp meta.json with the final status."""
        if not self._f.closed:
            self._f.close()
        self.mark(status, end_time=time.time(), **({"error": error} if error else {}))


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if hasattr(obj, "item"):
        return obj.item()
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


@dataclass
class Run:
    """A run read back: its directory, meta, records and how complete it is."""

    path: Path
    meta: dict
    records: list[dict]

    @property
    def status(self) -> str:
        return self.meta.get("status", "unknown")

    @property
    def partial(self) -> bool:
        """True unless the run says it completed (running = killed before it could say)."""
        return self.status != "complete"


def is_run_dir(path: Path) -> bool:
    return (path / RECORDS).is_file() or (path / META).is_file()


def iter_records(path: Path) -> Iterator[dict]:
    """Parse records.jsonl line by line; a bad line is a UsageError naming file and line."""
    try:
        f = open(path)
    except OSError as e:
        raise UsageError(f"cannot read {path}: {e.strerror}") from None
    with f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise UsageError(f"{path}:{lineno}: not a JSON record ({e.msg})") from None
            if not isinstance(rec, dict):
                raise UsageError(f"{path}:{lineno}: a record must be a JSON object")
            missing = [k for k in REQUIRED_FIELDS if k not in rec]
            if missing:
                raise UsageError(f"{path}:{lineno}: record lacks {', '.join(missing)}")
            if rec["schema_version"] != SCHEMA_VERSION:
                raise UsageError(
                    f"{path}:{lineno}: schema_version {rec['schema_version']!r} is not "
                    f"{SCHEMA_VERSION}"
                )
            yield rec


def read_run(path: str | Path) -> Run:
    """Load one run directory; clear errors for a missing, non-run or corrupt directory."""
    path = Path(path)
    if not path.exists():
        raise UsageError(f"{path}: no such run directory")
    if not path.is_dir():
        raise UsageError(f"{path}: not a directory (give a run directory holding {RECORDS})")
    if not os.access(path, os.R_OK | os.X_OK):
        raise UsageError(f"{path}: directory is not readable")
    if not is_run_dir(path):
        raise UsageError(f"{path}: not a run directory (no {RECORDS} or {META})")
    meta: dict = {}
    if (path / META).is_file():
        try:
            meta = json.loads((path / META).read_text())
        except (json.JSONDecodeError, OSError) as e:
            raise UsageError(f"{path / META}: unreadable meta ({e})") from None
        if not isinstance(meta, dict):
            raise UsageError(f"{path / META}: meta must be a JSON object")
    records = list(iter_records(path / RECORDS)) if (path / RECORDS).exists() else []
    return Run(path, meta, records)


def read_runs(paths: Iterable[str | Path]) -> list[Run]:
    """Load several run directories (each as read_run)."""
    return [read_run(p) for p in paths]


def latest_runs(root: Path, n: int | None = None) -> list[Path]:
    """Run directories under `root`, newest first (by name: names start with a timestamp)."""
    if not root.is_dir():
        return []
    runs = sorted(
        (p for p in root.iterdir() if p.is_dir() and is_run_dir(p)),
        key=lambda p: p.name,
        reverse=True,
    )
    return runs[:n] if n else runs


def to_frame(records: list[dict]):
    """Records as a pandas DataFrame (pandas imported here, never on the MPI path)."""
    import pandas as pd

    return pd.DataFrame.from_records(records)
