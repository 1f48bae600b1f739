#include "aten/tpu_storage.h"

#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/TensorImpl.h>

#include "aten/device_runtime.h"
#include "aten/host_transfer.h"
#include "aten/tpu_guard.h"
#include "lowering/storage_programs.h"

namespace torchtpu::aten {
namespace {

void delete_state(void* ctx) { delete static_cast<StorageState*>(ctx); }

c10::DataPtr make_data_ptr(StorageState* state) {
  // The data pointer is the state itself: unique and non-null, never dereferenced as data.
  return c10::DataPtr(state, state, &delete_state,
                      c10::Device(c10::DeviceType::PrivateUse1, state->device_index));
}

class TpuAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    auto* state = new StorageState();
    state->device_index = current_device_index();
    state->nbytes = static_cast<int64_t>(nbytes);
    return make_data_ptr(state);
  }
  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }
  void copy_data(void*, const void*, std::size_t) const override {
    TORCH_CHECK(false, "tpu: storage bytes cannot be copied directly; use Tensor.copy_()");
  }
};

TpuAllocator g_allocator;

lowering::TensorType type_of(const runtime::Buffer& b) {
  return lowering::TensorType{b.dtype(), b.dims()};
}

// Fills a storage that was allocated but never written with zeros of the reader's dtype.
void ensure_buffer(StorageState& s, c10::ScalarType dtype) {
  if (s.buffer) return;
  int64_t item = c10::elementSize(dtype);
  lowering::TensorType t{to_dtype(dtype), {s.nbytes / item}};
  s.buffer = run_program(lowering::zeros_module(t), {}, s.device_index)[0];
}

// A view's storage offset as the 0-d i64 operand of the view programs.
runtime::BufferPtr offset_buffer(int64_t offset, int device_index) {
  return scalar_to_buffer(c10::Scalar(offset), base::DType::kI64, device_index);
}

}  // namespace

c10::Allocator* tpu_allocator() { return &g_allocator; }

StorageState& storage_state(const at::Tensor& t) {
  TORCH_CHECK(t.device().type() == c10::DeviceType::PrivateUse1,
              "tpu: expected a tpu tensor, got one on ", t.device());
  void* ctx = t.storage().data_ptr().get_context();
  TORCH_CHECK(ctx != nullptr, "tpu: tensor has no tpu storage (was it created by torchtpu?)");
  return *static_cast<StorageState*>(ctx);
}

base::DType to_dtype(c10::ScalarType t) {
  switch (t) {
    case c10::ScalarType::Bool: return base::DType::kBool;
    case c10::ScalarType::Char: return base::DType::kI8;
    case c10::ScalarType::Byte: return base::DType::kU8;
    case c10::ScalarType::Short: return base::DType::kI16;
    case c10::ScalarType::Int: return base::DType::kI32;
    case c10::ScalarType::Long: return base::DType::kI64;
    case c10::ScalarType::Half: return base::DType::kF16;
    case c10::ScalarType::BFloat16: return base::DType::kBF16;
    case c10::ScalarType::Float: return base::DType::kF32;
    case c10::ScalarType::Double: return base::DType::kF64;
    case c10::ScalarType::UInt32: return base::DType::kU32;
    case c10::ScalarType::UInt64: return base::DType::kU64;
    default: break;
  }
  TORCH_CHECK_NOT_IMPLEMENTED(false, "tpu: dtype ", t,
                              " is not supported on the tpu device (supported: bool, int8, "
                              "uint8, int16, int32, int64, float16, bfloat16, float32, float64)");
}

c10::ScalarType to_scalar_type(base::DType t) {
  switch (t) {
    case base::DType::kBool: return c10::ScalarType::Bool;
    case base::DType::kI8: return c10::ScalarType::Char;
    case base::DType::kU8: return c10::ScalarType::Byte;
    case base::DType::kI16: return c10::ScalarType::Short;
    case base::DType::kI32: return c10::ScalarType::Int;
    case base::DType::kI64: return c10::ScalarType::Long;
    case base::DType::kF16: return c10::ScalarType::Half;
    case base::DType::kBF16: return c10::ScalarType::BFloat16;
    case base::DType::kF32: return c10::ScalarType::Float;
    case base::DType::kF64: return c10::ScalarType::Double;
    case base::DType::kU32: return c10::ScalarType::UInt32;
    case base::DType::kU64: return c10::ScalarType::UInt64;
  }
  return c10::ScalarType::Undefined;
}

std::vector<runtime::BufferPtr> run_program(const std::string& module_text,
                                            const std::vector<const runtime::Buffer*>& args,
                                            int device_index) {
  auto exe = compile_cache().get_or_compile(module_text, device_index);
  TORCH_CHECK(exe.ok(), exe.status().message());
  auto out = (*exe)->execute(args);
  TORCH_CHECK(out.ok(), out.status().message());
  return std::move(out).value();
}

runtime::BufferPtr read_tensor(const at::Tensor& t) {
  StorageState& s = storage_state(t);
  ensure_buffer(s, t.scalar_type());
  const runtime::Buffer& buf = *s.buffer;
  TORCH_CHECK(buf.dtype() == to_dtype(t.scalar_type()), "tpu: tensor of dtype ", t.scalar_type(),
              " views a storage holding ", base::dtype_name(buf.dtype()),
              "; reinterpreting storage as another dtype is not supported on tpu");
  std::vector<int64_t> sizes(t.sizes().begin(), t.sizes().end());
  std::vector<int64_t> strides(t.strides().begin(), t.strides().end());
  if (lowering::is_whole_buffer_view(buf.num_elements(), sizes, strides, t.storage_offset())) {
    if (buf.dims() == sizes) return s.buffer;
    lowering::Builder b("torchtpu_reshape");
    auto v = b.param(type_of(buf));
    return run_program(b.finish({b.reshape(v, sizes)}), {&buf}, s.device_index)[0];
  }
  runtime::BufferPtr offset = offset_buffer(t.storage_offset(), s.device_index);
  return run_program(lowering::strided_read_module(type_of(buf), sizes, strides),
                     {&buf, offset.get()}, s.device_index)[0];
}

void write_tensor(const at::Tensor& t, const runtime::BufferPtr& value) {
  StorageState& s = storage_state(t);
  TORCH_CHECK(value->dtype() == to_dtype(t.scalar_type()),
              "tpu: internal: writing a ", base::dtype_name(value->dtype()), " value into a ",
              t.scalar_type(), " tensor");
  std::vector<int64_t> sizes(t.sizes().begin(), t.sizes().end());
  std::vector<int64_t> strides(t.strides().begin(), t.strides().end());
  int64_t storage_numel = s.nbytes / static_cast<int64_t>(t.element_size());
  if (lowering::is_whole_buffer_view(storage_numel, sizes, strides, t.storage_offset())) {
    s.buffer = value;
    return;
  }
  ensure_buffer(s, t.scalar_type());
  const runtime::Buffer& base = *s.buffer;
  runtime::BufferPtr offset = offset_buffer(t.storage_offset(), s.device_index);
  s.buffer = run_program(lowering::strided_write_module(type_of(base), sizes, strides),
                         {&base, value.get(), offset.get()}, s.device_index)[0];
}

at::Tensor wrap_buffer(runtime::BufferPtr buffer, c10::ScalarType dtype) {
  auto* state = new StorageState();
  state->device_index = buffer->device_index();
  state->nbytes = buffer->size_bytes();
  std::vector<int64_t> sizes = buffer->dims();
  state->buffer = std::move(buffer);
  int64_t nbytes = state->nbytes;
  c10::Storage storage(c10::Storage::use_byte_size_t(), nbytes, make_data_ptr(state),
                       &g_allocator, /*resizable=*/true);
  auto t = at::detail::make_tensor<c10::TensorImpl>(
      std::move(storage), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
      c10::scalarTypeToTypeMeta(dtype));
  t.unsafeGetTensorImpl()->set_sizes_contiguous(sizes);
  return t;
}

}  // namespace torchtpu::aten
