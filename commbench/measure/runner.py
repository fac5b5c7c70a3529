"""Execute Steps on their groups: check, warm up, time, and reduce samples to statistics.

Timing (docs/design.md, "Timing"): per iteration, barrier on the group, clock, op, device
sync, clock; an iteration's time is the max over the group's ranks (and over all groups
of the axis, which run at the same time as in training). Iteration counts adapt to the
size within a time budget per point. The runner never names a pattern.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from commbench.dtypes import dtype_size
from commbench.measure import diag, offcache
from commbench.measure.bind import Bound, BufferPool, bind
from commbench.measure.transport.base import (
    ENQUEUE,
    GPU_TIMERS,
    HUGEPAGE,
    OFF_CACHE,
    PER_ITERATION,
    PLAIN,
    PRE_ROLL,
    TIMING_MODES,
    TORCH,
    Communicator,
    Fn,
)
from commbench.nccl_names import NCCL_FUNCS, REGIME_SETTINGS, env_pins
from commbench.ops import OPS, bus_factor, record_bytes, step_buffer_bytes
from commbench.ops.checkdata import exact_sum
from commbench.ops.spec import overlap_pct
from commbench.traffic.layout import GroupInfo
from commbench.traffic.program import Step

if TYPE_CHECKING:  # records are built on rank 0 only: the others never import them
    from commbench.results.records import Measurement


class Interrupted(Exception):
    """All ranks agreed to stop (SIGINT/SIGTERM seen by at least one of them)."""


DEFAULT_BUDGET_S = 0.2  # target timed seconds per point when iteration counts adapt


@dataclass(frozen=True, kw_only=True)
class TimingConfig:
    """How each point is timed; None means adapt to the message size."""

    iters: int | None = None
    warmup: int | None = None
    budget_s: float = DEFAULT_BUDGET_S
    min_iters: int = 5
    max_iters: int = 2000
    timing: str = PER_ITERATION
    gpu_timer: str = PRE_ROLL
    check: bool = True
    isolated: bool = False
    buffers: str = HUGEPAGE  # host pages of the pool (mpi: hugepage | plain; torch: torch)
    off_cache: bool = False  # flush the caches before each timed iteration (IMB -off_cache)

    def __post_init__(self) -> None:
        assert self.timing in TIMING_MODES, self.timing
        assert self.gpu_timer in GPU_TIMERS, self.gpu_timer
        assert not (self.off_cache and self.timing != PER_ITERATION), "off-cache is per-iteration"
        assert self.iters is None or self.iters >= 1
        assert self.warmup is None or self.warmup >= 0


def summarize(times_s: np.ndarray) -> dict[str, float]:
    """Median, mean, min, p95 and max over iterations, in microseconds (a straggler hides
    in the median and p95; the mean and max show it)."""
    us = np.asarray(times_s) * 1e6
    return {
        "time_us": float(np.median(us)),
        "time_mean_us": float(np.mean(us)),
        "time_min_us": float(np.min(us)),
        "time_p95_us": float(np.percentile(us, 95)),
        "time_max_us": float(np.max(us)),
    }


PROBE_MAX = 15  # probe iterations of a small op; the median of them sizes the point


def probe_seconds(comm: Communicator, fn: Fn, budget_s: float) -> float:
    """One iteration's time on this rank, robust to a preemption: the median of up to
    PROBE_MAX iterations, as many as fit in 5% of the budget after a first one (at least 3),
    so one descheduled iteration cannot cut a point's count tenfold (a max of 2 did)."""
    first = float(comm.time_loop(fn, 1, PER_ITERATION, ENQUEUE)[0])
    more = int(np.clip(0.05 * budget_s / max(first, 1e-9), 2, PROBE_MAX - 1))
    more = -comm.max_int(-more)  # the smallest over the group: every rank runs the same
    return float(np.median(np.append(comm.time_loop(fn, more, PER_ITERATION, ENQUEUE), first)))


def preempted(fn: Fn, seconds: float) -> Fn:
    """`fn`, descheduled for `seconds` before each call (the `preempt` fault); `fn` when 0."""
    if not seconds:
        return fn

    def late() -> None:
        time.sleep(seconds)
        fn()

    return late


def nccl_regimes(backend: str) -> dict[str, dict[str, str]]:
    """Per op, what this process's NCCL_ALGO / NCCL_PROTO pin on the nccl backend (records'
    algorithm, protocol and forced, as an imported log's); read once, on every rank, so a name
    NCCL does not know is one error before anything is measured."""
    if backend != "nccl":
        return {}
    where = {var: f"environment variable {var}" for var in REGIME_SETTINGS.values()}
    return {op: env_pins(op, dict(os.environ), where) for op in set(NCCL_FUNCS.values())}


class Runner:
    """Measures Steps on the world's sub-groups, reusing one buffer pool and cached splits."""

    def __init__(
        self,
        world: Communicator,
        cfg: TimingConfig,
        guard: Callable[[str], contextlib.AbstractContextManager] | None = None,
        stop_requested: Callable[[], bool] | None = None,
        on_point: Callable[[int], None] | None = None,
        preempt_s: Callable[[int], float] | None = None,
    ) -> None:
        self.world = world
        self.cfg = cfg
        self.pool = BufferPool(world, cfg.buffers)
        # off-cache scratch, touched before each timed iteration: sized by the caches that
        # hold this rank's buffers (measure/offcache)
        self.scratch = world.alloc(offcache.scratch().nbytes, PLAIN) if cfg.off_cache else None
        self._subs: dict[tuple, Communicator | None] = {}
        self._guard = guard or (lambda label: contextlib.nullcontext())
        self._stop_requested = stop_requested or (lambda: False)
        self._on_point = on_point or (lambda point: None)
        self._preempt_s = preempt_s or (lambda point: 0.0)  # faults.py's `preempt`, tests only
        self.points = 0  # measure() calls so far: the same count on every rank
        self.regimes = nccl_regimes(world.backend)

    def reserve(self, steps: list[tuple[Step, GroupInfo]]) -> None:
        """Allocate buffers once for the largest of these steps."""
        need = [step_buffer_bytes(s, g.size) for s, g in steps]
        if need:
            self.pool.reserve(max(n[0] for n in need), max(n[1] for n in need))

    def group(self, info: GroupInfo) -> Communicator | None:
        """This rank's communicator for the groups of `info` (split once, collective)."""
        key = info.groups
        if key not in self._subs:
            sub = self.world.split(info.groups)
            if sub is not None and self.scratch is not None:
                sub.flush = self.scratch
            self._subs[key] = sub
        return self._subs[key]

    @property
    def buffers(self) -> str:
        """What records say about the buffers: the pages, and whether caches were flushed."""
        pages = self.cfg.buffers if self.world.allocates_pages else TORCH
        return f"{pages}+{OFF_CACHE}" if self.cfg.off_cache else pages

    def close(self) -> None:
        for sub in self._subs.values():
            if sub is not None:
                sub.close()
        self._subs.clear()

    def check_stop(self) -> None:
        """Collective: raise Interrupted on every rank if any rank saw a stop signal."""
        if self.world.max_int(int(self._stop_requested())):
            raise Interrupted()

    def _iterations(
        self, comm: Communicator, bound, estimate_over: Communicator
    ) -> tuple[int, int]:
        """(warmup, iters): fixed if configured, else sized to the budget from a probe."""
        cfg = self.cfg
        if cfg.iters is not None and cfg.warmup is not None:
            estimate_over.max_float(0.0)  # the agreement every rank of the world joins
            return cfg.warmup, cfg.iters  # fixed counts (OSU -i/-x): nothing probed
        probe = estimate_over.max_float(
            probe_seconds(comm, preempted(bound.fn, self._preempt_s(self.points - 1)), cfg.budget_s)
        )
        warmup = (
            cfg.warmup
            if cfg.warmup is not None
            else int(np.clip(0.1 * cfg.budget_s / max(probe, 1e-9), 1, 20))
        )
        iters = (
            cfg.iters
            if cfg.iters is not None
            else int(np.clip(cfg.budget_s / max(probe, 1e-9), cfg.min_iters, cfg.max_iters))
        )
        return warmup, iters

    def checks(self, step: Step, p: int) -> bool:
        """Check this point? Not where a 16-bit sum over p ranks is inexact (EXACT_SUM_RANKS):
        it would count rounding as wrong data; the record then says `checked: false`."""
        return self.cfg.check and (not OPS[step.op].reduces or exact_sum(step.dtype, p))

    def _run_group(self, comm: Communicator, step: Step, agree: Communicator) -> tuple:
        """Check, warm up and time `step` on this rank's group:
        (times_s, wrong, warmup, iters, loop, overlapped, ack)."""
        bound = bind(comm, step, self.pool)
        wrong = 0
        if self.checks(step, comm.size):
            bound.prepare()
            bound.checked()
            comm.sync()
            wrong = bound.verify()
            bound.reset()
        warmup, iters = self._iterations(comm, bound, agree)
        timer = self.cfg.gpu_timer
        if warmup:
            comm.time_loop(bound.fn, warmup, PER_ITERATION, ENQUEUE)
        raw = comm.time_loop(bound.fn, iters, self.cfg.timing, timer)
        if self.cfg.iters is None:
            raw = self._top_up(comm, bound, raw, agree)
            iters = len(raw)
        times = raw * bound.time_scale
        overlapped = None
        if bound.binding.compute is not None:
            overlapped = self._overlapped(comm, bound, times, iters)
        loop = comm.loop_kind(bound.fn, self.cfg.timing, timer)
        return times, wrong, warmup, iters, loop, overlapped, bound.binding.ack

    def _top_up(self, comm: Communicator, bound: Bound, raw: np.ndarray, agree: Communicator):
        """The budget's count again, from the timed iterations' median (the group's slowest
        rank's, agreed over `agree` as the probe was): if the probe overstated the op's cost
        twice or more (its few iterations descheduled on a loaded box, or cold), time the
        missing iterations now. One agreement on every rank, whatever it decides."""
        cfg = self.cfg
        median = agree.max_float(float(np.median(raw)))
        target = int(np.clip(cfg.budget_s / max(median, 1e-9), cfg.min_iters, cfg.max_iters))
        if target < 2 * len(raw):
            return raw  # the probe was near enough: the point keeps its count
        more = comm.time_loop(bound.fn, target - len(raw), cfg.timing, cfg.gpu_timer)
        return np.concatenate([raw, more])

    def agreements(self) -> int:
        """How many count agreements a group's ranks join per point (_iterations, _top_up):
        a rank in none of the point's groups joins as many with nothing to say."""
        return 1 if self.cfg.iters is not None else 2

    def _overlapped(
        self, comm: Communicator, bound: Bound, pure: np.ndarray, iters: int
    ) -> tuple[np.ndarray, float]:
        """A non-blocking op timed again with its compute stand-in set to the op's own time
        (the group's slowest median), as osu_iallreduce: (times, compute seconds)."""
        cell = bound.binding.compute
        cell[0] = comm.max_float(float(np.median(pure)))
        timer = self.cfg.gpu_timer
        times = comm.time_loop(bound.fn, iters, self.cfg.timing, timer) * bound.time_scale
        compute, cell[0] = float(cell[0]), 0.0
        return times, compute

    def measure(self, step: Step, info: GroupInfo) -> Measurement | None:
        """Collective on the world: time `step` on every group of `info` (all at once, or one
        group at a time with `isolated`). Returns the measurement on world rank 0, else None.
        Every collective of the point, the stop agreement included, runs under the guard."""
        gathered = self._gather(step, info)
        if gathered is None:
            return None
        return self._aggregate(step, info, gathered)

    def measure_each(
        self, step: Step, info: GroupInfo, labels: list[GroupInfo]
    ) -> list[tuple[Measurement, list[float]]] | None:
        """measure() keeping groups apart (`commbench check`): every group of `info` runs at
        once; per group, its Measurement under its own label (`labels[i]`, one group each) and
        the median time of each of its ranks (us). On world rank 0, else None."""
        gathered = self._gather(step, info)
        if gathered is None:
            return None
        out = []
        for gi, label in enumerate(labels):
            mine = [(g, res) for g, res in gathered if g == gi]
            m = self._aggregate(step, label, [(0, res) for _, res in mine])
            per_rank = [round(float(np.median(res[0])) * 1e6, 3) for _, res in mine]
            out.append((m, per_rank))
        return out

    def _gather(self, step: Step, info: GroupInfo) -> list | None:
        """Run the point; every rank's (group index, result) on rank 0, in rank order."""
        diag.mark("first_point")
        point, self.points = self.points, self.points + 1
        result = None
        # named as tables number points, from 1
        with self._guard(f"point {point + 1}: {step.op} {step.label or ''} on {info.axis}".strip()):
            self.check_stop()
            self._on_point(point)
            sub = self.group(info)
            gi = next((i for i, g in enumerate(info.groups) if self.world.rank in g), -1)
            if self.cfg.isolated:
                for turn in range(len(info.groups)):
                    if turn == gi and sub is not None:
                        result = self._run_group(sub, step, sub)
                    self.world.barrier()
            else:
                # all groups agree on counts over the world so they stay in step (contention)
                if sub is not None:
                    result = self._run_group(sub, step, self.world)
                else:
                    for _ in range(self.agreements()):  # match the members' agreements
                        self.world.max_float(0.0)
            return self.world.gather_obj((gi, result), root=0)

    def _aggregate(self, step: Step, info: GroupInfo, gathered: list) -> Measurement:
        """Max over each group's ranks per iteration, then over groups; stats and bandwidth."""
        per_group: dict[int, list[np.ndarray]] = {}
        overall: list[np.ndarray] = []
        rank_means: list[float] = []  # each rank's mean over iterations (OSU -f, IMB t_avg)
        wrong, warmup, iters, loops, compute, acks = 0, 0, 0, set(), 0.0, set()
        slowest, slowest_us = -1, -1.0  # the world rank that saw the longest iteration
        for rank, (gi, res) in enumerate(gathered):
            if res is None:
                continue
            times, w, warmup_r, iters_r, loop, overlapped, ack = res
            acks.add(ack)
            if float(np.max(times)) > slowest_us:
                slowest, slowest_us = rank, float(np.max(times))
            per_group.setdefault(gi, []).append(times)
            rank_means.append(float(np.mean(times)) * 1e6)
            if overlapped is not None:
                overall.append(overlapped[0])
                compute = max(compute, overlapped[1])
            loops.add(loop)
            wrong += w
            warmup, iters = max(warmup, warmup_r), max(iters, iters_r)
        group_series = {gi: np.max(np.vstack(ts), axis=0) for gi, ts in per_group.items()}
        if self.cfg.isolated:
            medians = {gi: float(np.median(s)) for gi, s in group_series.items()}
            worst = max(medians, key=lambda g: medians[g])
            series = group_series[worst]
        else:
            series = np.max(np.vstack(list(group_series.values())), axis=0)
        stats = summarize(series)
        nbytes = record_bytes(step)
        t = stats["time_us"] * 1e-6
        with_compute = float(np.median(np.max(np.vstack(overall), axis=0))) if overall else None
        algbw = nbytes / t / 1e9 if t > 0 else 0.0
        assert len(acks) == 1, acks  # every rank bound the same op
        from commbench.results.records import Measurement

        return Measurement(
            op=step.op,
            dtype=step.dtype,
            bytes=nbytes,
            count=nbytes // dtype_size(step.dtype),
            **info.as_record(),
            world_size=self.world.size,
            iters=iters,
            warmup=warmup,
            time_us=stats["time_us"],
            time_mean_us=stats["time_mean_us"],
            time_min_us=stats["time_min_us"],
            time_p95_us=stats["time_p95_us"],
            time_max_us=stats["time_max_us"],
            slowest_rank=slowest,
            algbw_GBps=algbw,
            busbw_GBps=algbw * bus_factor(step.op, info.size),
            wrong=wrong,
            checked=self.checks(step, info.size),
            timing=self.cfg.timing,
            loop=loops.pop() if len(loops) == 1 else "mixed",
            isolated=self.cfg.isolated,
            buffers=self.buffers,
            per_group_us=[
                round(float(np.median(group_series[g])) * 1e6, 3) for g in sorted(group_series)
            ],
            rank_min_us=min(rank_means),
            rank_avg_us=float(np.mean(rank_means)),
            rank_max_us=max(rank_means),
            overall_us=None if with_compute is None else with_compute * 1e6,
            compute_us=None if with_compute is None else compute * 1e6,
            overlap_pct=None if with_compute is None else overlap_pct(with_compute, compute, t),
            ack=acks.pop(),
            algorithm=(pins := self.regimes.get(step.op, {})).get("algorithm"),
            protocol=pins.get("protocol"),
            forced=sorted(pins) or None,
        )
