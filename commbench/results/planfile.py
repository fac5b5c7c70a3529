"""The plan file (schema commbench.plan/1): what `commbench plan --json` and `-o` write and
`commbench report --plan` reads. The planner writes through PlanFile.to_json and the report
reads through PlanFile.read, which checks every field it takes and names the file and the JSON
path of a bad one. A hand-written plan needs only `configs`, each with a `label`; the report
draws label, zero_stage and time_s.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from commbench.errors import UsageError

SCHEMA = "commbench.plan/1"
EXPLAIN_SCHEMA = "commbench.plan.explain/1"
Scalar = str | int | float | bool | None


# ---- checked reads of one JSON value ------------------------------------------------------------
_JSON_NAMES = {dict: "object", list: "list", str: "string", bool: "true or false"}
_DEGREES = ("tp", "cp", "ep", "dp", "pp", "micro_batch", "micro_batches", "zero_stage",
            "virtual_stages")  # fmt: skip


def _number(v: object, where: str, what: str = "number of seconds") -> float | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= 0:
        raise UsageError(f"{where}: must be a non-negative {what}, got {v!r}")
    return float(v)


def _int(doc: dict, key: str, where: str) -> int | None:
    v = doc.get(key)
    if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
        raise UsageError(f"{where}.{key}: must be an integer, got {v!r}")
    return v


def _typed(doc: dict, key: str, kind: type, default: Any, where: str) -> Any:
    """doc[key] if it is a `kind`; absent or null: `default`."""
    v = doc.get(key)
    if v is None:
        return default
    if not isinstance(v, kind):
        raise UsageError(f"{where}.{key}: must be a JSON {_JSON_NAMES[kind]}, got {v!r}")
    return v


def _config_fields(c: object, where: str) -> dict[str, Any]:
    """label, degrees, micro-batching, zero_stage and order of a config (search.Config.as_dict)."""
    if not isinstance(c, dict) or not isinstance(c.get("label"), str):
        raise UsageError(f"{where}: needs a string 'label'")
    return {
        "label": c["label"],
        **{k: _int(c, k, where) for k in _DEGREES},
        "order": _typed(c, "order", str, None, where),
    }


def _band(c: dict, where: str) -> list[float] | None:
    """A config's step_band_s: [low, high] seconds, or None where absent."""
    band = _typed(c, "step_band_s", list, None, where)
    if band is None:
        return None
    if len(band) != 2:
        raise UsageError(f"{where}.step_band_s: must be [low, high] seconds, got {band!r}")
    lo, hi = (_number(v, f"{where}.step_band_s") for v in band)
    if lo is None or hi is None or lo > hi:
        raise UsageError(f"{where}.step_band_s: must be [low, high] seconds, got {band!r}")
    return [lo, hi]


# ---- the records ------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class PlanTimes:
    """A config's `time_s`, seconds per step per GPU. compute: FLOPs time (None: no compute
    model); bubble: idle pipeline time, the in-layer stretch included; tp, cp, ep: predicted
    in-layer communication; pp: pipeline messages on the 1F1B critical path; dp: gradient
    traffic (DP all-reduce or ZeRO) in all; dp_exposed: the part not hidden behind the backward
    compute (a hand-written plan may give dp alone); step: the step time. Absent communication
    reads as 0, absent compute, bubble and step as None."""

    compute: float | None = None
    bubble: float | None = None
    tp: float = 0.0
    cp: float = 0.0
    ep: float = 0.0
    pp: float = 0.0
    dp: float = 0.0
    dp_exposed: float | None = None
    step: float | None = None

    @property
    def comm(self) -> dict[str, float]:
        """Communication on the critical path per axis: tp, cp, ep, pp and the exposed dp."""
        exposed = self.dp if self.dp_exposed is None else self.dp_exposed
        return {"tp": self.tp, "cp": self.cp, "ep": self.ep, "pp": self.pp, "dp": exposed}

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_json(cls, doc: dict, where: str) -> PlanTimes:
        def s(key: str) -> float | None:
            return _number(doc.get(key), f"{where}.{key}")

        comm = {a: s(a) or 0.0 for a in ("tp", "cp", "ep", "pp", "dp")}
        return cls(
            **comm,
            dp_exposed=s("dp_exposed"),
            compute=s("compute"),
            bubble=s("bubble"),
            step=s("step"),
        )


@dataclass(frozen=True, kw_only=True)
class AxisPlacement:
    """Where an axis's groups lie: members per group, link class (intra: inside a node, inter:
    across nodes), hosts one group spans, and the rank stride between its members."""

    size: int
    link_class: str
    hosts_spanned: int
    stride: int

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True, kw_only=True)
class PlannedConfig:
    """One ranked config. rank: 1 = the fastest step; label: `tp8-cp1-dp1-pp4` (`-epN` with
    expert parallelism); tp, cp, ep, dp, pp: degrees; micro_batch: sequences per micro-batch;
    micro_batches: per step; zero_stage: 0-3; virtual_stages: model chunks a pipeline stage
    holds (> 1: interleaved 1F1B); order: the rank order, e.g. tp-cp-ep-dp-pp
    (Megatron's); placement: axis -> AxisPlacement; memory_gb: per GPU by kind and `total`;
    fits: within the GPU memory; time_s: PlanTimes; comm_s: communication on the critical path;
    comm_share: comm_s / step (None without a compute model); comm_bound: comm_share > 30%;
    extrapolated: a prediction lies beyond the calibration; step_band_s: [low, high] of the
    step with its ops priced beyond the measured node counts at their bands' ends (absent where
    none is); notes: how steps were priced;
    programs (`--explain` only): pattern -> its Program steps' estimates; inference (`plan
    --mode infer`): prefill_s, tpot_s (time per output token), tokens_per_s (and per GPU),
    batch, decode_comm_s, decode_memory_s and decode_flops_s. Everything but label
    may be absent from a hand-written plan (None, or empty)."""

    rank: int | None = None
    label: str
    tp: int | None = None
    cp: int | None = None
    ep: int | None = None
    dp: int | None = None
    pp: int | None = None
    micro_batch: int | None = None
    micro_batches: int | None = None
    zero_stage: int | None = None
    virtual_stages: int | None = None
    order: str | None = None
    placement: dict[str, AxisPlacement] = field(default_factory=dict)
    memory_gb: dict[str, float] = field(default_factory=dict)
    fits: bool | None = None
    time_s: PlanTimes = field(default_factory=PlanTimes)
    comm_s: float | None = None
    comm_share: float | None = None
    comm_bound: bool | None = None
    extrapolated: bool | None = None
    step_band_s: list[float] | None = None
    notes: list[str] = field(default_factory=list)
    programs: dict[str, list[dict[str, Any]]] | None = None
    inference: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        out = dict(self.__dict__)
        out["placement"] = {a: p.to_json() for a, p in self.placement.items()}
        out["time_s"] = self.time_s.to_json()
        for key in ("step_band_s", "programs", "inference"):
            if out[key] is None:
                del out[key]
        return out

    @classmethod
    def from_json(cls, c: object, where: str) -> PlannedConfig:
        fields = _config_fields(c, where)
        assert isinstance(c, dict)
        times = c.get("time_s") or {}
        if not isinstance(times, dict):
            raise UsageError(f"{where}.time_s: must map part -> seconds")
        placement = _typed(c, "placement", dict, {}, where)
        for axis, p in placement.items():
            if not isinstance(p, dict) or set(p) != {
                "size",
                "link_class",
                "hosts_spanned",
                "stride",
            }:
                raise UsageError(
                    f"{where}.placement.{axis}: must hold size, link_class, hosts_spanned, stride"
                )
        return cls(
            rank=_int(c, "rank", where),
            **fields,
            placement={a: AxisPlacement(**p) for a, p in placement.items()},
            memory_gb=_typed(c, "memory_gb", dict, {}, where),
            fits=_typed(c, "fits", bool, None, where),
            time_s=PlanTimes.from_json(times, f"{where}.time_s"),
            comm_s=_number(c.get("comm_s"), f"{where}.comm_s"),
            comm_share=_number(c.get("comm_share"), f"{where}.comm_share", "fraction"),
            comm_bound=_typed(c, "comm_bound", bool, None, where),
            extrapolated=_typed(c, "extrapolated", bool, None, where),
            step_band_s=_band(c, where),
            notes=_typed(c, "notes", list, [], where),
            programs=_typed(c, "programs", dict, None, where),
            inference=_typed(c, "inference", dict, None, where),
        )


@dataclass(frozen=True, kw_only=True)
class RejectedConfig:
    """A config that cannot run: label, degrees, micro-batching, zero_stage and order as in
    PlannedConfig; stage: where it was dropped (invalid: degrees or batch vs the model; memory:
    does not fit; unpriced: the calibration cannot price it); reasons: why."""

    label: str
    tp: int | None = None
    cp: int | None = None
    ep: int | None = None
    dp: int | None = None
    pp: int | None = None
    micro_batch: int | None = None
    micro_batches: int | None = None
    zero_stage: int | None = None
    virtual_stages: int | None = None
    order: str | None = None
    stage: str | None = None
    reasons: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_json(cls, r: object, where: str) -> RejectedConfig:
        fields = _config_fields(r, where)
        assert isinstance(r, dict)
        return cls(
            **fields,
            stage=_typed(r, "stage", str, None, where),
            reasons=_typed(r, "reasons", list, [], where),
        )


@dataclass(kw_only=True)
class PlanFile:
    """A whole plan. header: the top-level scalars (the planner writes only `schema`; a
    hand-written plan may add its own, e.g. model, gpus: the report shows them); inputs: the
    request (plan.PlanRequest.as_dict: model, model_shape, gpus, gpus_per_node, seq_len,
    global_batch, ...); calibration: which one priced the plan (path, kind, backends,
    link_classes, its sources or runs, device); assumptions: the modelling choices in force;
    findings (`--mode infer`): what the ranking says about serving (latency vs throughput, EP
    vs replicated experts);
    counts: candidates, valid, fit_memory, ranked, rejected, unpriced; configs: best first;
    rejected: every config that cannot run."""

    header: dict[str, Scalar] = field(default_factory=lambda: {"schema": SCHEMA})
    inputs: dict[str, Any] = field(default_factory=dict)
    calibration: dict[str, Any] = field(default_factory=dict)
    assumptions: list[str] = field(default_factory=list)
    findings: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    configs: list[PlannedConfig] = field(default_factory=list)
    rejected: list[RejectedConfig] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            **self.header,
            "inputs": self.inputs,
            "calibration": self.calibration,
            "assumptions": self.assumptions,
            **({"findings": self.findings} if self.findings else {}),
            "counts": self.counts,
            "configs": [c.to_json() for c in self.configs],
            "rejected": [r.to_json() for r in self.rejected],
        }

    @classmethod
    def from_json(cls, doc: object, source: str) -> PlanFile:
        """A parsed plan file; UsageError naming `source` and the JSON path of a bad field."""
        if not isinstance(doc, dict) or not isinstance(doc.get("configs"), list):
            raise UsageError(f"{source}: a plan must be a JSON object with a list 'configs'")
        return cls(
            header={k: v for k, v in doc.items() if not isinstance(v, (dict, list))},
            inputs=_typed(doc, "inputs", dict, {}, source),
            calibration=_typed(doc, "calibration", dict, {}, source),
            assumptions=_typed(doc, "assumptions", list, [], source),
            findings=_typed(doc, "findings", list, [], source),
            counts=_typed(doc, "counts", dict, {}, source),
            configs=[
                PlannedConfig.from_json(c, f"{source}: configs[{i}]")
                for i, c in enumerate(doc["configs"])
            ],
            rejected=[
                RejectedConfig.from_json(r, f"{source}: rejected[{i}]")
                for i, r in enumerate(_typed(doc, "rejected", list, [], source))
            ],
        )

    @classmethod
    def read(cls, path: str | Path) -> PlanFile:
        """The plan file at `path`; UsageError when it cannot be read, parsed or checked."""
        from commbench.textfile import read_json

        path = Path(path)
        doc = read_json(path, "plan")
        return cls.from_json(doc, str(path))


@dataclass(frozen=True, kw_only=True)
class ExplainFile:
    """What `commbench plan --explain --json` writes: the request and calibration as in a plan,
    and the one config explained, its Program steps included."""

    inputs: dict[str, Any]
    calibration: dict[str, Any]
    config: PlannedConfig
    chosen: tuple[str, ...] = ()  # what --explain set or picked that CONFIG did not name

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": EXPLAIN_SCHEMA,
            "inputs": self.inputs,
            "calibration": self.calibration,
            "config": self.config.to_json(),
            "chosen": list(self.chosen),
        }
