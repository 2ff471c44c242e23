"""gems on several GPUs, on streams and in CUDA graphs (skipped without CUDA GPUs, with the
reason): every conformance op case with its inputs on the second GPU while the first is
current; operands on two GPUs raise ATen's error; work issued on a side stream runs on that
stream, ordered with its other work; a decode step captured in a CUDA graph runs gems'
kernels and replays right without allocating; DDP, FSDP2 and tensor-parallel runs
(benchmarks/distributed.py under torchrun) match ATen's.

    python -m pytest -q tests/test_multi_gpu.py
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from gems_conformance import records as R
from gems_conformance.accuracy import check_sample, dtype_name, route
from gems_conformance.cases import all_cases
from gems_conformance.routing import RouteWatch, implementations

import gems_core

ROOT = Path(__file__).resolve().parent.parent
GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0
ON_CUDA = GPUS > 0 and gems_core.device == "cuda"

pytestmark = pytest.mark.skipif(not ON_CUDA, reason="needs a CUDA GPU and a gems backend that runs on it")
two_gpus = pytest.mark.skipif(GPUS < 2, reason="needs two CUDA GPUs")

CASES = all_cases()
PARAMS = [
    pytest.param(name, dtype, id=f"{name}-{dtype_name(dtype)}")
    for name, case in sorted(CASES.items())
    for dtype in case.dtypes
]


@pytest.fixture(autouse=True)
def _first_gpu_current():
    gems_core.disable()
    if ON_CUDA:
        torch.cuda.set_device(0)
    yield
    gems_core.disable()
    if ON_CUDA:
        torch.cuda.set_device(0)


def _bench():
    name = "gems_bench_distributed"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / "distributed.py")
        sys.modules[name] = module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return sys.modules[name]


# -- any device index -----------------------------------------------------------------------


@two_gpus
@pytest.mark.parametrize("name,dtype", PARAMS)
def test_op_case_on_the_second_gpu(name: str, dtype: torch.dtype) -> None:
    """Each sample with its inputs on cuda:1 while cuda:0 is current: right (the suite's
    tolerances and declared deviations), served by gems as the same sample on the current
    device is, and the current device left as it was."""
    case = CASES[name]
    mode, why = route(case, dtype_name(dtype))
    if mode == R.NOT_SUPPORTED:
        pytest.skip(why)
    impls = implementations(case.aten)
    codes = frozenset().union(*impls.values()) if impls else frozenset()
    served: dict[int, list[str]] = {}
    for device in (1, 0):
        served[device] = []
        for index, sample in enumerate(case.samples(dtype, torch.device("cuda", device), "quick")):
            outcome = check_sample(case, sample, index, dtype_name(dtype), mode, why, codes)
            assert outcome.status not in R.FAILING, f"cuda:{device}: {outcome.description}: {outcome.message}"
            assert torch.cuda.current_device() == 0
            served[device].append(outcome.served_by)
        torch.cuda.synchronize(device)  # a launch on the wrong device fails here at the latest
    assert served[1] and served[1] == served[0], "gems served other samples on the second GPU"
    if mode == "run":
        assert "gems" in served[1], "gems served no sample"


def _issue_ops() -> dict[str, tuple]:
    """The calls that failed on the second GPU: (function, inputs, overloads gems serves)."""
    g = torch.Generator().manual_seed(0)

    def rand(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)

    x, y = rand(33, 65), rand(65, 17)
    # products and attention in bfloat16: a backend may leave float32 ones to its vendor
    # library (the NVIDIA backend gives them to cuBLAS), where gems would not serve the call
    xb, yb = rand(33, 65, dtype=torch.bfloat16), rand(65, 17, dtype=torch.bfloat16)
    q, k, v = (rand(2, 4, 16, 32, dtype=torch.bfloat16) for _ in range(3))
    return {
        "add": (lambda a: a + 1.5 * a.t().contiguous().t(), (x,), ["add.Tensor"]),
        "clone": (lambda a: a.t().clone(), (x,), ["copy_"]),
        "layer_norm": (lambda a, w: F.layer_norm(a, (65,), w, w), (x, rand(65)), ["native_layer_norm", "layer_norm"]),
        "sum": (lambda a: a.sum(dim=1), (x,), ["sum.dim_IntList"]),
        "softmax": (lambda a: torch.softmax(a, dim=-1), (x,), ["_softmax", "softmax.int"]),
        "mm": (lambda a, b: a @ b, (xb, yb), ["mm"]),
        "cumsum": (lambda a: torch.cumsum(a, dim=1), (x,), ["cumsum"]),
        "sdpa": (lambda a, b, c: F.scaled_dot_product_attention(a, b, c, is_causal=True), (q, k, v),
                 ["scaled_dot_product_attention", "_scaled_dot_product_efficient_attention",
                  "_scaled_dot_product_flash_attention"]),
    }


@two_gpus
@pytest.mark.parametrize("native", ["1", "0"], ids=["native", "python"])
@pytest.mark.parametrize("op", sorted(_issue_ops()))
def test_ops_on_the_second_gpu_match_aten(op: str, native: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Repeated calls (the native layer records the second, replays the third) on cuda:1
    while cuda:0 is current, against ATen in float64; the results stay on cuda:1."""
    monkeypatch.setenv("GEMS_NATIVE", native)
    fn, inputs, overloads = _issue_ops()[op]
    expected = fn(*(t.double() for t in inputs))
    on_second = [t.to("cuda:1") for t in inputs]
    codes = frozenset().union(*implementations(overloads).values())
    with gems_core.use_gems(), RouteWatch(codes) as watch:
        results = [fn(*on_second) for _ in range(3)]
    assert watch.hit, f"{op}: gems did not serve the call"
    assert torch.cuda.current_device() == 0
    for result in results:
        assert result.device == torch.device("cuda", 1)
        tolerance = 2e-2 if inputs[0].dtype == torch.bfloat16 else 2e-3  # the result's rounding
        torch.testing.assert_close(result.double().cpu(), expected, rtol=tolerance, atol=tolerance)


@two_gpus
@pytest.mark.parametrize("call", ["add", "mm", "cat", "layer_norm"])
def test_operands_on_two_gpus_raise_atens_error(call: str) -> None:
    a = torch.randn(8, 8, device="cuda:0")
    b = torch.randn(8, 8, device="cuda:1")
    fn = {
        "add": lambda: a + b,
        "mm": lambda: a @ b,
        "cat": lambda: torch.cat([a, b]),
        "layer_norm": lambda: F.layer_norm(a, (8,), b[0], b[0]),
    }[call]
    with pytest.raises(RuntimeError) as aten:
        fn()
    with gems_core.use_gems(), pytest.raises(type(aten.value)) as gems:
        fn()
    same = "Expected all tensors to be on the same device"
    assert same in str(gems.value) or same not in str(aten.value), (str(gems.value), str(aten.value))


# -- streams ----------------------------------------------------------------------------------


@pytest.mark.parametrize("device", [0, 1], ids=["gpu0", "gpu1"])
def test_side_stream_work_is_ordered_on_that_stream(device: int) -> None:
    """A side stream sleeps, then fills a tensor, then gems' ops read it, all on that stream:
    gems' kernels must wait for the fill (they would read unwritten memory on another
    stream) and leave the default stream idle. Three rounds: the native layer replays."""
    if device >= GPUS:
        pytest.skip("needs two CUDA GPUs")
    x = torch.randn(1 << 16, dtype=torch.float64, device=device).float()
    expected = ((x.double() * 3 + 1) * 2).sum()
    side = torch.cuda.Stream(device)
    with gems_core.use_gems(include=["add", "mul", "sum"]):
        torch.cuda.synchronize(device)  # x is written
        with torch.cuda.stream(side):  # compiles and tunes: no host work left behind the sleep
            ((x * 3 + 1) * 2).sum()
        for _ in range(3):
            torch.cuda.synchronize(device)
            with torch.cuda.stream(side):
                torch.cuda._sleep(20_000_000)
                filled = x * 3  # gems' kernel too, on the side stream after the sleep
                result = ((filled + 1) * 2).sum()
            assert not side.query(), "the side stream finished before it was waited for"
            assert torch.cuda.default_stream(device).query(), "gems put work on the default stream"
            side.synchronize()
            torch.testing.assert_close(result.double(), expected, rtol=1e-4, atol=1e-3)


# -- CUDA graphs -------------------------------------------------------------------------------


def _small_decoder(device: int):
    bench = _bench()
    args = bench.parse_args(["--quick", "--modes", "graph"])
    llama = bench._load("gems_bench_llama", ROOT / "benchmarks" / "llama.py")
    config = llama.LlamaConfig(vocab=args.vocab, hidden=args.hidden, layers=args.layers, heads=args.heads,
                               kv_heads=args.kv_heads, intermediate=args.intermediate, max_positions=64)
    torch.manual_seed(0)
    model = llama.CachedLlama(config, 2).to(device).eval()
    g = torch.Generator().manual_seed(1)
    prompt = torch.randint(0, args.vocab, (2, 16), generator=g).to(device)
    token = torch.randint(0, args.vocab, (2, 1), generator=g).to(device)
    return bench, model, prompt, token


@pytest.mark.parametrize("device", [0, 1], ids=["gpu0", "gpu1"])
def test_decode_step_in_a_cuda_graph(device: int) -> None:
    """Warmed up and captured under use_gems(), a decode step runs gems' kernels, replays
    to the eager ATen step's logits, and a replay allocates nothing."""
    if device >= GPUS:
        pytest.skip("needs two CUDA GPUs")
    bench, model, prompt, token = _small_decoder(device)
    codes = frozenset().union(*implementations(["mm", "add.Tensor", "scaled_dot_product_attention"]).values())
    with torch.inference_mode():
        model(prompt, 0)
        expected = model(token, 16).double()  # ATen, eager
        with RouteWatch(codes) as watch:
            graph, out = bench.capture_decode_step(model, token, 16, "gems")
        assert watch.hit, "no gems kernel ran while capturing"
        torch.cuda.synchronize(device)
        allocated = torch.cuda.memory_allocated(device)
        for _ in range(3):
            out.zero_()
            graph.replay()
            torch.cuda.synchronize(device)
            torch.testing.assert_close(out.double(), expected, rtol=1e-3, atol=1e-3)
        assert torch.cuda.memory_allocated(device) == allocated


# -- torch.distributed ---------------------------------------------------------------------------


@two_gpus
def test_ddp_fsdp2_and_tensor_parallel_match_aten(tmp_path: Path) -> None:
    """benchmarks/distributed.py --quick under torchrun on two GPUs: DDP and FSDP2 losses
    within 1e-4 of ATen's over 20 steps with identical replicas, tensor-parallel logits
    equal to the one-GPU run, for gems as for ATen."""
    torchrun = shutil.which("torchrun")
    command = [torchrun] if torchrun else [sys.executable, "-m", "torch.distributed.run"]
    out = tmp_path / "distributed.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [*command, "--standalone", "--nproc_per_node", "2", str(ROOT / "benchmarks" / "distributed.py"),
         "--quick", "--check", "--modes", "ddp,fsdp,tp", "--out", str(out)],
        capture_output=True, text=True, timeout=1800, env=env, cwd=ROOT,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    results = json.loads(out.read_text())
    assert results["failures"] == []
    for mode in ("ddp", "fsdp"):
        run = results[mode]
        assert len(run["losses"]["gems"]) == 20 and run["loss_max_rel_diff"] <= 1e-4, run
        assert run["replicas_equal"]
    tp = results["tp"]
    if "skipped" in tp:
        pytest.skip(tp["skipped"])
    for row in tp["providers"].values():
        assert row["logits_rel_error"] <= 1e-3, row
