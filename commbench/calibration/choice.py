"""Which series answers a prediction: by timing, placement and buffers (preferences, best
first), and by the NCCL regime asked for (choose_regime); which regime a record is priced under
(asked_regime: its own where the calibration pinned it, else NCCL's choice).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypeVar

from commbench.calibration.lines import LinkModel, SeriesModel
from commbench.calibration.series_key import regime_of
from commbench.errors import UsageError
from commbench.nccl_names import canonical, label
from commbench.ops import OPS, canonical_op

TIMING_PREFERENCE = ("per-iteration", "pipelined")
PLACEMENT_PREFERENCE = ("out-of-place", "in-place")
BUFFERS_PREFERENCE = ("hugepage", "plain", "torch")  # warm before off-cache (listed after)


def rank(value: str, order: tuple) -> tuple:
    return (order.index(value) if value in order else len(order), value)


def prefer(cands: list[SeriesModel]) -> list[SeriesModel]:
    """Candidates sorted best first: per-iteration before pipelined timing, out-of-place
    before in-place placement, warm default buffers before plain or off-cache ones, then by
    name (so the choice is deterministic)."""
    return sorted(
        cands,
        key=lambda s: (
            rank(s.key.timing, TIMING_PREFERENCE),
            rank(s.key.placement, PLACEMENT_PREFERENCE),
            rank(s.key.buffers, BUFFERS_PREFERENCE),
        ),
    )


def choose_regime(
    cands: list[SeriesModel], algorithm: str | None, protocol: str | None, want: str, source: str
) -> tuple[list[SeriesModel], list[str]]:
    """The candidates of the NCCL regime asked for, and notes. Unasked (None), NCCL's own
    choice: the series whose runs pinned nothing, else, where every run pinned one and the
    same regime, that one (said in a note); where runs pinned several regimes and none let
    NCCL choose, all of them (the caller prices NCCL's choice as the fastest, as its tuner
    takes the fastest). Asked (a name, or "" for NCCL's choice), the series of that
    algorithm / protocol; a field not asked prefers NCCL's choice, else the same."""
    asked = {"algorithm": algorithm, "protocol": protocol}
    out = [s for s in cands if all(v is None or getattr(s.key, k) == v for k, v in asked.items())]
    regimes = sorted({s.key.regime or "NCCL's choice" for s in cands})
    if cands and not out:
        what = label(algorithm or "", protocol or "") or "NCCL's own choice"
        raise UsageError(
            f"{want}: not measured under {what} in {source} (its series ran: {', '.join(regimes)})"
        )
    notes: list[str] = []
    for k, v in asked.items():
        if v is not None:
            continue
        mine = [s for s in out if not getattr(s.key, k)]
        if mine:
            out = mine
            continue
        values = sorted({getattr(s.key, k) for s in out})
        if len(values) == 1:
            notes.append(f"measured only with NCCL's {k} pinned to {values[0]}: priced as that")
    return out, notes


class Priced(Protocol):
    seconds: float


P = TypeVar("P", bound=Priced)


def fastest_regime(
    cands: list[SeriesModel], price: Callable[[list[SeriesModel]], P]
) -> tuple[P, str | None]:
    """price() of the candidates, one regime at a time where choose_regime left several
    (pinned runs only: NCCL's own choice is the fastest of them, as its tuner takes the
    fastest), and a note saying so; a regime price() refuses is skipped, and where all are,
    the first refusal is raised."""
    regimes = sorted({s.key.regime for s in cands})
    if len(regimes) <= 1:
        return price(cands), None
    got: list[tuple[P, str]] = []
    refused: list[UsageError] = []
    for regime in regimes:
        try:
            got.append((price([s for s in cands if s.key.regime == regime]), regime))
        except UsageError as e:
            refused.append(e)
    if not got:
        raise refused[0]
    best, regime = min(got, key=lambda x: x[0].seconds)
    priced = ", ".join(r for _, r in got)
    return best, (
        f"NCCL's own choice was not measured, only runs that pinned {', '.join(regimes)}: "
        f"priced as {regime}, the fastest of {priced} (NCCL's tuner takes the fastest)"
    )


def spelled(algorithm: str | None, protocol: str | None) -> tuple[str | None, str | None]:
    """An asked regime in nccl_names spelling (None and "" kept); an unknown name is a
    UsageError naming the argument."""
    a, p = (v if v in (None, "") else canonical(k, v, f"{k}=") for k, v in
            (("algorithm", algorithm), ("protocol", protocol)))  # fmt: skip
    return a, p


def regimes_of(series: list[SeriesModel], op: str, link_class: str) -> set[tuple[str, str]]:
    """The (algorithm, protocol) keys of the series of `op` (or the op that prices it) on
    link_class: ("", "") is NCCL's own choice."""
    op = canonical_op(op)
    ops = [op, *OPS[op].priced_from] if op in OPS else [op]
    return {
        (s.key.algorithm, s.key.protocol)
        for s in series
        if s.key.op in ops and s.key.link_class == link_class
    }


def asked_regime(rec: dict, have: set[tuple[str, str]], where: str) -> tuple[str | None, ...]:
    """The NCCL regime to price a record under, given the calibration's regimes `have` of its
    op and link: the one it ran in (a trace's kernel, an import's tuning line) where a series
    pinned exactly that, else the one its run pinned (`forced`) where a series has it, else
    (None, None): NCCL's own choice (predict's default)."""
    ran = (rec.get("algorithm"), rec.get("protocol"))
    if all(isinstance(v, str) and v for v in ran) and ran in have:
        return ran
    mine = regime_of(rec, where)
    if any(mine) and mine in have:
        return mine
    return (None, None)


def resolve_backend(
    cands: list[SeriesModel], links: list[LinkModel], backend: str | None, link_class: str,
    where: str,
) -> str | None:  # fmt: skip
    """The backend asked, else the only one the candidates (or link_class's links) have; a
    UsageError naming them where there are several."""
    if backend is not None:
        return backend
    names = sorted({s.key.backend for s in cands})
    if not names:
        names = sorted({x.backend for x in links if x.link_class == link_class})
    if len(names) > 1:
        raise UsageError(f"{where} has several backends ({', '.join(names)}): pass backend=")
    return names[0] if names else None
