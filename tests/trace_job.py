"""A small real PyTorch job on gloo for `commbench trace`'s tests (torchrun, 4 ranks, CPU).

Two profiled parts, each under torch.profiler with record_shapes and a ProfilerStep schedule
(one warm-up step, two recorded), each rank writing its trace and the ops it issued:
  OUT/tpdp: tp=2 x dp=2 in Megatron order (tp groups [0,1] [2,3], dp groups [0,2] [1,3]),
    ep=2 over the dp ranks: forward TP all-reduces and an EP all-to-all, backward a TP
    all-reduce and the DP gradient reduce-scatter, optimizer the DP all-gather and the loss
    all-reduce on the whole world (the default group).
  OUT/pp: pp=2 x dp=2 (dp groups [0,1] [2,3], pp groups [0,2] [1,3]): GPipe with m = 2
    micro-batches on p = 2 stages (activations forward, gradients back on the pp group),
    then the DP gradient all-reduce.
OUT/ops/PARTRANK.json: [op, bytes (nccl-tests S), group ranks, axis] in issue order, per step.
"""

from __future__ import annotations

import json
import os
import sys

import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile, record_function, schedule

N = 32  # tensors are N x N float32: 4 KiB


def main(out: str) -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    assert world == 4, world
    tpdp = new_groups(rank, tp=[[0, 1], [2, 3]], dp=[[0, 2], [1, 3]])
    run(out, "tpdp", rank, lambda log: tpdp_step(rank, tpdp, log))
    pp = new_groups(rank, dp2=[[0, 1], [2, 3]], pp=[[0, 2], [1, 3]])
    run(out, "pp", rank, lambda log: pp_step(rank, pp, log))
    dist.destroy_process_group()


def new_groups(rank: int, **axes: list[list[int]]) -> dict:
    """axis -> (this rank's process group, its ranks); every rank creates every group, in
    the same order, as new_group requires."""
    groups = {}
    for name, gs in axes.items():
        for g in gs:
            pg = dist.new_group(g)
            if rank in g:
                groups[name] = (pg, g)
    return groups


def run(out: str, part: str, rank: int, step) -> None:
    folder = os.path.join(out, part)
    os.makedirs(folder, exist_ok=True)
    logs: list[list] = []
    sched = schedule(wait=0, warmup=1, active=2, repeat=1)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, schedule=sched) as prof:
        for i in range(3):
            log: list = []
            step(log)
            if i >= 1:
                logs.append(log)
            prof.step()
    prof.export_chrome_trace(os.path.join(folder, f"rank{rank}.json"))
    os.makedirs(os.path.join(out, "ops"), exist_ok=True)
    with open(os.path.join(out, "ops", f"{part}{rank}.json"), "w") as f:
        json.dump(logs, f)


def tpdp_step(rank: int, groups: dict, log: list) -> None:
    x = torch.ones(N, N)
    (tp, tp_ranks), (dp, dp_ranks) = groups["tp"], groups["dp"]
    with record_function("## forward ##"):
        for _ in range(2):
            x = torch.mm(x, x) / N
            dist.all_reduce(x, group=tp)
            log.append(["allreduce", 4 * N * N, tp_ranks, "tp"])
        routed = torch.empty(N, N)
        dist.all_to_all_single(routed, x, group=dp)
        log.append(["alltoall", 4 * N * N, dp_ranks, "ep"])
    with record_function("## backward ##"):
        g = torch.mm(x, routed) / N
        dist.all_reduce(g, group=tp)
        log.append(["allreduce", 4 * N * N, tp_ranks, "tp"])
        shard = torch.empty(N // 2, N)
        dist.reduce_scatter_tensor(shard, g, group=dp)
        log.append(["reduce_scatter", 4 * N * N, dp_ranks, "dp"])
    with record_function("## optimizer ##"):
        full = torch.empty(N, N)
        dist.all_gather_into_tensor(full, shard, group=dp)
        log.append(["allgather", 4 * N * N, dp_ranks, "dp"])
        loss = torch.ones(16)
        dist.all_reduce(loss)
        log.append(["allreduce", 64, [0, 1, 2, 3], "world"])


def pp_step(rank: int, groups: dict, log: list) -> None:
    (pp, pp_ranks), (dp, dp_ranks) = groups["pp"], groups["dp2"]
    stage, m = pp_ranks.index(rank), 2
    peer = pp_ranks[1 - stage]
    act = torch.ones(N, N)

    def passes(sender: int) -> None:
        """m micro-batches from stage `sender` to the other: it computes then sends, the
        other receives then computes."""
        nonlocal act
        for _ in range(m):
            if stage == sender:
                act = torch.mm(act, act) / N
                dist.send(act, peer, group=pp)
            else:
                dist.recv(act, peer, group=pp)
                act = torch.mm(act, act) / N
            log.append(["sendrecv", 4 * N * N, sorted(pp_ranks), "pp"])

    with record_function("## forward ##"):
        passes(sender=0)
    with record_function("## backward ##"):
        passes(sender=1)
        dist.all_reduce(act, group=dp)
        log.append(["allreduce", 4 * N * N, dp_ranks, "dp"])


if __name__ == "__main__":
    main(sys.argv[1])
