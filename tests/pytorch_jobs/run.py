"""Run the tiny Llama under real PyTorch parallelism on gloo and write every op each rank
issued (tests/pytorch_jobs/oplog.py) as JSON, one file per config and rank:

    python tests/pytorch_jobs/run.py --world 2 --out DIR tp tp-sp fsdp ddp
    python tests/pytorch_jobs/run.py --world 2 --out DIR --profile TRACES tp

DIR/<config>/rank<r>.json holds {"config", "world", "micro_batches", "ops": [...]}; with
--profile, the logged step also runs under torch.profiler and each rank's Chrome trace goes to
TRACES/<config>/rank<r>.json. One warm-up step (unlogged: DDP rebuilds its buckets after the
first) precedes the logged step. Ranks are forked from this process (torch imported once),
and the configs run one after another in the same process group. The step is torchtitan's
(torchtitan/trainer.py train_step): the global valid-token count summed over dp first, the
micro-batches' forward and backward, then the grad norm (clip_grad_norm_: DTensor
full_tensor over every sharded mesh dim) and the loss-finite flag's MIN over dp.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, str(Path(__file__).resolve().parent))
import torch.distributed._functional_collectives as funcol  # noqa: E402
from configs import CONFIGS, Built  # noqa: E402
from llama import Shape  # noqa: E402
from oplog import FunctionalBackwardMode, OpLog  # noqa: E402


def train_step(b: Built, shape: Shape, log: OpLog, seed: int) -> None:
    """One torchtitan step of b.micro_batches micro-batches of b.micro_batch sequences."""
    gen = torch.Generator().manual_seed(seed)
    batches = [
        torch.randint(0, shape.vocab, (b.micro_batch, shape.seq_len + 1), generator=gen)
        for _ in range(b.micro_batches)
    ]
    if b.cp[1] > 1:  # this rank's chunk of every sequence (inputs and their labels)
        n = shape.seq_len // b.cp[1]
        lo = b.cp[0] * n
        batches = [x[:, lo : lo + n + 1] for x in batches]
    with log.during("forward"):
        tokens = torch.tensor(sum(x[:, 1:].numel() for x in batches), dtype=torch.int64)
        if b.dp_mesh is not None:
            tokens = funcol.wait_tensor(funcol.all_reduce(tokens, "sum", b.dp_mesh))
    if b.schedule is not None:
        pipeline_step(b, batches, tokens, log)
    for x in batches if b.schedule is None else []:
        with log.during("forward"), b.loss_context():
            logits = b.model(x[:, :-1])
            loss = (
                torch.nn.functional.cross_entropy(
                    logits.flatten(0, 1).float(), x[:, 1:].flatten(0, 1), reduction="sum"
                )
                / tokens
            )
        with log.during("backward"), b.loss_context():
            loss.backward()
    with log.during("optimizer"):
        grads = [p.grad for p in b.model.parameters() if p.grad is not None]
        if b.ep_group is not None:
            norm = ep_grad_norm(grads, b.ep_group)
        else:
            norm = torch.nn.utils.get_total_norm(grads)
        if hasattr(norm, "full_tensor"):
            norm = norm.full_tensor()
        if b.pp_mesh is not None:  # torchtitan's clip_grad_norm_: the stages' norms summed
            norm = norm**2
            dist.all_reduce(norm, op=dist.ReduceOp.SUM, group=b.pp_mesh.get_group())
            norm = norm**0.5
        params = list(b.model.parameters())
        kinds = {type(p.grad) for p in params if p.grad is not None}
        for kind in kinds:  # DTensor grads and plain (expert) grads clipped apart
            torch.nn.utils.clip_grads_with_norm_(
                [p for p in params if type(p.grad) is kind], 1.0, norm
            )
        loss_mesh = b.loss_mesh or b.dp_mesh
        if loss_mesh is not None:
            finite = torch.ones((), dtype=torch.int32)
            dist.all_reduce(finite, op=dist.ReduceOp.MIN, group=loss_mesh.get_group())
        if b.pp_mesh is not None:
            finite = torch.ones((), dtype=torch.int32)
            dist.all_reduce(finite, op=dist.ReduceOp.MIN, group=b.pp_mesh.get_group())
        if b.moe:  # the expert-bias update's token counts (torchtitan's _update_expert_bias)
            counts = torch.stack([m.tokens_per_expert for m in b.moe])
            dist.all_reduce(counts, group=(b.loss_mesh or b.dp_mesh).get_group())
            for m in b.moe:
                m.tokens_per_expert.zero_()
        b.optimizer.step()
        b.optimizer.zero_grad()


def ep_grad_norm(grads: list[torch.Tensor], ep_group: dist.ProcessGroup) -> torch.Tensor:
    """torchtitan's _clip_grad_norm_with_ep: the dense grads' norm (DTensors, reduced over
    their mesh) and the experts' (one norm per grouped tensor, summed over ep) combined."""
    from torch.distributed.tensor import DTensor

    dense = [g for g in grads if isinstance(g, DTensor)]
    expert = [g for g in grads if not isinstance(g, DTensor)]
    dense_norm = torch.nn.utils.get_total_norm(dense).full_tensor()
    squares = torch.stack([torch.linalg.vector_norm(g) ** 2 for g in expert])
    dist.all_reduce(squares, group=ep_group)
    return (dense_norm**2 + squares.sum()) ** 0.5


def pipeline_step(b: Built, batches: list[torch.Tensor], tokens: torch.Tensor, log: OpLog) -> None:
    """The micro-batches through the pipeline schedule as one batch (torchtitan's
    forward_backward_step with pp): the first stage feeds the tokens, the last the labels."""

    b.tokens = tokens

    def loss_fn(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        ce = torch.nn.functional.cross_entropy(
            logits.flatten(0, 1).float(), labels.flatten(0, 1), reduction="sum"
        )
        return ce / b.tokens

    if b.made is None:  # built once, as torchtitan does: shape inference in the warm-up
        b.made = b.schedule(loss_fn)
    schedule = b.made
    whole = torch.cat(batches)
    with log.during("forward+backward"):
        if b.first_stage:
            schedule.step(whole[:, :-1])
        elif b.last_stage:
            schedule.step(target=whole[:, 1:], losses=[])
        else:
            schedule.step()


@contextlib.contextmanager
def profiled(directory: str | None, name: str, rank: int) -> Iterator[None]:
    """Run the body under torch.profiler (CPU) and write its Chrome trace to
    directory/<name>/rank<rank>.json; without a directory, just run it."""
    if directory is None:
        yield
        return
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        yield
    tdir = Path(directory) / name
    tdir.mkdir(parents=True, exist_ok=True)
    prof.export_chrome_trace(str(tdir / f"rank{rank}.json"))


def rank_main(
    rank: int, world: int, init: str, configs: list[str], out: str, profile: str | None
) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    shape = Shape()
    for name in configs:
        torch.manual_seed(0)
        built = CONFIGS[name](shape, world)
        log = OpLog()
        log.install()
        mode = FunctionalBackwardMode(log) if built.moe else contextlib.nullcontext()
        try:
            train_step(built, shape, log, seed=1)  # warm-up, unlogged
            log.records.clear()
            log.phase = None
            with mode, profiled(profile, name, rank):
                train_step(built, shape, log, seed=2)
        finally:
            log.uninstall()
        odir = Path(out) / name
        odir.mkdir(parents=True, exist_ok=True)
        doc = {
            "config": name,
            "world": world,
            "micro_batches": built.micro_batches,
            "micro_batch": built.micro_batch,
            "ops": log.records,
        }
        (odir / f"rank{rank}.json").write_text(json.dumps(doc))
        dist.barrier()
    dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("configs", nargs="+", choices=sorted(CONFIGS))
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--out", required=True, help="directory for <config>/rank<r>.json op logs")
    ap.add_argument("--profile", help="also write torch.profiler Chrome traces here")
    args = ap.parse_args(argv)
    if any(c.startswith("pp-") for c in args.configs):
        import torch.distributed.pipelining  # noqa: F401 - imports dynamo (~5 s): once, before the fork
    with tempfile.TemporaryDirectory() as tmp:
        init = f"file://{os.path.join(tmp, 'store')}"
        mp.start_processes(
            rank_main,
            args=(args.world, init, args.configs, args.out, args.profile),
            nprocs=args.world,
            start_method="fork",
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
