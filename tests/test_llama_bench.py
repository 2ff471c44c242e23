"""benchmarks/llama.py runs end to end at tiny sizes on whatever backend is selected (the cpu
backend here) and reports every field a GPU run is read for."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "benchmarks" / "llama.py"


def _bench():
    spec = importlib.util.spec_from_file_location("gems_bench_llama", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_quick_run_reports_latency_error_and_kernel_share(tmp_path: Path, capsys) -> None:
    out = tmp_path / "llama.json"
    bench = _bench()
    assert bench.main(["--quick", "--providers", "aten,gems,gems-fused", "--kernels", "5",
                       "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    payload = json.loads(out.read_text())
    for key in ("device", "backend", "torch", "triton", "dtype", "batch", "prompt",
                "decode_steps", "config", "results"):
        assert key in payload, key
    assert payload["config"]["layers"] == 2 and payload["config"]["kv_heads"] == 2
    rows = {row["provider"]: row for row in payload["results"]}
    assert set(rows) == {"aten", "gems", "gems-fused"}
    for row in rows.values():
        assert "error" not in row, row
        for key in ("prefill_ms", "decode_ms_per_token", "logits_rel_error", "gems_kernel_share"):
            assert key in row, key
        assert row["prefill_ms"] > 0 and row["decode_ms_per_token"] > 0
    assert rows["aten"]["logits_rel_error"] == 0.0
    assert rows["gems"]["logits_rel_error"] < 1e-4
    # the fused ops compute the same function
    assert rows["gems-fused"]["logits_rel_error"] < 1e-4

    # the kernel breakdown: on the cpu backend, CPU ops by self time, per phase
    assert payload["top_kernels"] == 5
    for name, row in rows.items():
        breakdown = row["kernel_breakdown"]
        assert set(breakdown) == {"prefill", "decode"}, name
        for phase, data in breakdown.items():
            assert data["phase"] == phase and data["source"] == "cpu ops (self time)"
            assert data["steps"] == (1 if phase == "prefill" else payload["profile_steps"])
            assert data["triton_share"] is None  # no GPU kernels to tell apart
            assert set(data["categories_us"]) == set(bench.CATEGORIES)
            assert abs(sum(data["categories_us"].values()) - data["total_us"]) < 1e-6 * data["total_us"] + 1e-6
            kernels = data["kernels"]
            assert kernels and abs(sum(k["share"] for k in kernels) - 1.0) < 1e-6
            assert [k["total_us"] for k in kernels] == sorted((k["total_us"] for k in kernels), reverse=True)
            for k in kernels:
                assert set(k) >= {"kernel", "op", "launched_by", "category", "calls", "total_us",
                                  "us_per_call", "share"}
                assert k["category"] in bench.CATEGORIES and k["calls"] > 0
            by_category = data["categories_us"]
            assert by_category["gemm"] > 0 and by_category["attention"] > 0
            assert by_category["norm"] > 0 and by_category["rotary"] > 0
            assert by_category["embedding/index"] > 0
        # every projection is a GEMM under aten::linear, the rotary embedding is labelled
        prefill = breakdown["prefill"]["kernels"]
        assert any(k["kernel"] == "aten::mm" and k["op"] == "aten::linear" and k["category"] == "gemm"
                   for k in prefill), name
        assert any(k["op"] == "rotary" and k["category"] == "rotary" for k in prefill), name
    fused_ops = {k["kernel"] for k in rows["gems-fused"]["kernel_breakdown"]["prefill"]["kernels"]}
    assert {"gems::skip_rms_norm", "gems::apply_rotary_position_embedding", "gems::silu_and_mul"} <= fused_ops
    # side by side, per phase
    for phase in ("prefill", "decode"):
        table = payload["kernel_categories"][phase]
        assert list(table) == ["aten", "gems", "gems-fused"]
        for provider, categories in table.items():
            assert set(categories) == set(bench.CATEGORIES) | {"total"}
            key = "categories_us" if phase == "prefill" else "categories_us_per_step"
            assert categories["gemm"] == rows[provider]["kernel_breakdown"][phase][key]["gemm"]
    assert "prefill, kernel time by category" in printed and "decode, kernel time by category" in printed
    assert "gems-fused, decode: top 5 of" in printed
    header = next(line for line in printed.splitlines() if line.startswith("category"))
    assert header.split() == ["category", "aten", "µs", "gems", "µs", "x", "aten", "gems-fused", "µs",
                              "x", "aten"]


def test_no_breakdown_with_kernels_0(tmp_path: Path) -> None:
    out = tmp_path / "llama.json"
    bench = _bench()
    assert bench.main(["--quick", "--providers", "aten", "--kernels", "0", "--json", str(out)]) == 0
    payload = json.loads(out.read_text())
    (row,) = payload["results"]
    assert row["kernel_breakdown"] is None and row["kernels"] is None
    assert payload["kernel_categories"] == {}


def test_kernels_are_classified_by_name() -> None:
    bench = _bench()
    known = bench.triton_kernel_names()
    assert {"_mm_kernel", "_mm_decode_kernel", "_gemv_kernel", "pointwise_kernel"} <= known
    assert bench.is_triton_kernel("_mm_decode_kernel", known)
    # the NVIDIA backend's Gluon kernels count as gems' own
    try:
        from gems_backend_nvidia import attention_sm90, gemm_sm90
    except ImportError:
        pass
    else:
        if gemm_sm90.available():
            assert {"gemm_kernel", "attention_kernel"} <= bench.triton_kernel_names()
    assert not bench.is_triton_kernel("nvjet_tst_64x8_64x16_4x1_v_bz_TNN", known)
    assert not bench.is_triton_kernel(
        "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>", known
    )


def test_kernel_categories_by_name_and_context() -> None:
    bench = _bench()
    category = bench.kernel_category
    # ATen's CUDA kernels
    assert category("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1"
                    "_execute_segment_k_off_kernel__5x_cublas") == "gemm"
    assert category("nvjet_tst_64x8_64x16_4x1_v_bz_TNN") == "gemm"
    assert category("void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_16x16_"
                    "128x2_tn_align8>(cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_16x16_128x2_tn_"
                    "align8::Params)") == "gemm"
    assert category("void cublasLt::splitKreduce_kernel<32, 16, int, float, __nv_bfloat16, float>"
                    "(cublasLt::cublasSplitKParams<float>)") == "gemm"
    assert category("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, "
                    "false, false, cutlass::bfloat16_t>, false, true>(pytorch_flash::Flash_fwd_params)"
                    ) == "attention"
    assert category("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x64x128"
                    "_4x1x1_kernel0_0") == "attention"
    assert category("fmha_cutlassF_bf16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel"
                    "<cutlass::bfloat16_t, cutlass::arch::Sm80, true, 64, 64, 64, true, true>::Params)"
                    ) == "attention"
    assert category("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16,"
                    " float, true>(int, float, c10::BFloat16 const*)") == "norm"
    assert category("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add"
                    "<c10::BFloat16>, std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<c10::"
                    "BFloat16>, std::array<char*, 3ul>)") == "pointwise/activation"
    assert category("void at::native::(anonymous namespace)::indexSelectLargeIndex<c10::BFloat16, long,"
                    " unsigned int, 2, 2, -2, true>(at::cuda::detail::TensorInfo<c10::BFloat16, unsigned"
                    " int>)") == "embedding/index"
    assert category("void at::native::(anonymous namespace)::CatArrayBatchedCopy_aligned16_contig<at::"
                    "native::(anonymous namespace)::OpaqueType<2u>, unsigned int, 4, 128, 1>()") == "copy/cat"
    assert category("Memcpy DtoD (Device -> Device)") == "copy/cat"
    # gems' Triton kernels
    for name, expected in [
        ("_mm_kernel", "gemm"), ("_mm_decode_kernel", "gemm"), ("_mm_tma_kernel", "gemm"),
        ("_gemv_kernel", "gemm"), ("_split_k_reduce_kernel", "gemm"), ("_bmm_kernel", "gemm"),
        ("gemm_kernel", "gemm"), ("attention_kernel", "attention"),
        ("_attention_forward_kernel", "attention"), ("_attention_decode_kernel", "attention"),
        ("_attention_decode_combine_kernel", "attention"), ("_softmax_kernel", "attention"),
        ("_norm_forward_kernel", "norm"), ("_skip_norm_forward_kernel", "norm"),
        ("_rotary_kernel", "rotary"), ("_index_select_kernel", "embedding/index"),
        ("_arange_kernel", "embedding/index"), ("_copy_kernel", "copy/cat"),
        ("pointwise_kernel", "pointwise/activation"), ("_reduce_kernel", "other"),
    ]:
        assert category(name) == expected, name
    # CPU op names (the cpu backend's breakdown)
    assert category("aten::mm") == category("aten::addmm") == "gemm"
    assert category("aten::_scaled_dot_product_flash_attention_for_cpu") == "attention"
    assert category("aten::rms_norm") == category("gems::skip_rms_norm") == "norm"
    assert category("gems::apply_rotary_position_embedding") == "rotary"
    assert category("aten::embedding") == category("aten::index_select") == "embedding/index"
    assert category("aten::copy_") == category("aten::cat") == "copy/cat"
    assert category("aten::mul") == category("aten::silu") == category("gems::silu_and_mul") \
        == "pointwise/activation"
    assert category("aten::empty") == "other"
    # the enclosing ops: the outermost that names a part of the model decides ...
    assert category("pointwise_kernel", ("rotary", "aten::mul")) == "rotary"
    assert category("void at::native::reduce_kernel<512, 1>()", ("aten::rms_norm", "aten::mean")) == "norm"
    assert category("_index_select_kernel", ("rotary", "aten::index")) == "rotary"
    assert category("aten::empty", ("aten::linear", "aten::matmul", "aten::mm")) == "gemm"
    assert category("pointwise_kernel", ("aten::scaled_dot_product_attention",)) == "attention"
    # ... a generic kernel takes its launching op's category, a specific one keeps its own
    assert category("pointwise_kernel", ("aten::reshape", "aten::clone", "aten::copy_")) == "copy/cat"
    assert category("_mm_kernel", ("aten::slice",)) == "gemm"
    assert category("_reduce_kernel", ("aten::slice",)) == "other"


def test_kernel_names_are_shortened() -> None:
    short = _bench().short_kernel_name
    assert short("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::"
                 "BFloat16>, std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, "
                 "std::array<char*, 3ul>)") == "vectorized_elementwise_kernel<CUDAFunctor_add>"
    assert short("void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::"
                 "native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() "
                 "const::{lambda()#7}::operator()() const::{lambda(c10::BFloat16)#1}>(at::"
                 "TensorIteratorBase&)::{lambda(int)#1}>(int)") == "elementwise_kernel<direct_copy_kernel_cuda>"
    assert short("void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl<at::native::"
                 "BinaryFunctor<c10::BFloat16, c10::BFloat16, c10::BFloat16, at::native::binary_internal::"
                 "MulFunctor<float> > >(at::TensorIteratorBase&)>(int)") == "elementwise_kernel<MulFunctor>"
    assert short("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps"
                 "<float, float, float, float>, unsigned int, float, 4, 4> >(at::native::ReduceOp<float, "
                 "at::native::MeanOps<float, float, float, float>, unsigned int, float, 4, 4>)"
                 ) == "reduce_kernel<MeanOps>"
    assert short("void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_16x16_128x2_tn_"
                 "align8>(cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_16x16_128x2_tn_align8::Params)"
                 ) == "cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_16x16_128x2_tn_align8"
    assert short("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, "
                 "false, cutlass::bfloat16_t>, false, true>(pytorch_flash::Flash_fwd_params)"
                 ) == "flash_fwd_kernel"
    assert short("void at::native::(anonymous namespace)::CatArrayBatchedCopy_aligned16_contig<at::native"
                 "::(anonymous namespace)::OpaqueType<2u>, unsigned int, 4, 128, 1>()"
                 ) == "CatArrayBatchedCopy_aligned16_contig"
    for plain in ("_mm_decode_kernel", "pointwise_kernel", "aten::mm", "nvjet_tst_64x8_64x16_4x1_v_bz_TNN",
                  "Memcpy DtoD (Device -> Device)", "gems::skip_rms_norm"):
        assert short(plain) == plain
    long_name = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_kernel"
    assert len(short(long_name, width=40)) == 40 and short(long_name, width=40).endswith("…")


def test_gpu_events_are_attributed_to_their_ops() -> None:
    """The CUDA path of the breakdown, on stand-ins for torch.profiler's events: kernels
    attached to the op that launched them (with its enclosing ops and labels), a kernel the
    profiler could not attach, a label's span on the GPU timeline left out."""
    from types import SimpleNamespace

    from torch.autograd import DeviceType
    from torch.autograd.profiler_util import Kernel

    bench = _bench()

    def cpu(name, parent=None, kernels=(), annotation=False):
        return SimpleNamespace(name=name, device_type=DeviceType.CPU, cpu_parent=parent,
                               kernels=list(kernels), is_user_annotation=annotation, is_legacy=False)

    def gpu(name, us, annotation=False):
        return SimpleNamespace(name=name, device_type=DeviceType.CUDA, is_user_annotation=annotation,
                               time_range=SimpleNamespace(elapsed_us=lambda: us))

    add = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>(int)"
    linear = cpu("aten::linear")
    matmul = cpu("aten::matmul", linear)
    mm = cpu("aten::mm", matmul, [Kernel("_mm_kernel", 0, 30.0)])
    rotary = cpu("rotary", annotation=True, kernels=[Kernel("rotary", 0, 9.0)])
    mul = cpu("aten::mul", rotary, [Kernel("pointwise_kernel", 0, 2.0)])
    residual = cpu("aten::add", None, [Kernel(add, 0, 1.0), Kernel(add, 0, 1.0)])
    mm2 = cpu("aten::mm", matmul, [Kernel("_mm_kernel", 0, 10.0)])
    events = [linear, matmul, mm, rotary, mul, residual, mm2,
              gpu("_mm_kernel", 30.0), gpu("_mm_kernel", 10.0), gpu("rotary", 9.0, annotation=True),
              gpu("pointwise_kernel", 2.0), gpu("pointwise_kernel", 4.0), gpu(add, 1.0), gpu(add, 1.0)]
    source, records = bench.phase_records(events, on_gpu=True)
    assert source == "gpu kernels"
    data = bench.summarize_phase("decode", 2, source, records, {"_mm_kernel", "pointwise_kernel"})
    rows = {(k["kernel"], k["op"]): k for k in data["kernels"]}
    assert data["total_us"] == 48.0 and data["us_per_step"] == 24.0
    mm_row = rows[("_mm_kernel", "aten::linear")]
    assert (mm_row["calls"], mm_row["total_us"], mm_row["us_per_call"]) == (2, 40.0, 20.0)
    assert mm_row["launched_by"] == "aten::mm" and mm_row["category"] == "gemm" and mm_row["triton"]
    assert rows[("pointwise_kernel", "rotary")]["category"] == "rotary"
    unattached = rows[("pointwise_kernel", None)]  # 4 µs the profiler did not attach to an op
    assert (unattached["calls"], unattached["total_us"], unattached["category"]) == (1, 4.0, "pointwise/activation")
    add_row = rows[("vectorized_elementwise_kernel<CUDAFunctor_add>", "aten::add")]
    assert add_row["calls"] == 2 and add_row["category"] == "pointwise/activation" and not add_row["triton"]
    assert data["kernels"][0] is mm_row and abs(mm_row["share"] - 40 / 48) < 1e-12
    assert data["categories_us"] == {"gemm": 40.0, "attention": 0.0, "norm": 0.0,
                                     "pointwise/activation": 6.0, "rotary": 2.0, "embedding/index": 0.0,
                                     "copy/cat": 0.0, "other": 0.0}
    assert data["categories_us_per_step"]["gemm"] == 20.0
    assert data["triton_share"] == 46.0 / 48.0
    share = bench.kernel_share(data)
    assert share["steps"] == 2 and share["kernel_us_per_step"] == 24.0
    assert share["top_triton"][0] == {"kernel": "_mm_kernel", "us_per_step": 20.0}
    assert share["top_other"] == [{"kernel": "vectorized_elementwise_kernel<CUDAFunctor_add>",
                                   "us_per_step": 1.0}]


def test_python_path_counts_the_calls_that_missed_the_native_layer(monkeypatch) -> None:
    """Per phase, the ops whose calls ran gems' Python kernels (the counters' growth over one
    prefill and one decode step) and the calls replayed natively; None without the layer."""
    import torch

    from gems_core import dispatch

    bench = _bench()
    counters = {"arange.start_out": [0, 0], "mm": [0, 0]}  # python calls, native hits

    def stats() -> list[dict]:
        return [{"op": op, "python_calls": c[0], "hits": c[1]} for op, c in counters.items()]

    class Model:
        def __call__(self, tokens: torch.Tensor, start: int) -> None:
            counters["arange.start_out"][0] += 1
            counters["mm"][1] += 7 if start == 0 else 3

    monkeypatch.setattr(dispatch, "native_stats", stats)
    prompt, steps = torch.zeros(1, 4, dtype=torch.long), torch.zeros(2, 1, 1, dtype=torch.long)
    report = bench.python_path(Model(), prompt, steps)
    assert report == {
        "prefill": {"native_replays": 7, "python_calls": {"arange.start_out": 1}},
        "decode": {"native_replays": 3, "python_calls": {"arange.start_out": 1}},
    }
    monkeypatch.setattr(dispatch, "native_stats", lambda: [])
    assert bench.python_path(Model(), prompt, steps) is None
