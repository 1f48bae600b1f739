#include "aten/storage_bytes.h"

#include <c10/util/Exception.h>

#include "aten/fused_eager.h"
#include "lowering/hlo_builder.h"

namespace torchtpu::aten {
namespace {

using lowering::Builder;
using lowering::TensorType;
using lowering::Value;

// XLA has no bitcast to or from complex types: a complex value is its (real, imag) pairs,
// which is how it is laid out in memory.
Value complex_as_parts(Builder& b, Value v) {
  int64_t n = v.type.num_elements();
  TensorType part{base::complex_component(v.dtype()), {n, 1}};
  v = b.reshape(v, {n, 1});
  Value re = b.op("stablehlo.real", {v}, part), im = b.op("stablehlo.imag", {v}, part);
  Value pairs = b.concatenate({re, im}, 1);
  return b.reshape(pairs, {2 * n});
}

Value parts_as_complex(Builder& b, Value v, base::DType to) {
  int64_t n = v.type.num_elements() / 2;
  v = b.reshape(v, {n, 2});
  Value re = b.reshape(b.slice(v, {0, 0}, {n, 1}, {1, 1}), {n});
  Value im = b.reshape(b.slice(v, {0, 1}, {n, 2}, {1, 1}), {n});
  return b.op("stablehlo.complex", {re, im}, TensorType{to, {n}});
}

// `v` flattened and bitcast to `to` (a flat vector). Integer ratios of element sizes only,
// which holds for every pair of the device's dtypes.
Value bitcast_flat(Builder& b, Value v, base::DType to) {
  int64_t n = v.type.num_elements();
  v = b.reshape(v, {n});
  if (v.dtype() == to) return v;
  if (base::is_complex(v.dtype())) return bitcast_flat(b, complex_as_parts(b, v), to);
  if (base::is_complex(to)) {
    base::DType part = base::complex_component(to);
    return parts_as_complex(b, bitcast_flat(b, v, part), to);
  }
  if (v.dtype() == base::DType::kBool) v = b.convert(v, base::DType::kU8);
  base::DType target = to == base::DType::kBool ? base::DType::kU8 : to;
  int64_t from_size = base::dtype_size_bytes(v.dtype());
  int64_t to_size = base::dtype_size_bytes(target);
  if (v.dtype() != target) {
    if (from_size == to_size) {
      v = b.op("stablehlo.bitcast_convert", {v}, TensorType{target, {n}});
    } else if (from_size > to_size) {
      int64_t r = from_size / to_size;
      v = b.op("stablehlo.bitcast_convert", {v}, TensorType{target, {n, r}});
      v = b.reshape(v, {n * r});
    } else {
      int64_t r = to_size / from_size;
      v = b.reshape(v, {n / r, r});
      v = b.op("stablehlo.bitcast_convert", {v}, TensorType{target, {n / r}});
    }
  }
  if (to == base::DType::kBool) v = b.convert(v, base::DType::kBool);
  return v;
}

}  // namespace

bool keeps_bytes(base::DType held, c10::ScalarType dtype) {
  return dtype != c10::ScalarType::Bool || held == base::DType::kBool;
}

runtime::BufferPtr storage_bytes_as(const runtime::BufferPtr& held, int device_index,
                                    c10::ScalarType dtype, const std::vector<int64_t>* dims) {
  const runtime::Buffer& buf = *held;
  base::DType want = to_dtype(dtype);
  if (buf.dtype() == want) return held;
  int64_t bytes = buf.size_bytes();
  int64_t item = base::dtype_size_bytes(want);
  TORCH_CHECK(bytes % item == 0, "tpu: a storage of ", bytes, " bytes holding ",
              base::dtype_name(buf.dtype()), " cannot be read as ", dtype, " (", bytes,
              " is not a multiple of ", item, " bytes); resize the storage to a multiple of ",
              item, " bytes first");
  Builder b("torchtpu_reinterpret");
  Value v = bitcast_flat(b, b.param(TensorType{buf.dtype(), buf.dims()}), want);
  if (dims != nullptr && *dims != v.dims()) v = b.reshape(v, *dims);
  return run_program(b.finish({v}), {&buf}, device_index)[0];
}

void resize_storage_bytes(c10::StorageImpl* impl, int64_t nbytes) {
  TORCH_CHECK(nbytes >= 0, "tpu: cannot resize a storage to ", nbytes, " bytes");
  TORCH_CHECK(impl->resizable(), "tpu: trying to resize a storage that is not resizable");
  StorageState* s = find_storage_state(impl->data_ptr());
  TORCH_INTERNAL_ASSERT(s != nullptr, "tpu: storage without a StorageState");
  if (nbytes == s->nbytes) {
    // The state's buffer may already be that size while the storage is a prefix of it (a
    // fused graph padded to a shape bucket): the storage takes the buffer's size.
    impl->set_nbytes(nbytes);
    return;
  }
  materialize(*s);
  runtime::BufferPtr held = s->buffer();
  if (held && (nbytes == 0 || held->size_bytes() == 0)) {
    // Nothing is kept: the new storage is all zeros, which a storage without a buffer reads
    // as. FSDP2 frees and reallocates every unsharded parameter so, twice a step each.
    s->set_buffer(nullptr);
  } else if (held) {
    // Keep the buffer's dtype when the new size allows it, else work in bytes.
    base::DType dtype = held->dtype();
    int64_t item = base::dtype_size_bytes(dtype);
    if (nbytes % item != 0 || held->size_bytes() % item != 0) {
      dtype = base::DType::kU8;
      item = 1;
    }
    Builder b("torchtpu_resize_storage");
    const runtime::Buffer& buf = *held;
    Value v = bitcast_flat(b, b.param(TensorType{buf.dtype(), buf.dims()}), dtype);
    int64_t old_n = v.type.num_elements();
    int64_t new_n = nbytes / item;
    if (new_n < old_n) {
      v = b.slice(v, {0}, {new_n}, {1});
    } else {
      v = b.concatenate({v, b.zeros(TensorType{dtype, {new_n - old_n}})}, 0);
    }
    s->set_buffer(run_program(b.finish({v}), {&buf}, s->device_index)[0]);
  }
  set_storage_nbytes(*s, nbytes);
  impl->set_nbytes(nbytes);
}

}  // namespace torchtpu::aten
