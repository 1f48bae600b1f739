// max_unpool2d / max_unpool3d: the inverse of max pooling. Each value of `self` goes to
// the flat position `indices` names within its (batch, channel) output plane; every other
// output is zero. One stablehlo.scatter over the flattened planes; out-of-range indices
// raise (a data check), as the CPU kernel does.
#include "lowering/families.h"
#include "lowering/lowering.h"

namespace torchtpu::lowering {
namespace {

using Lowered = base::StatusOr<std::vector<Value>>;

Lowered lower_max_unpool(LoweringContext& c, int64_t spatial) {
  Builder& b = c.b();
  Value x = c.tensor(0), idx = c.tensor(1);
  const TensorType& out = c.out_type();
  int64_t planes = 1, in_len = 1, out_len = 1;
  for (int64_t d = 0; d < x.rank() - spatial; ++d) planes *= x.dims()[d];
  for (int64_t d = x.rank() - spatial; d < x.rank(); ++d) in_len *= x.dims()[d];
  for (int64_t d = out.rank() - spatial; d < out.rank(); ++d) out_len *= out.dims[d];
  if (planes * out_len == 0) return std::vector<Value>{b.zeros(out)};
  Value flat_x = b.reshape(x, {planes, in_len});
  Value flat_i = b.convert(b.reshape(idx, {planes, in_len}), DType::kI64);

  std::string dims = std::to_string(out_len);
  Value zero = b.zeros(flat_i.type), limit = b.splat(static_cast<double>(out_len), flat_i.type);
  Value in_range = b.binary("and", b.compare(flat_i, zero, "GE"), b.compare(flat_i, limit, "LT"));
  c.require(b.all_of(in_range),
            "max_unpool" + std::to_string(spatial) + "d(): Found an invalid max index (output "
            "volumes are of size " + dims + " elements per plane)",
            CheckKind::kRuntimeError);

  Value plane = b.iota(TensorType{DType::kI64, {planes, in_len}}, 0);
  Value coords = b.concatenate({b.reshape(plane, {planes, in_len, 1}),
                                b.reshape(flat_i, {planes, in_len, 1})}, 2);
  TensorType scalar{x.dtype(), {}};
  Value result = b.op_with_region(
      "stablehlo.scatter", {b.zeros(TensorType{x.dtype(), {planes, out_len}}), coords, flat_x},
      {TensorType{x.dtype(), {planes, out_len}}}, {scalar, scalar},
      [](Builder&, const std::vector<Value>& a) { return std::vector<Value>{a[1]}; },
      "scatter_dimension_numbers = #stablehlo.scatter<inserted_window_dims = [0, 1], "
      "scatter_dims_to_operand_dims = [0, 1], index_vector_dim = 2>, "
      "indices_are_sorted = false, unique_indices = false")[0];
  return std::vector<Value>{b.reshape(result, out.dims)};
}

}  // namespace

void register_unpool_lowerings() {
  register_lowering({"aten::max_unpool2d", "aten::max_unpool2d.out"},
                    [](LoweringContext& c) { return lower_max_unpool(c, 2); });
  register_lowering({"aten::max_unpool3d", "aten::max_unpool3d.out"},
                    [](LoweringContext& c) { return lower_max_unpool(c, 3); });
}

}  // namespace torchtpu::lowering
