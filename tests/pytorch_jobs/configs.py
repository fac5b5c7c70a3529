"""The parallel configs the op-log job runs, each applied as torchtitan applies it
(torchtitan/models/llama3/parallelize.py apply_tp, torchtitan/distributed/fsdp.py
apply_fsdp_to_decoder) to a fresh tiny Llama; `CONFIGS[name](shape, world) -> Built`."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from llama import Llama, Shape
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    PrepareModuleInput,
    RowwiseParallel,
    SequenceParallel,
    loss_parallel,
    parallelize_module,
)


@dataclass
class Built:
    model: nn.Module
    micro_batches: int
    micro_batch: int = 2
    dp_mesh: DeviceMesh | None = None
    loss_parallel: bool = False
    optimizer: Any = field(default=None)
    schedule: Any = None  # a torch.distributed.pipelining schedule (pp configs)
    first_stage: bool = True
    last_stage: bool = True
    pp_mesh: DeviceMesh | None = None
    made: Any = None  # the schedule, built at the first step
    loss_mesh: DeviceMesh | None = None  # dp x cp: the loss-finite flag's (None: dp_mesh)
    cp: tuple[int, int] = (0, 1)  # (this rank's chunk, chunks): the sequence split over cp
    ep_group: Any = None  # expert parallel: the grad norm's and expert-bias update's group
    moe: list = field(default_factory=list)  # the MoE modules (their token counts)
    tokens: Any = None  # this step's valid-token count, which the pipeline's loss divides by

    def __post_init__(self) -> None:
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=1e-3)

    def loss_context(self) -> contextlib.AbstractContextManager:
        return loss_parallel() if self.loss_parallel else contextlib.nullcontext()


def apply_tp(model: Llama, mesh: DeviceMesh, sp: bool) -> None:
    """torchtitan's apply_tp with loss parallel; sp=False keeps activations replicated (the
    norms' weights become Replicate DTensors so the grad norm sees one kind of tensor)."""
    seq = Shard(1) if sp else Replicate()
    parallelize_module(
        model,
        mesh,
        {
            "tok_embeddings": RowwiseParallel(input_layouts=Replicate(), output_layouts=seq),
            "norm": SequenceParallel() if sp else _replicated(),
            "output": ColwiseParallel(
                input_layouts=seq, output_layouts=Shard(-1), use_local_output=False
            ),
        },
    )
    for block in model.layers.values():
        plan: dict[str, Any] = {
            "attention.wq": ColwiseParallel(),
            "attention.wk": ColwiseParallel(),
            "attention.wv": ColwiseParallel(),
            "attention.wo": RowwiseParallel(output_layouts=seq),
            "feed_forward.w1": ColwiseParallel(),
            "feed_forward.w2": RowwiseParallel(output_layouts=seq),
            "feed_forward.w3": ColwiseParallel(),
        }
        # one input redistribution per attention and MLP (torchtitan's PrepareModuleInput):
        # wq, wk, wv (w1, w3) share it, so their input grads meet in one all-reduce
        plan |= {
            "attention": PrepareModuleInput(
                input_layouts=(seq,), desired_input_layouts=(Replicate(),)
            ),
            "feed_forward": PrepareModuleInput(
                input_layouts=(seq,), desired_input_layouts=(Replicate(),)
            ),
        }
        norm = SequenceParallel() if sp else _replicated()
        plan |= {"attention_norm": norm, "ffn_norm": norm}
        parallelize_module(block, mesh, plan)


def _replicated() -> Any:
    """A norm whose weight is a Replicate DTensor and whose input and output stay local
    tensors replicated over tp (Megatron's TP without sequence parallel)."""
    from torch.distributed.tensor import distribute_module
    from torch.distributed.tensor.parallel.style import ParallelStyle

    class ReplicateNorm(ParallelStyle):
        def _apply(self, module: nn.Module, mesh: DeviceMesh) -> nn.Module:
            def to_dtensor(inputs: Any, mesh: DeviceMesh) -> Any:
                from torch.distributed.tensor import DTensor

                return tuple(DTensor.from_local(x, mesh, [Replicate()]) for x in inputs)

            return distribute_module(
                module,
                mesh,
                input_fn=lambda mod, inputs, mesh: to_dtensor(inputs, mesh),
                output_fn=lambda mod, out, mesh: out.to_local(),
            )

    return ReplicateNorm()


def apply_fsdp(model: Llama, mesh: DeviceMesh, bf16: bool) -> None:
    """torchtitan's apply_fsdp_to_decoder (no PP): tok_embeddings and each layer resharded
    after forward, [norm, output] not (FSDP would prefetch them at once), then the root."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    cfg: dict[str, Any] = {"mesh": mesh, "mp_policy": mp} if bf16 else {"mesh": mesh}
    fully_shard(model.tok_embeddings, **cfg, reshard_after_forward=True)
    fully_shard([model.norm, model.output], **cfg, reshard_after_forward=False)
    for block in model.layers.values():
        fully_shard(block, **cfg, reshard_after_forward=True)
    fully_shard(model, **cfg)


def tp(sp: bool) -> Callable[[Shape, int], Built]:
    def build(shape: Shape, world: int) -> Built:
        mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("tp",))
        model = Llama(shape)
        apply_tp(model, mesh, sp)
        return Built(model, micro_batches=2, loss_parallel=True)

    return build


def fsdp(bf16: bool) -> Callable[[Shape, int], Built]:
    def build(shape: Shape, world: int) -> Built:
        mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("dp",))
        model = Llama(shape)
        apply_fsdp(model, mesh, bf16)
        return Built(model, micro_batches=2, dp_mesh=mesh)

    return build


def tp_fsdp(shape: Shape, world: int) -> Built:
    """2-D: FSDP2 over dp outside, TP with SP inside (torchtitan's dp_shard x tp)."""
    mesh = init_device_mesh("cpu", (world // 2, 2), mesh_dim_names=("dp", "tp"))
    model = Llama(shape)
    apply_tp(model, mesh["tp"], sp=True)
    apply_fsdp(model, mesh["dp"], bf16=False)
    return Built(model, micro_batches=2, dp_mesh=mesh["dp"], loss_parallel=True)


def ddp(shape: Shape, world: int) -> Built:
    """torch DDP with 0.5 MiB buckets, its gradients all-reduced by the default hook (the
    hook is registered so the all-reduce goes through torch.distributed.all_reduce)."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel

    mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("dp",))
    model = DistributedDataParallel(Llama(shape), bucket_cap_mb=0.5)
    model.register_comm_hook(mesh.get_group(), default_hooks.allreduce_hook)
    return Built(model, micro_batches=1, dp_mesh=mesh)


def pipeline(schedule: str) -> Callable[[Shape, int], Built]:
    """torch.distributed.pipelining over `world` stages (torchtitan's pipeline_llm: each
    stage a copy of the model with the other stages' modules deleted), 4 micro-batches of 2,
    the loss on the last stage."""

    def build(shape: Shape, world: int) -> Built:
        from torch.distributed import pipelining

        mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("pp",))
        rank = mesh.get_local_rank()
        model = Llama(shape)
        per = shape.layers // world
        for i in range(shape.layers):
            if not rank * per <= i < (rank + 1) * per:
                del model.layers[str(i)]
        if rank > 0:
            model.tok_embeddings = None  # type: ignore[assignment]
        if rank < world - 1:
            model.norm = None  # type: ignore[assignment]
            model.output = None  # type: ignore[assignment]
        stage = pipelining.PipelineStage(
            model, rank, world, torch.device("cpu"), group=mesh.get_group()
        )
        cls = {"1F1B": pipelining.Schedule1F1B, "GPipe": pipelining.ScheduleGPipe}[schedule]
        built = Built(
            model,
            micro_batches=4,
            pp_mesh=mesh,
            first_stage=rank == 0,
            last_stage=rank == world - 1,
        )
        built.schedule = lambda loss_fn: cls(stage, n_microbatches=4, loss_fn=loss_fn)
        return built

    return build


def cp_ring(shape: Shape, world: int) -> Built:
    """Context parallel over `world` ranks as a TE/Megatron p2p ring (tests/pytorch_jobs/
    ring.py), the parameters FSDP2-sharded over the cp ranks as torchtitan shards them over
    dp_shard x cp; each rank holds a contiguous 1/world of every sequence."""
    mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("cp",))
    model = Llama(shape)
    for block in model.layers.values():
        block.attention.cp_group = mesh.get_group()
    apply_fsdp(model, mesh, bf16=False)
    return Built(model, micro_batches=2, loss_mesh=mesh, cp=(mesh.get_local_rank(), world))


def expert_parallel(shape: Shape, world: int) -> Built:
    """torchtitan's EP over `world` ranks borrowed from dp_shard (parallelize.py apply_moe_ep
    and apply_fsdp_to_decoder): each rank keeps E/ep experts; the dense parameters are
    FSDP2-sharded over the same ranks, the experts left out of FSDP (edp = 1)."""
    import dataclasses

    from torch.distributed.fsdp import fully_shard

    moe_shape = dataclasses.replace(shape, experts=4, top_k=2)
    mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("dp",))
    model = Llama(moe_shape)
    moes = [block.feed_forward for block in model.layers.values()]
    for m in moes:
        m.shard_experts(mesh.get_group())
    experts = {p for m in moes for p in (m.w1, m.w2, m.w3)}
    fully_shard(model.tok_embeddings, mesh=mesh)
    fully_shard([model.norm, model.output], mesh=mesh, reshard_after_forward=False)
    for block in model.layers.values():
        fully_shard(block, mesh=mesh, ignored_params=experts)
    fully_shard(model, mesh=mesh, ignored_params=experts)
    return Built(model, micro_batches=2, dp_mesh=mesh, ep_group=mesh.get_group(), moe=moes)


CONFIGS: dict[str, Callable[[Shape, int], Built]] = {
    "tp": tp(sp=False),
    "tp-sp": tp(sp=True),
    "fsdp": fsdp(bf16=False),
    "fsdp-bf16": fsdp(bf16=True),
    "ddp": ddp,
    "tp-fsdp": tp_fsdp,
    "pp-1f1b": pipeline("1F1B"),
    "pp-gpipe": pipeline("GPipe"),
    "cp-ring": cp_ring,
    "ep": expert_parallel,
}
