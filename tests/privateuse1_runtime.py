"""A CPU-backed PrivateUse1 device, ``fakechip``, for tests: what a chip vendor's torch
runtime provides, in its smallest form. A C++ extension (built once into ``build_dir``)
registers an allocator of CPU memory and the device's tensor basics at PrivateUse1 (empty
tensors, copies to and from the CPU, views, ``resize_``, ``set_``, a device guard), and a
boxed fallback that runs every other ATen op on the CPU kernels; then PrivateUse1 is renamed
``fakechip`` and a device module registered as ``torch.fakechip``. Kernels of a backend on it
run in Triton's interpreter, which reads the device's tensors through ``.cpu()``.
"""

from __future__ import annotations

import os
import types
from pathlib import Path

import torch

NAME = "fakechip"
DEVICE_NAME = "Fake Chip F1"

SOURCE = r"""
#include <torch/extension.h>
#include <ATen/EmptyTensor.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/resize_native.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/impl/alloc_cpu.h>
#include <torch/library.h>

namespace {
constexpr c10::DeviceType kDevice = c10::DeviceType::PrivateUse1;

struct HostMemory final : at::Allocator {
  at::DataPtr allocate(size_t n) override {
    void* p = n ? c10::alloc_cpu(n) : nullptr;
    return {p, p, &c10::free_cpu, at::Device(kDevice, 0)};
  }
  at::DeleterFnPtr raw_deleter() const override { return &c10::free_cpu; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }
};
HostMemory memory;
const c10::DispatchKeySet keys(c10::DispatchKey::PrivateUse1);

at::Tensor empty(c10::IntArrayRef size, std::optional<at::ScalarType> dtype, std::optional<at::Layout>,
                 std::optional<at::Device>, std::optional<bool>, std::optional<at::MemoryFormat> format) {
  return at::detail::empty_generic(size, &memory, keys, c10::dtype_or_default(dtype), format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride, std::optional<at::ScalarType> dtype,
                         std::optional<at::Layout>, std::optional<at::Device>, std::optional<bool>) {
  return at::detail::empty_strided_generic(size, stride, &memory, keys, c10::dtype_or_default(dtype));
}

// the device's memory is host memory: a CPU tensor over the same bytes
at::Tensor host_view(const at::Tensor& t) {
  if (t.device().type() == c10::DeviceType::CPU) return t;
  return at::from_blob(t.data_ptr(), t.sizes(), t.strides(), t.options().device(at::kCPU));
}

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool) {
  host_view(dst).copy_(host_view(self));
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  dst.resize_(self.sizes());
  return copy_from(self, dst, false);
}

const at::Tensor& resize(const at::Tensor& self, c10::SymIntArrayRef size, std::optional<at::MemoryFormat> format) {
  return at::native::resize_(self, C10_AS_INTARRAYREF_SLOW(size), format);
}

struct Guard final : c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kDevice; }
  c10::Device exchangeDevice(c10::Device) const override { return c10::Device(kDevice, 0); }
  c10::Device getDevice() const override { return c10::Device(kDevice, 0); }
  void setDevice(c10::Device) const override {}
  void uncheckedSetDevice(c10::Device) const noexcept override {}
  c10::Stream getStream(c10::Device d) const noexcept override { return c10::Stream(c10::Stream::DEFAULT, d); }
  c10::Stream getDefaultStream(c10::Device d) const override { return c10::Stream(c10::Stream::DEFAULT, d); }
  c10::Stream exchangeStream(c10::Stream s) const noexcept override { return s; }
  c10::DeviceIndex deviceCount() const noexcept override { return 1; }
  void record(void**, const c10::Stream&, const c10::DeviceIndex, const c10::EventFlag) const override {}
  void block(void*, const c10::Stream&) const override {}
  bool queryEvent(void*) const override { return true; }
  void destroyEvent(void*, const c10::DeviceIndex) const noexcept override {}
  bool queryStream(const c10::Stream&) const override { return true; }
  void synchronizeStream(const c10::Stream&) const override {}
};
C10_REGISTER_GUARD_IMPL(PrivateUse1, Guard);

void on_the_cpu(const c10::OperatorHandle& op, torch::jit::Stack* stack) { at::native::cpu_fallback(op, stack); }
}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", empty);
  m.impl("empty_strided", empty_strided);
  m.impl("_copy_from", copy_from);
  m.impl("_copy_from_and_resize", copy_from_and_resize);
  m.impl("as_strided", at::native::as_strided_tensorimpl);
  m.impl("view", at::native::view);
  m.impl("_reshape_alias", at::native::_reshape_alias);
  m.impl("resize_", resize);
  m.impl("set_.source_Storage", at::native::set_);
  m.impl("set_.source_Storage_storage_offset", at::native::set_storage_cpu_);
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&on_the_cpu>());
}
"""


def _device_module() -> types.ModuleType:
    module = types.ModuleType(f"torch.{NAME}")
    module.is_available = lambda: True  # type: ignore[attr-defined]
    module.is_initialized = lambda: True  # type: ignore[attr-defined]
    module._lazy_init = lambda: None  # type: ignore[attr-defined]
    module._is_in_bad_fork = lambda: False  # type: ignore[attr-defined]
    module.device_count = lambda: 1  # type: ignore[attr-defined]
    module.current_device = lambda: 0  # type: ignore[attr-defined]
    module.manual_seed_all = lambda seed: None  # type: ignore[attr-defined]
    module.get_device_name = lambda index=0: DEVICE_NAME  # type: ignore[attr-defined]
    return module


def load(build_dir: str | os.PathLike[str] | None = None) -> None:
    """Build (once) and load the runtime, rename PrivateUse1 and register ``torch.fakechip``.
    ``build_dir`` defaults to ``$GEMS_TEST_PRIVATEUSE1_BUILD``."""
    if torch._C._get_privateuse1_backend_name() == NAME:
        return
    from torch.utils.cpp_extension import load_inline

    folder = Path(build_dir or os.environ["GEMS_TEST_PRIVATEUSE1_BUILD"])
    folder.mkdir(parents=True, exist_ok=True)
    load_inline("gems_test_fakechip", cpp_sources=[SOURCE], build_directory=str(folder),
                extra_cflags=["-O0"], is_python_module=False, verbose=False)
    torch.utils.rename_privateuse1_backend(NAME)
    torch._register_device_module(NAME, _device_module())
    torch.utils.generate_methods_for_privateuse1_backend()
