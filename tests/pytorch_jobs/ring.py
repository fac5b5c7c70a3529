"""Ring attention over the cp group as TransformerEngine / Megatron-Core's p2p context
parallel exchange K and V (TE attention.py AttnFuncWithCPAndKVP2P): K and V travel around
the ring as one tensor, c-1 hops in forward; backward sends K,V on the first hop, K,V and the
accumulated dK,dV together on the middle hops and dK,dV alone on the last, 2(c-1) units.
Written for the op-log job: torch's own context parallel needs CUDA's SDPA kernels.

The sequence is split in contiguous chunks (no load balancing: the chunks a causal mask hides
still travel, as in Megatron's ring), softmax combined by log-sum-exp, the backward from the
global lse and the flash-attention identities (dS = P * (dP - rowsum(dO * O)))."""

from __future__ import annotations

import torch
import torch.distributed as dist


def _exchange(send: torch.Tensor, group: dist.ProcessGroup) -> torch.Tensor:
    """Send to the next rank of the ring, receive from the previous, as one batch."""
    ranks = dist.get_process_group_ranks(group)
    me = ranks.index(dist.get_rank())
    nxt, prv = ranks[(me + 1) % len(ranks)], ranks[(me - 1) % len(ranks)]
    recv = torch.empty_like(send)
    ops = [dist.P2POp(dist.isend, send.contiguous(), nxt), dist.P2POp(dist.irecv, recv, prv)]
    for work in dist.batch_isend_irecv(ops):
        work.wait()
    return recv


def _scores(q: torch.Tensor, k: torch.Tensor, me: int, block: int) -> torch.Tensor | None:
    """Scaled scores of the local queries against chunk `block`'s keys, causally masked;
    None when the whole chunk lies in the future."""
    if block > me:
        return None
    s = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    if block == me:
        n = s.shape[-1]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    return s


class RingAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, group):  # type: ignore[override]
        c = dist.get_world_size(group)
        me = dist.get_rank(group)
        kv = torch.stack([k, v])
        lse = torch.full(q.shape[:-1], float("-inf"))
        out = torch.zeros_like(q)
        for i in range(c):
            nxt = _exchange(kv, group) if i < c - 1 else None
            s = _scores(q, kv[0], me, (me - i) % c)
            if s is not None:
                blk_lse = torch.logsumexp(s, dim=-1)
                new = torch.logaddexp(lse, blk_lse)
                out = (
                    out * torch.exp(lse - new).unsqueeze(-1)
                    + torch.exp(s - new.unsqueeze(-1)) @ kv[1]
                )
                lse = new
            kv = nxt if nxt is not None else kv
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.group = group
        return out

    @staticmethod
    def backward(ctx, dout):  # type: ignore[override]
        q, k, v, out, lse = ctx.saved_tensors
        group = ctx.group
        c, me = dist.get_world_size(group), dist.get_rank(group)
        delta = (dout * out).sum(-1, keepdim=True)
        dq = torch.zeros_like(q)
        kv, dkv = torch.stack([k, v]), torch.zeros(2, *k.shape)
        own = None
        for i in range(c):
            s = _scores(q, kv[0], me, (me - i) % c)
            if s is not None:
                p = torch.exp(s - lse.unsqueeze(-1))
                dp = dout @ kv[1].transpose(-1, -2)
                ds = p * (dp - delta) / q.shape[-1] ** 0.5
                dq += ds @ kv[0]
                dkv[0] += ds.transpose(-1, -2) @ q
                dkv[1] += p.transpose(-1, -2) @ dout
            if i == 0:
                own, dkv = dkv, torch.zeros_like(dkv)  # our own chunk's share stays here
            if i < c - 1:  # K,V first; then K,V with the dK,dV gathered so far
                sent = _exchange(kv if i == 0 else torch.cat([kv, dkv]), group)
                kv, dkv = (sent, dkv * 0) if i == 0 else (sent[:2], sent[2:])
        dkv = own + (_exchange(dkv, group) if c > 1 else 0)  # the last hop: dK,dV home
        return dq, dkv[0], dkv[1], None


def ring_attention(q, k, v, group):
    return RingAttention.apply(q, k, v, group)
