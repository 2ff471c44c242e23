"""The public switches: enable/disable/use_gems, registered_ops, device, backend()."""

from __future__ import annotations

import pytest
import torch

import gems_core
from gems_core import dispatch, info, runtime
from gems_core.registry import all_impls

DEVICE = torch.device(gems_core.device)


@pytest.fixture(autouse=True)
def gems_off():
    gems_core.disable()
    yield
    gems_core.disable()


def packet(name: str) -> list[str]:
    """Every overload of the ATen packet ``name`` that gems serves."""
    return sorted(op for op, impl in all_impls().items() if impl.packet == name)


def dispatch_line(op: str) -> str:
    """The dispatcher's entry for ``op`` on the selected backend's key ("" when none)."""
    key = runtime.current().selection.execution.dispatch_key
    dump = torch._C._dispatch_dump(f"aten::{op}")
    return next((line for line in dump.splitlines() if line.startswith(f"{key}: ")), "")


def test_registered_ops_is_empty_when_disabled():
    assert gems_core.registered_ops() == []


def test_enable_and_disable():
    gems_core.enable()
    assert "add.Tensor" in gems_core.registered_ops()
    gems_core.disable()
    assert gems_core.registered_ops() == []


def test_include_overload():
    gems_core.enable(include="add.Tensor")
    assert gems_core.registered_ops() == ["add.Tensor"]


def test_include_packet_takes_every_overload():
    gems_core.enable(include="add")
    assert gems_core.registered_ops() == packet("add")
    assert {"add.Tensor", "add.Scalar", "add.out"} <= set(packet("add"))


def test_exclude_overload_and_packet():
    gems_core.enable(exclude=["add.Tensor", "mul"])
    ops = set(gems_core.registered_ops())
    assert "add.Tensor" not in ops and "add.Scalar" in ops
    assert not ops & set(packet("mul"))
    assert "mul_.Tensor" in ops  # the in-place op is a packet of its own


def test_unknown_name_names_close_matches():
    with pytest.raises(ValueError, match=r"'ad\.Tensor'.*close matches: .*add\.Tensor"):
        gems_core.enable(include="ad.Tensor")
    assert gems_core.registered_ops() == []


def test_use_gems_restores_disabled_state():
    with gems_core.use_gems(include="add"):
        assert gems_core.registered_ops() == packet("add")
    assert gems_core.registered_ops() == []


def test_use_gems_restores_previous_state_when_body_raises():
    gems_core.enable(include="mul")
    with pytest.raises(RuntimeError, match="boom"), gems_core.use_gems(include="add.Tensor"):
        assert gems_core.registered_ops() == ["add.Tensor"]
        raise RuntimeError("boom")
    assert gems_core.registered_ops() == packet("mul")


def test_use_gems_nests():
    with gems_core.use_gems(include="add"):
        with gems_core.use_gems(include="add.Tensor"):
            assert gems_core.registered_ops() == ["add.Tensor"]
        assert gems_core.registered_ops() == packet("add")
    assert gems_core.registered_ops() == []


def test_use_gems_results_match_aten():
    x = torch.arange(6, dtype=torch.float32, device=DEVICE).reshape(2, 3)
    expected = torch.add(x, x.t().contiguous().t(), alpha=2)
    with gems_core.use_gems(include="add.Tensor"):
        result = torch.add(x, x.t().contiguous().t(), alpha=2)
    torch.testing.assert_close(result, expected)


def test_dispatcher_shows_gems_kernel_only_inside_use_gems():
    assert "gems_core" not in dispatch_line("add.Tensor")
    with gems_core.use_gems(include="add.Tensor"):
        line = dispatch_line("add.Tensor")
        assert "gems_core/dispatch.py" in line or "gems_core/native/dispatch_layer.cpp" in line
        assert "gems_core" not in dispatch_line("mul.Tensor")
    assert "gems_core" not in dispatch_line("add.Tensor")


def test_device_is_the_selected_execution_device():
    assert gems_core.device == runtime.current().selection.execution.device_type
    x = torch.ones(2, device=gems_core.device)
    assert x.device.type == gems_core.device


def test_backend_is_the_selected_descriptor():
    descriptor = gems_core.backend()
    assert isinstance(descriptor, gems_core.BackendDescriptor)
    assert descriptor.name == runtime.current().selection.backend.name


def test_unknown_module_attribute_raises():
    with pytest.raises(AttributeError, match="no attribute 'nosuch'"):
        gems_core.nosuch  # noqa: B018


def test_info_reports_runtime_fallbacks_of_this_process():
    fallbacks = runtime.current().runtime_fallbacks
    fallbacks["neg.out"] = "KernelCompileError: example"
    try:
        report = info.collect()
    finally:
        del fallbacks["neg.out"]
    assert report["policy"]["runtime_fallbacks"] == {"neg.out": "KernelCompileError: example"}
    assert "neg.out: KernelCompileError: example" in info.render(report)


def test_use_gems_that_fails_to_register_keeps_previous_state(monkeypatch):
    gems_core.enable(include="mul")
    make_kernel = dispatch._kernel_for

    def failing(impl, rt, key, *rest):
        if impl.name == "add.out":
            raise RuntimeError("cannot register")
        return make_kernel(impl, rt, key, *rest)

    monkeypatch.setattr(dispatch, "_kernel_for", failing)
    with pytest.raises(RuntimeError, match="cannot register"), gems_core.use_gems(include="add"):
        pass
    assert gems_core.registered_ops() == packet("mul")
    assert "gems_core" in dispatch_line("mul.Tensor")
    assert "gems_core" not in dispatch_line("add.Tensor")  # registered before the failure


def test_composite_ops_are_served_in_inference_mode(monkeypatch):
    """Ops ATen implements as composites (rms_norm, scaled_dot_product_attention) are served
    on the backend key too, so inference mode (no Autograd key) still reaches gems."""
    import torch.nn.functional as F

    from gems_core.launch_cache import BoundLaunch, LaunchCache
    from gems_core.plan_cache import Launch

    launched = []
    # every launch path: a launch cache, a bound launcher, a plan's direct launch (GPUs)
    for cls, attr, name in ((LaunchCache, "__call__", lambda c: c.name), (BoundLaunch, "__call__",
                            lambda b: b.cache.name), (Launch, "_direct", lambda p: p.bound.cache.name)):
        def counting(self, *args, _original=getattr(cls, attr), _name=name, **kwargs):
            launched.append(_name(self))
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(cls, attr, counting)
    device = gems_core.device  # the selected backend's tensors (a GPU's where there is one)
    x = torch.randn(3, 16, dtype=torch.float64, device=device)
    w = torch.randn(16, dtype=torch.float64, device=device)
    q, k, v = (torch.randn(1, 2, 5, 8, device=device) for _ in range(3))
    expected_norm = F.rms_norm(x, (16,), w, eps=1e-6)
    expected_attention = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    with torch.inference_mode(), gems_core.use_gems(include=["rms_norm", "scaled_dot_product_attention"]):
        norm = F.rms_norm(x, (16,), w, eps=1e-6)
        after_norm = len(launched)
        attention = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert after_norm > 0 and len(launched) > after_norm, launched
    torch.testing.assert_close(norm, expected_norm)
    torch.testing.assert_close(attention, expected_attention, atol=1e-5, rtol=1e-4)


def test_autograd_ops_build_a_graph_only_when_a_gradient_is_needed():
    import torch.nn.functional as F

    x = torch.randn(3, 16, dtype=torch.float64, device=DEVICE)
    w = torch.randn(16, dtype=torch.float64, device=DEVICE, requires_grad=True)
    with gems_core.use_gems(include="rms_norm"):
        frozen = F.rms_norm(x, (16,), w.detach())
        with torch.no_grad():
            no_grad = F.rms_norm(x, (16,), w)
        trained = F.rms_norm(x, (16,), w)
        trained.sum().backward()
    assert frozen.grad_fn is None and no_grad.grad_fn is None and trained.grad_fn is not None
    expected = F.rms_norm(x, (16,), w.detach())
    torch.testing.assert_close(frozen, expected)
    torch.testing.assert_close(no_grad, expected)
    w_ref = w.detach().clone().requires_grad_()
    F.rms_norm(x, (16,), w_ref).sum().backward()
    torch.testing.assert_close(w.grad, w_ref.grad)


def _reached(call) -> set[str]:
    """The ATen overloads gems serves that ``call``'s outputs reach below autograd,
    forward and backward (with random output gradients)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    seen: set[str] = set()

    class Watch(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.add(func.name().removeprefix("aten::").removesuffix(".default"))
            return func(*args, **(kwargs or {}))

    with Watch():
        outputs = call()
    grads = [torch.randn_like(out) for out in outputs]
    with Watch():
        torch.autograd.backward(outputs, grads)
    return seen & set(all_impls())


def _rand(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, dtype=torch.float64, requires_grad=True)


COMPOSITE_CALLS = {
    "softmax": lambda F: [F.softmax(_rand(2, 3), -1)],
    "log_softmax": lambda F: [F.log_softmax(_rand(2, 3), -1)],
    "layer_norm": lambda F: [F.layer_norm(_rand(2, 4), (4,), _rand(4), _rand(4))],
    "group_norm": lambda F: [F.group_norm(_rand(2, 4, 3), 2, _rand(4), _rand(4))],
    "nll_loss": lambda F: [F.nll_loss(_rand(3, 4), torch.tensor([0, 3, 1])),
                           F.nll_loss(_rand(2, 4, 3, 2), torch.randint(0, 4, (2, 3, 2)))],
    "cross_entropy": lambda F: [F.cross_entropy(_rand(3, 4), torch.tensor([0, 3, 1])),
                                F.cross_entropy(_rand(2, 4, 3, 2), torch.randint(0, 4, (2, 3, 2)))],
    "linear": lambda F: [F.linear(_rand(2, 3), _rand(4, 3), _rand(4)), F.linear(_rand(2, 5, 3), _rand(4, 3))],
    "matmul": lambda F: [_rand(2, 3) @ _rand(3, 4), _rand(2, 2, 3) @ _rand(2, 3, 4), _rand(2, 3) @ _rand(3)],
    **{f"conv{kind}{n}d": lambda F, kind=kind, n=n: [getattr(F, f"conv{kind}{n}d")(
        _rand(1, 2, *[4] * n), _rand(2, 2, *[3] * n), _rand(2), stride=2)]
       for kind in ("", "_transpose") for n in (1, 2, 3)},
    "batch_norm": lambda F: [F.batch_norm(_rand(2, 3, 4), None, None, _rand(3), _rand(3), training=True)],
    "max_pool2d": lambda F: [F.max_pool2d(_rand(1, 2, 5, 5), 3, 2, 1)],
    "max_pool1d": lambda F: [F.max_pool1d(_rand(1, 2, 7), 3, 2, 1)],
    "avg_pool1d": lambda F: [F.avg_pool1d(_rand(1, 2, 7), 3, 2, 1)],
    "adaptive_avg_pool2d": lambda F: [F.adaptive_avg_pool2d(_rand(1, 2, 5, 5), 3)],
    "adaptive_avg_pool1d": lambda F: [F.adaptive_avg_pool1d(_rand(1, 2, 7), 3)],
    "adaptive_max_pool1d": lambda F: [F.adaptive_max_pool1d(_rand(1, 2, 7), 3)],
}
COMPOSITE_CALLS["cross_entropy_loss"] = COMPOSITE_CALLS["cross_entropy"]
#: building blocks a decomposition also reaches (a bias gradient's sum, the outer product of
#: mv's backward): a composite's name does not select them, which would take them from
#: every other op
GENERIC = {"sum", "mul"}
#: packets a name also selects that its decomposition reaches on other devices only
OTHER_DEVICES = {"cudnn_batch_norm", "cudnn_batch_norm_backward", "miopen_batch_norm", "miopen_batch_norm_backward"}


@pytest.mark.parametrize("name", sorted(dispatch.COMPOSITES))
def test_composite_names_select_what_pytorch_decomposes_them_into(name):
    """``include``/``exclude`` take the names users know for ops PyTorch decomposes: each
    selects the served ops its decomposition reaches (forward and backward), found here by
    watching the dispatcher rather than trusting the table."""
    import torch.nn.functional as F

    reached = {op for op in _reached(lambda: COMPOSITE_CALLS[name](F)) if op.split(".")[0] not in GENERIC}
    selected = dispatch.resolve([name], None)
    assert reached <= selected, reached - selected
    assert {op.split(".")[0] for op in selected} - OTHER_DEVICES == {op.split(".")[0] for op in reached}
    assert not reached & dispatch.resolve(None, [name])


def test_readme_exclude_softmax_keeps_softmax_on_aten(monkeypatch):
    import torch.nn.functional as F

    from gems_core.launch_cache import LaunchCache

    launched = []
    launch = LaunchCache.__call__
    monkeypatch.setattr(LaunchCache, "__call__", lambda self, *a, **k: (launched.append(self.name), launch(self, *a, **k))[1])
    x = torch.randn(2, 5, dtype=torch.float64, device=DEVICE)
    expected = x.exp() / x.exp().sum(-1, keepdim=True)
    with gems_core.use_gems(exclude=["softmax"]):
        assert not {"_softmax", "_softmax.out"} & set(gems_core.registered_ops())
        result = F.softmax(x, -1)
    assert launched == []
    torch.testing.assert_close(result, expected)
    with gems_core.use_gems(include=["softmax", "layer_norm.default"]):
        assert "native_layer_norm" in gems_core.registered_ops()
        result = F.softmax(x, -1)
    assert launched
    torch.testing.assert_close(result, expected)


@pytest.mark.parametrize("name", ["fft_fft", "max_pool3d", "cholesky.out"])
def test_aten_ops_gems_leaves_to_aten_select_nothing(name):
    assert dispatch.resolve([name], None) == frozenset()
    assert dispatch.resolve(None, [name]) == dispatch.resolve(None, None)


@pytest.mark.parametrize("name", ["softmaxx", "linear.nosuch", "cross_entropy.default"])
def test_names_that_are_none_of_these_raise(name):
    with pytest.raises(ValueError, match=f"{name!r}"):
        gems_core.enable(exclude=[name])
    assert gems_core.registered_ops() == []
