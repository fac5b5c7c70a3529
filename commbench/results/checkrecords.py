"""The record `commbench check` writes: one pair of one round, or one group of a collective.

A Measurement of exactly one group (its own link class and hosts spanned), plus what traces it
to hardware: the world ranks, their hosts and local ranks (meta.json's `devices` names each
rank's device), and each rank's own median time, not only the group's slowest.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from commbench.results.records import Measurement


@dataclass(kw_only=True)
class CheckRecord(Measurement):
    """A unit `commbench check` judged: a pair (test `pairs`), a node's group (`node`) or the
    ranks of one local rank across nodes (`rail`)."""

    kind: Literal["check"] = "check"
    backend: str
    test: str  # pairs | node | rail
    round: int  # pairs: the schedule's round (0-based); groups: the attempt (1: again)
    ranks: list[int]  # world ranks, ascending
    hosts: list[str]  # host of each rank
    local_ranks: list[int]  # local rank of each rank on its host
    per_rank_us: list[float]  # each rank's median time over iterations (us)
