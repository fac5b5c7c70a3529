"""Runs fitted together that ran under different library settings: say so, naming both.

A calibration's terms blend every run of a series; when those runs used different NCCL
versions or transport settings (Polaris' nccl-tests logs: NCCL 2.18 reaches 18.7 GB/s at 540
nodes where 2.21.5 reaches 29.1; its libfabric settings 4 and 5 differ too) the blend describes
neither. Compared per backend from each run's provenance (meta.json `libraries` and `env`):
the library versions and every NCCL_* / FI_* variable either run set, but an NCCL_ALGO /
NCCL_PROTO that pins one name in both: such runs are fitted as series of their own regime.
"""

from __future__ import annotations

from commbench.errors import UsageError
from commbench.nccl_names import NCCL_FUNCS, REGIME_SETTINGS, pinned

SETTING_PREFIXES = ("NCCL_", "FI_")
# settings whose single-name values the fitter files apart (SeriesKey algorithm / protocol)
REGIME_KIND = {var: kind for kind, var in REGIME_SETTINGS.items()}


def _settings(prov: dict) -> dict[str, str]:
    out = {f"{name} version": str(v) for name, v in (prov.get("libraries") or {}).items() if v}
    for key, value in (prov.get("env") or {}).items():
        if key.startswith(SETTING_PREFIXES):
            out[key] = str(value)
    return out


def _apart(key: str, a: str | None, b: str | None) -> bool:
    """Whether two runs' different values of `key` keep their series apart: NCCL_ALGO /
    NCCL_PROTO where either pins one name for some collective (nccl_names.pinned, the rule
    the importer keys series by: `Ring`, `allreduce:Ring`); a list, an exclusion, unset or a
    name NCCL does not know lets NCCL choose, so the runs blend."""
    if key not in REGIME_KIND:
        return False
    kind = REGIME_KIND[key]
    try:
        return any(
            pinned(kind, v, op, key) is not None
            for v in (a, b)
            if v is not None
            for op in set(NCCL_FUNCS.values())
        )
    except UsageError:
        return False


def mixed_settings(runs: list[dict]) -> list[str]:
    """One warning per pair of runs (same backend) whose settings differ, naming both runs
    and up to three differences; [] when all agree or a run states none."""
    warnings = []
    seen: dict[str, tuple[str, dict[str, str]]] = {}  # backend -> first run with settings
    for prov in runs:
        mine = _settings(prov)
        if not mine:
            continue
        backend = str(prov.get("backend"))
        if backend not in seen:
            seen[backend] = (prov["run_id"], mine)
            continue
        first, theirs = seen[backend]
        keys = sorted(
            (
                k
                for k in set(mine) | set(theirs)
                if mine.get(k) != theirs.get(k) and not _apart(k, mine.get(k), theirs.get(k))
            ),
            key=lambda k: (not k.endswith(" version"), k),  # versions first
        )
        if keys:
            diff = ", ".join(
                f"{k} {theirs.get(k, 'unset')} vs {mine.get(k, 'unset')}" for k in keys[:3]
            )
            more = f" and {len(keys) - 3} more" if len(keys) > 3 else ""
            warnings.append(
                f"runs {first} and {prov['run_id']} ran under different settings ({diff}{more}): "
                "fitted together their terms blend both; fit them apart"
            )
    return warnings
