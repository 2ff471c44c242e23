"""A BERT-style encoder on random weights (nothing downloaded): token, position and segment
embeddings, post-norm layers of multi-head self-attention written with matmul + softmax and
a GELU MLP, LayerNorm, and a masked-language-model head. Runs once on ATen and once under
``gems_core.use_gems()`` and prints the largest logit difference.

    python examples/bert.py                       # tiny defaults
    python examples/bert.py --layers 4 --hidden 128 --heads 8 --seq 64
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

import gems_core


@dataclass(frozen=True)
class BertConfig:
    vocab: int = 97
    hidden: int = 32
    layers: int = 2
    heads: int = 4
    intermediate: int = 64
    max_positions: int = 64
    segments: int = 2
    dropout: float = 0.0
    eps: float = 1e-12


class SelfAttention(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.heads = config.heads
        self.qkv = nn.Linear(config.hidden, 3 * config.hidden)
        self.out = nn.Linear(config.hidden, config.hidden)
        self.dropout = config.dropout

    def forward(self, x: torch.Tensor, additive_mask: torch.Tensor) -> torch.Tensor:
        batch, seq, hidden = x.shape
        head_dim = hidden // self.heads
        # (batch, seq, 3, heads, head_dim) -> three of (batch, heads, seq, head_dim)
        q, k, v = self.qkv(x).view(batch, seq, 3, self.heads, head_dim).permute(2, 0, 3, 1, 4)
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(head_dim) + additive_mask
        probs = F.dropout(torch.softmax(scores, dim=-1), self.dropout, self.training)
        context = torch.matmul(probs, v).transpose(1, 2).reshape(batch, seq, hidden)
        return self.out(context)


class EncoderLayer(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.attention = SelfAttention(config)
        self.attention_norm = nn.LayerNorm(config.hidden, eps=config.eps)
        self.up = nn.Linear(config.hidden, config.intermediate)
        self.down = nn.Linear(config.intermediate, config.hidden)
        self.mlp_norm = nn.LayerNorm(config.hidden, eps=config.eps)
        self.dropout = config.dropout

    def forward(self, x: torch.Tensor, additive_mask: torch.Tensor) -> torch.Tensor:
        attended = F.dropout(self.attention(x, additive_mask), self.dropout, self.training)
        x = self.attention_norm(x + attended)
        mlp = F.dropout(self.down(F.gelu(self.up(x))), self.dropout, self.training)
        return self.mlp_norm(x + mlp)


class Bert(nn.Module):
    """Encoder plus masked-LM head: (batch, seq) token ids -> (batch, seq, vocab) logits."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.config = config
        self.tokens = nn.Embedding(config.vocab, config.hidden)
        self.positions = nn.Embedding(config.max_positions, config.hidden)
        self.segments = nn.Embedding(config.segments, config.hidden)
        self.embedding_norm = nn.LayerNorm(config.hidden, eps=config.eps)
        self.layers = nn.ModuleList(EncoderLayer(config) for _ in range(config.layers))
        self.head = nn.Linear(config.hidden, config.hidden)
        self.head_norm = nn.LayerNorm(config.hidden, eps=config.eps)
        self.decoder = nn.Linear(config.hidden, config.vocab)

    def forward(
        self, tokens: torch.Tensor, attention_mask: torch.Tensor | None = None,
        segments: torch.Tensor | None = None,
    ) -> torch.Tensor:
        seq = tokens.shape[1]
        positions = torch.arange(seq, device=tokens.device)
        segments = torch.zeros_like(tokens) if segments is None else segments
        x = self.tokens(tokens) + self.positions(positions) + self.segments(segments)
        x = F.dropout(self.embedding_norm(x), self.config.dropout, self.training)
        if attention_mask is None:
            attention_mask = torch.ones_like(tokens, dtype=torch.bool)
        # padding keys get -inf-like scores: (batch, 1, 1, seq) broadcast over heads and queries
        additive_mask = torch.where(attention_mask[:, None, None, :], 0.0, torch.finfo(x.dtype).min)
        for layer in self.layers:
            x = layer(x, additive_mask)
        return self.decoder(self.head_norm(F.gelu(self.head(x))))


def sample_batch(config: BertConfig, batch: int, seq: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Random token ids and a padding mask whose last row is padded past half its length."""
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, config.vocab, (batch, seq), generator=g)
    mask = torch.ones(batch, seq, dtype=torch.bool)
    mask[-1, seq // 2 + 1:] = False
    return tokens, mask


def compare(config: BertConfig, batch: int, seq: int) -> float:
    """Max |logits(gems) - logits(ATen)| of one forward pass on random weights."""
    torch.manual_seed(0)
    model = Bert(config).eval()
    tokens, mask = sample_batch(config, batch, seq)
    with torch.no_grad():
        reference = model(tokens, mask)
        with gems_core.use_gems():
            logits = model(tokens, mask)
    return float((logits - reference).abs().max())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--seq", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--intermediate", type=int, default=64)
    parser.add_argument("--vocab", type=int, default=97)
    args = parser.parse_args()
    config = BertConfig(vocab=args.vocab, hidden=args.hidden, layers=args.layers, heads=args.heads,
                        intermediate=args.intermediate, max_positions=max(64, args.seq))
    start = time.perf_counter()
    diff = compare(config, args.batch, args.seq)
    print(f"bert {config}: max |logits gems - ATen| = {diff:.3e} "
          f"(backend {gems_core.backend().name}, {time.perf_counter() - start:.1f} s)")
    return 0 if diff < 1e-3 else 1


if __name__ == "__main__":
    sys.exit(main())
