"""A mixture-of-experts feed-forward as torchtitan writes its expert parallelism
(models/common/moe.py MoE, token_dispatcher.py AllToAllTokenDispatcher): the router's top-k,
the int64 tokens-per-expert counts exchanged by all-to-all over ep, the routed tokens
dispatched and combined by all-to-all with the variable splits those counts give, grouped
experts (w1, w2, w3 each one tensor of the local experts).

The router's choice is balanced by construction (token t takes experts t, t+1, ... mod E;
the gates still come from the router's scores, so it learns): every expert receives T k / E
tokens, the expectation commbench prices with `routing: expected`, so the split sizes can be
compared exactly rather than against one random draw.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
import torch.nn.functional as F
from torch import nn


class MoE(nn.Module):
    def __init__(self, hidden: int, ffn: int, experts: int, top_k: int) -> None:
        super().__init__()
        self.experts, self.top_k = experts, top_k
        self.router = nn.Linear(hidden, experts, bias=False)
        self.w1 = nn.Parameter(torch.randn(experts, hidden, ffn) * hidden**-0.5)
        self.w2 = nn.Parameter(torch.randn(experts, ffn, hidden) * ffn**-0.5)
        self.w3 = nn.Parameter(torch.randn(experts, hidden, ffn) * hidden**-0.5)
        self.ep_group: dist.ProcessGroup | None = None
        self.register_buffer("tokens_per_expert", torch.zeros(experts), persistent=False)

    def shard_experts(self, group: dist.ProcessGroup) -> None:
        """Keep this rank's E/ep experts (torchtitan's ExpertParallel: Shard(0) of the
        grouped weights over the ep mesh)."""
        ep, me = dist.get_world_size(group), dist.get_rank(group)
        n = self.experts // ep
        for name in ("w1", "w2", "w3"):
            full = getattr(self, name)
            setattr(self, name, nn.Parameter(full.detach()[me * n : (me + 1) * n].clone()))
        self.ep_group = group

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        tokens = x.reshape(-1, h)
        t = tokens.shape[0]
        ids = (torch.arange(t)[:, None] + torch.arange(self.top_k)) % self.experts
        gates = torch.sigmoid(self.router(tokens)).gather(1, ids)
        counts = torch.zeros(t, self.experts, dtype=torch.bool).scatter_(1, ids, True).sum(0)
        with torch.no_grad():
            self.tokens_per_expert.add_(counts)
        order = ids.reshape(-1).argsort(stable=True)  # expert-major, as _local_reorder
        routed = tokens.repeat_interleave(self.top_k, dim=0)[order]
        out = self._experts(routed, counts)
        back = torch.empty_like(out).index_copy(0, order, out)
        weighted = back.reshape(t, self.top_k, h) * gates.unsqueeze(-1)
        return weighted.sum(1).reshape(b, s, h)

    def _experts(self, routed: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        """Dispatch, run the local experts, combine."""
        group = self.ep_group
        ep = dist.get_world_size(group) if group is not None else 1
        if ep == 1:
            return self._run(routed, counts.tolist())
        with torch.no_grad():
            recv = funcol.wait_tensor(
                funcol.all_to_all_single(counts.view(ep, -1), None, None, group)
            )
        input_splits = counts.view(ep, -1).sum(1).tolist()
        output_splits = recv.sum(1).tolist()
        got = funcol.wait_tensor(
            funcol.all_to_all_single(routed, output_splits, input_splits, group)
        )
        # rows arrive by (source rank, local expert): run each block by its expert
        sizes = recv.reshape(-1).tolist()
        local = self.w1.shape[0]
        outs, start = [], 0
        for i, n in enumerate(sizes):
            outs.append(self._one(got[start : start + n], i % local))
            start += n
        mine = torch.cat(outs)
        return funcol.wait_tensor(
            funcol.all_to_all_single(mine, input_splits, output_splits, group)
        )

    def _run(self, routed: torch.Tensor, sizes: list[int]) -> torch.Tensor:
        outs, start = [], 0
        for e, n in enumerate(sizes):
            outs.append(self._one(routed[start : start + n], e))
            start += n
        return torch.cat(outs)

    def _one(self, x: torch.Tensor, e: int) -> torch.Tensor:
        return (F.silu(x @ self.w1[e]) * (x @ self.w3[e])) @ self.w2[e]
