// Membership tests: isin. Hugging Face generate() calls isin on every step (end-of-sequence
// and padding token checks), so without a lowering each decoding step would fall back.
//
// isin(elements, test_elements) compares every element with every test element (the test
// tensor is flattened) and reduces with "or": a [*elements.shape, M] comparison. That is
// O(N * M) work and memory, which is what token-id checks need (M is a handful of ids); a
// sort-based search would pay off only for large test sets.
#include "lowering/elementwise_util.h"
#include "lowering/families.h"

namespace torchtpu::lowering {
namespace {

// Arguments: (elements, test_elements, assume_unique, invert); either of the first two may
// be a Scalar (isin.Tensor_Scalar, isin.Scalar_Tensor). assume_unique changes nothing here.
base::StatusOr<std::vector<Value>> lower_isin(LoweringContext& c) {
  Builder& b = c.b();
  DType t = c.result_type({0, 1});
  const Dims& out_dims = c.out_type().dims;
  bool invert = c.num_args() > 3 && c.arg(3).kind == ArgKind::kBool && c.bool_arg(3);

  Value elements = c.arg(0).kind == ArgKind::kTensor ? b.convert(c.tensor(0), t) : c.scalar(0, t);
  Value found;
  if (c.arg(1).kind != ArgKind::kTensor) {
    // One test value: a plain comparison.
    found = b.compare(b.broadcast_to(elements, out_dims),
                      b.broadcast_to(c.scalar(1, t), out_dims), "EQ");
  } else {
    int64_t m = c.tensor_type(1).num_elements();
    if (m == 0) {
      found = b.zeros(TensorType{DType::kBool, out_dims});
    } else {
      Value test = b.reshape(b.convert(c.tensor(1), t), {m});
      Dims pair_dims = out_dims;
      pair_dims.push_back(m);
      Dims element_axes;
      for (int64_t d = 0; d < static_cast<int64_t>(out_dims.size()); ++d) element_axes.push_back(d);
      Value e = b.broadcast_in_dim(b.reshape(elements, out_dims), pair_dims, element_axes);
      Value tv = b.broadcast_in_dim(test, pair_dims, {static_cast<int64_t>(out_dims.size())});
      found = b.reduce(b.compare(e, tv, "EQ"), b.constant(0, DType::kBool),
                       {static_cast<int64_t>(out_dims.size())}, "or");
    }
  }
  if (invert) found = b.unary("not", found);
  return std::vector<Value>{to_out(c, found)};
}

}  // namespace

void register_membership_lowerings() {
  register_lowering({"aten::isin.Tensor_Tensor", "aten::isin.Tensor_Tensor_out",
                     "aten::isin.Tensor_Scalar", "aten::isin.Tensor_Scalar_out",
                     "aten::isin.Scalar_Tensor", "aten::isin.Scalar_Tensor_out"},
                    lower_isin);
}

}  // namespace torchtpu::lowering
