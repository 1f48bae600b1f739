#include "compile/bucket_io.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include "aten/host_transfer.h"
#include "aten/tpu_storage.h"
#include "base/metrics.h"
#include "lowering/storage_programs.h"
#include "runtime/execution_trace.h"

namespace torchtpu::compile {
namespace {

int64_t numel_of(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

runtime::BufferPtr i64_buffer(std::vector<int64_t> values, int device) {
  return aten::cpu_to_buffer(at::tensor(values, at::kLong), device);
}

at::Tensor pad_on_host(const at::Tensor& t, const runtime::Buffer& buffer,
                       const std::vector<int64_t>& padded, const std::vector<int64_t>& out) {
  // Not a user's host read: the graph checks queued so far are not due here.
  at::Tensor host = at::empty({buffer.num_elements()}, t.options().device(at::kCPU));
  auto status = buffer.to_host(host.data_ptr(), host.nbytes());
  TORCH_CHECK(status.ok(), status.message());
  at::Tensor view = host.as_strided(t.sizes(), t.strides(), t.storage_offset());
  std::vector<int64_t> pads;
  for (int64_t k = static_cast<int64_t>(padded.size()) - 1; k >= 0; --k) {
    pads.push_back(0);
    pads.push_back(padded[k] - t.size(k));
  }
  at::Tensor whole = at::constant_pad_nd(view, pads).reshape(out).contiguous();
  base::counter_add("num_bucket_pads_host");
  return aten::wrap_buffer(aten::cpu_to_buffer(whole, buffer.device_index()), t.scalar_type());
}

}  // namespace

at::Tensor pad_to_bucket(const at::Tensor& t, const std::vector<int64_t>& padded,
                         const std::vector<int64_t>& out) {
  TORCH_CHECK(t.device().is_privateuseone(), "tpu compile: a graph input is on ", t.device(),
              "; move inputs with .to('tpu')");
  TORCH_CHECK(t.dim() == static_cast<int64_t>(padded.size()) && numel_of(padded) == numel_of(out),
              "tpu compile: cannot pad a tensor of shape ", t.sizes(), " to the bucket shape ",
              at::IntArrayRef(padded), " viewed as ", at::IntArrayRef(out));
  for (int64_t k = 0; k < t.dim(); ++k) {
    TORCH_CHECK(t.size(k) <= padded[k], "tpu compile: input size ", t.sizes(),
                " exceeds its bucket ", at::IntArrayRef(padded));
  }
  runtime::trace::Label label("tpu bucket pad");
  runtime::BufferPtr held = aten::storage_buffer(t);
  int device = held->device_index();
  if (held->num_elements() == t.numel()) return pad_on_host(t, *held, padded, out);
  lowering::TensorType base{held->dtype(), held->dims()};
  runtime::BufferPtr offset = i64_buffer({t.storage_offset()}, device);
  runtime::BufferPtr sizes = i64_buffer(std::vector<int64_t>(t.sizes().begin(), t.sizes().end()),
                                        device);
  runtime::BufferPtr strides =
      i64_buffer(std::vector<int64_t>(t.strides().begin(), t.strides().end()), device);
  auto result = aten::run_program(lowering::padded_read_module(base, padded, out),
                                  {held.get(), offset.get(), sizes.get(), strides.get()}, device);
  base::counter_add("num_bucket_pads_device");
  return aten::wrap_buffer(result[0], t.scalar_type());
}

}  // namespace torchtpu::compile
