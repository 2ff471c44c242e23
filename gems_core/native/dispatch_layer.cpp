// gems' native dispatch layer: a C++ kernel in front of gems' Python kernels on an
// accelerator's dispatch key.
//
// A call's key is what gems' Python path decides from (operand dtypes, shapes, strides,
// devices and 16-byte alignment, list arguments' tensors alike; which operands share a data
// pointer or overlap; the values of non-tensor arguments; a few global settings). The first calls of a key run the Python kernel; a key seen again is run once
// more under recording (gems_core/native/recorder.py), which returns a *recipe*: the
// outputs and scratch buffers to allocate and the compiled kernels to launch, with every
// argument either a number or an address (an operand's, an output's or a scratch buffer's,
// plus a byte offset). Later calls of the key allocate and launch from C++ with no Python
// and no global interpreter lock: the host cost of a small op comes down to ATen's own.
//
// Anything the layer does not understand (argument types, calls the recorder refuses)
// simply keeps the Python path.
//
// A key no call had before (a decoding loop's growing key/value length) may still be served
// without Python: where the recorder gives a recipe a *generic* form (its integers as
// formulas in one size of the key, learnt from recordings of calls whose keys differ only in
// sizes and strides), a call whose key matches but for sizes and strides that follow the
// formulas is served by the recipe the formulas give, while each integer argument keeps
// what Triton specializes on (derive()). To learn them, a new key of a family met before
// is recorded on its first call (Book::families).
//
// Ops gems differentiates itself also get a gate on the Autograd key (AutogradGate): a call
// that needs no gradient goes on below autograd to the native kernel without Python (so
// torch.no_grad() loops reach the recipes, not only torch.inference_mode()).
//
// Error messages are built as std::string: formatting numbers through an ostream inside
// this extension crashed with some torch builds (their libstdc++ locale facets).

#include <torch/extension.h>

#include <ATen/EmptyTensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/csrc/utils/tensor_memoryformats.h>
#include <torch/library.h>

#include <ATen/Context.h>
#include <torch/csrc/Generator.h>

#include <array>
#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace py = pybind11;

namespace {

// ---------------------------------------------------------------------------------------
// The device driver's entry points, handed over as addresses by the backend that supplies
// the kernel launch (gems_core.contract.NativeLaunch: set_driver), so the layer builds with
// no driver headers or libraries. The signatures are those NativeLaunch documents.

using Status = int;
using LaunchFn = Status (*)(void*, unsigned, unsigned, unsigned, unsigned, unsigned,
                            unsigned, unsigned, void*, void**, void**);
using CtxGetFn = Status (*)(void**);
using CtxSetFn = Status (*)(void*);
using DeviceGetFn = Status (*)(int*, int);
using PrimaryRetainFn = Status (*)(void**, int);
using ErrorStringFn = Status (*)(Status, const char**);
// tensor map encoding: (map, data type, rank, address, dims, byte strides, box, element
// strides, interleave, swizzle, L2 promotion, out-of-bounds fill)
using EncodeTiledFn = Status (*)(void*, int, unsigned, void*, const uint64_t*, const uint64_t*,
                                 const unsigned*, const unsigned*, int, int, int, int);

template <typename Fn>
Fn entry(uint64_t address) {
  return reinterpret_cast<Fn>(static_cast<uintptr_t>(address));
}

struct Driver {
  LaunchFn launch = nullptr;
  CtxGetFn ctx_get = nullptr;
  CtxSetFn ctx_set = nullptr;
  DeviceGetFn device_get = nullptr;
  PrimaryRetainFn primary_retain = nullptr;
  ErrorStringFn error_string = nullptr;  // optional: errors are then reported as numbers
  EncodeTiledFn encode_tiled = nullptr;  // optional: calls with tensor maps keep the Python path

  // Takes the entry points (0: absent); an error message when a required one is missing.
  std::string set(uint64_t launch_at, uint64_t ctx_get_at, uint64_t ctx_set_at, uint64_t device_get_at,
                  uint64_t primary_retain_at, uint64_t error_string_at, uint64_t encode_tiled_at) {
    if (!launch_at || !ctx_get_at || !ctx_set_at || !device_get_at || !primary_retain_at) {
      return "the backend's kernel launch lacks a driver entry point the native layer needs";
    }
    launch = entry<LaunchFn>(launch_at);
    ctx_get = entry<CtxGetFn>(ctx_get_at);
    ctx_set = entry<CtxSetFn>(ctx_set_at);
    device_get = entry<DeviceGetFn>(device_get_at);
    primary_retain = entry<PrimaryRetainFn>(primary_retain_at);
    error_string = entry<ErrorStringFn>(error_string_at);
    encode_tiled = entry<EncodeTiledFn>(encode_tiled_at);
    return std::string();
  }

  std::string describe(Status code) const {
    const char* text = nullptr;
    if (error_string != nullptr) error_string(code, &text);
    return text ? std::string(text) : "driver error " + std::to_string(code);
  }
};

Driver driver;

// Tests run the layer without a GPU: launches are then recorded here instead of made.
std::atomic<bool> fake_launches{false};
// Check mode: every call of a key is recorded, and each new recipe is run at once on copies
// of the call's operands and compared with what the Python kernel computed.
std::atomic<bool> check_mode{false};
// Set while check mode copies operands or compares results: the ops it uses for that
// (copy_, allclose...) may be gems' own and must not be checked in turn.
thread_local int checking_depth = 0;

struct CheckingScope {
  CheckingScope() { ++checking_depth; }
  ~CheckingScope() { --checking_depth; }
};
std::mutex log_mutex;
py::list* launch_log = nullptr;  // created on first use, with the GIL

// ---------------------------------------------------------------------------------------
// Recipes

// The numbering is gems_core/native/recorder.py's KINDS.
// kPhilox: an int32 drawn on every call, word ``offset`` (seed low and high, offset low and
// high) of the recipe's Philox draw (Recipe::draw; ``slot`` 0, the draw's index).
enum ArgKind : int { kPointer = 0, kNull = 1, kI32 = 2, kI64 = 3, kU32 = 4, kU64 = 5, kF32 = 6, kF64 = 7, kI8 = 8, kI16 = 9, kU8 = 10, kU16 = 11, kTensorMap = 12, kPhilox = 13 };

// A TMA tensor map passed by value (128 bytes, 64-byte aligned), encoded on
// every launch over the address of its slot plus offset; the rest of the encoding is fixed
// by the call's key. Dimensions innermost first, as the driver's encoder takes them.
constexpr unsigned kMaxMapRank = 5;
constexpr size_t kMaxMaps = 8;
struct TensorMapSpec {
  // the encoder's codes (gems_core.native.recorder.TensorMap)
  int data_type = 0;
  int swizzle = 0;
  int fill = 0;  // out-of-bounds fill
  int promotion = 0;  // L2 promotion
  unsigned rank = 0;
  uint64_t dims[kMaxMapRank] = {};
  uint64_t strides[kMaxMapRank] = {};  // bytes, of dims 1 .. rank - 1
  unsigned box[kMaxMapRank] = {};
};

struct LaunchArg {
  int kind;
  int slot;        // kPointer: stack position (< number of arguments) or allocation
  int64_t offset;  // kPointer: bytes from the slot tensor's data pointer
  int64_t ivalue;
  double fvalue;
  int map = -1;  // kTensorMap: index into the step's maps
};

struct LaunchStep {
  uint64_t function;
  unsigned grid[3];
  unsigned block;
  unsigned shared;
  std::vector<LaunchArg> args;
  std::vector<TensorMapSpec> maps;
};

struct Allocation {
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
  c10::ScalarType dtype;
};

constexpr size_t kMaxArgs = 96;
// Slots of list elements: kListSlot + position * kListWidth + element (recorder.py's slots).
constexpr int kListSlot = 1 << 20;
constexpr size_t kListWidth = 1024;

// A length-generic recipe (gems_core/native/recorder.py's learn): a recipe's integers as
// formulas in one size x of the call's key, ceil((a + b x) / c), for the calls whose sizes
// and strides (the key's *entries*) follow its formulas in x, within [low, high].
struct Formula {
  int64_t a, b, c;
};
struct GenericNumber {
  std::vector<Formula> formulas;  // several (a grid's): all must agree
  int guard;                      // recorder.py's learn: 0 none, 1 specialization, 2/3 grid, 4 size
  int64_t expected;
};
struct GenericEntry {
  int64_t a, b, zero_or_one;
};
struct Generic {
  size_t pivot = 0;
  int64_t low = 0, high = 0;
  std::vector<GenericEntry> entries;
  std::vector<GenericNumber> numbers;  // in the order derive() reads a recipe's integers
};

// A draw of Philox counters from the default generator of the call's device, made on every
// replay as gems_core.ops.random's philox_state makes it; ``classes``: what Triton
// specialized each of its four words on in the recorded call (-1: a word not passed), which
// a replay's words must keep.
struct Draw {
  int64_t counters = 0;
  std::array<int64_t, 4> classes{-1, -1, -1, -1};
};

struct Recipe {
  std::vector<Allocation> allocations;  // slots n_args, n_args + 1, ...
  std::vector<LaunchStep> launches;
  std::vector<int> returns;  // slot per returned tensor
  std::shared_ptr<const Generic> generic;  // set where it serves other lengths too
  // one draw at most: a replay that gives way to Python must not have drawn before
  std::optional<Draw> draw;
};

int64_t ceil_div(int64_t p, int64_t q) { return p >= 0 ? (p + q - 1) / q : -((-p) / q); }

// What Triton specializes an integer argument on (recorder.py's _class).
int64_t specialization(int64_t v) {
  return (v == 1) | (v % 16 == 0) << 1 | (v >= INT32_MIN && v <= INT32_MAX) << 2;
}

int64_t zero_or_one(int64_t v) { return (v == 0) | (v == 1) << 1; }

// The kernels' int32 halves of a 64-bit seed and offset (gems_core.ops.random's _halves).
std::array<int32_t, 4> philox_words(uint64_t seed, uint64_t offset) {
  auto word = [](uint64_t v) { return static_cast<int32_t>(static_cast<uint32_t>(v & 0xFFFFFFFFu)); };
  return {word(seed), word(seed >> 32), word(offset), word(offset >> 32)};
}

// How far a draw of ``counters`` Philox counters moves a generator's offset (gems_core.ops.random).
uint64_t philox_increment(int64_t counters) { return (static_cast<uint64_t>(counters) + 3) / 4 * 4; }

bool same_classes(const std::array<int32_t, 4>& words, const std::array<int64_t, 4>& classes) {
  for (size_t w = 0; w < 4; ++w) {
    if (classes[w] >= 0 && specialization(words[w]) != classes[w]) return false;
  }
  return true;
}

// (seed, offset) of ``counters`` Philox counters from ``generator``, its offset advanced past
// them, under the generator's mutex, which ATen's own draws hold too; nothing (the generator
// untouched) where ``classes`` are given and the draw's words would be specialized otherwise.
std::optional<std::pair<uint64_t, uint64_t>> philox_advance(at::Generator& generator, int64_t counters,
                                                            const std::array<int64_t, 4>* classes = nullptr) {
  std::lock_guard<std::mutex> lock(generator.mutex());
  const uint64_t offset = generator.get_offset();
  const uint64_t seed = generator.current_seed();
  if (classes != nullptr && !same_classes(philox_words(seed, offset), *classes)) return std::nullopt;
  generator.set_offset(offset + philox_increment(counters));
  return std::make_pair(seed, offset);
}

// In fake-launch tests on the CPU, whose generator keeps no offset, draws come from here.
std::atomic<uint64_t> fake_offset{0};

// The words of ``draw``, made from the default generator of ``device`` (its offset advanced
// past them, under its mutex); nothing where they would be specialized otherwise than the
// recorded call's, or where the generator refuses (the generator then untouched, so the
// Python path draws what it would have drawn).
std::optional<std::array<int32_t, 4>> philox_draw(c10::Device device, const Draw& draw) {
  if (device.is_cpu()) {
    TORCH_CHECK(fake_launches.load(), "gems: a recipe draws Philox counters on the CPU");
    uint64_t offset = fake_offset.load();
    do {
      if (!same_classes(philox_words(0, offset), draw.classes)) return std::nullopt;
    } while (!fake_offset.compare_exchange_weak(offset, offset + philox_increment(draw.counters)));
    return philox_words(0, offset);
  }
  try {
    at::Generator generator = at::globalContext().defaultGenerator(device);
    const auto drawn = philox_advance(generator, draw.counters, &draw.classes);
    if (!drawn) return std::nullopt;
    return philox_words(drawn->first, drawn->second);
  } catch (const c10::Error&) {
    // the generator refuses (an offset moved while a CUDA graph is captured, say): the
    // Python path draws as it can
    return std::nullopt;
  }
}

// Length-generic recipes kept per family (the latest): specializations and bounds met lately.
constexpr size_t kGenericPerFamily = 8;
// Calls touching this many bytes or more keep exact recipes (kernels switch to 64-bit offsets).
constexpr int64_t kLargeBytes = int64_t{1} << 31;

// The recipe of a call whose key's sizes and strides are ``entries``, from the generic
// recipe ``base``; null where its formulas or guards do not hold for them.
std::shared_ptr<const Recipe> derive(const Recipe& base, const std::vector<int64_t>& entries) {
  const Generic& g = *base.generic;
  if (entries.size() != g.entries.size() || g.pivot >= entries.size()) return nullptr;
  const int64_t x = entries[g.pivot];
  if (x < g.low || x > g.high) return nullptr;
  for (size_t i = 0; i < entries.size(); ++i) {
    const GenericEntry& e = g.entries[i];
    if (entries[i] != e.a + e.b * x || zero_or_one(entries[i]) != e.zero_or_one) return nullptr;
  }
  std::vector<int64_t> values;
  values.reserve(g.numbers.size());
  for (const GenericNumber& number : g.numbers) {
    int64_t v = 0;
    for (size_t f = 0; f < number.formulas.size(); ++f) {
      const Formula& form = number.formulas[f];
      const int64_t w = ceil_div(form.a + form.b * x, form.c);
      if (f > 0 && w != v) return nullptr;
      v = w;
    }
    const bool ok = number.guard == 1   ? specialization(v) == number.expected
                    : number.guard == 2 ? v >= 1 && v <= INT32_MAX
                    : number.guard == 3 ? v >= 1 && v <= 65535
                    : number.guard == 4 ? v >= 0 && zero_or_one(v) == number.expected
                                        : true;
    if (!ok) return nullptr;
    values.push_back(v);
  }
  auto recipe = std::make_shared<Recipe>(base);
  size_t k = 0;
  auto next = [&]() { return k < values.size() ? values[k++] : int64_t{-1}; };
  for (Allocation& a : recipe->allocations) {
    int64_t extent = 1;
    for (auto& size : a.sizes) size = next();
    for (size_t d = 0; d < a.strides.size(); ++d) {
      a.strides[d] = next();
      extent += a.sizes[d] > 0 ? (a.sizes[d] - 1) * a.strides[d] : 0;
    }
    if (extent * static_cast<int64_t>(c10::elementSize(a.dtype)) >= kLargeBytes) return nullptr;
  }
  for (LaunchStep& step : recipe->launches) {
    for (unsigned& size : step.grid) size = static_cast<unsigned>(next());
    for (LaunchArg& arg : step.args) {
      if (arg.kind == kPointer || arg.kind == kTensorMap) {
        arg.offset = next();
      } else if (arg.kind != kNull && arg.kind != kF32 && arg.kind != kF64 && arg.kind != kU64 && arg.kind != kPhilox) {
        arg.ivalue = next();
      }
    }
  }
  return k == values.size() ? recipe : nullptr;
}

using Key = std::vector<int64_t>;

struct KeyHash {
  size_t operator()(const Key& key) const noexcept {
    uint64_t h = 1469598103934665603ull;
    for (int64_t v : key) {
      h ^= static_cast<uint64_t>(v) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    }
    return static_cast<size_t>(h);
  }
};

// [first, last) bytes a tensor's elements occupy (empty for no elements).
using Span = std::pair<uintptr_t, uintptr_t>;

Span span_of(const at::Tensor& t) {
  const uintptr_t start = reinterpret_cast<uintptr_t>(t.data_ptr());
  if (t.numel() == 0) return {start, start};
  int64_t last = 0;
  for (int64_t i = 0; i < t.dim(); ++i) last += (t.sizes()[i] - 1) * t.strides()[i];
  return {start, start + static_cast<uintptr_t>((last + 1) * t.element_size())};
}

int64_t double_bits(double v) {
  int64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  return bits;
}

// Appends what the Python path may depend on of one argument; false where the layer does
// not handle the argument (the call then keeps the Python path). The byte spans of the
// device tensors met (list elements included) go to ``spans``, for the alias pattern.
bool key_of(const c10::IValue& v, c10::DeviceType expected, Key& key, c10::Device& device, bool& have_device,
            std::vector<Span>& spans, std::vector<size_t>& sized) {
  if (v.isTensor()) {
    const at::Tensor& t = v.toTensor();
    if (!t.defined()) {
      key.push_back(-11);
      return true;
    }
    if (t.layout() != c10::kStrided || t.is_conj() || t.is_neg()) return false;
    const c10::Device d = t.device();
    key.push_back(-12);
    key.push_back(static_cast<int64_t>(t.scalar_type()));
    key.push_back(static_cast<int64_t>(d.type()) * 1024 + d.index());
    const int64_t dim = t.dim();
    key.push_back(dim);
    for (int64_t i = 0; i < dim; ++i) {
      sized.push_back(key.size());
      key.push_back(t.sizes()[i]);
      sized.push_back(key.size());
      key.push_back(t.strides()[i]);
    }
    if (d.type() != expected) {
      // a CPU number next to accelerator tensors: the Python path reads its value
      if (dim != 0) return false;
      const c10::Scalar s = t.item();
      if (s.isComplex()) return false;
      key.push_back(s.isFloatingPoint() ? double_bits(s.toDouble()) : s.toLong());
      return true;
    }
    key.push_back(reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0 ? 1 : 0);
    spans.push_back(span_of(t));
    if (!have_device) {
      device = d;
      have_device = true;
    }
    return true;
  }
  if (v.isNone()) {
    key.push_back(-13);
    return true;
  }
  if (v.isBool()) {
    key.push_back(-14);
    key.push_back(v.toBool());
    return true;
  }
  if (v.isInt()) {
    key.push_back(-15);
    key.push_back(v.toInt());
    return true;
  }
  if (v.isDouble()) {
    key.push_back(-16);
    key.push_back(double_bits(v.toDouble()));
    return true;
  }
  if (v.isScalar()) {  // a Scalar argument holding a complex number, or a symbolic one
    return false;
  }
  if (v.isIntList()) {
    key.push_back(-17);
    const auto list = v.toIntVector();
    key.push_back(static_cast<int64_t>(list.size()));
    key.insert(key.end(), list.begin(), list.end());
    return true;
  }
  if (v.isBoolList()) {
    key.push_back(-18);
    const auto list = v.toBoolList();
    key.push_back(static_cast<int64_t>(list.size()));
    for (bool b : list) key.push_back(b);
    return true;
  }
  if (v.isDoubleList()) {
    key.push_back(-19);
    const auto list = v.toDoubleVector();
    key.push_back(static_cast<int64_t>(list.size()));
    for (double d : list) key.push_back(double_bits(d));
    return true;
  }
  if (v.isString()) {
    key.push_back(-20);
    const std::string& s = v.toStringRef();
    key.push_back(static_cast<int64_t>(s.size()));
    for (unsigned char c : s) key.push_back(c);
    return true;
  }
  if (v.isDevice()) {
    const c10::Device d = v.toDevice();
    key.push_back(-21);
    key.push_back(static_cast<int64_t>(d.type()) * 1024 + d.index());
    // a factory call (arange) names its device only here: the recipe runs on it
    if (!have_device && d.type() == expected && d.has_index()) {
      device = d;
      have_device = true;
    }
    return true;
  }
  if (v.isTensorList()) {  // Tensor[]: each element as a tensor argument
    const c10::List<at::Tensor> list = v.toTensorList();
    if (list.size() >= kListWidth) return false;
    key.push_back(-22);
    key.push_back(static_cast<int64_t>(list.size()));
    for (size_t j = 0; j < list.size(); ++j) {
      if (!key_of(c10::IValue(list.get(j)), expected, key, device, have_device, spans, sized)) return false;
    }
    return true;
  }
  if (v.isList()) {  // Tensor?[]: tensors and Nones; lists of anything else are not handled
    const c10::List<c10::IValue> list = v.toList();
    if (list.size() >= kListWidth) return false;
    key.push_back(-23);
    key.push_back(static_cast<int64_t>(list.size()));
    for (size_t j = 0; j < list.size(); ++j) {
      const c10::IValue item = list.get(j);
      if (!(item.isTensor() || item.isNone())) return false;
      if (!key_of(item, expected, key, device, have_device, spans, sized)) return false;
    }
    return true;
  }
  return false;  // generators, storages, nested lists...: the Python path
}

// Appends how the device tensors of a call share memory: for each, the position of the
// first earlier one with the same data pointer (or -1), and whether its bytes meet an
// earlier one's. A recipe addresses each operand by its slot and repeats what the Python
// path decided, which depends on overlap (copy_ hands a source that meets its destination
// to ATen), so a call whose operands alias (``x + x``) or overlap must not share a key, and
// so a recipe, with one whose operands are apart.
void alias_key(const std::vector<Span>& spans, Key& key) {
  key.push_back(-24);
  for (size_t i = 0; i < spans.size(); ++i) {
    int64_t first = -1;
    int64_t meets = 0;
    for (size_t j = 0; j < i; ++j) {
      if (first < 0 && spans[j].first == spans[i].first) first = static_cast<int64_t>(j);
      if (spans[i].first < spans[j].second && spans[j].first < spans[i].second) meets = 1;
    }
    key.push_back(first);
    key.push_back(meets);
  }
}

// The tensor element ``j`` of list argument ``v`` (Tensor[] or Tensor?[]).
const at::Tensor list_element(const c10::IValue& v, size_t j) {
  if (v.isTensorList()) return v.toTensorList().get(j);
  return v.toList().get(j).toTensor();
}

// What every key carries besides the arguments: settings the Python path reads.
void global_key(Key& key) {
  key.push_back(static_cast<int64_t>(c10::typeMetaToScalarType(c10::get_default_dtype())));
  key.push_back(at::globalContext().deterministicAlgorithms() ? 1 : 0);
  // float32 products follow torch.set_float32_matmul_precision (IEEE or tf32 kernels)
  key.push_back(static_cast<int64_t>(at::globalContext().float32MatmulPrecision()));
}

py::object schema_aware_object(const c10::Argument& arg, const c10::IValue& v) {
  if (v.isNone()) return py::none();
  c10::TypePtr type = arg.real_type();
  if (auto optional = type->cast<c10::OptionalType>()) type = optional->getElementType();
  switch (type->kind()) {
    case c10::TypeKind::ScalarTypeType:
      return py::reinterpret_borrow<py::object>(
          reinterpret_cast<PyObject*>(torch::getTHPDtype(static_cast<c10::ScalarType>(v.toInt()))));
    case c10::TypeKind::LayoutType:
      return py::reinterpret_borrow<py::object>(
          reinterpret_cast<PyObject*>(torch::getTHPLayout(static_cast<c10::Layout>(v.toInt()))));
    case c10::TypeKind::MemoryFormatType:
      return py::reinterpret_borrow<py::object>(
          torch::utils::getTHPMemoryFormat(static_cast<c10::MemoryFormat>(v.toInt())));
    default:
      return torch::jit::toPyObject(v);
  }
}

// The arguments of a call as PyTorch passes them to a Python kernel: positional ones up to
// the last that differs from its default, keyword-only ones where they differ from theirs.
// With ``tensors``, every tensor operand is listed as (stack position, tensor) for the
// recorder, list elements at their list slots (kListSlot).
void python_arguments(const c10::FunctionSchema& schema, const torch::jit::Stack& stack, size_t n, py::list& args,
                      py::dict& kwargs, py::list* tensors) {
  const auto& arguments = schema.arguments();
  const size_t first = stack.size() - n;
  auto is_default = [&](size_t i) {
    const auto& fallback = arguments[i].default_value();
    return fallback.has_value() && *fallback == stack[first + i];
  };
  size_t positional = 0;
  while (positional < n && !arguments[positional].kwarg_only()) ++positional;
  size_t passed = positional;
  while (passed > 0 && is_default(passed - 1)) --passed;
  for (size_t i = 0; i < n; ++i) {
    const c10::IValue& v = stack[first + i];
    const bool kwarg = i >= positional;
    if ((kwarg && is_default(i)) || (!kwarg && i >= passed)) continue;
    py::object value = schema_aware_object(arguments[i], v);
    if (kwarg) {
      kwargs[arguments[i].name().c_str()] = value;
    } else {
      args.append(value);
    }
    if (tensors == nullptr) continue;
    if (v.isTensor() && v.toTensor().defined()) tensors->append(py::make_tuple(i, value));
    if ((v.isTensorList() || v.isList()) && !value.is_none()) {
      size_t j = 0;
      for (const auto& item : value) {
        if (j < kListWidth && THPVariable_Check(item.ptr())) {
          tensors->append(py::make_tuple(kListSlot + static_cast<int>(i * kListWidth + j), item));
        }
        ++j;
      }
    }
  }
}

// Replace a call's arguments on the stack by the Python kernel's result.
void push_result(const c10::FunctionSchema& schema, torch::jit::Stack* stack, size_t n, const py::object& out) {
  const auto& returns = schema.returns();
  std::vector<c10::IValue> values;
  if (returns.size() == 1) {
    values.push_back(torch::jit::toIValue(out, returns[0].real_type()));
  } else if (!returns.empty()) {
    py::sequence seq = out.cast<py::sequence>();
    TORCH_CHECK(seq.size() == returns.size(), "gems: " + schema.name() + " returned " + std::to_string(seq.size()) +
                " values, its schema " + std::to_string(returns.size()));
    for (size_t i = 0; i < returns.size(); ++i) {
      values.push_back(torch::jit::toIValue(seq[i], returns[i].real_type()));
    }
  }
  torch::jit::drop(*stack, n);
  for (auto& v : values) stack->push_back(std::move(v));
}

enum FamilyState { kFamilySeen, kFamilyGeneric, kFamilyPlain };

// What a native kernel learns about its keys: recipes, keys seen once, keys refused. A
// registration's kernel may take the book of an earlier registration of the same op (a
// *shelf* name the Python side gives, naming the op, the dispatch key and the runtime), so
// that recipes outlive ``use_gems()`` blocks: a block entered again starts from them.
struct Book {
  std::mutex mutex;
  std::unordered_map<Key, std::shared_ptr<const Recipe>, KeyHash> recipes;
  std::unordered_set<Key, KeyHash> seen;
  std::unordered_set<Key, KeyHash> refused;
  // length-generic recipes by their key with sizes and strides masked (masked_key), the
  // latest first: one per specialization of the arguments (and bounds) met lately
  std::unordered_map<Key, std::vector<std::shared_ptr<const Recipe>>, KeyHash> generic;
  // families of keys (masked_key) met: kFamilySeen, or what a recording of one said (it
  // opted in to length-generic recipes, or not). A new key of a family met before that did
  // not say no is recorded on its first call, not its second: a decoding loop's step meets
  // each length once.
  std::unordered_map<Key, FamilyState, KeyHash> families;

  void clear() {
    std::lock_guard<std::mutex> guard(mutex);
    recipes.clear();
    seen.clear();
    refused.clear();
    generic.clear();
    families.clear();
  }
};

std::mutex shelves_mutex;
std::unordered_map<std::string, std::shared_ptr<Book>> shelves;

// ``key`` with its tensors' sizes and strides (at positions ``sized``) zeroed, and those
// sizes and strides: the family of calls a length-generic recipe may serve.
Key masked_key(const Key& key, const std::vector<size_t>& sized, std::vector<int64_t>& entries) {
  Key masked = key;
  entries.clear();
  entries.reserve(sized.size());
  for (size_t position : sized) {
    entries.push_back(key[position]);
    masked[position] = 0;
  }
  return masked;
}

// The book on ``shelf`` (a new one, kept there, on first use); an unshared book for "".
std::shared_ptr<Book> book_on(const std::string& shelf) {
  if (shelf.empty()) return std::make_shared<Book>();
  std::lock_guard<std::mutex> guard(shelves_mutex);
  auto& book = shelves[shelf];
  if (!book) book = std::make_shared<Book>();
  return book;
}

class NativeKernel;

// Whether ``pred`` holds for a tensor argument ``v``: a tensor, or an element of a tensor list
// or of a list of optional tensors.
template <typename Pred>
bool any_tensor(const c10::IValue& v, Pred pred) {
  if (v.isTensor()) return pred(v.toTensor());
  if (v.isTensorList()) {
    for (const at::Tensor& t : v.toTensorList()) {
      if (pred(t)) return true;
    }
  } else if (v.isList()) {
    for (const c10::IValue& e : v.toListRef()) {
      if (e.isTensor() && pred(e.toTensor())) return true;
    }
  }
  return false;
}

// Calls the layer hands to ATen's own kernel for the key (taken before gems' registration
// covered it) without Python: calls involving a dtype the backend leaves to ATen (a tensor's,
// a tensor list element's, or one asked for with a ScalarType argument; not a wrapped
// number's), and, for ops whose Python kernel declines them, calls with a tensor of more than
// zero dims on a device of another type (a copy between host and device memory).
struct AtenRoute {
  std::vector<c10::ScalarType> dtypes;
  bool foreign = false;
  std::optional<c10::SafeKernelFunction> kernel;

  bool takes(const c10::FunctionSchema& schema, const torch::jit::Stack& stack, size_t n,
             c10::DeviceType expected) const {
    if (!kernel) return false;
    const size_t first = stack.size() - n;
    const auto routed = [&](const at::Tensor& t) { return tensor(t, expected); };
    for (size_t i = 0; i < n; ++i) {
      const c10::IValue& v = stack[first + i];
      if (any_tensor(v, routed)) return true;
      if (!dtypes.empty() && v.isInt() && is_dtype_argument(schema.arguments()[i]) &&
          gated(static_cast<c10::ScalarType>(v.toInt()))) {
        return true;
      }
    }
    return false;
  }

 private:
  bool gated(c10::ScalarType dtype) const {
    for (c10::ScalarType g : dtypes) {
      if (g == dtype) return true;
    }
    return false;
  }

  bool tensor(const at::Tensor& t, c10::DeviceType expected) const {
    if (!t.defined()) return false;
    if (foreign && t.dim() != 0 && t.device().type() != expected) return true;
    return !dtypes.empty() && !t.unsafeGetTensorImpl()->is_wrapped_number() && gated(t.scalar_type());
  }

  static bool is_dtype_argument(const c10::Argument& argument) {
    c10::TypePtr type = argument.real_type();
    if (auto optional = type->cast<c10::OptionalType>()) type = optional->getElementType();
    return type->kind() == c10::TypeKind::ScalarTypeType;
  }
};

std::mutex live_mutex;
std::unordered_set<NativeKernel*> live_kernels;

class NativeKernel final : public c10::OperatorKernel {
 public:
  NativeKernel(std::string name, c10::DeviceType device_type, py::object python_kernel, py::object recorder,
               size_t limit, std::shared_ptr<Book> book)
      : name_(std::move(name)), device_type_(device_type), limit_(limit), book_(std::move(book)) {
    python_kernel_ = python_kernel.release().ptr();
    recorder_ = recorder.release().ptr();
    std::lock_guard<std::mutex> guard(live_mutex);
    live_kernels.insert(this);
  }

  ~NativeKernel() override {
    {
      std::lock_guard<std::mutex> guard(live_mutex);
      live_kernels.erase(this);
    }
    if (Py_IsInitialized()) {
      py::gil_scoped_acquire gil;
      Py_XDECREF(python_kernel_);
      Py_XDECREF(recorder_);
    }
  }

  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet keyset, torch::jit::Stack* stack) {
    const size_t n = op.schema().arguments().size();
    if (route_.takes(op.schema(), *stack, n, device_type_)) {  // ATen's (AtenRoute)
      aten_calls_.fetch_add(1, std::memory_order_relaxed);
      route_.kernel->callBoxed(op, keyset, stack);
      return;
    }
    Key key;
    key.reserve(32);
    c10::Device device(c10::kCPU);
    bool have_device = false;
    bool keyed = n < kListWidth;
    std::vector<Span> spans;
    std::vector<size_t> sized;
    std::shared_ptr<const Recipe> predicted;  // from a length-generic recipe
    for (size_t i = stack->size() - n; keyed && i < stack->size(); ++i) {
      if (!key_of((*stack)[i], device_type_, key, device, have_device, spans, sized)) keyed = false;
    }
    keyed = keyed && have_device;
    if (keyed) {
      alias_key(spans, key);
      global_key(key);
      // the current stream: a recipe may use a buffer the Python path keeps per stream
      // (attention's merge counters), so a recipe recorded on one stream serves only it
      if (!device.is_cpu()) key.push_back(c10::impl::getDeviceGuardImpl(device.type())->getStream(device).id());
      std::shared_ptr<const Recipe> recipe;
      {
        std::lock_guard<std::mutex> guard(book_->mutex);
        auto found = book_->recipes.find(key);
        if (found != book_->recipes.end()) recipe = found->second;
      }
      if (recipe) {
        if (run(*recipe, stack, n, device)) {
          hits_.fetch_add(1, std::memory_order_relaxed);
        } else {  // its Philox words are specialized otherwise than the recorded call's
          call_python(op, stack, n, nullptr, &sized);
        }
        return;
      }
      predicted = generic_for(key, sized, spans);
      // check mode runs the Python kernel and holds the generic recipe against it
      if (predicted && (checking_depth > 0 || !check_mode.load(std::memory_order_relaxed))) {
        {  // later calls of this key (the next layers of a model) find it at once
          std::lock_guard<std::mutex> guard(book_->mutex);
          if (book_->recipes.size() >= limit_) book_->recipes.clear();
          book_->recipes.emplace(key, predicted);
        }
        if (run(*predicted, stack, n, device)) {  // never false: a recipe with draws is not generic
          hits_.fetch_add(1, std::memory_order_relaxed);
          generic_hits_.fetch_add(1, std::memory_order_relaxed);
          return;
        }
      }
    }
    call_python(op, stack, n, keyed ? &key : nullptr, &sized, predicted.get());
  }

  void clear() { book_->clear(); }

  // Calls that AtenRoute ``route`` takes go to its kernel without Python: all the Python
  // kernel would do with them is find out that ATen serves them.
  void route_to_aten(AtenRoute route) { route_ = std::move(route); }

  // The recipe of a new key from a length-generic recipe of its family, if one holds.
  std::shared_ptr<const Recipe> generic_for(const Key& key, const std::vector<size_t>& sized,
                                            const std::vector<Span>& spans) {
    if (!has_generic_.load(std::memory_order_relaxed)) return nullptr;
    for (const Span& span : spans) {
      if (static_cast<int64_t>(span.second - span.first) >= kLargeBytes) return nullptr;
    }
    std::vector<int64_t> entries;
    const Key masked = masked_key(key, sized, entries);
    std::vector<std::shared_ptr<const Recipe>> bases;
    {
      std::lock_guard<std::mutex> guard(book_->mutex);
      auto found = book_->generic.find(masked);
      if (found == book_->generic.end()) return nullptr;
      bases = found->second;
    }
    std::shared_ptr<const Recipe> recipe;
    for (size_t i = 0; i < bases.size() && !recipe; ++i) recipe = derive(*bases[i], entries);
    return recipe;
  }

  py::dict stats() {
    py::dict d;
    std::lock_guard<std::mutex> guard(book_->mutex);
    d["op"] = name_;
    d["recipes"] = book_->recipes.size();
    d["hits"] = hits_.load();
    d["python_calls"] = python_calls_.load();
    d["recorded"] = recorded_.load();
    d["refused"] = refused_.load();
    d["aten_calls"] = aten_calls_.load();
    size_t generic = 0;
    for (const auto& [masked, bases] : book_->generic) generic += bases.size();
    d["generic_recipes"] = generic;
    d["generic_hits"] = generic_hits_.load();
    return d;
  }

 private:
  // Runs the recipe, its results replacing the arguments on the stack; false (the stack
  // untouched) where its Philox draw cannot be made here (philox_draw: words specialized
  // otherwise than the recorded call's, for which Triton compiled the kernel).
  bool run(const Recipe& recipe, torch::jit::Stack* stack, size_t n, c10::Device device) {
    const size_t first = stack->size() - n;
    c10::OptionalDeviceGuard guard;
    const auto* impl = c10::impl::getDeviceGuardImpl(device.type());
    if (impl->getDevice() != device) guard.reset_device(device);
    std::array<int32_t, 4> words{};
    if (recipe.draw) {
      const auto drawn = philox_draw(device, *recipe.draw);
      if (!drawn) return false;
      words = *drawn;
    }
    std::vector<at::Tensor> allocated;
    allocated.reserve(recipe.allocations.size());
    for (const Allocation& a : recipe.allocations) {
      allocated.push_back(allocate(a, device));
    }
    auto address = [&](int slot) -> uintptr_t {
      if (static_cast<size_t>(slot) < n) {
        return reinterpret_cast<uintptr_t>((*stack)[first + slot].toTensor().data_ptr());
      }
      if (slot >= kListSlot) {  // an element of a list argument (its key fixed the list's shape)
        const size_t position = static_cast<size_t>(slot - kListSlot) / kListWidth;
        const size_t element = static_cast<size_t>(slot - kListSlot) % kListWidth;
        return reinterpret_cast<uintptr_t>(list_element((*stack)[first + position], element).data_ptr());
      }
      return reinterpret_cast<uintptr_t>(allocated[slot - n].data_ptr());
    };
    if (!recipe.launches.empty()) {
      void* stream = device.is_cpu() ? nullptr : impl->getStreamNativeHandle(impl->getStream(device));
      if (!fake_launches.load(std::memory_order_relaxed)) ensure_context(device);
      uint64_t values[kMaxArgs];
      void* params[kMaxArgs];
      struct alignas(64) MapStorage {
        unsigned char bytes[128];
      };
      MapStorage maps[kMaxMaps];
      for (const LaunchStep& step : recipe.launches) {
        const size_t count = step.args.size();
        for (size_t i = 0; i < count; ++i) {
          const LaunchArg& arg = step.args[i];
          values[i] = 0;
          switch (arg.kind) {
            case kPointer: {
              const uint64_t p = address(arg.slot) + arg.offset;
              std::memcpy(&values[i], &p, 8);
              break;
            }
            case kNull:
              break;
            case kI8: { const int8_t v = static_cast<int8_t>(arg.ivalue); std::memcpy(&values[i], &v, 1); break; }
            case kU8: { const uint8_t v = static_cast<uint8_t>(arg.ivalue); std::memcpy(&values[i], &v, 1); break; }
            case kI16: { const int16_t v = static_cast<int16_t>(arg.ivalue); std::memcpy(&values[i], &v, 2); break; }
            case kU16: { const uint16_t v = static_cast<uint16_t>(arg.ivalue); std::memcpy(&values[i], &v, 2); break; }
            case kI32: { const int32_t v = static_cast<int32_t>(arg.ivalue); std::memcpy(&values[i], &v, 4); break; }
            case kPhilox: std::memcpy(&values[i], &words[arg.offset], 4); break;
            case kU32: { const uint32_t v = static_cast<uint32_t>(arg.ivalue); std::memcpy(&values[i], &v, 4); break; }
            case kI64:
            case kU64: std::memcpy(&values[i], &arg.ivalue, 8); break;
            case kF32: { const float v = static_cast<float>(arg.fvalue); std::memcpy(&values[i], &v, 4); break; }
            case kF64: std::memcpy(&values[i], &arg.fvalue, 8); break;
            case kTensorMap: {
              const uint64_t p = address(arg.slot) + arg.offset;
              std::memcpy(&values[i], &p, 8);  // what the launch log shows
              if (!fake_launches.load(std::memory_order_relaxed)) encode(step.maps[arg.map], p, maps[arg.map].bytes);
              params[i] = maps[arg.map].bytes;
              continue;
            }
          }
          params[i] = &values[i];
        }
        if (fake_launches.load(std::memory_order_relaxed)) {
          log_launch(step, stream, values, count);
          continue;
        }
        const Status code = driver.launch(reinterpret_cast<void*>(step.function), step.grid[0], step.grid[1],
                                             step.grid[2], step.block, 1, 1, step.shared, stream, params, nullptr);
        TORCH_CHECK(code == 0, "gems: launching a kernel of " + name_ + " failed: " + driver.describe(code));
      }
    }
    std::vector<c10::IValue> results;
    results.reserve(recipe.returns.size());
    for (int slot : recipe.returns) {
      if (static_cast<size_t>(slot) < n) {
        results.push_back((*stack)[first + slot]);
      } else {
        results.emplace_back(allocated[slot - n]);
      }
    }
    torch::jit::drop(*stack, n);
    for (auto& r : results) stack->push_back(std::move(r));
    return true;
  }

  // A recipe's allocation: straight from the allocator that PyTorch's own empty tensors of
  // this device type use (learned from one of them), without a trip through the dispatcher
  // (a few microseconds a call, more under the profiler); where that allocator cannot be
  // learned, through at::empty_strided.
  static at::Tensor allocate(const Allocation& a, c10::Device device) {
    static std::atomic<c10::Allocator*> learned[static_cast<int>(c10::DeviceType::COMPILE_TIME_MAX_DEVICE_TYPES)];
    const auto options = at::TensorOptions().dtype(a.dtype).device(device);
    auto& slot = learned[static_cast<int>(device.type())];
    c10::Allocator* allocator = slot.load(std::memory_order_acquire);
    if (allocator == nullptr) {  // first use (two threads may both learn it: the same answer)
      allocator = at::empty({1}, options).storage().allocator();
      slot.store(allocator, std::memory_order_release);
    }
    if (allocator == nullptr) return at::empty_strided(a.sizes, a.strides, options);
    const c10::DispatchKeySet keys(c10::computeDispatchKey(a.dtype, c10::kStrided, device));
    return at::Tensor(at::detail::empty_strided_generic(a.sizes, a.strides, allocator, keys, a.dtype));
  }

  void encode(const TensorMapSpec& spec, uint64_t address, void* map) const {
    static const unsigned ones[kMaxMapRank] = {1, 1, 1, 1, 1};
    const Status code = driver.encode_tiled(map, spec.data_type, spec.rank, reinterpret_cast<void*>(address),
                                               spec.dims, spec.strides, spec.box, ones, 0, spec.swizzle,
                                               spec.promotion, spec.fill);
    TORCH_CHECK(code == 0, "gems: encoding a tensor map for a kernel of " + name_ + " failed: " +
                driver.describe(code));
  }

  static void ensure_context(c10::Device device) {
    void* context = nullptr;
    TORCH_CHECK(driver.launch != nullptr, "gems: the native layer has no kernel launch (the backend supplies none)");
    if (driver.ctx_get(&context) == 0 && context != nullptr) return;
    int handle = 0;
    TORCH_CHECK(driver.device_get(&handle, device.index()) == 0, "gems: no device " + std::to_string(device.index()));
    TORCH_CHECK(driver.primary_retain(&context, handle) == 0 && driver.ctx_set(context) == 0,
                "gems: could not make the context of device " + std::to_string(device.index()) + " current");
  }

  void log_launch(const LaunchStep& step, void* stream, const uint64_t* values, size_t count) {
    py::gil_scoped_acquire gil;
    std::lock_guard<std::mutex> guard(log_mutex);
    if (launch_log == nullptr) launch_log = new py::list();
    py::list args;
    for (size_t i = 0; i < count; ++i) {
      const LaunchArg& arg = step.args[i];
      if (arg.kind == kTensorMap) {
        const TensorMapSpec& spec = step.maps[arg.map];
        py::list dims, strides, box;
        for (unsigned d = 0; d < spec.rank; ++d) {
          dims.append(spec.dims[d]);
          box.append(spec.box[d]);
          if (d + 1 < spec.rank) strides.append(spec.strides[d]);
        }
        uint64_t p;
        std::memcpy(&p, &values[i], 8);
        args.append(py::make_tuple("tensor_map", p, spec.data_type, spec.swizzle, spec.fill, spec.promotion,
                                   py::tuple(dims), py::tuple(strides), py::tuple(box)));
      } else if (arg.kind == kF32) {
        float f;
        std::memcpy(&f, &values[i], 4);
        args.append(py::float_(f));
      } else if (arg.kind == kF64) {
        double d;
        std::memcpy(&d, &values[i], 8);
        args.append(py::float_(d));
      } else if (arg.kind == kPointer || arg.kind == kNull || arg.kind == kU64 || arg.kind == kI64) {
        int64_t v;
        std::memcpy(&v, &values[i], 8);
        args.append(py::int_(v));
      } else if (arg.kind == kPhilox) {
        int32_t v;
        std::memcpy(&v, &values[i], 4);
        args.append(py::int_(v));
      } else {
        args.append(py::int_(arg.ivalue));
      }
    }
    launch_log->append(py::make_tuple(name_, step.function,
                                      py::make_tuple(step.grid[0], step.grid[1], step.grid[2]), step.block,
                                      step.shared, reinterpret_cast<uintptr_t>(stream), args));
  }

  void call_python(const c10::OperatorHandle& op, torch::jit::Stack* stack, size_t n, const Key* key,
                   const std::vector<size_t>* sized, const Recipe* predicted = nullptr) {
    const auto& schema = op.schema();
    py::gil_scoped_acquire gil;
    python_calls_.fetch_add(1, std::memory_order_relaxed);
    bool record = false;
    bool first_call = false;  // recorded on the key's first call (a family met before)
    Key masked;
    std::vector<int64_t> entries;
    const bool checking = key != nullptr && checking_depth == 0 && check_mode.load(std::memory_order_relaxed);
    if (checking) {
      record = true;
    } else if (key != nullptr) {
      std::lock_guard<std::mutex> guard(book_->mutex);
      if (book_->refused.count(*key)) {
        record = false;  // recorded once and refused: the Python path from now on
      } else if (book_->seen.count(*key)) {
        record = true;
      } else {
        if (book_->seen.size() >= limit_) book_->seen.clear();
        book_->seen.insert(*key);
        if (book_->families.size() >= limit_) book_->families.clear();
        masked = masked_key(*key, *sized, entries);
        auto met = book_->families.emplace(masked, kFamilySeen);
        record = first_call = !met.second && met.first->second != kFamilyPlain;
      }
    }
    py::list args;
    py::dict kwargs;
    py::list tensors;  // (stack position, tensor) for the recorder
    python_arguments(schema, *stack, n, args, kwargs, record ? &tensors : nullptr);
    std::vector<c10::IValue> copies, predicted_copies;
    if (checking) {  // check mode keeps the GIL throughout
      CheckingScope scope;
      copies = copy_operands(*stack, n);
      if (predicted != nullptr) predicted_copies = copy_operands(*stack, n);
    }
    PyObject* raw = nullptr;
    py::tuple call_args = py::tuple(args);
    py::object family = py::none();
    if (record) {
      if (masked.empty()) masked = masked_key(*key, *sized, entries);
      family = py::make_tuple(py::tuple(py::cast(masked)), py::tuple(py::cast(entries)));
      py::tuple recorder_args =
          py::make_tuple(py::handle(python_kernel_), call_args, kwargs, py::tuple(tensors), n, family);
      raw = PyObject_Call(recorder_, recorder_args.ptr(), nullptr);
    } else {
      raw = PyObject_Call(python_kernel_, call_args.ptr(), kwargs.ptr());
    }
    if (raw == nullptr) throw python_error();
    py::object out = py::reinterpret_steal<py::object>(raw);
    if (record) {
      py::tuple pair = out.cast<py::tuple>();
      out = pair[0];
      if (py::isinstance<py::bool_>(pair[1])) {
        // not yet (ATen served the call while its kernel compiles, or it tuned): the key
        // stays seen, so the next call records again
      } else if (!pair[1].is_none()) {
        std::shared_ptr<const Recipe> recipe = parse_recipe(pair[1], n);
        note_family(masked, recipe && py::len(pair[1]) > 3);  // a fourth part: it opted in
        if (recipe && checking) {
          push_result(schema, stack, n, out);
          {
            CheckingScope scope;
            check(*recipe, *stack, schema.returns().size(), copies, n);
            if (predicted != nullptr) check(*predicted, *stack, schema.returns().size(), predicted_copies, n);
          }
          keep(*key, masked, std::move(recipe));
          return;
        }
        TORCH_CHECK(!(checking && predicted != nullptr), "gems native check: " + name_ +
                    ": a length-generic recipe serves a call its Python kernel does not repeat");
        if (recipe) {
          keep(*key, masked, std::move(recipe));
        } else {
          refuse(*key);
        }
      } else {
        TORCH_CHECK(!(checking && predicted != nullptr), "gems native check: " + name_ +
                    ": a length-generic recipe serves a call its Python kernel does not repeat");
        // a first call may do what later ones do not (allocate a buffer it keeps): the key's
        // next call records again
        if (!first_call) refuse(*key);
        note_family(masked, false);
      }
    }
    push_result(schema, stack, n, out);
  }

  void keep(const Key& key, const Key& masked, std::shared_ptr<const Recipe> recipe) {
    recorded_.fetch_add(1, std::memory_order_relaxed);
    std::lock_guard<std::mutex> guard(book_->mutex);
    if (book_->recipes.size() >= limit_) book_->recipes.clear();
    if (recipe->generic) {
      if (book_->generic.size() >= limit_) book_->generic.clear();
      auto& bases = book_->generic[masked];
      bases.insert(bases.begin(), recipe);
      if (bases.size() > kGenericPerFamily) bases.pop_back();
      has_generic_.store(true, std::memory_order_relaxed);
    }
    book_->recipes[key] = std::move(recipe);
  }

  void note_family(const Key& masked, bool generic) {
    std::lock_guard<std::mutex> guard(book_->mutex);
    if (book_->families.size() >= limit_) book_->families.clear();
    book_->families[masked] = generic ? kFamilyGeneric : kFamilyPlain;
  }

  void refuse(const Key& key) {
    refused_.fetch_add(1, std::memory_order_relaxed);
    std::lock_guard<std::mutex> guard(book_->mutex);
    if (book_->refused.size() >= limit_) book_->refused.clear();
    book_->refused.insert(key);
  }

  // Copies of a call's tensor operands with the same sizes and strides (operands whose
  // elements overlap, which no kernel writes, are shared).
  static std::vector<c10::IValue> copy_operands(const torch::jit::Stack& stack, size_t n) {
    std::vector<c10::IValue> copies;
    copies.reserve(n);
    for (size_t i = stack.size() - n; i < stack.size(); ++i) {
      const c10::IValue& v = stack[i];
      if (v.isTensor() && v.toTensor().defined() && v.toTensor().layout() == c10::kStrided) {
        copies.emplace_back(copy_of(v.toTensor()));
      } else if (v.isTensorList()) {
        c10::List<at::Tensor> list;
        for (const at::Tensor& t : v.toTensorList().vec()) list.push_back(copy_of(t));
        copies.emplace_back(list);
      } else if (v.isList()) {
        c10::List<c10::IValue> list(v.toList().elementType());
        for (const c10::IValue& item : v.toList().vec()) {
          list.push_back(item.isTensor() && item.toTensor().defined() ? c10::IValue(copy_of(item.toTensor())) : item);
        }
        copies.emplace_back(list);
      } else {
        copies.push_back(v);
      }
    }
    return copies;
  }

  static at::Tensor copy_of(const at::Tensor& t) {
    if (t.layout() != c10::kStrided || at::has_internal_overlap(t) == at::MemOverlap::Yes) return t;
    at::Tensor copy = at::empty_strided(t.sizes(), t.strides(), t.options());
    copy.copy_(t);
    return copy;
  }

  static bool same(const at::Tensor& a, const at::Tensor& b) {
    if (a.sizes() != b.sizes() || a.scalar_type() != b.scalar_type()) return false;
    if (a.numel() == 0) return true;
    if (at::isFloatingType(a.scalar_type())) return at::allclose(a, b, 1e-3, 1e-5, true);
    return at::equal(a, b);
  }

  // Runs the recipe on the copies and holds its results (and whatever it wrote into the
  // operands) against the Python kernel's: the stack holds the Python results now.
  void check(const Recipe& recipe, torch::jit::Stack& stack, size_t returns, const std::vector<c10::IValue>& copies,
             size_t n) {
    // a recipe that draws random numbers draws others than the Python call did: nothing to
    // hold against it (and a draw here would move the generator past what ATen expects)
    if (recipe.draw) return;
    torch::jit::Stack replay(copies.begin(), copies.end());
    run(recipe, &replay, n, device_of(copies));
    TORCH_CHECK(replay.size() == returns, "gems native check: " + name_ + ": the recipe returned " +
                std::to_string(replay.size()) + " values, the Python kernel " + std::to_string(returns));
    for (size_t i = 0; i < returns; ++i) {
      const c10::IValue& mine = replay[i];
      const c10::IValue& theirs = stack[stack.size() - returns + i];
      if (mine.isTensor() && theirs.isTensor()) {
        const at::Tensor& a = mine.toTensor();
        const at::Tensor& b = theirs.toTensor();
        TORCH_CHECK(a.strides() == b.strides() || a.numel() <= 1, "gems native check: " + name_ + ": result " +
                    std::to_string(i) + " has other strides from the recipe than from Python");
        TORCH_CHECK(same(a, b), "gems native check: " + name_ + ": result " + std::to_string(i) +
                    " differs between the recipe and the Python kernel");
      }
    }
  }

  // The device of a call's operands (list elements included): the first tensor off the CPU,
  // else a device argument off the CPU (a factory call such as arange names its device only
  // there, as in key_of), else the first tensor's.
  static c10::Device device_of(const std::vector<c10::IValue>& values) {
    std::vector<at::Tensor> tensors;
    std::optional<c10::Device> named;
    for (const auto& v : values) {
      if (v.isDevice()) {
        if (!named && !v.toDevice().is_cpu() && v.toDevice().has_index()) named = v.toDevice();
      } else if (v.isTensor()) {
        tensors.push_back(v.toTensor());
      } else if (v.isTensorList()) {
        for (const at::Tensor& t : v.toTensorList().vec()) tensors.push_back(t);
      } else if (v.isList()) {
        for (const c10::IValue& item : v.toList().vec()) {
          if (item.isTensor()) tensors.push_back(item.toTensor());
        }
      }
    }
    for (const auto& t : tensors) {
      if (t.defined() && !t.is_cpu()) return t.device();
    }
    if (named) return *named;
    for (const auto& t : tensors) {
      if (t.defined()) return t.device();
    }
    return c10::Device(c10::kCPU);
  }

  // A pointer's slot: a stack argument, an allocation, or an element of a list argument.
  static bool valid_pointer_slot(int slot, size_t n, size_t slots) {
    if (slot >= kListSlot) return static_cast<size_t>(slot - kListSlot) / kListWidth < n;
    return slot >= 0 && static_cast<size_t>(slot) < slots;
  }

  // (data type, swizzle, fill, L2 promotion, dims, byte strides, box): recorder.py's TensorMap.
  static bool parse_map(const py::handle& value, std::vector<TensorMapSpec>& maps) {
    py::tuple t = value.cast<py::tuple>();
    if (t.size() != 7) return false;
    TensorMapSpec spec;
    spec.data_type = t[0].cast<int>();
    spec.swizzle = t[1].cast<int>();
    spec.fill = t[2].cast<int>();
    spec.promotion = t[3].cast<int>();
    const auto dims = t[4].cast<std::vector<uint64_t>>();
    const auto strides = t[5].cast<std::vector<uint64_t>>();
    const auto box = t[6].cast<std::vector<unsigned>>();
    if (dims.empty() || dims.size() > kMaxMapRank || strides.size() + 1 != dims.size() || box.size() != dims.size()) {
      return false;
    }
    spec.rank = static_cast<unsigned>(dims.size());
    for (unsigned d = 0; d < spec.rank; ++d) {
      spec.dims[d] = dims[d];
      spec.box[d] = box[d];
      if (d + 1 < spec.rank) spec.strides[d] = strides[d];
    }
    maps.push_back(spec);
    return true;
  }

  // (pivot, low, high, entries, numbers): recorder.py's learn.
  static std::shared_ptr<const Generic> parse_generic(const py::handle& spec) {
    py::tuple t = spec.cast<py::tuple>();
    auto generic = std::make_shared<Generic>();
    generic->pivot = t[0].cast<size_t>();
    generic->low = t[1].cast<int64_t>();
    generic->high = t[2].cast<int64_t>();
    for (const auto& e : t[3]) {
      py::tuple entry = e.cast<py::tuple>();
      generic->entries.push_back({entry[0].cast<int64_t>(), entry[1].cast<int64_t>(), entry[2].cast<int64_t>()});
    }
    for (const auto& x : t[4]) {
      py::tuple item = x.cast<py::tuple>();
      GenericNumber number{{}, item[1].cast<int>(), item[2].cast<int64_t>()};
      for (const auto& f : item[0]) {
        py::tuple form = f.cast<py::tuple>();
        const Formula formula{form[0].cast<int64_t>(), form[1].cast<int64_t>(), form[2].cast<int64_t>()};
        if (formula.c < 1) return nullptr;
        number.formulas.push_back(formula);
      }
      if (number.formulas.empty()) return nullptr;
      generic->numbers.push_back(std::move(number));
    }
    return generic;
  }

  std::shared_ptr<const Recipe> parse_recipe(const py::handle& spec, size_t n) {
    // (allocations, launches, returns): see gems_core/native/recorder.py
    auto recipe = std::make_shared<Recipe>();
    py::tuple parts = spec.cast<py::tuple>();
    for (const auto& a : parts[0]) {
      py::tuple alloc = a.cast<py::tuple>();
      Allocation allocation;
      allocation.sizes = alloc[0].cast<std::vector<int64_t>>();
      allocation.strides = alloc[1].cast<std::vector<int64_t>>();
      PyObject* dtype = alloc[2].ptr();
      if (!THPDtype_Check(dtype)) return nullptr;
      allocation.dtype = reinterpret_cast<THPDtype*>(dtype)->scalar_type;
      recipe->allocations.push_back(std::move(allocation));
    }
    const size_t slots = n + recipe->allocations.size();
    for (const auto& l : parts[1]) {
      py::tuple launch = l.cast<py::tuple>();
      LaunchStep step;
      step.function = launch[0].cast<uint64_t>();
      step.grid[0] = launch[1].cast<unsigned>();
      step.grid[1] = launch[2].cast<unsigned>();
      step.grid[2] = launch[3].cast<unsigned>();
      step.block = launch[4].cast<unsigned>();
      step.shared = launch[5].cast<unsigned>();
      for (const auto& x : launch[6]) {
        py::tuple item = x.cast<py::tuple>();
        LaunchArg arg{item[0].cast<int>(), item[1].cast<int>(), item[2].cast<int64_t>(), 0, 0.0};
        if (arg.kind == kTensorMap) {
          if (!driver.encode_tiled && !fake_launches.load()) return nullptr;  // no encoder: Python's
          if (step.maps.size() >= kMaxMaps || !parse_map(item[3], step.maps)) return nullptr;
          arg.map = static_cast<int>(step.maps.size()) - 1;
        } else if (arg.kind == kF32 || arg.kind == kF64) {
          arg.fvalue = item[3].cast<double>();
        } else if (arg.kind == kPhilox) {
          // (kPhilox, draw, word, (counters, specialization class of the recorded word))
          py::tuple value = item[3].cast<py::tuple>();
          const int64_t counters = value[0].cast<int64_t>();
          if (arg.slot != 0 || arg.offset < 0 || arg.offset > 3 || counters <= 0) return nullptr;  // one draw
          if (!recipe->draw) recipe->draw = Draw{counters};
          if (recipe->draw->counters != counters) return nullptr;
          recipe->draw->classes[arg.offset] = value[1].cast<int64_t>();
        } else if (arg.kind != kPointer && arg.kind != kNull) {
          arg.ivalue = item[3].cast<int64_t>();
        }
        if (arg.kind < kPointer || arg.kind > kPhilox) return nullptr;
        if ((arg.kind == kPointer || arg.kind == kTensorMap) && !valid_pointer_slot(arg.slot, n, slots)) return nullptr;
        step.args.push_back(arg);
      }
      if (step.args.size() > kMaxArgs) return nullptr;
      recipe->launches.push_back(std::move(step));
    }
    for (const auto& r : parts[2]) {
      const int slot = r.cast<int>();
      if (slot < 0 || static_cast<size_t>(slot) >= slots) return nullptr;
      recipe->returns.push_back(slot);
    }
    // a recipe that draws is never length-generic: its words are no formulas
    if (parts.size() > 3 && !parts[3].is_none() && !recipe->draw) recipe->generic = parse_generic(parts[3]);
    return recipe;
  }

  std::string name_;
  c10::DeviceType device_type_;
  size_t limit_;
  PyObject* python_kernel_ = nullptr;
  PyObject* recorder_ = nullptr;
  std::shared_ptr<Book> book_;
  std::atomic<uint64_t> hits_{0}, python_calls_{0}, recorded_{0}, refused_{0}, generic_hits_{0};
  std::atomic<uint64_t> aten_calls_{0};
  std::atomic<bool> has_generic_{false};
  AtenRoute route_;
};

// In front of an op's Python kernel on an Autograd key (ops gems differentiates itself). A
// call that needs no gradient (grad mode off, or no tensor argument requiring grad, and no
// forward-mode gradient) goes on below autograd, to the backend key and its native kernel,
// with no Python; any other call runs the Python kernel, which takes the keyset first.
class AutogradGate final : public c10::OperatorKernel {
 public:
  AutogradGate(py::object python_kernel, c10::DeviceType device_type)
      : device_type_(device_type) {
    python_kernel_ = python_kernel.release().ptr();
  }

  ~AutogradGate() override {
    if (Py_IsInitialized()) {
      py::gil_scoped_acquire gil;
      Py_XDECREF(python_kernel_);
    }
  }

  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet keyset, torch::jit::Stack* stack) {
    const size_t n = op.schema().arguments().size();
    if (!needs_autograd(*stack, n)) {
      below_.fetch_add(1, std::memory_order_relaxed);
      op.redispatchBoxed(keyset & c10::after_autograd_keyset, stack);
      return;
    }
    if (route_.takes(op.schema(), *stack, n, device_type_)) {  // ATen's, graph and all
      aten_calls_.fetch_add(1, std::memory_order_relaxed);
      route_.kernel->callBoxed(op, keyset, stack);
      return;
    }
    python_calls_.fetch_add(1, std::memory_order_relaxed);
    const auto& schema = op.schema();
    py::gil_scoped_acquire gil;
    py::list args;
    py::dict kwargs;
    args.append(py::cast(keyset));
    python_arguments(schema, *stack, n, args, kwargs, nullptr);
    PyObject* raw = PyObject_Call(python_kernel_, py::tuple(args).ptr(), kwargs.ptr());
    if (raw == nullptr) throw python_error();
    push_result(schema, stack, n, py::reinterpret_steal<py::object>(raw));
  }

  std::tuple<uint64_t, uint64_t, uint64_t> counts() const {
    return {below_.load(std::memory_order_relaxed), python_calls_.load(std::memory_order_relaxed),
            aten_calls_.load(std::memory_order_relaxed)};
  }

  void route_to_aten(AtenRoute route) { route_ = std::move(route); }

 private:
  static bool needs_gradient(const at::Tensor& t, bool grad_mode) {
    return t.defined() && ((grad_mode && t.requires_grad()) || t._fw_grad(0).defined());
  }

  static bool needs_autograd(const torch::jit::Stack& stack, size_t n) {
    const bool grad_mode = c10::GradMode::is_enabled();
    const auto needs = [grad_mode](const at::Tensor& t) { return needs_gradient(t, grad_mode); };
    for (size_t i = stack.size() - n; i < stack.size(); ++i) {
      if (any_tensor(stack[i], needs)) return true;
    }
    return false;
  }

  PyObject* python_kernel_;
  c10::DeviceType device_type_;
  AtenRoute route_;
  std::atomic<uint64_t> below_{0}, python_calls_{0}, aten_calls_{0};
};

// One registration block: the native kernels of one enable() on one dispatch key.
class Registration {
 public:
  Registration(const std::string& ns, const std::string& dispatch_key)
      : ns_(ns),
        key_(c10::parseDispatchKey(dispatch_key)),
        library_(std::make_unique<torch::Library>(torch::Library::IMPL, ns, key_, __FILE__, __LINE__)) {}

  // ``gated``: a tensor of each dtype the backend leaves to ATen for this op; ``foreign``:
  // the op's Python kernel declines tensors (of more than zero dims) on a device of another
  // type. Such calls go to the kernel registered for the key before this one (AtenRoute), if
  // that is not gems' own.
  void impl(const std::string& name, py::object python_kernel, py::object recorder, size_t limit,
            const std::string& shelf, const std::vector<at::Tensor>& gated, bool foreign) {
    TORCH_CHECK(library_, "gems: this registration is closed");
    torch::PyWarningHandler handler;  // an override warning becomes a Python warning
    auto kernel = std::make_unique<NativeKernel>(name, c10::dispatchKeyToDeviceType(key_), std::move(python_kernel),
                                                 std::move(recorder), limit, book_on(shelf));
    if (auto route = route_for(name, gated, foreign)) kernel->route_to_aten(std::move(*route));
    kernels_.push_back(kernel.get());
    library_->impl(name.c_str(), torch::CppFunction::makeFromBoxedFunctor(std::move(kernel)));
  }

  // On an Autograd key: the gate in front of the op's Python autograd kernel; calls that
  // need a graph and involve a ``gated`` dtype go to ATen's kernel for the key (for a
  // composite op, its decomposition) without Python.
  void gate(const std::string& name, py::object python_kernel, const std::vector<at::Tensor>& gated) {
    TORCH_CHECK(library_, "gems: this registration is closed");
    torch::PyWarningHandler handler;
    auto kernel = std::make_unique<AutogradGate>(std::move(python_kernel), c10::dispatchKeyToDeviceType(key_));
    if (auto route = route_for(name, gated, false)) kernel->route_to_aten(std::move(*route));
    gates_.emplace_back(name, kernel.get());
    library_->impl(name.c_str(), torch::CppFunction::makeFromBoxedFunctor(std::move(kernel)));
  }

  py::list stats() {
    py::list out;
    std::lock_guard<std::mutex> guard(live_mutex);
    for (NativeKernel* k : kernels_) {
      if (live_kernels.count(k)) out.append(k->stats());
    }
    for (const auto& [name, g] : gates_) {  // owned by the library; close() forgets them
      const auto [below, python, aten] = g->counts();
      py::dict d;
      d["op"] = name;
      d["gate"] = true;
      d["below_autograd"] = below;
      d["python_calls"] = python;
      d["aten_calls"] = aten;
      out.append(d);
    }
    return out;
  }

  void close() {
    kernels_.clear();
    gates_.clear();
    library_.reset();
  }

 private:
  // ATen's route for op ``name`` on this key, where anything goes there and the kernel the
  // key has now is not gems' own (a registration still open: its calls would come back here)
  std::optional<AtenRoute> route_for(const std::string& name, const std::vector<at::Tensor>& gated, bool foreign) {
    if (gated.empty() && !foreign) return std::nullopt;
    const size_t dot = name.find('.');
    const std::string packet = ns_ + "::" + name.substr(0, dot);
    const std::string overload = dot == std::string::npos ? "" : name.substr(dot + 1);
    auto handle = c10::Dispatcher::singleton().findSchema({packet, overload});
    // the key's computed kernel: its own, or an alias key's (a composite op's decomposition)
    if (!handle || !handle->hasComputedKernelForDispatchKey(key_)) return std::nullopt;
    c10::SafeKernelFunction previous = handle->getComputedKernelForDispatchKey(key_);
    if (previous.debug().find("dispatch_layer") != std::string::npos ||
        previous.debug().find("gems_core") != std::string::npos) {
      return std::nullopt;
    }
    AtenRoute route;
    for (const at::Tensor& t : gated) route.dtypes.push_back(t.scalar_type());
    route.foreign = foreign;
    route.kernel.emplace(std::move(previous));
    return route;
  }

  std::string ns_;
  c10::DispatchKey key_;
  std::unique_ptr<torch::Library> library_;
  std::vector<NativeKernel*> kernels_;
  std::vector<std::pair<std::string, AutogradGate*>> gates_;
};

void clear_all() {
  {
    std::lock_guard<std::mutex> guard(live_mutex);
    for (NativeKernel* k : live_kernels) k->clear();
  }
  std::lock_guard<std::mutex> guard(shelves_mutex);
  for (auto& [shelf, book] : shelves) book->clear();
}

std::string set_driver(uint64_t launch, uint64_t ctx_get, uint64_t ctx_set, uint64_t device_get,
                       uint64_t primary_retain, uint64_t error_string, uint64_t encode_tiled) {
  return driver.set(launch, ctx_get, ctx_set, device_get, primary_retain, error_string, encode_tiled);
}

uintptr_t current_stream(int device_index) {
  const c10::Device device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(device_index));
  const auto* impl = c10::impl::getDeviceGuardImpl(device.type());
  return reinterpret_cast<uintptr_t>(impl->getStreamNativeHandle(impl->getStream(device)));
}

// A foreach call's tensor lists (``rows``), checked as gems' Python path checks them: every
// tensor strided, dense without overlap (contiguous, or channels-last: a convolution's weight),
// of the first tensor's dtype and device; every row as long as the first, each tensor of its
// column's sizes and layout (its strides, or contiguous as the column's first is), so that
// the tensors of a column hold their elements in the same order. Returns (every row's data pointers, row after
// row; the first row's element counts), or None where the call is not served. An optimizer
// step checks several lists of hundreds of tensors per call: in Python that cost more than
// ATen's whole call.
py::object foreach_addresses(const py::handle& rows) {
  PyObject* outer = rows.ptr();
  if (!PyList_Check(outer) && !PyTuple_Check(outer)) return py::none();
  const Py_ssize_t r = PySequence_Fast_GET_SIZE(outer);
  if (r == 0) return py::none();
  PyObject* head = PySequence_Fast_GET_ITEM(outer, 0);
  if (!PyList_Check(head) && !PyTuple_Check(head)) return py::none();
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(head);
  if (n == 0) return py::none();
  py::tuple addresses(r * n);
  py::tuple counts(n);
  std::vector<const at::Tensor*> column(static_cast<size_t>(n));
  c10::ScalarType dtype = c10::ScalarType::Undefined;
  c10::Device device(c10::kCPU);
  for (Py_ssize_t i = 0; i < r; ++i) {
    PyObject* row = PySequence_Fast_GET_ITEM(outer, i);
    if ((!PyList_Check(row) && !PyTuple_Check(row)) || PySequence_Fast_GET_SIZE(row) != n) return py::none();
    for (Py_ssize_t j = 0; j < n; ++j) {
      PyObject* item = PySequence_Fast_GET_ITEM(row, j);
      if (!THPVariable_Check(item)) return py::none();
      const at::Tensor& t = THPVariable_Unpack(item);
      if (i == 0 && j == 0) {
        dtype = t.scalar_type();
        device = t.device();
      }
      if (t.layout() != c10::kStrided || t.scalar_type() != dtype || t.device() != device ||
          !t.is_non_overlapping_and_dense())
        return py::none();
      if (i == 0) {
        column[j] = &t;
        counts[j] = py::int_(t.numel());
      } else if (t.sizes() != column[j]->sizes() ||
                 (t.strides() != column[j]->strides() && !(t.is_contiguous() && column[j]->is_contiguous()))) {
        return py::none();
      }
      addresses[i * n + j] = py::int_(reinterpret_cast<uintptr_t>(t.data_ptr()));
    }
  }
  return py::make_tuple(addresses, counts);
}

py::list take_launch_log() {
  std::lock_guard<std::mutex> guard(log_mutex);
  py::list out = launch_log ? *launch_log : py::list();
  delete launch_log;
  launch_log = nullptr;
  return out;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "gems' native dispatch layer";
  py::class_<Registration>(m, "Registration")
      .def(py::init<const std::string&, const std::string&>())
      .def("impl", &Registration::impl, py::arg("name"), py::arg("python_kernel"), py::arg("recorder"),
           py::arg("limit"), py::arg("shelf") = std::string(), py::arg("gated") = std::vector<at::Tensor>(),
           py::arg("foreign") = false)
      .def("gate", &Registration::gate, py::arg("name"), py::arg("python_kernel"),
           py::arg("gated") = std::vector<at::Tensor>())
      .def("stats", &Registration::stats)
      .def("close", &Registration::close);
  m.def("clear_all", &clear_all, "Forget every recipe of every live native kernel");
  m.def("set_driver", &set_driver, "Take the device driver's entry points (addresses, 0: absent); an error message or an empty string",
        py::arg("launch"), py::arg("context_get"), py::arg("context_set"), py::arg("device_get"),
        py::arg("primary_context_retain"), py::arg("error_string"), py::arg("encode_tensor_map"));
  m.def("current_stream", &current_stream, "The current CUDA stream's handle, as the layer reads it");
  m.def("set_fake_launches", [](bool on) { fake_launches.store(on); }, "Record launches instead of making them (tests)");
  m.def("set_check", [](bool on) { check_mode.store(on); }, "Record every call and check each new recipe against Python");
  m.def("take_launch_log", &take_launch_log, "The launches recorded instead of made, since the last call");
  m.def(
      "philox_advance",
      [](py::object generator, int64_t counters) {
        TORCH_CHECK(THPGenerator_Check(generator.ptr()), "gems: philox_advance takes a torch.Generator");
        at::Generator& gen = reinterpret_cast<THPGenerator*>(generator.ptr())->cdata;
        py::gil_scoped_release no_gil;  // the mutex may be held by a draw that waits for the GIL
        return *philox_advance(gen, counters);
      },
      "(seed, offset) of counters Philox counters from a device generator, its offset advanced past them "
      "under the generator's mutex (the replays' draws take it too)");
  m.def("foreach_addresses", &foreach_addresses,
        "A foreach call's tensor lists checked: (data pointers row after row, the first row's element counts) or None");
}
