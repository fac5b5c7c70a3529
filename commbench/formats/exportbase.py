"""What the exporters share: one link model per link class, the system's size (NPUs per node,
nodes), the error gate, and the list of what a one-line-per-link description cannot express."""

from __future__ import annotations

from dataclasses import dataclass

from commbench.calibration import TIMING_PREFERENCE, Calibration
from commbench.calibration.band import export_notes
from commbench.errors import UsageError
from commbench.keys import assign

LINK_ORDER = ("intra", "inter")
REFERENCE_NODES = 2  # inter NPUs of a reference export without --gpus / --npus inter=N
MAX_MEDIAN_ERR = 0.25  # a link model missing its points by more is refused without --force


@dataclass(frozen=True)
class Tier:
    """One link class as a simulator network dimension."""

    link_class: str
    model: str  # best algorithm model of the link table
    alpha_s: float
    beta_s_per_byte: float
    npus: int
    median_rel_err: float | None  # of the exported (shared) line over the link's points

    @property
    def busbw_Bps(self) -> float:
        return 1.0 / self.beta_s_per_byte


def parse_assignments(text: str | None, what: str, cast=str) -> dict[str, object]:
    """`intra=8,inter=4` -> {"intra": 8, "inter": 4}."""
    out: dict[str, object] = {}
    for part in (text or "").split(","):
        if not part.strip():
            continue
        if "=" not in part:
            raise UsageError(f"{what} {text!r}: use LINK=VALUE[,LINK=VALUE], e.g. intra=8,inter=4")
        k, v = part.split("=", 1)
        try:
            value = cast(v.strip())
        except ValueError:
            raise UsageError(f"{what}: {v.strip()!r} is not valid for {k.strip()}") from None
        assign(out, k.strip(), value, what)
    return out


def _runs_value(cal: Calibration, key: str) -> int | None:
    values = [r.get(key) for r in cal.doc["provenance"].get("runs", []) if r.get(key)]
    return max(values) if values else None


@dataclass(frozen=True)
class Cluster:
    """NPUs per node and nodes of the exported system, and where each number came from."""

    per_node: int | None
    nodes: int | None
    source: str

    @property
    def gpus(self) -> int | None:
        return self.per_node * self.nodes if self.per_node and self.nodes else None


def cluster(cal: Calibration, gpus: int | None = None) -> Cluster:
    """NPUs per node: the runs' ranks per node (real or `--ranks-per-node` virtual nodes), else
    the calibration's device (the reference's gpus_per_node). Nodes: `gpus` / per node when
    asked, else the runs' world / ranks per node (virtual nodes count, one real host or not),
    else the runs' hosts; None where the calibration cannot tell (the reference)."""
    rpn = _runs_value(cal, "ranks_per_node")
    device = cal.doc.get("device") or {}
    per_node = rpn or device.get("gpus_per_node")
    source = "the runs' ranks per node" if rpn else "the calibration's device"
    if gpus is not None:
        if per_node and gpus % per_node:
            raise UsageError(f"--gpus {gpus} is not a multiple of {per_node} NPUs per node")
        return Cluster(per_node, gpus // per_node if per_node else None, "--gpus")
    nodes = None
    runs = cal.doc["provenance"].get("runs", [])
    sizes = [r["world_size"] // r["ranks_per_node"] for r in runs if r.get("world_size")
             and r.get("ranks_per_node")]  # fmt: skip
    if sizes:
        nodes, source = max(sizes), source + " and world sizes"
    elif _runs_value(cal, "num_hosts"):
        nodes = _runs_value(cal, "num_hosts")
    return Cluster(per_node, nodes, source)


def tiers(
    cal: Calibration,
    backend: str | None = None,
    timing: str | None = None,
    npus: dict | None = None,
    gpus: int | None = None,
) -> list[Tier]:
    """Intra then inter (then any other link class): the link table's best model of each.

    npus per tier: --npus, else intra = NPUs per node and inter = nodes (`cluster`); else the
    largest group measured on the link. The reference has no nodes: inter defaults to 2 (the
    smallest system with an inter link; `notes` says so), or --gpus / --npus inter=N."""
    npus = npus or {}
    entries = cal.doc["link_table"]
    if not entries:
        raise UsageError(
            f"{cal.source} has no link table (the fit needs 3+ points on a link): nothing to export"
        )
    if backend is None:
        names = sorted({e["backend"] for e in entries})
        if len(names) > 1:
            raise UsageError(f"{cal.source} has backends {', '.join(names)}: pass --backend")
        backend = names[0]
    chosen: dict[str, dict] = {}
    for e in entries:
        if e["backend"] != backend or (timing and e["timing"] != timing):
            continue
        have = chosen.get(e["link_class"])
        rank = TIMING_PREFERENCE.index(e["timing"]) if e["timing"] in TIMING_PREFERENCE else 9
        if have is None or rank < have["_rank"]:
            chosen[e["link_class"]] = {**e, "_rank": rank}
    if not chosen:
        raise UsageError(f"{cal.source}: no link table entry for backend {backend} timing {timing}")
    order = sorted(chosen, key=lambda k: (LINK_ORDER.index(k) if k in LINK_ORDER else 9, k))
    where = cluster(cal, gpus)
    known = {"intra": where.per_node, "inter": where.nodes}
    if cal.kind == "reference" and known["inter"] is None:
        known["inter"] = REFERENCE_NODES
    out = []
    for link in order:
        e = chosen[link]
        m = e["models"][e["best_model"]]
        if not m["beta_s_per_byte"] > 0:
            raise UsageError(f"{cal.source}: link {link} has no bandwidth term (beta = 0)")
        sizes = e.get("group_sizes") or []
        n = npus.get(link) or known.get(link) or (max(sizes) if sizes else None)
        if n == 1 and link not in npus:
            continue  # one node (--gpus): the system has no such link
        if not n or n < 2:
            raise UsageError(
                f"cannot tell how many NPUs the {link} dimension has (measured group sizes: "
                f"{e.get('group_sizes')}): pass --npus {link}=N (N >= 2)"
            )
        out.append(
            Tier(
                link,
                e["best_model"],
                m["alpha_s"],
                m["beta_s_per_byte"],
                int(n),
                exported_error(m),
            )
        )
    if not out:
        raise UsageError(
            f"{cal.source} has only {', '.join(order)} links, which a one-node system of "
            f"{where.per_node} NPUs does not use: pass a larger --gpus"
        )
    return out


def exported_error(m: dict) -> float | None:
    """The median relative error of the line an export writes: the model's shared alpha and
    beta (fit/links.py `shared_median_rel_err`), not its per-op terms, which the export does
    not carry (two ops of one link can each fit their terms exactly while one line through
    both misses them by 100%+); calibrations that predate the field give the terms' error."""
    shared = m.get("shared_median_rel_err")
    return shared if shared is not None else m.get("median_rel_err")


def check_error(used: list[Tier], force: bool) -> list[str]:
    """Refuse (UsageError) a link model that misses its measured points by a median over
    MAX_MEDIAN_ERR: the consumer would price every message from it, while commbench's own
    plan prices from the per-op series. With `force`, the warnings to print instead."""
    bad = [t for t in used if t.median_rel_err is not None and t.median_rel_err > MAX_MEDIAN_ERR]
    warnings = [
        f"the {t.link_class} {t.model} link line (one alpha-beta for every op) misses its "
        f"measured points by a median {t.median_rel_err:.1%} (over {MAX_MEDIAN_ERR:.0%}): the "
        "export prices every message from it, commbench plan from the per-op series"
        for t in bad
    ]
    if warnings and not force:
        raise UsageError(warnings[0] + "; pass --force to export it anyway")
    return warnings


def not_expressed(cal: Calibration, used: list[Tier]) -> list[str]:
    """What the calibration knows that one alpha-beta line per link cannot carry."""
    notes = []
    multi = [s for s in cal.doc["series"] if len(s["segments"]) > 1]
    if multi:
        notes.append(
            f"per-size segments: {len(multi)} of {len(cal.doc['series'])} series have several "
            "segments (protocol/algorithm switches); only the link table's single line per "
            "link is exported"
        )
    by_link: dict[str, set] = {}
    for s in cal.doc["series"]:
        by_link.setdefault(s["link_class"], set()).add(s["group_size"])
    for link, sizes in sorted(by_link.items()):
        if len(sizes) > 1:
            notes.append(
                f"per-group-size alpha: {link} series at group sizes {sorted(sizes)} have their "
                "own alphas; the export has one alpha per link"
            )
    ops = sorted({s["op"] for s in cal.doc["series"]})
    if ops:
        notes.append(
            f"per-op fits ({', '.join(ops)}) and dtypes are folded into one link model per link"
        )
    for t in used:
        if t.median_rel_err is not None:
            notes.append(
                f"{t.link_class}: the exported {t.model} link line explains the measured points "
                f"with a median relative error of {t.median_rel_err:.1%}"
            )
    notes += export_notes(cal.doc)  # how far beyond its node counts the link can be trusted
    skipped = {e["link_class"] for e in cal.doc["link_table"]} - {t.link_class for t in used}
    if skipped:
        notes.append(f"link classes not exported (other backend/timing): {sorted(skipped)}")
    return notes
