"""The direct launch path (gems_core.launch_cache.fast_launcher) against stand-ins for the
launcher objects of the Triton versions gems supports: it must forward exactly what Triton's
own launcher would, and keep Triton's launcher whenever that one has work to do."""

from __future__ import annotations

from typing import Any

import pytest

from gems_core.launch_cache import fast_launcher, launcher_for


class _Launcher36:
    """Forwards like Triton 3.6: scratch buffers, then the rest splatted."""

    def __init__(self, scratch: int = 0) -> None:
        self.global_scratch_size = scratch
        self.profile_scratch_size = 0
        self.launch_cooperative_grid = False
        self.launch_pdl = True
        self.calls: list[tuple[Any, ...]] = []
        self.launch = lambda *a: self.calls.append(a)

    def __call__(self, gx: Any, gy: Any, gz: Any, stream: Any, function: Any, *args: Any) -> None:
        scratch = object() if self.global_scratch_size else None
        self.launch(gx, gy, gz, stream, function, self.launch_cooperative_grid, self.launch_pdl,
                    scratch, None, *args)


class _Launcher39:
    """Forwards like Triton 3.9: metadata and hooks first, kernel arguments as one tuple."""

    def __init__(self) -> None:
        self.global_scratch_size = 0
        self.profile_scratch_size = 0
        self.gsan_enabled = False
        self.arg_annotations = ("ann",)
        self.kernel_signature = b"sig"
        self.calls: list[tuple[Any, ...]] = []
        self.launch = lambda *a: self.calls.append(a)

    def __call__(self, gx: Any, gy: Any, gz: Any, stream: Any, function: Any, metadata: Any,
                 launch_metadata: Any, enter: Any, exit: Any, *args: Any) -> None:
        self.launch(gx, gy, gz, stream, function, False, False, metadata, launch_metadata, enter, exit,
                    None, None, self.arg_annotations, self.kernel_signature, args)


class _Compiled:
    def __init__(self, run: Any) -> None:
        self.run = run
        self.function = 0xF00
        self.packed_metadata = ("packed",)


def _reference(launcher_cls: type, args: tuple[Any, ...]) -> tuple[Any, ...]:
    """What Triton's own launcher passes to the native launch for these arguments."""
    reference = launcher_cls()
    reference(4, 2, 1, 77, 0xF00, ("packed",), None, None, None, *args)
    return reference.calls[0]


@pytest.mark.parametrize("launcher_cls", [_Launcher36, _Launcher39])
def test_direct_launch_forwards_what_triton_would(launcher_cls: type) -> None:
    run = launcher_cls()
    go = fast_launcher(_Compiled(run))
    assert go.__name__.startswith("direct")
    args = (1234, 5678, 1024, 128)
    go(4, 2, 1, 77, args)
    assert run.calls == [_reference(launcher_cls, args)]
    assert run.launch.__name__ == "<lambda>" and len(run.calls) == 1  # the probe left no trace


def test_scratch_memory_keeps_tritons_launcher() -> None:
    run = _Launcher36(scratch=256)
    go = fast_launcher(_Compiled(run))
    assert go.__name__ == "standard"
    go(1, 1, 1, 0, (5,))
    assert len(run.calls) == 1 and run.calls[0][7] is not None  # scratch allocated by Triton


def test_unrecognised_forwarding_keeps_tritons_launcher() -> None:
    class Reordering(_Launcher36):
        def __call__(self, gx: Any, gy: Any, gz: Any, stream: Any, function: Any, *args: Any) -> None:
            self.launch(gy, gx, gz, stream, function, *args)  # not the shape fast_launcher knows

    go = fast_launcher(_Compiled(Reordering()))
    assert go.__name__ == "standard"


def test_environment_switch_keeps_tritons_launcher(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GEMS_LAUNCHER", "triton")
    assert launcher_for(_Compiled(_Launcher39())).__name__ == "standard"
    monkeypatch.setenv("GEMS_LAUNCHER", "direct")
    assert launcher_for(_Compiled(_Launcher39())).__name__ == "direct_tuple"


class _StaticLauncher:
    calls: list[tuple[Any, ...]] = []

    @staticmethod
    def _launch_kernel(*args: Any) -> None:
        _StaticLauncher.calls.append(args)


def _compiled_for_torch(signature: dict[str, str], **metadata: Any) -> Any:
    from types import SimpleNamespace

    fields = {"num_warps": 4, "shared": 0, "num_ctas": 1, "global_scratch_size": 0,
              "profile_scratch_size": 0, **metadata}
    src = SimpleNamespace(fn=SimpleNamespace(arg_names=list(signature)), signature=signature)
    return SimpleNamespace(function=0xF00, metadata=SimpleNamespace(**fields), src=src)


def test_torch_launcher_drops_constexprs_and_adds_scratch(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from gems_core.launch_cache import torch_launcher

    monkeypatch.setattr(torch._C, "_StaticCudaLauncher", _StaticLauncher, raising=False)
    monkeypatch.setattr(torch.version, "hip", None)
    _StaticLauncher.calls = []
    # x and y pointers, n (int32), a runtime int Triton specialised to 1, then a constexpr
    compiled = _compiled_for_torch({"x": "*fp32", "y": "*bf16", "n": "i32", "one": "constexpr",
                                    "scale": "fp32", "BLOCK": "constexpr"})
    go = torch_launcher(compiled)
    assert go is not None and go.__name__ == "torch_selected"
    go(3, 1, 1, 55, (100, 200, 7, 1, 0.5, 1024))
    assert _StaticLauncher.calls == [(0xF00, 3, 1, 1, 4, 0, "OOifOO", (100, 200, 7, 0.5, None, None), 55)]
    # a plain prefix of runtime arguments is sliced, not picked
    prefix = torch_launcher(_compiled_for_torch({"x": "*fp32", "n": "i64", "BLOCK": "constexpr"}))
    assert prefix is not None and prefix.__name__ == "torch_prefix"
    prefix(1, 2, 3, 9, (100, 5, 1024))
    assert _StaticLauncher.calls[-1] == (0xF00, 1, 2, 3, 4, 0, "OlOO", (100, 5, None, None), 9)


@pytest.mark.parametrize("metadata", [{"num_ctas": 2}, {"launch_pdl": True}, {"global_scratch_size": 64},
                                      {"tensordesc_meta": [{}]}])
def test_torch_launcher_declines_what_it_cannot_launch(monkeypatch: pytest.MonkeyPatch, metadata: dict) -> None:
    import torch

    from gems_core.launch_cache import torch_launcher

    monkeypatch.setattr(torch._C, "_StaticCudaLauncher", _StaticLauncher, raising=False)
    monkeypatch.setattr(torch.version, "hip", None)
    assert torch_launcher(_compiled_for_torch({"x": "*fp32"}, **metadata)) is None
    assert torch_launcher(_compiled_for_torch({"d": "tensordesc<fp16[64, 64]>"})) is None


def test_plan_launch_goes_straight_to_the_compiled_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    """A plan's Launch, after its first compiled launch, launches from the tensors'
    addresses; a tensor of another alignment takes the general path once more."""
    import torch
    import triton
    import triton.language as tl

    from gems_core import compat
    from gems_core.launch_cache import LaunchCache
    from gems_core.plan_cache import Launch

    @triton.jit
    def scale(x_ptr, y_ptr, n, factor, BLOCK: tl.constexpr):
        pass

    cache = LaunchCache(scale, name="scale")
    cache.interpreted = False  # as on a GPU
    launched: list[tuple[Any, ...]] = []
    lookups: list[Any] = []

    def go(gx: int, gy: int, gz: int, stream: int, args: tuple[Any, ...]) -> None:
        launched.append((gx, gy, gz, stream, args))

    def entry_for(grid3: Any, args: Any, constexprs: Any, config: Any, options: Any) -> Any:
        lookups.append(args)
        return (go, (constexprs["BLOCK"],))

    monkeypatch.setattr(cache, "entry_for", entry_for)
    monkeypatch.setattr(compat, "stream_function", lambda: (lambda index: 7))
    launch = Launch(cache, (3,), 2, (100, 0.5), torch.device("cpu"), BLOCK=64)
    x, y = torch.zeros(8), torch.zeros(8)
    for _ in range(3):
        launch(x, y)
    assert len(lookups) == 1  # resolved once, then launched directly
    assert launched[1] == launched[2] == (3, 1, 1, 7, (x.data_ptr(), y.data_ptr(), 100, 0.5, 64))
    assert launched[0][4][2:] == (100, 0.5, 64)
    misaligned = torch.zeros(9)[1:]  # 4 bytes past an aligned address
    launch(misaligned, y)
    launch(misaligned, y)
    assert len(lookups) == 2 and launched[-1][4][:2] == (misaligned.data_ptr(), y.data_ptr())


def test_plan_launch_with_trailing_numbers_goes_straight_to_the_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    """Trailing numbers (a norm's eps, a scalar) join the direct path; an int that Triton
    would specialize differently (== 1) resolves its own kernel."""
    import torch
    import triton
    import triton.language as tl

    from gems_core import compat
    from gems_core.launch_cache import LaunchCache
    from gems_core.plan_cache import Launch

    @triton.jit
    def shift(x_ptr, n, amount, count, BLOCK: tl.constexpr):
        pass

    cache = LaunchCache(shift, name="shift")
    cache.interpreted = False
    launched: list[tuple[Any, ...]] = []
    lookups: list[Any] = []

    def entry_for(grid3: Any, args: Any, constexprs: Any, config: Any, options: Any) -> Any:
        lookups.append(args)
        return (lambda gx, gy, gz, stream, args: launched.append(args), (constexprs["BLOCK"],))

    monkeypatch.setattr(cache, "entry_for", entry_for)
    monkeypatch.setattr(compat, "stream_function", lambda: (lambda index: 0))
    launch = Launch(cache, (1,), 1, (10,), torch.device("cpu"), trailing=2, BLOCK=32)
    x = torch.zeros(4)
    launch.with_trailing((x,), (0.5, 7))
    launch.with_trailing((x,), (0.25, 9))  # another float and a same-class int: direct
    assert len(lookups) == 1 and launched[-1] == (x.data_ptr(), 10, 0.25, 9, 32)
    launch.with_trailing((x,), (0.25, 1))  # an int of 1 is specialized by Triton: resolved anew
    assert len(lookups) == 2 and launched[-1] == (x.data_ptr(), 10, 0.25, 1, 32)


def test_the_launch_key_of_arguments_is_each_arguments_specialization() -> None:
    """_args_key, the per-launch key with the common types inlined, is _arg_key of each
    argument for every type a launch passes (tensors by dtype and 16-byte alignment;
    integers by 1, divisibility by 16 and int32 range; bools, floats and their subclasses)."""
    import enum

    import numpy
    import torch

    from gems_core.launch_cache import _arg_key, _args_key

    class Size(enum.IntEnum):
        BLOCK = 16

    tensors = (torch.empty(8), torch.empty(8, dtype=torch.float16)[1:], torch.empty(0, dtype=torch.int64))
    numbers = (0, 1, 16, 17, -5, 2**31 - 1, 2**31, -(2**31), -(2**31) - 1, True, False, 0.5, float("nan"),
               numpy.float64(2.0), numpy.int64(32), numpy.bool_(True), Size.BLOCK, None, "s")
    args = tensors + numbers
    assert _args_key(args) == tuple(_arg_key(a) for a in args)
    # what separates compiled kernels stays separated
    assert len({_args_key((a,)) for a in (1, 2, 16, 2**31, True)}) == 5
    assert _args_key((tensors[0],)) != _args_key((tensors[1],))
