// Registration of the `tpu` backend with the dispatcher: the boxed kernel for every op,
// plus the few kernels that are metadata or transfers rather than lowerings.
#include <ATen/Context.h>
#include <ATen/EmptyTensor.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/native/TensorFactories.h>
#include <ATen/ops/_nested_tensor_size_native.h>
#include <ATen/ops/_nested_tensor_storage_offsets_native.h>
#include <ATen/ops/_nested_tensor_strides_native.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/is_set_to_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/DeviceGuard.h>
#include <torch/csrc/jit/frontend/tracer.h>
#include <torch/library.h>

#include "aten/copy_ops.h"
#include "aten/device_runtime.h"
#include "aten/op_kernel.h"
#include "aten/storage_ops.h"
#include "aten/tpu_guard.h"
#include "aten/tpu_storage.h"
#include "aten/tpu_streams.h"
#include "lowering/lowering.h"

namespace torchtpu::aten {
namespace {

constexpr c10::DispatchKeySet kTpuKeys(c10::DispatchKey::PrivateUse1);

// Element types a plugin is known to lack, refused when a tensor is made (a clear error
// naming the plugin instead of one from its first transfer or compile): TPUs have no
// complex128. Other gaps surface from the runtime with the plugin named (client.cc).
void check_plugin_dtype(c10::ScalarType st) {
  if (platform_holds(to_dtype(st))) return;
  const runtime::Client& c = client();
  TORCH_CHECK_NOT_IMPLEMENTED(false, "tpu: dtype ", st,
                              " is not supported by the ", c.platform_name(), " plugin (",
                              c.plugin().path(), "): TPUs compute complex64 only; use "
                              "torch.complex64, or keep complex128 tensors on the CPU");
}

int device_of(std::optional<c10::Device> device) {
  if (device && device->has_index()) return device->index();
  return current_device_index();
}

// Under torch.use_deterministic_algorithms(True) with fill_uninitialized_memory (its
// default), an empty tensor is NaN (floats) or the dtype's largest value, as the CPU's and
// CUDA's empty make it, so code reading memory it never wrote shows it.
at::Tensor filled_if_deterministic(at::Tensor t) {
  if (at::globalContext().deterministicAlgorithms() &&
      at::globalContext().deterministicFillUninitializedMemory()) {
    at::native::fill_empty_deterministic_(t);
  }
  return t;
}

// pin_memory=True names page-locked host memory, which a device tensor is not (CUDA's
// factories refuse it with these words; it was ignored).
void check_not_pinned(std::optional<bool> pin_memory) {
  TORCH_CHECK(!pin_memory.value_or(false), "Only dense CPU tensors can be pinned");
}

// A float16 tensor's complex view is complex32, which no op here runs: refused at the view
// (to_dtype raises its NotImplementedError, as for making one any other way) rather than
// by the first op that reads it.
at::Tensor view_as_complex(const at::Tensor& self) {
  if (self.scalar_type() == c10::ScalarType::Half) to_dtype(c10::ScalarType::ComplexHalf);
  return at::native::view_as_complex(self);
}

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout> layout,
                               std::optional<c10::Device> device, std::optional<bool> pin_memory,
                               std::optional<c10::MemoryFormat> memory_format) {
  TORCH_CHECK(!layout || *layout == c10::kStrided, "tpu: only strided tensors are supported, got ", *layout);
  check_not_pinned(pin_memory);
  c10::ScalarType st = dtype.value_or(c10::get_default_dtype_as_scalartype());
  to_dtype(st);  // rejects unsupported dtypes with a clear message
  check_plugin_dtype(st);
  // The allocator places storage on the current device (restored when it raises too).
  c10::DeviceGuard guard(c10::Device(c10::DeviceType::PrivateUse1,
                                     static_cast<c10::DeviceIndex>(device_of(device))));
  at::Tensor t = at::detail::empty_generic(size, tpu_allocator(), kTpuKeys, st, memory_format);
  return filled_if_deterministic(t);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride,
                         std::optional<c10::ScalarType> dtype, std::optional<c10::Layout> layout,
                         std::optional<c10::Device> device, std::optional<bool> pin_memory) {
  TORCH_CHECK(!layout || *layout == c10::kStrided, "tpu: only strided tensors are supported, got ", *layout);
  check_not_pinned(pin_memory);
  c10::ScalarType st = dtype.value_or(c10::get_default_dtype_as_scalartype());
  to_dtype(st);
  check_plugin_dtype(st);
  c10::DeviceGuard guard(c10::Device(c10::DeviceType::PrivateUse1,
                                     static_cast<c10::DeviceIndex>(device_of(device))));
  at::Tensor t = at::detail::empty_strided_generic(size, stride, tpu_allocator(), kTpuKeys, st);
  return filled_if_deterministic(t);
}

// Whether `self` may take `from`'s storage in place (`param.data = t`, and Module.to()
// through it). The default is true only within the built-in backends, so module.to("tpu")
// made new Parameters, each module its own: weights tied across modules (an LM head and
// its embedding) came apart. Strided tensors on the CPU and on tpu are compatible.
bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  auto plain = [](const at::Tensor& t) {
    return t.layout() == c10::kStrided &&
           (t.device().type() == c10::DeviceType::CPU ||
            t.device().type() == c10::DeviceType::PrivateUse1);
  };
  return plain(self) && plain(from);
}

void boxed_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  tpu_boxed_kernel(op, stack);
}

// convolution's tracer kernel records nothing (torch.jit.trace leaves that to _convolution,
// which the CPU's convolution calls) and keeps tracing on: a trace recorded no node (its
// result became a constant of the trace) and the meta kernel ran traced (sizes as tensors:
// a TypeError). Traced, it runs as the CPU's does, through _convolution, which records
// itself and runs its kernels untraced (convolution_overrideable, lowered).
void convolution_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  if (!torch::jit::tracer::isTracing()) return tpu_boxed_kernel(op, stack);
  auto args = torch::jit::last(*stack, 9);
  const at::Context& ctx = at::globalContext();
  at::Tensor out = at::_convolution(
      args[0].toTensor(), args[1].toTensor(), args[2].toOptional<at::Tensor>(),
      args[3].toIntVector(), args[4].toIntVector(), args[5].toIntVector(), args[6].toBool(),
      args[7].toIntVector(), args[8].toInt(), ctx.benchmarkCuDNN(),
      ctx.deterministicCuDNN() || ctx.deterministicAlgorithms(), ctx.userEnabledCuDNN(),
      ctx.allowTF32CuDNN());
  torch::jit::drop(*stack, 9);
  stack->emplace_back(std::move(out));
}

// Sparse and nested tpu tensors have no kernels: an op that makes or reads one says so and
// what to do, where the dispatcher said "Could not run ... from the 'Sparsetpu' backend"
// (and a CSR tensor, whose constructor needs no kernel, failed in repr with a
// self-contradicting message).
[[noreturn]] void refuse_layout(const c10::OperatorHandle& op, const char* why) {
  C10_THROW_ERROR(NotImplementedError,
                  "torchtpu: " + c10::toString(op.operator_name()) + " on a " + why);
}

void sparse_unsupported(const c10::OperatorHandle& op, torch::jit::Stack* /*stack*/) {
  refuse_layout(op, "sparse tpu tensor: sparse layouts (COO, CSR, CSC, BSR, BSC) are not "
                    "supported on tpu. Keep the sparse tensor on the CPU, or make it dense "
                    "(.to_dense()) before moving it to tpu; for nn.Embedding and "
                    "nn.EmbeddingBag, use sparse=False.");
}

void nested_unsupported(const c10::OperatorHandle& op, torch::jit::Stack* /*stack*/) {
  refuse_layout(op, "nested tpu tensor: nested tensors are not supported on tpu. "
                    "nn.TransformerEncoder makes one in eval mode with a src_key_padding_mask "
                    "(its sparsity fast path): construct it with enable_nested_tensor=False, "
                    "or set encoder.use_nested_tensor = False (for nn.Transformer: "
                    "model.encoder.use_nested_tensor = False); the results are the same.");
}

void quantized_unsupported(const c10::OperatorHandle& op, torch::jit::Stack* /*stack*/) {
  refuse_layout(op, "quantized tpu tensor: quantized tensors (qint8, quint8, qint32, ...) are "
                    "not supported on tpu. Call .dequantize() on the CPU before moving the "
                    "tensor to tpu.");
}

}  // namespace

void register_direct_lowerings() {
  // Also prunes table entries that name no overload of this PyTorch.
  // Ops with a CompositeExplicitAutograd kernel would decompose before reaching the
  // backend fallback. Where we have a lowering for the op itself (native_layer_norm,
  // convolution_overrideable, ...) we claim it for PrivateUse1; autograd still uses the
  // op's derivative formula. CompositeImplicitAutograd ops are left alone: claiming
  // them would bypass their autograd decomposition.
  static torch::Library* lib = new torch::Library(
      torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
  for (const std::string& full : lowering::registered_lowerings()) {
    // Our own ops (torchtpu::*) are defined from Python after this runs; the backend
    // fallback reaches their lowerings by name.
    if (full.rfind("aten::", 0) != 0) continue;
    std::string name = full.substr(full.find("::") + 2);
    size_t dot = name.find('.');
    std::string base = name.substr(0, dot);
    std::string overload = dot == std::string::npos ? "" : name.substr(dot + 1);
    auto op = c10::Dispatcher::singleton().findOp(c10::OperatorName("aten::" + base, overload));
    if (!op) {
      // Family helpers register in-place/out= names by pattern; not all exist.
      lowering::remove_lowering(full);
      continue;
    }
    // Structured ops' functional and in-place forms have a CompositeExplicitAutograd-
    // NonFunctional kernel that runs the meta function, allocates the result and calls
    // the out= form: claimed too, since the boxed kernel lowers them itself (its meta runs
    // once per signature, not per call), which halves an eager op's host work.
    if (!op->hasSchema() ||
        !(op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd) ||
          op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutogradNonFunctional)) ||
        op->hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1)) {
      continue;
    }
    // View ops (permute, expand, ...) have graph-mode lowerings that copy; in eager mode
    // they must stay metadata over the same storage. Ops with a Device or MemoryFormat
    // argument (_to_copy, full, clone) may move data off the device or pick a layout; the
    // boxed kernel drops both, so their composite kernels keep handling them in eager mode.
    bool returns_view = false, takes_device = false;
    for (const c10::Argument& r : op->schema().returns()) {
      returns_view |= r.alias_info() != nullptr && !r.alias_info()->isWrite();
    }
    for (const c10::Argument& a : op->schema().arguments()) {
      c10::TypePtr t = a.type();
      if (auto o = t->cast<c10::OptionalType>()) t = o->getElementType();
      takes_device |= t->kind() == c10::TypeKind::DeviceObjType ||
                      t->kind() == c10::TypeKind::MemoryFormatType;
    }
    if (returns_view || takes_device) continue;
    // The as_strided_copy / _scatter lowerings read self as a dense row-major value (a
    // graph value); PyTorch's kernels address self's memory layout, which eager mode keeps.
    if (base == "as_strided_scatter" || base == "as_strided_copy") continue;
    lib->impl(name.c_str(), name == "convolution"
                                ? torch::CppFunction::makeFromBoxedFunction<&convolution_kernel>()
                                : torch::CppFunction::makeFromBoxedFunction<&boxed_kernel>());
  }
}

void register_hooks();

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", empty_memory_format);
  m.impl("empty_strided", empty_strided);
  m.impl("as_strided", at::native::as_strided_tensorimpl);
  m.impl("view", at::native::view);
  m.impl("_reshape_alias", at::native::_reshape_alias);
  m.impl("unfold", at::native::unfold);
  // Complex views reinterpret the storage's elements (complex64 <-> float32 pairs); the
  // storage reads its buffer as the viewer's dtype (storage_bytes.h).
  m.impl("view_as_real", at::native::view_as_real);
  m.impl("view_as_complex", view_as_complex);
  m.impl("resize_", resize_);
  m.impl("set_.source_Storage_storage_offset", set_storage_offset);
  m.impl("set_.source_Storage", set_storage);
  m.impl("set_.source_Tensor", set_tensor);
  m.impl("set_", set_empty);
  // Same storage, offset, sizes and strides: device-generic, and a fallback would compare
  // two host copies (always false).
  m.impl("is_set_to", at::native::is_set_to);
  m.impl("_copy_from", copy_from);
  m.impl("_copy_from_and_resize", copy_from_and_resize);
  m.impl("_local_scalar_dense", local_scalar_dense);
  m.impl("_has_compatible_shallow_copy_type", has_compatible_shallow_copy_type);
  m.impl("record_stream", record_stream);
}

// _copy_from is called only for devices outside ATen's own copy (tpu here), so these
// reach only tpu copies.
TORCH_LIBRARY_IMPL(aten, Conjugate, m) { m.impl("_copy_from", copy_from_with_math_bits); }
TORCH_LIBRARY_IMPL(aten, Negative, m) { m.impl("_copy_from", copy_from_with_math_bits); }

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&boxed_kernel>());
}

TORCH_LIBRARY_IMPL(_, SparsePrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&sparse_unsupported>());
}

TORCH_LIBRARY_IMPL(_, SparseCsrPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&sparse_unsupported>());
}

TORCH_LIBRARY_IMPL(_, QuantizedPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&quantized_unsupported>());
}

TORCH_LIBRARY_IMPL(_, NestedTensorPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&nested_unsupported>());
}

// A nested tensor's metadata (CPU int64 tensors its impl holds) reads as on any device:
// autograd reads the sizes when it records a nested result (as_nested_tensor of a tensor
// that requires grad), where the refusal above, thrown in a noexcept path, aborted Python.
// Ops on the nested tensor still refuse with the message above.
TORCH_LIBRARY_IMPL(aten, NestedTensorPrivateUse1, m) {
  m.impl("_nested_tensor_size", TORCH_FN(at::native::_nested_tensor_size));
  m.impl("_nested_tensor_strides", TORCH_FN(at::native::_nested_tensor_strides));
  m.impl("_nested_tensor_storage_offsets", TORCH_FN(at::native::_nested_tensor_storage_offsets));
}

// The compressed layouts' accessors have CompositeExplicitAutograd kernels, which a fallback
// does not replace (and which failed with "expected sparse row compressed tensor layout but
// got SparseCsr"; `.cpu()` reaches them).
TORCH_LIBRARY_IMPL(aten, SparseCsrPrivateUse1, m) {
  for (const char* name : {"crow_indices", "col_indices", "ccol_indices", "row_indices",
                           "values", "_nnz"}) {
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&sparse_unsupported>());
  }
}

}  // namespace torchtpu::aten
