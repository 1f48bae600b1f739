#include "lowering/scan.h"

#include <string>

namespace torchtpu::lowering {

std::vector<Value> scan_all(Builder& b, const std::vector<Value>& operands,
                            const std::vector<Value>& inits, int64_t dim,
                            const Builder::RegionBody& body) {
  const Value& x = operands[0];
  int64_t n = x.dims()[dim];
  Dims window(x.rank(), 1), strides(x.rank(), 1);
  window[dim] = n;
  std::string padding = "dense<[";
  for (int64_t i = 0; i < x.rank(); ++i) {
    padding += std::string(i ? ", " : "") + "[" + std::to_string(i == dim ? n - 1 : 0) + ", 0]";
  }
  padding += "]> : tensor<" + std::to_string(x.rank()) + "x2xi64>";
  std::vector<Value> all = operands;
  all.insert(all.end(), inits.begin(), inits.end());
  std::vector<TensorType> results, block_args;
  for (const Value& v : operands) results.push_back(v.type);
  for (int pass = 0; pass < 2; ++pass) {
    for (const Value& v : operands) block_args.push_back(TensorType{v.dtype(), {}});
  }
  return b.op_with_region(
      "stablehlo.reduce_window", all, results, block_args, body,
      "window_dimensions = " + i64_array(window) + ", window_strides = " + i64_array(strides) +
          ", padding = " + padding);
}

Value scan(Builder& b, Value x, int64_t dim, Value identity,
           const std::function<Value(Builder&, Value, Value)>& body) {
  return scan_all(b, {x}, {identity}, dim, [&](Builder& r, const std::vector<Value>& a) {
    return std::vector<Value>{body(r, a[0], a[1])};
  })[0];
}

}  // namespace torchtpu::lowering
