"""Predicting a collective's time from a loaded calibration, and saying how it was predicted.

predict() rule. Strict (extrapolate=False): a series must match op (alltoallv may use an
alltoall series: both take S = the busiest rank's send buffer), link class, group size, dtype
and backend (either may be omitted when the calibration has only one), preferring per-iteration
over pipelined timing and out-of-place over in-place unless asked; nbytes must lie within the
series' measured sizes; the segment holding nbytes is used (between two segments, the cut is
the geometric mean of their neighbouring sizes). A group of 1 costs 0 s. Anything else raises
UsageError saying what is missing and what the calibration covers. With extrapolate=True, in
this order: (1) bytes outside the range use the nearest segment's line; (2) a dtype not
measured uses the same op/link/group size in another dtype, same element size first, priced by
bytes; (3) a group size not measured scales the series of the nearest measured group size q
(in log2 distance, ties to the larger) by the link table's best model:
t(p, S) = t_q(S) * M(op, p, S) / M(op, q, S) with M = alpha A(op, p) + beta B(op, p) S
(Thakur, Rabenseifner & Gropp 2005), except 0 bytes, which keeps the 0-byte time measured at q
(nothing moves); (4) an op never measured on that link uses M directly.
A link class with nothing measured (no series, no link table) is refused even then. On a
reference calibration the link table is the statement itself, so (3)-(4) need no extrapolate.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from functools import partial

from commbench.calibration.algorithms import LIBRARIES, switched
from commbench.calibration.band import Priors
from commbench.calibration.choice import (
    TIMING_PREFERENCE,
    choose_regime,
    fastest_regime,
    prefer,
    rank,
    resolve_backend,
    spelled,
)
from commbench.calibration.costmodels import MODELLED_OPS
from commbench.calibration.hierarchy import Scaled, series_to_nodes
from commbench.calibration.lines import Line, LinkModel, SeriesModel, link_model, segment_for
from commbench.calibration.reach import Reach, bytes_factor
from commbench.calibration.series_key import SeriesKey
from commbench.dtypes import DTYPE_SIZES, canonical_dtype_name
from commbench.errors import UsageError
from commbench.ops import OPS, canonical_op
from commbench.sizes import format_size


@dataclass(kw_only=True)
class Prediction:
    """A predicted time and how it was obtained."""

    seconds: float
    method: str
    extrapolated: bool = False
    series: SeriesKey | None = None
    model: str | None = None
    kind: str = "measured"
    notes: list[str] = field(default_factory=list)
    reach: Reach = field(default_factory=Reach)  # how far beyond the measurements it went
    band: tuple[float, float] | None = None  # seconds: where the truth should lie (band.py)
    band_terms: dict | None = None  # what band is made of (band.BandTerms), to rescore priors


class Calibration:
    """A loaded calibration: predict(), explain() and what it covers."""

    def __init__(self, doc: dict, source: str = "calibration") -> None:
        self.doc = doc
        self.source = source
        self.kind: str = doc["kind"]
        self.series: list[SeriesModel] = [
            SeriesModel(
                SeriesKey.from_dict(s),
                s["bytes_min"],
                s["bytes_max"],
                tuple(
                    Line(g["bytes_min"], g["bytes_max"], g["alpha_s"], g["beta_s_per_byte"])
                    for g in s["segments"]
                ),
                tuple((x["nodes"], x["ranks_per_node"]) for x in s.get("shapes", ())),
                tuple((k["bytes"], k["seconds"]) for k in s.get("knots", ())),
            )
            for s in doc["series"]
        ]
        self._by_key = {s.key: s for s in self.series}
        self.links: list[LinkModel] = [link_model(e) for e in doc["link_table"]]

    # ---- what it covers ----------------------------------------------------------------
    def coverage(self) -> list[dict]:
        """One row per series: its key and measured byte range (for listings and errors)."""
        return [
            {**s.key.as_dict(), "bytes_min": s.bytes_min, "bytes_max": s.bytes_max}
            for s in sorted(self.series, key=lambda s: s.key)
        ]

    @property
    def ops(self) -> list[str]:
        return sorted({s.key.op for s in self.series})

    @property
    def link_classes(self) -> list[str]:
        return sorted({s.key.link_class for s in self.series} | {x.link_class for x in self.links})

    @property
    def backends(self) -> list[str]:
        return sorted({s.key.backend for s in self.series} | {x.backend for x in self.links})

    def describe(self, op: str | None = None, link_class: str | None = None) -> str:
        """Compact text of what is covered, e.g. `allreduce intra p=4 float32 8 B..4 MiB`."""
        groups: dict[tuple, list[SeriesModel]] = {}
        for s in self.series:
            k = s.key
            if (op and k.op != op) or (link_class and k.link_class != link_class):
                continue
            groups.setdefault((k.op, k.link_class, k.dtype, k.backend), []).append(s)
        parts = []
        for (o, link, dt, be), ss in sorted(groups.items()):
            ps = ",".join(str(p) for p in sorted({s.key.group_size for s in ss}))
            lo = format_size(min(s.bytes_min for s in ss))
            hi = format_size(max(s.bytes_max for s in ss))
            parts.append(f"{o} {link} p={ps} {dt} {be} {lo}..{hi}")
        links = [
            f"link table {x.backend}/{x.link_class}/{x.timing} ({x.best_model})"
            for x in self.links
            if not link_class or x.link_class == link_class
        ]
        return "; ".join(parts + links) or "nothing"

    # ---- prediction --------------------------------------------------------------------
    def predict(
        self,
        op: str,
        nbytes: float,
        group_size: int,
        link_class: str,
        dtype: str | None = None,
        backend: str | None = None,
        extrapolate: bool = False,
        timing: str | None = None,
        placement: str | None = None,
        algorithm: str | None = None,
        protocol: str | None = None,
    ) -> float:
        """Seconds for one `op` of S = nbytes on a group of group_size over link_class."""
        return self.explain(
            op, nbytes, group_size, link_class, dtype, backend, extrapolate, timing, placement,
            algorithm=algorithm, protocol=protocol,
        ).seconds  # fmt: skip

    def explain(
        self,
        op: str,
        nbytes: float,
        group_size: int,
        link_class: str,
        dtype: str | None = None,
        backend: str | None = None,
        extrapolate: bool = False,
        timing: str | None = None,
        placement: str | None = None,
        nodes: int | None = None,
        algorithm: str | None = None,
        protocol: str | None = None,
    ) -> Prediction:
        """predict() with the method used (see the module docstring for the rule) and how far
        it reached (`nodes`: the hosts one group spans, compared with those measured).
        `algorithm` / `protocol`: the NCCL regime (RING, LL128; any NCCL spelling) whose pinned
        series to use; None: NCCL's own choice (see choice.choose_regime)."""
        got = self._explain(
            op, nbytes, group_size, link_class, dtype, backend, extrapolate, timing, placement,
            nodes, *spelled(algorithm, protocol),
        )  # fmt: skip
        s = self._by_key.get(got.series) if got.series is not None else None
        if s is not None:
            got.reach = Reach(
                bytes_factor=bytes_factor(nbytes, s.bytes_min, s.bytes_max),
                group_size_from=s.key.group_size if s.key.group_size != group_size else None,
                nodes=nodes,
                nodes_measured=tuple(sorted({n for n, _ in s.shapes})),
            )
        elif group_size > 1:
            got.reach = Reach(nodes=nodes, model_only=True)
        if not math.isfinite(got.seconds):  # finite but absurd alpha/beta overflowed
            raise UsageError(
                f"{self.source}: {op} of {format_size(nbytes)} on {link_class} links, group "
                f"size {group_size}: the {got.method} gives {got.seconds} s (alpha/beta out "
                "of range)"
            )
        return got

    def _explain(
        self,
        op: str,
        nbytes: float,
        group_size: int,
        link_class: str,
        dtype: str | None,
        backend: str | None,
        extrapolate: bool,
        timing: str | None,
        placement: str | None,
        nodes: int | None = None,
        algorithm: str | None = None,
        protocol: str | None = None,
    ) -> Prediction:
        op = canonical_op(op)
        if op not in OPS:
            raise UsageError(f"unknown op {op!r}: choose from {', '.join(OPS)}")
        if isinstance(nbytes, bool) or not isinstance(nbytes, (int, float)) or not nbytes >= 0:
            raise UsageError(f"nbytes must be a non-negative number of bytes, got {nbytes!r}")
        if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1:
            raise UsageError(f"group_size must be a positive integer, got {group_size!r}")
        if group_size == 1:
            return Prediction(seconds=0.0, method="group of 1: no communication", kind=self.kind)
        dtype = canonical_dtype_name(dtype) if dtype else None
        want = (
            f"{op} of {format_size(nbytes)} on {link_class} links, group size {group_size}"
            + (f", dtype {dtype}" if dtype else "")
            + (f", backend {backend}" if backend else "")
        )
        ops = [op, *OPS[op].priced_from]  # alltoallv: its own series, else alltoall's
        on_link = [
            s
            for s in self.series
            if s.key.link_class == link_class
            and (backend is None or s.key.backend == backend)
            and s.key.op in ops
        ]
        backend = resolve_backend(
            on_link, self.links, backend, link_class, f"{want}: {self.source}"
        )
        on_link = [s for s in on_link if s.key.backend == backend] if backend else on_link
        if OPS[op].priced_from and any(s.key.op == op for s in on_link):
            on_link = [s for s in on_link if s.key.op == op]
        if timing is not None:
            on_link = [s for s in on_link if s.key.timing == timing]
        if placement is not None:
            on_link = [s for s in on_link if s.key.placement == placement]
        on_link, notes = choose_regime(on_link, algorithm, protocol, want, self.source)
        pick = partial(self._pick, op, nbytes, group_size, link_class, dtype, backend,
                       extrapolate, want=want, ops=ops, nodes=nodes)  # fmt: skip
        got, note = fastest_regime(on_link, pick)
        got.notes[:0] = [*notes, *([note] if note else [])]
        return got

    def _pick(
        self, op, nbytes, group_size, link_class, dtype, backend, extrapolate, on_link, want,
        ops, nodes,
    ) -> Prediction:  # fmt: skip
        """_explain's choice among the candidate series (one op, link, backend, regime)."""
        same_p = [s for s in on_link if s.key.group_size == group_size]
        if dtype is None:
            dtypes = sorted({s.key.dtype for s in same_p})
            if len(dtypes) > 1:
                raise UsageError(
                    f"{want}: {self.source} has it in several dtypes ({', '.join(dtypes)}): "
                    "pass dtype="
                )
        exact = prefer([s for s in same_p if dtype is None or s.key.dtype == dtype])
        if exact:
            s = exact[0]
            if s.covers(nbytes):
                return Prediction(
                    seconds=s.at(nbytes), method="measured segment", series=s.key, kind=self.kind
                )
            if not extrapolate:
                raise UsageError(
                    f"{want}: {format_size(nbytes)} is outside the measured sizes "
                    f"{format_size(s.bytes_min)}..{format_size(s.bytes_max)} of {s.key.label()} "
                    f"in {self.source} (--extrapolate uses the nearest segment)"
                )
            return Prediction(
                seconds=s.at(nbytes),
                method="nearest segment (bytes outside the measured range)",
                extrapolated=True,
                series=s.key,
                kind=self.kind,
            )
        if not extrapolate and self.kind != "reference":
            raise UsageError(
                f"{want}: not measured in {self.source} (it covers: "
                f"{self.describe(op=ops[-1])}); --extrapolate scales from the link table"
            )
        return self._extrapolate(
            op, nbytes, group_size, link_class, dtype, backend, on_link, want, nodes
        )

    def _link(self, backend, link_class, timing=None) -> LinkModel | None:
        links = [x for x in self.links if x.link_class == link_class]
        if backend:
            links = [x for x in links if x.backend == backend]
        if timing:
            same = [x for x in links if x.timing == timing]
            links = same or links
        links.sort(key=lambda x: rank(x.timing, TIMING_PREFERENCE))
        return links[0] if links else None

    def _to_nodes(self, link, s, op, p, nodes, nbytes) -> Scaled | None:
        """calibration.hierarchy's scaling of an inter series of one node count to `nodes`."""
        if nodes is None:
            return None
        intra = self._link(s.key.backend, "intra", s.key.timing)
        priors = Priors.of(self.doc)  # the band the calibration was written with
        return series_to_nodes(self.series, link, intra, s, op, (p, nodes), nbytes, priors)

    def _extrapolate(
        self, op, nbytes, p, link_class, dtype, backend, on_link, want, nodes=None
    ) -> Prediction:
        kind = self.kind
        same_p = prefer([s for s in on_link if s.key.group_size == p])
        if same_p:  # (2) another dtype, same element size first
            size = DTYPE_SIZES.get(dtype or "", 0)
            s = min(same_p, key=lambda s: DTYPE_SIZES.get(s.key.dtype, -1) != size)
            where = "" if s.covers(nbytes) else ", nearest segment"
            return Prediction(
                seconds=s.at(nbytes),
                method=f"dtype {s.key.dtype} measured, priced by bytes{where}",
                extrapolated=True,
                series=s.key,
                kind=kind,
            )
        if op not in MODELLED_OPS:
            raise UsageError(
                f"{want}: no algorithm model prices {op}, so it cannot be extrapolated"
            )
        if on_link:  # (3) scale the nearest measured group size by the link model
            pref = prefer([s for s in on_link if dtype is None or s.key.dtype == dtype] or on_link)
            q = min(
                {s.key.group_size for s in pref},
                key=lambda g: (abs(math.log2(g) - math.log2(p)), -g),
            )
            s = next(s for s in pref if s.key.group_size == q)
            if nbytes == 0 and any(b == 0 for b, _ in s.knots):
                return Prediction(  # nccl-tests' size-0 rows: NCCL returns before any step
                    seconds=s.at(0),
                    method=f"0 bytes: nothing moves at any group size, the 0-byte time measured "
                    f"at group size {q}",
                    extrapolated=True,
                    series=s.key,
                    kind=kind,
                )
            link = self._link(s.key.backend, link_class, s.key.timing)
            if link is not None:
                if link.library and op in link.library.terms:  # the library's own choice
                    link = link.library
                base = link.time(op, q, nbytes)
                target = link.time(op, p, nbytes)
                seg = segment_for(s.segments, nbytes)
                why = link.best_model in LIBRARIES and switched(
                    op, q, p, nbytes, seg.bytes_min, seg.bytes_max, link.best_model
                )
                if why:  # q's time holds another algorithm's: the model prices p itself
                    return Prediction(
                        seconds=target,
                        method=f"the {link.best_model} model at group size {p} ({why})",
                        extrapolated=True,
                        series=s.key,
                        model=link.best_model,
                        kind=kind,
                    )
                scaled = self._to_nodes(link, s, op, p, nodes, nbytes)
                if scaled is not None:
                    t = s.at(nbytes) * scaled.ratio
                    return Prediction(
                        seconds=t,
                        method=scaled.method,
                        extrapolated=True,
                        series=s.key,
                        model=link.best_model,
                        kind=kind,
                        notes=scaled.notes,
                        band=(t / (1 + scaled.band), t * (1 + scaled.band)),
                        band_terms=asdict(scaled.terms) if scaled.terms else None,
                    )
                if base > 0:
                    return Prediction(
                        seconds=s.at(nbytes) * target / base,
                        method=f"scaled from group size {q} by the {link.best_model} model",
                        extrapolated=True,
                        series=s.key,
                        model=link.best_model,
                        kind=kind,
                        notes=[link.note] if link.note else [],
                    )
        link = self._link(backend, link_class)
        if link is None:  # (5)
            raise UsageError(
                f"{want}: nothing was measured on {link_class} links in {self.source} (it "
                f"covers link classes: {', '.join(self.link_classes) or 'none'}), so there is "
                "no link model to extrapolate from"
            )
        return Prediction(  # (4) the link model itself
            seconds=link.time(op, p, nbytes),
            method=f"{'reference' if kind == 'reference' else 'link'} {link.best_model} model",
            extrapolated=kind != "reference",
            model=link.best_model,
            kind=kind,
            notes=[link.note] if link.note else [],
        )
