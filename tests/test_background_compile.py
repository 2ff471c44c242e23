"""Background compiles (gems_core.background, ``GEMS_COMPILE``): ATen serves a call whose
kernel is not compiled yet and gems serves once it is; sync mode blocks; an in-place or
``out=`` op is never left half-written; a compile worker that dies degrades to compiling in
the call, with one warning.

The CPU interpreter compiles nothing, so slow compiles are simulated through
``background.compiler``, the seam that starts each kernel's compile: the tests choose which
kernels are slow and when they finish. One test compiles a real kernel for sm_90 in a worker
process and checks that the process's own compile of it is then a hit in Triton's cache.
"""

from __future__ import annotations

import concurrent.futures
import copy
import json
import sys
import threading
import time
import warnings
from collections.abc import Callable

import pytest
import torch
from gems_conformance.routing import RouteWatch
from plugin_factory import run_code
from triton.runtime.interpreter import GridExecutor

import gems_core
from gems_core import background, launch_cache, launches, registry, runtime

#: entered whenever the interpreter runs a gems kernel
KERNEL_RAN = [GridExecutor.__call__.__code__]


class SlowCompiles:
    """Stands in for ``background.compiler``: the kernels named in ``slow`` (every kernel
    where None) compile until :meth:`finish`, or for as many seconds as ``slow`` gives."""

    def __init__(self) -> None:
        self.asked: list[str] = []
        self.slow: dict[str, float | None] | None = None
        self.futures: list[concurrent.futures.Future[float]] = []

    def __call__(self, name: str, job: object) -> concurrent.futures.Future[float]:
        self.asked.append(name)
        future: concurrent.futures.Future[float] = concurrent.futures.Future()
        if self.slow is not None and name not in self.slow:
            future.set_result(0.0)
            return future
        future.set_running_or_notify_cancel()  # as a worker does when it takes the job
        self.futures.append(future)
        delay = self.slow.get(name) if self.slow is not None else None
        if delay is not None:
            threading.Timer(delay, self._done, (future,)).start()
        return future

    @staticmethod
    def _done(future: concurrent.futures.Future[float]) -> None:
        if not future.done():
            future.set_result(0.0)

    def finish(self) -> None:
        for future in self.futures:
            self._done(future)


@pytest.fixture
def slow(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("GEMS_COMPILE", "background")
    compiles = SlowCompiles()
    monkeypatch.setattr(background, "compiler", compiles)
    yield compiles
    compiles.finish()
    for cache in launch_cache.all_caches():  # the next test meets every kernel afresh
        cache._pending.clear()


def _served(fn: Callable[[], torch.Tensor]) -> tuple[torch.Tensor, bool]:
    """``fn()`` and whether a gems kernel ran in it."""
    with RouteWatch(KERNEL_RAN) as watch:
        result = fn()
    return result, watch.entered


X = torch.randn(33, 4).t()  # non-contiguous
Y = torch.randn(33)  # broadcast against X
CASES: dict[str, tuple[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]]] = {
    "softmax": ("_softmax", lambda x, y: torch.softmax(x, -1)),
    "add": ("add", lambda x, y: torch.add(x, y, alpha=2)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_aten_serves_while_the_kernel_compiles_then_gems(slow: SlowCompiles, case: str) -> None:
    op, fn = CASES[case]
    aten = fn(X, Y)
    reference = fn(X.double(), Y.double())
    with gems_core.use_gems(include=[op]):
        first, ran = _served(lambda: fn(X, Y))
        assert not ran and slow.asked, "the first call waited for the compile"
        assert torch.equal(first, aten)  # ATen's own result
        asked = len(slow.asked)
        again, ran = _served(lambda: fn(X, Y))
        assert not ran and torch.equal(again, aten)
        assert len(slow.asked) == asked, "a compile under way was started again"
        slow.finish()
        later, ran = _served(lambda: fn(X, Y))
    assert ran, "gems' kernel did not serve once compiled"
    torch.testing.assert_close(later.double(), reference, rtol=1.3e-6, atol=1e-5)


def test_a_model_runs_on_aten_then_on_gems(slow: SlowCompiles) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.LayerNorm(16),
                                torch.nn.Linear(16, 4))
    x = torch.randn(3, 8)
    with torch.no_grad():
        aten = model(x)
        reference = copy.deepcopy(model).double()(x.double())
        with gems_core.use_gems(include=["linear", "gelu", "layer_norm"]):
            first, ran = _served(lambda: model(x))
            assert not ran and torch.equal(first, aten)
            slow.finish()
            later, ran = _served(lambda: model(x))
    assert ran
    torch.testing.assert_close(later.double(), reference, rtol=1e-5, atol=1e-5)


#: inputs gems' kernels treat specially: 0-d, empty, broadcast (stride 0)
EDGES = {"0-d": torch.tensor(1.5), "empty": torch.randn(0, 4), "broadcast": torch.randn(1, 4).expand(3, 4)}


@pytest.mark.parametrize("edge", sorted(EDGES))
@pytest.mark.parametrize("case", sorted(CASES))
def test_edge_inputs_are_right_across_the_switch(slow: SlowCompiles, case: str, edge: str) -> None:
    op, fn = CASES[case]
    x = EDGES[edge]
    y = torch.randn(x.shape[-1:])
    aten, reference = fn(x, y), fn(x.double(), y.double())
    with gems_core.use_gems(include=[op]):
        first = fn(x, y)
        slow.finish()
        later = fn(x, y)
    assert torch.equal(first, aten) and later.shape == aten.shape and later.dtype == aten.dtype
    torch.testing.assert_close(later.double(), reference, rtol=1.3e-6, atol=1e-5)


def _outcome(call: Callable[[], object]) -> str:
    try:
        call()
    except Exception as exc:  # noqa: BLE001 - the error itself is what is compared
        return f"{type(exc).__name__}: {exc}"
    return "ok"


def test_bad_inputs_raise_atens_errors_while_kernels_compile(slow: SlowCompiles) -> None:
    x = torch.randn(3, 4)
    calls = (lambda: torch.softmax(x, 2), lambda: torch.add(x, torch.randn(5)),
             lambda: torch.add(x, x, out=torch.empty(3, 4, dtype=torch.int32)))
    expected = [_outcome(call) for call in calls]
    assert "ok" not in expected
    with gems_core.use_gems(include=["_softmax", "add"]):
        assert [_outcome(call) for call in calls] == expected


def test_sync_mode_compiles_in_the_first_call(slow: SlowCompiles, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GEMS_COMPILE", "sync")
    x = torch.randn(5, 7)
    with gems_core.use_gems(include=["_softmax"]):
        y, ran = _served(lambda: torch.softmax(x, -1))
    assert ran and not slow.asked
    torch.testing.assert_close(y.double(), torch.softmax(x.double(), -1), rtol=1.3e-6, atol=1e-5)


def test_the_cpu_interpreter_defaults_to_sync(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GEMS_COMPILE", raising=False)
    assert background.mode() == "sync"
    monkeypatch.setenv("GEMS_COMPILE", "background")
    assert background.mode() == "background"
    monkeypatch.setenv("GEMS_COMPILE", "later")
    with pytest.raises(ValueError, match="GEMS_COMPILE='later' is not understood"):
        background.mode()


def test_an_in_place_op_goes_to_aten_whole(slow: SlowCompiles) -> None:
    x, y = torch.randn(6, 5), torch.randn(5)
    expected = x.clone().add_(y, alpha=3)
    target = x.clone()
    with gems_core.use_gems(include=["add_"]):
        result, ran = _served(lambda: target.add_(y, alpha=3))
    assert result is target and not ran and slow.asked
    assert torch.equal(target, expected)


def _impl(name: str) -> Callable[..., object]:
    return registry.all_impls()[name].fn


def test_an_op_waiting_for_its_compile_goes_to_aten_without_running_its_body(slow: SlowCompiles) -> None:
    """While the compile that sent an op's call to ATen runs, the op's next calls go to ATen
    at once (its Python is not run up to the same wait again); once it is done, gems serves."""
    slow.slow = {"pointwise": None}
    entered: list[int] = []

    def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        entered.append(1)
        return _impl("add.Tensor")(x, y)

    body = background.tracked(add)
    x, y = torch.randn(5, 3), torch.randn(5, 3)
    for _ in range(3):
        with pytest.raises(background.NotReady):
            body(x, y)
    assert len(entered) == 1 and slow.asked == ["pointwise"]
    slow.finish()
    with RouteWatch(KERNEL_RAN) as watch:
        result = body(x, y)
    assert len(entered) == 2 and watch.entered
    torch.testing.assert_close(result.double(), x.double() + y.double(), rtol=1.3e-6, atol=1e-5)
    with gems_core.use_gems(include=["add"]):  # through the dispatcher: ATen's results meanwhile
        slow.slow = {"pointwise": None}
        z = torch.randn(4, 9, 2)
        results = [torch.add(z, 1.5) for _ in range(3)]
    assert all(torch.equal(r, z + 1.5) for r in results) and slow.asked == ["pointwise", "pointwise"]


def test_a_call_that_launched_nothing_goes_to_aten_untouched(slow: SlowCompiles) -> None:
    """An op's body that would fill its output and then add to it: its first kernel is not
    ready, so nothing is written and the call goes to ATen (NotReady)."""
    slow.slow = {"fill": None}
    out, y = torch.randn(7, 3), torch.randn(7, 3)
    before = out.clone()
    body = background.tracked(lambda: (_impl("fill_.Scalar")(out, 2.0), _impl("add_.Tensor")(out, y)))
    with pytest.raises(background.NotReady):
        body()
    assert torch.equal(out, before) and slow.asked == ["fill"]


def _start_compiling(step: Callable[[], object]) -> float:
    """Meet ``step``'s kernel in a call of its own, which goes to ATen while it compiles."""
    with pytest.raises(background.NotReady):
        background.tracked(step)()
    return time.perf_counter()


def test_a_call_that_launched_waits_for_its_next_kernel(slow: SlowCompiles) -> None:
    """The same body with the fill ready and the add compiling: once the fill wrote the
    output the call may no longer go to ATen, so it waits for the add's compile."""
    slow.slow = {"pointwise": 0.5}
    out, y = torch.randn(7, 3), torch.randn(7, 3)
    start = _start_compiling(lambda: _impl("add_.Tensor")(torch.randn(7, 3), y))
    body = background.tracked(lambda: (_impl("fill_.Scalar")(out, 2.0), _impl("add_.Tensor")(out, y)))
    with RouteWatch(KERNEL_RAN) as watch:
        body()
    assert time.perf_counter() - start >= 0.45 and watch.entered
    assert slow.asked == ["pointwise", "fill"]
    torch.testing.assert_close(out.double(), y.double() + 2.0, rtol=1.3e-6, atol=1e-5)


def test_a_variants_own_kernel_compiles_in_the_background_as_the_cores_do(
        slow: SlowCompiles, monkeypatch: pytest.MonkeyPatch) -> None:
    """A backend's kernel launched outside the launch cache (a variant's Gluon GEMM) calls
    launches.before_compile before its first launch of a signature: ATen serves while a
    worker compiles it; a call that launched already waits for it; sync mode asks nothing."""

    def gemm_kernel() -> None:  # stands in for the variant's JIT function (named by __name__)
        pass

    runtime.current()  # the selected backend: background mode needs one
    monkeypatch.setattr(launches, "_pending", {})
    monkeypatch.setattr(background, "job_for", lambda kernel, args, options: (kernel, args, options))
    slow.slow = {"gemm_kernel": 0.4}
    ran: list[str] = []

    def variant(key: str) -> None:  # what a variant's launcher does on a miss
        launches.before_compile(gemm_kernel, (1, 2), {"num_warps": 4}, key)
        ran.append(key)
        launches.launched()

    start = _start_compiling(lambda: variant("bf16"))
    assert ran == [] and slow.asked == ["gemm_kernel"]
    # launched already (its first kernel ran): waits for the compile under way, then launches
    background.tracked(lambda: (launches.launched(), variant("bf16")))()
    assert ran == ["bf16"] and time.perf_counter() - start >= 0.3 and slow.asked == ["gemm_kernel"]
    background.tracked(lambda: variant("bf16"))()  # compiled: launches at once
    assert ran == ["bf16", "bf16"]
    # a launch marks the call: a later signature not compiled no longer sends it to ATen but
    # is compiled in the call (nothing asked of the workers)
    background.tracked(lambda: (variant("bf16"), variant("fp16")))()
    assert ran[-2:] == ["bf16", "fp16"] and slow.asked == ["gemm_kernel"]
    with pytest.raises(background.NotReady):  # launched nothing: to ATen, compiling meanwhile
        background.tracked(lambda: variant("fp32"))()
    assert ran[-1] == "fp16" and slow.asked == ["gemm_kernel"] * 2
    monkeypatch.setenv("GEMS_COMPILE", "sync")
    background.tracked(lambda: variant("int8"))()
    assert ran[-1] == "int8" and len(slow.asked) == 2


def test_a_functional_op_goes_to_aten_whole_even_after_a_launch(slow: SlowCompiles) -> None:
    """An op that writes none of its arguments wrote, in what it launched, only tensors it
    made: when its next kernel still compiles, ATen serves it whole instead of it waiting
    (nll_loss: a kernel for the partial sums, one for the total)."""
    slow.slow = {"pointwise": None}
    y = torch.randn(7, 3)

    def body(y: torch.Tensor) -> torch.Tensor:
        scratch = torch.empty(7, 3)
        _impl("fill_.Scalar")(scratch, 2.0)  # compiled: launches
        return _impl("add.Tensor")(scratch, y)  # compiling

    with pytest.raises(background.NotReady):
        background.tracked(body, free=True)(y)
    assert slow.asked == ["fill", "pointwise"]
    slow.slow = {"nll_loss_total": None}
    logp, target = torch.randn(6, 5).log_softmax(-1), torch.randint(0, 5, (6,))
    start = time.perf_counter()
    with gems_core.use_gems(include=["nll_loss_forward"]):
        losses = [torch.nn.functional.nll_loss(logp, target) for _ in range(2)]
    assert time.perf_counter() - start < 30 and slow.asked[-2:] == ["nll_loss", "nll_loss_total"]
    expected = torch.nn.functional.nll_loss(logp.double(), target)
    for loss in losses:
        torch.testing.assert_close(loss.double(), expected, rtol=1.3e-6, atol=1e-6)


def test_an_in_place_op_aten_served_inside_a_call_is_that_calls_write(slow: SlowCompiles) -> None:
    """A body that copies into its output through the dispatcher (copy_, whose kernel is not
    ready: ATen serves the copy) and then fills another: after the copy the call must not go
    to ATen, so it waits for the fill's compile."""
    slow.slow = {"pointwise": None, "fill": 0.5}
    out, other, source = torch.randn(7, 3), torch.randn(4), torch.randn(7, 3, dtype=torch.float64)
    start = _start_compiling(lambda: _impl("fill_.Scalar")(torch.randn(4), 3.0))
    body = background.tracked(lambda out, other: (out.copy_(source), _impl("fill_.Scalar")(other, 3.0)))
    with gems_core.use_gems(include=["copy_"]):
        body(out, other)
    assert time.perf_counter() - start >= 0.45 and slow.asked == ["fill", "pointwise"]
    assert torch.equal(out, source.float()) and torch.equal(other, torch.full((4,), 3.0))


def test_aten_writing_a_tensor_the_call_made_leaves_the_call_free_to_go_to_aten(slow: SlowCompiles) -> None:
    """The same body copying into a buffer of its own (a new tensor, as an upload or a zeroed
    accumulator is) before its first kernel: nothing of its arguments was written, so the call
    still goes to ATen whole while its kernel compiles; a view of an argument binds it."""
    slow.slow = {"pointwise": None, "fill": 0.5}
    other, source = torch.randn(4), torch.randn(7, 3, dtype=torch.float64)
    before = other.clone()

    def body(other: torch.Tensor, scratch_of=None) -> None:
        scratch = torch.empty(7, 3) if scratch_of is None else scratch_of[:7, :3]
        scratch.copy_(source)  # ATen's: copy_'s kernel compiles
        _impl("fill_.Scalar")(other, 3.0)

    start = time.perf_counter()
    with gems_core.use_gems(include=["copy_"]):
        with pytest.raises(background.NotReady):
            background.tracked(body)(other)
        assert torch.equal(other, before) and slow.asked == ["pointwise", "fill"]
        mine = torch.randn(8, 4)
        background.tracked(body)(other, mine)  # wrote into an argument: waits for the fill
    assert time.perf_counter() - start >= 0.45 and torch.equal(other, torch.full((4,), 3.0))
    assert torch.equal(mine[:7, :3], source.float()) and slow.asked.count("fill") == 1


def test_a_dead_worker_degrades_to_sync_with_one_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GEMS_COMPILE", "background")
    monkeypatch.setattr(background, "_failure", None)
    monkeypatch.setattr(background, "_pools", {})
    monkeypatch.setattr(background, "_worker_command", lambda: [sys.executable, "-c", "import sys; sys.exit(3)"])
    # the interpreter's kernels have no job for a worker: give each one anyway
    job = background.CompileJob("m", "k", "", (), {}, {}, {}, {}, None, "", "")
    monkeypatch.setattr(background, "compiler", lambda name, _: background._start(name, job))
    for cache in launch_cache.all_caches():  # a compile another test left under way is not this one's
        cache._pending.clear()
    x = torch.randn(4, 9)
    try:
        with warnings.catch_warnings(record=True) as caught, gems_core.use_gems(include=["_softmax"]):
            warnings.simplefilter("always")
            deadline = time.monotonic() + 60
            while True:
                y, ran = _served(lambda: torch.softmax(x, -1))
                torch.testing.assert_close(y.double(), torch.softmax(x.double(), -1), rtol=1.3e-6, atol=1e-5)
                if ran or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            assert ran, "gems never served after the worker died"
            assert background.mode() == "sync"
            z, ran = _served(lambda: torch.softmax(x * 2, -1))  # a new signature: compiled in the call
            assert ran
    finally:
        for cache in launch_cache.all_caches():
            cache._pending.clear()
    failures = [str(w.message) for w in caught if "background compiles failed" in str(w.message)]
    assert len(failures) == 1, failures
    assert "exited with status 3" in failures[0]


#: kernels a worker compiles: one an op module defines, one generated into a file of gems' cache
KERNELS = {
    "module": """
from gems_core.ops.factory import _arange_kernel as kernel
args = (torch.empty(1000, dtype=torch.float32), 0.0, 1.0, 1000)
constexprs = dict(ACC=tl.float32, F64_BITS=False, INT64=False, BLOCK_SIZE=256)
""",
    "generated": """
from gems_core.codegen import pointwise
from gems_core.ops import activation
op = next(v for v in vars(activation).values()
          if isinstance(v, pointwise.PointwiseOp) and v.fn_id.endswith(":_exp"))
kernel = pointwise._load_generated(pointwise._generate(op.fn_id, 1, ("tensor",), op.promoted, 1, ())).pointwise_kernel
args = (torch.empty(1000), torch.empty(1000), 1000, 1, 1)
constexprs = dict(COMPUTE=tl.float32, BLOCK_SIZE=256, INT64=False)
""",
    # a backend's Gluon kernel (launched outside the launch cache: launches.before_compile)
    "gluon": """
from gems_backend_nvidia import gemm_sm90 as G
kernel, config = G.gemm_kernel, G.CONFIGS[0]
blocks = G._blocks(config, False)
a, b, out = (torch.empty(256, 256, dtype=torch.bfloat16) for _ in range(3))
def desc(t, block):
    return G.TensorDescriptor(t, list(t.shape), [t.stride(0), 1], list(block), G._layout(t.dtype, *block))
args = (desc(a, blocks[0]), desc(b, blocks[1]), desc(out, blocks[2]), 256, 256, 256, 1.0, out, 0, 0.0,
        config.stages, False, config.group_m, 0, G.CONSUMER_REGISTERS, G.LOADER_REGISTERS)
constexprs = {}
options = {"num_warps": 4, "maxnreg": G.MAX_REGISTERS}
""",
}

WORKER_COMPILE = """
import dataclasses, json
import torch, triton
import triton.language as tl
from gems_core import aot, background, compat
from gems_core.contract import TritonTarget
{kernel}
target = TritonTarget("cuda", 90, 32)
backend, bind = aot._binder(kernel, target)
kwargs = options if "options" in globals() else aot._launch_kwargs(kernel, constexprs, 4, 2, {{}})
job = background.job_for(kernel, args, kwargs, binder=(aot._gpu_target(target), backend, bind))
from triton.backends.nvidia import driver as nvidia_driver
job = dataclasses.replace(job, launcher="triton.backends.nvidia.driver:CudaLauncher")
seconds = background._pool().submit(job).result(timeout=240)
# a kernel whose source the worker finds different is refused, not compiled as something else
refused = background._pool().submit(dataclasses.replace(job, source_hash="0")).exception(timeout=240)

def compiled_again(*args, **kwargs):
    raise AssertionError("the kernel was compiled again")

source_class = compat.source_class(kernel)  # a Gluon kernel's is Gluon's
source_class.make_ir = compiled_again  # a hit in Triton's cache makes no IR
source = source_class(kernel, job.signature, job.constexprs, job.attrs)
compiled = triton.compile(source, target=job.target, options=job.options)
launcher = "one for all signatures"
try:
    nvidia_driver.library_dirs()
except AssertionError:  # no libcuda on this machine: no launcher is built anywhere
    launcher = "no driver library"
if launcher != "no driver library" and hasattr(nvidia_driver, "make_launcher"):  # one per signature
    import triton.runtime.build as build
    build._build = compiled_again  # a hit in Triton's cache builds nothing
    launcher = type(nvidia_driver.CudaLauncher(compiled.src, compiled.metadata).launch).__name__
print(json.dumps({{"seconds": seconds, "hit": compiled.metadata.name, "requires": job.requires,
                  "refused": str(refused), "launcher": launcher}}))
"""


@pytest.mark.parametrize("kind", sorted(KERNELS))
def test_a_worker_compiles_what_the_process_then_finds_in_its_cache(tmp_path, kind: str) -> None:
    code = WORKER_COMPILE.format(kernel=KERNELS[kind])
    result = run_code(code, env={"TRITON_CACHE_DIR": str(tmp_path / "triton"), "GEMS_CACHE_DIR": str(tmp_path)})
    assert result.returncode == 0, result.stderr[-3000:]
    outcome = json.loads(result.stdout.strip().splitlines()[-1])
    assert outcome["seconds"] > 0 and "hashes differently in a worker" in outcome["refused"]
    assert outcome["hit"] == {"module": "_arange_kernel", "generated": "pointwise_kernel", "gluon": "gemm_kernel"}[kind]
    # where the kernel's launcher is compiled per signature, the worker built it too
    assert outcome["launcher"] in ("one for all signatures", "no driver library", "builtin_function_or_method",
                                   "function")
    if kind == "generated":  # the worker imports the scalar function's module first
        assert outcome["requires"] == ["gems_core.ops.activation"]


def test_the_native_layer_builds_while_the_python_kernels_serve(monkeypatch: pytest.MonkeyPatch) -> None:
    """With background compiles the layer's build (a minute on first use) runs in a thread:
    the registration made meanwhile serves through Python, the next one through the layer."""
    from gems_core import dispatch, native

    monkeypatch.setenv("GEMS_COMPILE", "background")
    monkeypatch.setenv("GEMS_NATIVE", "force")  # the layer fronts the interpreter's kernels too
    for name, value in (("_module", None), ("_tried", False), ("_building", None), ("_problem", None)):
        monkeypatch.setattr(native, name, value)
    release = threading.Event()
    build = native._build

    def slow_build(quiet: bool) -> object:
        assert release.wait(120)
        return build(True)

    monkeypatch.setattr(native, "_build", slow_build)
    monkeypatch.setattr(native, "_built", lambda: False)
    x = torch.randn(5, 7)
    with gems_core.use_gems(include=["_softmax"]):
        y, ran = _served(lambda: torch.softmax(x, -1))
        assert ran and not dispatch.native_stats()  # served by Python while the layer builds
    release.set()
    native._building.join(300)
    with gems_core.use_gems(include=["_softmax"]):
        z, ran = _served(lambda: torch.softmax(x, -1))
        assert ran and dispatch.native_stats()
    assert torch.equal(y, z)
    torch.testing.assert_close(z.double(), torch.softmax(x.double(), -1), rtol=1.3e-6, atol=1e-5)


def test_attention_in_training_through_the_native_layer_goes_to_aten_while_compiling(
        slow: SlowCompiles, monkeypatch: pytest.MonkeyPatch) -> None:
    """Attention that needs a gradient launches through gems' own ops, which the native
    layer fronts (forced here on the CPU interpreter): while its kernel compiles, the wait
    crosses the layer and ATen serves the call, forward and backward; once compiled, gems
    does, with float64 ATen's gradients."""
    if gems_core.native.load(quiet=True) is None:
        pytest.skip(f"native layer not built: {gems_core.native.problem()}")
    monkeypatch.setenv("GEMS_NATIVE", "force")
    torch.manual_seed(4)
    q, k, v = (torch.randn(1, 4 if i == 0 else 2, 12, 16, dtype=torch.float16, requires_grad=True) for i in range(3))
    grad = torch.randn(1, 4, 12, 16, dtype=torch.float16)

    def step() -> tuple[torch.Tensor, ...]:
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        return (out, *torch.autograd.grad(out, (q, k, v), grad))

    aten = step()
    reference = [t.detach().double().requires_grad_() for t in (q, k, v)]
    out64 = torch.nn.functional.scaled_dot_product_attention(*reference, is_causal=True, enable_gqa=True)
    expected = (out64, *torch.autograd.grad(out64, reference, grad.double()))
    with gems_core.use_gems(include=["scaled_dot_product_attention"]):
        first, ran = _served(step)
        assert not ran and slow.asked, "the first call waited for the compile"
        for got, want in zip(first, aten):
            assert torch.equal(got, want)
        slow.finish()
        later, ran = _served(step)
        from gems_core.ops import attention
        assert attention._fronted()
    assert ran, "gems' kernels did not serve once compiled"
    for got, want in zip(later, expected):
        torch.testing.assert_close(got.double(), want.detach(), rtol=1e-2, atol=1e-2)
