"""The issue's tiny Llama, written as torchtitan's llama3 model registers its parameters
(tok_embeddings; per layer attention wq wk wv wo, feed_forward w1 w2 w3, attention_norm,
ffn_norm; norm; output), so DDP's and FSDP2's bucketing and the TP plan see the same tensors.
Attention reads its local head count from the weights, so it runs TP-sharded as is."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class Shape:
    """commbench's ModelShape fields of the same model."""

    layers: int = 2
    hidden: int = 256
    heads: int = 4
    ffn_hidden: int = 688
    vocab: int = 1024
    seq_len: int = 128
    experts: int = 0  # > 0: every layer's feed-forward is an MoE (tests/pytorch_jobs/moe.py)
    top_k: int = 0

    def commbench_model(self) -> str:
        """The `--model` argument of the same shape."""
        return (
            f"tiny-llama:layers={self.layers},hidden={self.hidden},heads={self.heads},"
            f"ffn_hidden={self.ffn_hidden},vocab={self.vocab},seq_len={self.seq_len}"
            + (f",experts={self.experts},top_k={self.top_k}" if self.experts else "")
        )


class Attention(nn.Module):
    def __init__(self, s: Shape) -> None:
        super().__init__()
        self.head_dim = s.hidden // s.heads
        self.wq = nn.Linear(s.hidden, s.hidden, bias=False)
        self.wk = nn.Linear(s.hidden, s.hidden, bias=False)
        self.wv = nn.Linear(s.hidden, s.hidden, bias=False)
        self.wo = nn.Linear(s.hidden, s.hidden, bias=False)
        self.cp_group = None  # set: ring attention over this context-parallel group

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = (
            w(x).view(b, t, -1, self.head_dim).transpose(1, 2) for w in (self.wq, self.wk, self.wv)
        )
        if self.cp_group is not None:
            from ring import ring_attention

            out = ring_attention(q, k, v, self.cp_group)
        else:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(out.transpose(1, 2).reshape(b, t, -1))


class FeedForward(nn.Module):
    def __init__(self, s: Shape) -> None:
        super().__init__()
        self.w1 = nn.Linear(s.hidden, s.ffn_hidden, bias=False)
        self.w2 = nn.Linear(s.ffn_hidden, s.hidden, bias=False)
        self.w3 = nn.Linear(s.hidden, s.ffn_hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, s: Shape) -> None:
        super().__init__()
        self.attention = Attention(s)
        if s.experts:
            from moe import MoE

            self.feed_forward: nn.Module = MoE(s.hidden, s.ffn_hidden, s.experts, s.top_k)
        else:
            self.feed_forward = FeedForward(s)
        self.attention_norm = nn.RMSNorm(s.hidden)
        self.ffn_norm = nn.RMSNorm(s.hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x + self.attention(self.attention_norm(x))
        return h + self.feed_forward(self.ffn_norm(h))


class Llama(nn.Module):
    def __init__(self, s: Shape) -> None:
        super().__init__()
        self.tok_embeddings = nn.Embedding(s.vocab, s.hidden)
        self.layers = nn.ModuleDict({str(i): Block(s) for i in range(s.layers)})
        self.norm = nn.RMSNorm(s.hidden)
        self.output = nn.Linear(s.hidden, s.vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.tok_embeddings(tokens) if self.tok_embeddings is not None else tokens
        for layer in self.layers.values():
            h = layer(h)
        h = self.norm(h) if self.norm is not None else h
        return self.output(h) if self.output is not None else h
