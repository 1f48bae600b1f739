// index_reduce(self, dim, index, source, reduce, include_self): along `dim`, position
// index[i] of self combines with slice i of source by prod, mean, amax or amin. One
// stablehlo.scatter with the combiner; include_self=False first resets the positions
// that receive a slice to the combiner's identity; mean divides by the number of
// contributions (floor division for integers, as the CPU kernel does). Unlike scatter_reduce,
// the CPU kernel combines in the tensor's own dtype, rounding at each step (its count too:
// a half count stops at 2048), and so does this: a half product 300 * 300 * 0.001 is inf.
#include "lowering/elementwise_util.h"
#include "lowering/families.h"
#include "lowering/gather_scatter.h"

namespace torchtpu::lowering {
namespace {

using Lowered = base::StatusOr<std::vector<Value>>;

Value scatter_along(Builder& b, Value operand, Value index, Value updates, int64_t dim,
                    const std::string& combiner) {
  int64_t k = index.dims().empty() ? 1 : index.dims()[0];
  Value idx = b.reshape(b.convert(index, DType::kI64), {k, 1});
  Dims window;
  for (int64_t d = 0; d < updates.rank(); ++d) if (d != dim) window.push_back(d);
  return scatter(b, operand, idx, updates, window, {dim}, {dim}, 1, combiner);
}

Lowered lower_index_reduce(LoweringContext& c) {
  Builder& b = c.b();
  Value self = c.tensor(0);
  int64_t dim = wrap_dim(c.int_arg(1), self.rank());
  Value index = c.tensor(2);
  const std::string& reduce = c.string_arg(4);
  bool include_self = c.bool_arg(5);
  DType t = self.dtype();
  Value x = self.rank() == 0 ? b.reshape(self, {1}) : self;
  Value src = c.tensor(3);
  if (src.rank() == 0) src = b.reshape(src, {1});

  int64_t size = x.dims()[dim];
  Value idx64 = b.convert(index, DType::kI64);
  Value ok = b.binary("and", b.compare(idx64, b.zeros(idx64.type), "GE"),
                      b.compare(idx64, b.splat(static_cast<double>(size), idx64.type), "LT"));
  if (idx64.type.num_elements() > 0) {
    c.require(b.all_of(ok),
              "index_reduce(): index out of range in self (expected values in [0, " +
                  std::to_string(size) + "))");
  }

  std::string combiner = reduce == "prod" ? "multiply" : reduce == "mean" ? "add"
                         : reduce == "amax" ? "maximum" : "minimum";
  if (reduce != "prod" && reduce != "mean" && reduce != "amax" && reduce != "amin") {
    return base::invalid_argument("lowering: index_reduce: unknown reduce '" + reduce + "'");
  }
  Value sc = b.convert(src, t);
  // Positions that receive at least one slice (and, for mean, how many).
  Value counts = scatter_along(b, b.zeros(TensorType{t, x.dims()}), idx64,
                               b.splat(1, TensorType{t, src.dims()}), dim, "add");
  Value hit = b.compare(counts, b.zeros(counts.type), "GT");
  Value init = x;
  if (!include_self) {
    double identity = reduce == "prod" ? 1 : 0;
    Value id = reduce == "amax"   ? b.broadcast_to(b.min_value(t), x.dims())
               : reduce == "amin" ? b.broadcast_to(b.max_value(t), x.dims())
                                  : b.splat(identity, x.type);
    init = b.select(hit, id, x);
  }
  Value r = scatter_along(b, init, idx64, sc, dim, combiner);
  if (reduce == "mean") {
    Value n = include_self ? b.add(counts, b.splat(1, counts.type)) : counts;
    n = b.select(b.compare(n, b.zeros(n.type), "EQ"), b.splat(1, n.type), n);
    Value q = base::is_floating(t) ? b.div(r, n) : floor_divide_int(b, r, n);
    r = b.select(hit, q, r);
  }
  return std::vector<Value>{b.reshape(b.convert(r, c.out_type().dtype), c.out_type().dims)};
}

}  // namespace

void register_index_reduce_lowerings() {
  register_lowering({"aten::index_reduce", "aten::index_reduce_", "aten::index_reduce.out"},
                    lower_index_reduce);
}

}  // namespace torchtpu::lowering
