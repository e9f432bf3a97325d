"""A small Llama-style decoder (RMSNorm, rotary attention, SwiGLU) for the demo and tests."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass(frozen=True)
class Config:
    vocab: int = 512
    dim: int = 96
    layers: int = 3
    heads: int = 4
    hidden: int = 260  # SwiGLU width: not a multiple of the world size on purpose
    seq: int = 32
    kv_heads: int = 0  # grouped-query attention: key/value heads (0: as many as heads)

    @property
    def kv_dim(self) -> int:
        return self.dim // self.heads * (self.kv_heads or self.heads)


# Llama-3.1-70B's decoder layer shapes (q 8192, k and v 1024 wide, SwiGLU 28672), its
# vocabulary, and a sequence that fits a few layers per GPU; `layers` is set by the caller.
LLAMA_3_1_70B = Config(vocab=128256, dim=8192, layers=4, heads=64, hidden=28672, seq=2048,
                       kv_heads=8)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
        return (x.float() * scale).type_as(x) * self.weight


def _rotary(x: torch.Tensor) -> torch.Tensor:
    seq, half = x.shape[-2], x.shape[-1] // 2
    freqs = 1.0 / (10000 ** (torch.arange(half, device=x.device, dtype=torch.float32) / half))
    angles = torch.arange(seq, device=x.device, dtype=torch.float32)[:, None] * freqs[None]
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


class Block(nn.Module):
    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.heads = cfg.heads
        self.kv_heads = cfg.kv_heads or cfg.heads
        self.split = (cfg.dim, cfg.kv_dim, cfg.kv_dim)
        self.attn_norm = RMSNorm(cfg.dim)
        self.qkv = nn.Linear(cfg.dim, cfg.dim + 2 * cfg.kv_dim, bias=False)
        self.out = nn.Linear(cfg.dim, cfg.dim, bias=False)
        self.mlp_norm = RMSNorm(cfg.dim)
        self.gate_up = nn.Linear(cfg.dim, 2 * cfg.hidden, bias=False)
        self.down = nn.Linear(cfg.hidden, cfg.dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(self.attn_norm(x)).split(self.split, dim=-1)
        q = q.view(b, s, self.heads, -1).transpose(1, 2)
        k, v = (t.view(b, s, self.kv_heads, -1).transpose(1, 2) for t in (k, v))
        gqa = {"enable_gqa": True} if self.kv_heads != self.heads else {}
        y = F.scaled_dot_product_attention(_rotary(q), _rotary(k), v, is_causal=True, **gqa)
        x = x + self.out(y.transpose(1, 2).reshape(b, s, d))
        gate, up = self.gate_up(self.mlp_norm(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(gate) * up)


class Decoder(nn.Module):
    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab, cfg.dim)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
        self.norm = RMSNorm(cfg.dim)
        self.head = nn.Linear(cfg.dim, cfg.vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))

    def loss(self, tokens: torch.Tensor) -> torch.Tensor:
        logits = self(tokens[:, :-1])
        return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))


def batch(cfg: Config, batch_size: int, step: int, rank: int, device: torch.device) -> torch.Tensor:
    """Deterministic tokens for (step, rank): a repeating pattern with noise, learnable."""
    gen = torch.Generator().manual_seed(1000 * step + rank)
    base = torch.randint(0, cfg.vocab, (batch_size, 1), generator=gen)
    stride = torch.randint(1, 7, (batch_size, 1), generator=gen)
    tokens = (base + stride * torch.arange(cfg.seq + 1)) % cfg.vocab
    return tokens.to(device)
