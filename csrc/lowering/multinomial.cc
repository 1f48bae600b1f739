// multinomial(self, num_samples, replacement, generator): category indices drawn with
// probabilities proportional to the rows of `self` (1-D: one distribution; 2-D: one per row).
//
// With replacement, as PyTorch's kernels: each sample inverts its row's running sum (a
// uniform draw scaled by the total, found by binary search), in self's compute type.
// Without, an exponential race: with E_k ~ Exp(1) independent, sorting p_k / E_k in
// descending order gives a draw without replacement (the Gumbel-top-k identity, which
// PyTorch's own kernel uses for replacement=False). Keys are compared as
// log p_k - log E_k, so tiny probabilities keep their resolution; zero probabilities get
// -inf and are never drawn while another category is left.
//
// PyTorch's data checks are data checks here too: negative, infinite or NaN probabilities,
// and a row summing to zero, raise RuntimeError with PyTorch's messages.
#include <cmath>
#include <string>
#include <vector>

#include "lowering/families.h"
#include "lowering/gather_scatter.h"
#include "lowering/lowering.h"
#include "lowering/random_bits.h"
#include "lowering/scan.h"

namespace torchtpu::lowering {
namespace {

using Result = base::StatusOr<std::vector<Value>>;

// -log(1 - u) for u uniform in [0, 1): Exp(1) samples in [0, inf).
Value exponential(Builder& b, RandomBits& bits, const Dims& dims, DType t) {
  Value u = unit_uniform(b, bits, dims, t);
  return b.unary("negate", b.unary("log_plus_one", b.unary("negate", u)));
}

Result lower_multinomial(LoweringContext& c) {
  Builder& b = c.b();
  const TensorType& out = c.out_type();
  const TensorType& in = c.tensor_type(0);
  if (!base::is_floating(in.dtype)) {
    return base::invalid_argument("lowering: multinomial only supports floating-point dtypes "
                                  "for input, got: " + std::string(base::dtype_name(in.dtype)));
  }
  if (out.num_elements() == 0) return std::vector<Value>{b.zeros(out)};
  int64_t rows = in.rank() == 1 ? 1 : in.dims[0];
  int64_t cats = in.dims.back();
  int64_t samples = c.int_arg(1);
  bool replacement = c.bool_arg(2);
  DType t = compute_type(in.dtype);
  Value p = b.reshape(b.convert(c.tensor(0), t), {rows, cats});

  Value finite_nonneg = b.binary("and", b.compare(p, b.zeros(p.type), "GE"),
                                 b.compare(p, b.splat(INFINITY, p.type), "LT"));
  c.require(b.all_of(finite_nonneg),
            "probability tensor contains either `inf`, `nan` or element < 0",
            CheckKind::kRuntimeError);
  Value sums = b.reduce_sum(p, {1});
  c.require(b.all_of(b.compare(sums, b.zeros(sums.type), "GT")),
            "invalid multinomial distribution (sum of probabilities <= 0)",
            CheckKind::kRuntimeError);

  RandomBits bits(c);
  Value positive = b.compare(p, b.zeros(p.type), "GT");
  Value result;
  if (replacement) {
    // The inverse of each row's running sum: u * total for u uniform in [0, 1) falls in
    // category k's interval [cum_{k-1}, cum_k), found by a binary search (rows x samples
    // values, not a race per sample over every category). A zero-probability category's
    // interval is empty, never found. u * total rounding up to total finds no interval:
    // that is the last positive category's.
    Value cum = scan(b, p, 1, b.constant(0, t),
                     [](Builder& sb, Value x, Value y) { return sb.add(x, y); });
    Value total = b.reshape(b.slice(cum, {0, cats - 1}, {rows, cats}, {1, 1}), {rows});
    Value u = unit_uniform(b, bits, {rows, samples}, t);
    Value at = b.mul(u, b.broadcast_in_dim(total, {rows, samples}, {0}));
    Value found = binary_search(b, cum, at, /*right=*/true);
    TensorType it{DType::kI64, {rows, cats}};
    Value last_positive =
        b.reduce_max(b.select(positive, b.iota(it, 1), b.splat(0, it)), {1});
    result = b.min(found, b.broadcast_in_dim(last_positive, {rows, samples}, {0}));
  } else {
    Value log_p = b.unary("log", p);  // -inf where p == 0
    Value e = exponential(b, bits, {rows, cats}, t);
    Value key = b.select(positive, b.sub(log_p, b.unary("log", e)), b.splat(-INFINITY, p.type));
    Value idx = b.iota(TensorType{DType::kI64, {rows, cats}}, 1);
    TensorType key_s{t, {}}, idx_s{DType::kI64, {}};
    std::vector<Value> sorted = b.op_with_region(
        "stablehlo.sort", {key, idx}, {key.type, idx.type}, {key_s, key_s, idx_s, idx_s},
        [](Builder& rb, const std::vector<Value>& a) {
          return std::vector<Value>{rb.compare(a[0], a[1], "GT")};
        },
        "dimension = 1 : i64, is_stable = true");
    result = b.slice(sorted[1], {0, 0}, {rows, samples}, {1, 1});
  }
  return std::vector<Value>{b.convert(b.reshape(result, out.dims), out.dtype)};
}

}  // namespace

void register_multinomial_lowerings() {
  register_lowering({"aten::multinomial", "aten::multinomial.out"}, lower_multinomial);
}

}  // namespace torchtpu::lowering
