"""The gems demo: a model's forward pass on gems' Triton kernels, checked against ATen, then
the conformance summary of the backend gems selected.

    python examples/demo.py            # the detected device (the cpu reference without a GPU)
    python examples/demo.py --no-conformance
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

# the demo shows gems' kernels serving the forward: on a GPU they compile in its calls rather
# than in the background while ATen serves (the default there)
os.environ.setdefault("GEMS_COMPILE", "sync")

import gems_core  # noqa: E402


class Block(nn.Module):
    """A pre-norm transformer MLP block with an output head: LayerNorm, Linear, GELU,
    residual add, softmax over a vocabulary."""

    def __init__(self, hidden: int, vocab: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(hidden)
        self.up = nn.Linear(hidden, 4 * hidden)
        self.act = nn.GELU(approximate="tanh")
        self.down = nn.Linear(4 * hidden, hidden)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x + self.down(self.act(self.up(self.norm(x))))
        return torch.softmax(self.head(h), dim=-1)


class OpRecorder(TorchDispatchMode):
    """Records which ATen overloads a forward pass calls."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        name = func._schema.name.removeprefix("aten::")
        overload = func._overloadname
        self.ops.append(name if overload == "default" else f"{name}.{overload}")
        return func(*args, **(kwargs or {}))


def run_model(tokens: int, hidden: int, vocab: int) -> bool:
    backend = gems_core.backend()
    device = torch.device(gems_core.device)
    print(f"gems {gems_core.__version__} on backend '{backend.name}' ({backend.description or backend.vendor}), "
          f"device {device}")
    torch.manual_seed(0)
    model = Block(hidden, vocab).to(device).eval()
    x = torch.randn(tokens, hidden, device=device)
    with torch.no_grad():
        reference = model.double()(x.double())
        model.float()
        with gems_core.use_gems():
            served = set(gems_core.registered_ops())
            recorder = OpRecorder()
            start = time.perf_counter()
            with recorder:
                out = model(x)
            elapsed = time.perf_counter() - start
    on_gems = [op for op in recorder.ops if op in served]
    on_aten = sorted({op for op in recorder.ops if op not in served})
    error = (out.double() - reference).abs().max().item()
    print(f"forward of a {tokens}x{hidden} batch through LayerNorm/Linear/GELU/softmax "
          f"(vocab {vocab}): {elapsed * 1e3:.1f} ms")
    print(f"  {len(on_gems)} of {len(recorder.ops)} ATen calls ran on gems kernels: "
          f"{', '.join(sorted(set(on_gems)))}")
    if on_aten:
        print(f"  left to ATen: {', '.join(on_aten)}")
    ok = error < 1e-4 and bool(on_gems)
    print(f"  max abs difference from a float64 ATen forward: {error:.2e} ({'ok' if ok else 'TOO LARGE'})")
    return ok


#: the quick contract and accuracy tiers under the CPU interpreter, in CPU-seconds (measured)
CONFORMANCE_CPU_SECONDS = 900


def run_conformance(report: str) -> int:
    name = gems_core.backend().name
    command = [sys.executable, "-m", "gems_conformance", "--device", name, "--quick",
               "--tier", "contract,accuracy", "--report", report]
    if gems_core.device == "cpu":
        cores = os.cpu_count() or 1
        took = f"about {max(1, round(CONFORMANCE_CPU_SECONDS / cores / 60))} min on {cores} cores"
    else:
        took = "a few minutes (kernels compile on first use)"
    print(f"\nconformance summary of '{name}': {took}; --no-conformance skips it")
    print(f"$ {' '.join(command[1:])}", flush=True)
    start = time.perf_counter()
    status = subprocess.call(command, env=dict(os.environ, GEMS_DEVICE=name))
    print(f"conformance summary done in {time.perf_counter() - start:.0f} s")
    return status


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--vocab", type=int, default=67)
    parser.add_argument("--no-conformance", action="store_true", help="skip the conformance summary")
    parser.add_argument("--report", default="out/conformance", help="conformance report folder")
    args = parser.parse_args()
    ok = run_model(args.tokens, args.hidden, args.vocab)
    status = 0 if ok else 1
    if not args.no_conformance:
        status = run_conformance(args.report) or status
    return status


if __name__ == "__main__":
    sys.exit(main())
