"""A Llama-style decoder on random weights (nothing downloaded): RMSNorm, rotary position
embedding (half-rotated), grouped-query causal attention written with matmul + softmax, and
a SwiGLU MLP. Runs once on ATen and once under ``gems_core.use_gems()`` with gems' fused
ops (skip_rms_norm, apply_rotary_position_embedding, silu_and_mul) in place of their
unfused PyTorch forms, and prints the largest logit difference.

    python examples/llama.py                      # tiny defaults
    python examples/llama.py --layers 4 --hidden 128 --heads 8 --kv-heads 2 --seq 64
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass

import torch
from torch import nn

import gems_core
from gems_core import fused as gems_fused


@dataclass(frozen=True)
class LlamaConfig:
    vocab: int = 97
    hidden: int = 32
    layers: int = 2
    heads: int = 4
    kv_heads: int = 2
    intermediate: int = 48
    max_positions: int = 64
    rope_theta: float = 10000.0
    eps: float = 1e-6


def rope_tables(config: LlamaConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """(max_positions, head_dim / 2) cos and sin of p * theta^(-2j / head_dim)."""
    head_dim = config.hidden // config.heads
    inv_freq = config.rope_theta ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    angles = torch.arange(config.max_positions, dtype=torch.float64)[:, None] * inv_freq
    return angles.cos().float(), angles.sin().float()


class Attention(nn.Module):
    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.heads, self.kv_heads = config.heads, config.kv_heads
        self.head_dim = config.hidden // config.heads
        self.q = nn.Linear(config.hidden, config.heads * self.head_dim, bias=False)
        self.kv = nn.Linear(config.hidden, 2 * config.kv_heads * self.head_dim, bias=False)
        self.o = nn.Linear(config.heads * self.head_dim, config.hidden, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, fused: bool) -> torch.Tensor:
        batch, seq, _ = x.shape
        q = self.q(x).view(batch, seq, self.heads, self.head_dim)
        k, v = self.kv(x).view(batch, seq, 2, self.kv_heads, self.head_dim).unbind(2)
        rotate = gems_fused.apply_rotary_position_embedding if fused else gems_fused.apply_rotary_position_embedding_reference
        q, k = rotate(q, k, cos, sin)
        # grouped-query attention: each key/value head serves heads // kv_heads query heads
        group = self.heads // self.kv_heads
        q, k, v = (t.transpose(1, 2) for t in (q, k.repeat_interleave(group, 2), v.repeat_interleave(group, 2)))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        causal = torch.ones(seq, seq, dtype=torch.bool, device=x.device).tril()
        scores = scores.masked_fill(~causal, float("-inf"))
        context = torch.matmul(torch.softmax(scores, dim=-1), v)
        return self.o(context.transpose(1, 2).reshape(batch, seq, -1))


class Mlp(nn.Module):
    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.gate_up = nn.Linear(config.hidden, 2 * config.intermediate, bias=False)
        self.down = nn.Linear(config.intermediate, config.hidden, bias=False)

    def forward(self, x: torch.Tensor, fused: bool) -> torch.Tensor:
        act = gems_fused.silu_and_mul if fused else gems_fused.silu_and_mul_reference
        return self.down(act(self.gate_up(x)))


class DecoderLayer(nn.Module):
    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.input_norm = nn.RMSNorm(config.hidden, eps=config.eps)
        self.attention = Attention(config)
        self.post_attention_norm = nn.RMSNorm(config.hidden, eps=config.eps)
        self.mlp = Mlp(config)


class Llama(nn.Module):
    """Decoder plus LM head: (batch, seq) token ids -> (batch, seq, vocab) logits.

    ``fused=True`` runs gems' fused ops; ``False`` their pure-PyTorch references, which give
    the same function."""

    def __init__(self, config: LlamaConfig, fused: bool = False) -> None:
        super().__init__()
        self.config = config
        self.fused = fused
        self.embed = nn.Embedding(config.vocab, config.hidden)
        self.layers = nn.ModuleList(DecoderLayer(config) for _ in range(config.layers))
        self.norm = nn.RMSNorm(config.hidden, eps=config.eps)
        self.lm_head = nn.Linear(config.hidden, config.vocab, bias=False)
        cos, sin = rope_tables(config)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def _add_norm(self, x: torch.Tensor, residual: torch.Tensor, norm: nn.RMSNorm) -> tuple[torch.Tensor, torch.Tensor]:
        """(norm(x + residual), x + residual): the residual add fused into the next norm."""
        add_norm = gems_fused.skip_rms_norm if self.fused else gems_fused.skip_rms_norm_reference
        return add_norm(x, residual, norm.weight, self.config.eps)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        seq = tokens.shape[1]
        cos, sin = self.cos[:seq], self.sin[:seq]
        residual = self.embed(tokens)
        x = self.layers[0].input_norm(residual)
        norms_after = [layer.input_norm for layer in self.layers[1:]] + [self.norm]
        for layer, next_norm in zip(self.layers, norms_after):
            x, residual = self._add_norm(layer.attention(x, cos, sin, self.fused), residual, layer.post_attention_norm)
            x, residual = self._add_norm(layer.mlp(x, self.fused), residual, next_norm)
        return self.lm_head(x)


def sample_tokens(config: LlamaConfig, batch: int, seq: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, config.vocab, (batch, seq), generator=torch.Generator().manual_seed(seed))


def compare(config: LlamaConfig, batch: int, seq: int) -> float:
    """Max |logits(gems, fused ops) - logits(ATen, unfused)| of one forward on random weights."""
    torch.manual_seed(0)
    model = Llama(config).eval()
    tokens = sample_tokens(config, batch, seq)
    with torch.no_grad():
        reference = model(tokens)
        model.fused = True
        with gems_core.use_gems():
            logits = model(tokens)
        model.fused = False
    return float((logits - reference).abs().max())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--seq", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--kv-heads", type=int, default=2)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--intermediate", type=int, default=48)
    parser.add_argument("--vocab", type=int, default=97)
    args = parser.parse_args()
    config = LlamaConfig(vocab=args.vocab, hidden=args.hidden, layers=args.layers, heads=args.heads,
                         kv_heads=args.kv_heads, intermediate=args.intermediate,
                         max_positions=max(64, args.seq))
    start = time.perf_counter()
    diff = compare(config, args.batch, args.seq)
    print(f"llama {config}: max |logits gems - ATen| = {diff:.3e} "
          f"(backend {gems_core.backend().name}, {time.perf_counter() - start:.1f} s)")
    return 0 if diff < 1e-3 else 1


if __name__ == "__main__":
    sys.exit(main())
