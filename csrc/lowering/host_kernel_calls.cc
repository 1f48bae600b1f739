// Ops that run a host kernel (csrc/kernels) as a typed-FFI custom call. Python defines the
// ops (torchtpu/ops.py) and calls them only where the plugin registered the kernel; the
// lowering checks what the kernel would reject, so a bad call fails here with the op's
// name, not inside XLA.
#include <cstdio>

#include "lowering/families.h"
#include "lowering/lowering.h"

namespace torchtpu::lowering {
namespace {

using Lowered = base::StatusOr<std::vector<Value>>;

// torchtpu::paged_attention(Tensor q, Tensor k_cache, Tensor v_cache, Tensor pages,
//                           Tensor positions, Tensor query_start, int page_size, float scale,
//                           int window)
Lowered lower_paged_attention(LoweringContext& c) {
  const TensorType &q = c.tensor_type(0), &k = c.tensor_type(1), &v = c.tensor_type(2),
                   &pages = c.tensor_type(3), &pos = c.tensor_type(4),
                   &starts = c.tensor_type(5);
  int64_t page_size = c.int_arg(6), window = c.int_arg(8);
  bool ok = q.dtype == DType::kF32 && q.rank() == 3 && k.dtype == DType::kF32 && k.rank() == 3 &&
            v.dtype == k.dtype && v.dims == k.dims && pages.dtype == DType::kI64 &&
            pages.rank() == 2 && pos.dtype == DType::kI64 && pos.dims == Dims{q.dims[0]} &&
            starts.dtype == DType::kI64 && starts.dims == Dims{pages.dims[0] + 1} &&
            page_size > 0 && k.dims[2] == q.dims[2] && q.dims[1] % k.dims[1] == 0 &&
            k.dims[0] % page_size == 0;
  if (!ok) {
    return base::invalid_argument(
        "torchtpu::paged_attention: expected q f32[T,H,D], k_cache and v_cache "
        "f32[N,KV,D] with H a multiple of KV and N whole pages, pages i64[S,P], positions "
        "i64[T], query_start i64[S+1]; got q " + q.str() + ", k_cache " + k.str() +
        ", v_cache " + v.str() + ", pages " + pages.str() + ", positions " + pos.str() +
        ", query_start " + starts.str() + ", page_size " + std::to_string(page_size));
  }
  char scale[40];
  std::snprintf(scale, sizeof scale, "%.9e", c.double_arg(7));
  std::string attrs = "call_target_name = \"torchtpu_paged_attention\", api_version = 4 : i32, "
                      "backend_config = {page_size = " + std::to_string(page_size) +
                      " : i64, scale = " + scale + " : f32, window = " +
                      std::to_string(window) + " : i64}";
  std::vector<Value> operands;
  for (int i = 0; i < 6; ++i) operands.push_back(c.tensor(i));
  Value out = c.b().op("stablehlo.custom_call", operands, c.out_type(), attrs);
  return std::vector<Value>{out};
}

// torchtpu::int8_matmul(Tensor x, Tensor w, Tensor scale); w packed (kernels/int8_matmul.h)
Lowered lower_int8_matmul(LoweringContext& c) {
  const TensorType &x = c.tensor_type(0), &w = c.tensor_type(1), &scale = c.tensor_type(2);
  bool ok = x.dtype == DType::kF32 && x.rank() == 2 && w.dtype == DType::kI8 && w.rank() == 3 &&
            scale.dtype == DType::kF32 && scale.rank() == 1 &&
            w.dims[0] == (scale.dims[0] + 63) / 64 && w.dims[1] == x.dims[1] && w.dims[2] == 64;
  if (!ok) {
    return base::invalid_argument(
        "torchtpu::int8_matmul: expected x f32[M,K], w i8[ceil(N/64),K,64] (packed by "
        "torchtpu.ops.pack_int8) and scale f32[N]; got x " + x.str() + ", w " + w.str() +
        ", scale " + scale.str());
  }
  std::string attrs = "call_target_name = \"torchtpu_int8_matmul\", api_version = 4 : i32, "
                      "backend_config = {}";
  Value out = c.b().op("stablehlo.custom_call", {c.tensor(0), c.tensor(1), c.tensor(2)},
                       c.out_type(), attrs);
  return std::vector<Value>{out};
}

}  // namespace

void register_host_kernel_call_lowerings() {
  register_lowering({"torchtpu::paged_attention"}, lower_paged_attention);
  register_lowering({"torchtpu::int8_matmul"}, lower_int8_matmul);
}

}  // namespace torchtpu::lowering
