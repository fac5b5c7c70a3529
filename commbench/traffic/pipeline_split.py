"""How a model's layers are split over pipeline stages, as Megatron-Core splits them
(`get_num_layers_to_build` in megatron/core/transformer/transformer_block.py):

- even: L / p layers a stage (p must divide L);
- `decoder_first_pipeline_num_layers` / `decoder_last_pipeline_num_layers`: the first / last
  stage holds that many, the stages left share the rest evenly (they must divide it);
- `account_for_embedding_in_pipeline_split` / `account_for_loss_in_pipeline_split`: the
  embedding / the loss counts as one layer, (L + e + l) / p slots a stage (p must divide),
  and the first / last stage builds one transformer layer fewer (Llama 3 405B's 126 layers
  on 16 stages: 7, 8 x 14, 7). Megatron refuses both kinds at once.

A stage left without layers is refused here (Megatron only asserts >= 0). `megatron_split`
is the split the planner uses for a depth that does not divide the layers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from commbench.errors import UsageError


@dataclass(frozen=True)
class PipelineSplit:
    """Megatron-Core's uneven-pipeline settings (its argument names)."""

    decoder_first_pipeline_num_layers: int | None = None
    decoder_last_pipeline_num_layers: int | None = None
    account_for_embedding_in_pipeline_split: bool = False
    account_for_loss_in_pipeline_split: bool = False

    @property
    def uneven(self) -> bool:
        return (
            self.decoder_first_pipeline_num_layers is not None
            or self.decoder_last_pipeline_num_layers is not None
        )

    @property
    def accounted(self) -> bool:
        return self.account_for_embedding_in_pipeline_split or (
            self.account_for_loss_in_pipeline_split
        )

    def describe(self) -> str:
        """Short text for labels: `first=7,last=7`, `+embedding,+loss` or `even`."""
        parts = []
        if self.decoder_first_pipeline_num_layers is not None:
            parts.append(f"first={self.decoder_first_pipeline_num_layers}")
        if self.decoder_last_pipeline_num_layers is not None:
            parts.append(f"last={self.decoder_last_pipeline_num_layers}")
        if self.account_for_embedding_in_pipeline_split:
            parts.append("+embedding")
        if self.account_for_loss_in_pipeline_split:
            parts.append("+loss")
        return ",".join(parts) or "even"


def settings_error(split: PipelineSplit) -> str | None:
    """Why the settings are wrong at any depth (a stage given no layers; both kinds at once),
    naming the value, or None."""
    if split.uneven and split.accounted:
        return (
            "decoder_first/last_pipeline_num_layers and account_for_embedding/loss_in_"
            "pipeline_split cannot be used together (Megatron-Core refuses it)"
        )
    for name in ("first", "last"):
        value = getattr(split, f"decoder_{name}_pipeline_num_layers")
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value < 1
        ):
            return (
                f"decoder_{name}_pipeline_num_layers={value!r} leaves the {name} stage without "
                "layers (give 1 or more)"
            )
    return None


def check_settings(model: str, split: PipelineSplit) -> None:
    """settings_error as a UsageError naming the model, raised when the model is read, before
    any search."""
    bad = settings_error(split)
    if bad:
        raise UsageError(f"model {model}: {bad}")


def split_error(layers: int, pp: int, split: PipelineSplit) -> str | None:
    """Why `split` cannot place `layers` on `pp` stages (naming the value), or None."""
    try:
        stage_counts(layers, pp, split)
    except UsageError as e:
        return str(e)
    return None


@lru_cache(maxsize=4096)
def stage_counts(layers: int, pp: int, split: PipelineSplit = PipelineSplit()) -> tuple[int, ...]:
    """Transformer layers on each of `pp` stages, Megatron-Core's rule; UsageError naming the
    value when the split does not work (one stage: every layer, the settings unused)."""
    first = split.decoder_first_pipeline_num_layers
    last = split.decoder_last_pipeline_num_layers
    bad = settings_error(split)
    if bad:
        raise UsageError(bad)
    if pp == 1:
        return (layers,)
    if split.uneven:
        rest, left = layers, pp
        for value in (first, last):
            if value is not None:
                rest, left = rest - value, left - 1
        if left == 0:
            if rest:
                raise UsageError(
                    f"decoder_first/last_pipeline_num_layers={first}/{last} hold "
                    f"{layers - rest} of the {layers} layers on pp={pp}"
                )
            mid = 0
        elif rest < left or rest % left:
            raise UsageError(
                f"pp={pp} with decoder_first/last_pipeline_num_layers={first}/{last}: the "
                f"{rest} layers left do not split evenly over {left} stage(s) with at least "
                "one layer each"
            )
        else:
            mid = rest // left
        counts = [mid] * pp
        if first is not None:
            counts[0] = first
        if last is not None:
            counts[-1] = last
        return tuple(counts)
    e = int(split.account_for_embedding_in_pipeline_split)
    lo = int(split.account_for_loss_in_pipeline_split)
    slots = layers + e + lo
    if pp > layers:
        raise UsageError(
            f"pp={pp} is more stages than the {layers} layers: a stage would be without layers"
        )
    if slots % pp:
        what = f"{layers} layers" + (f" (+{e + lo} for embedding/loss)" if e + lo else "")
        raise UsageError(f"pp={pp} does not divide the {what}")
    n = slots // pp
    counts = [n] * pp
    counts[0] -= e
    counts[-1] -= lo
    if min(counts) < 1:
        raise UsageError(
            f"pp={pp}: {n} layer slot(s) a stage leave the first or last stage without "
            "layers once the embedding/loss takes one"
        )
    return tuple(counts)


def stage_slots(layers: int, pp: int, split: PipelineSplit) -> list[int]:
    """Each stage's layer slots: its layers, plus the embedding / loss where the split counts
    them as a layer (Megatron's premise; one stage: its layers, the settings unused)."""
    counts = list(stage_counts(layers, pp, split))
    if pp > 1:
        counts[0] += int(split.account_for_embedding_in_pipeline_split)
        counts[-1] += int(split.account_for_loss_in_pipeline_split)
    return counts


def virtual_error(layers: int, pp: int, split: PipelineSplit, v: int) -> str | None:
    """Why `v` virtual stages (model chunks) a stage cannot hold its layers, or None: each
    stage's layer slots (stage_slots) must split into v chunks of at least one (Megatron
    asserts the divisibility)."""
    if v == 1 or pp == 1:
        return None
    counts = stage_slots(layers, pp, split)
    for i, n in enumerate(counts):
        if n < v or n % v:
            return (
                f"virtual_stages={v}: stage {i} holds {n} layer(s), which do not split into "
                f"{v} model chunks of equal size (a divisor of {math.gcd(*counts)} does)"
            )
    return None


def stage_weights(layers: int, pp: int, split: PipelineSplit) -> tuple[float, ...]:
    """Each stage's share of the compute relative to the mean stage (1.0 = even): its layer
    slots (stage_slots) over their mean."""
    counts = stage_slots(layers, pp, split)
    mean = sum(counts) / pp
    return tuple(c / mean for c in counts)


@lru_cache(maxsize=1024)
def megatron_split(layers: int, pp: int) -> PipelineSplit:
    """The split used for a depth that does not divide the layers. Where counting the
    embedding and the loss (or the loss alone) as a layer makes the stages even, Megatron's
    account_for_* settings: Llama 3 405B on 16 stages, 7, 8 x 14, 7 (as trained, Llama 3
    paper 3.3.2), every stage 8 slots, so interleaving can split them. Else the stages
    between first and last even, first and last holding the rest (at most one apart, the
    last the lighter: it also runs the output layer and loss), the busiest stage as light as
    it can be, then the middle stages as full as they can be: DeepSeek-V3's 61 layers on 16,
    3, 4 x 14, 2. Even depths return the even split."""
    if pp == 1 or layers % pp == 0:
        return PipelineSplit()
    if pp > layers:
        raise UsageError(f"pp={pp} is more stages than the {layers} layers")
    for e, lo in ((True, True), (False, True)):
        split = PipelineSplit(None, None, e, lo)
        if split_error(layers, pp, split) is None:
            return split
    best: tuple[tuple[int, int], PipelineSplit] | None = None
    for mid in range(0 if pp == 2 else 1, layers + 1):
        rest = layers - mid * (pp - 2)
        if rest < 2 or (pp == 2 and mid):
            continue
        first, last = rest - rest // 2, rest // 2
        key = (max(mid, first), -mid)
        if best is None or key < best[0]:
            best = (key, PipelineSplit(first, last))
    assert best is not None, (layers, pp)
    return best[1]
