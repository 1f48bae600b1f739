// Builder: emits one StableHLO module as MLIR text in the generic op form.
//
// The module has one public function `@main`; parameters are declared with param(), ops
// are appended in order, and finish() returns the module text. Values are SSA handles
// that carry their tensor type, so helpers can check shapes and derive result types.
// Generic form ("stablehlo.add"(...) : (...) -> ...) is used throughout because it is
// the most stable text across StableHLO versions.
//
// Every helper that can be misused by shape returns a Value whose type is computed here;
// shape errors are the lowering's responsibility (they are caught before lowering by the
// caller's meta check), so helpers assert only our own invariants.
// Thread safety: a Builder is used by one thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/dtype.h"

namespace torchtpu::lowering {

using base::DType;
using Dims = std::vector<int64_t>;

struct TensorType {
  DType dtype = DType::kF32;
  Dims dims;
  int64_t rank() const { return static_cast<int64_t>(dims.size()); }
  int64_t num_elements() const;
  // "tensor<2x3xf32>"
  std::string str() const;
  bool operator==(const TensorType& o) const { return dtype == o.dtype && dims == o.dims; }
};

struct Value {
  int id = -1;
  TensorType type;
  int result_index = -1;  // >= 0 for one result of a multi-result op (%m<id>#<index>)
  DType dtype() const { return type.dtype; }
  const Dims& dims() const { return type.dims; }
  int64_t rank() const { return type.rank(); }
};

// "array<i64: 1, 2>"
std::string i64_array(const Dims& v);
// "[1, 2]"
std::string i64_list(const Dims& v);

class Builder {
 public:
  explicit Builder(std::string module_name = "torchtpu");

  Value param(const TensorType& type);
  // Lets XLA write result `result_index` into parameter `param_index`'s buffer when the
  // caller donates it (`tf.aliasing_output`); types must match. Without a donation at run
  // time XLA copies, so an alias is never wrong, only sometimes free.
  void alias_param(size_t param_index, size_t result_index);

  // Appends one op with one result. `attrs` is the body of the attribute dictionary
  // without braces, e.g. "dimension = 0 : i64".
  Value op(std::string_view name, const std::vector<Value>& operands, const TensorType& result,
           std::string_view attrs = "");
  // An op with several results.
  std::vector<Value> op_multi(std::string_view name, const std::vector<Value>& operands,
                              const std::vector<TensorType>& results, std::string_view attrs = "");
  // An op with one region whose block takes `block_args` and is filled by `body`, which
  // returns the values the block yields ("stablehlo.return").
  using RegionBody = std::function<std::vector<Value>(Builder&, const std::vector<Value>&)>;
  std::vector<Value> op_with_region(std::string_view name, const std::vector<Value>& operands,
                                    const std::vector<TensorType>& results,
                                    const std::vector<TensorType>& block_args,
                                    const RegionBody& body, std::string_view attrs = "");
  // stablehlo.while over the loop state `init`: `cond` maps the state to an i1 scalar
  // (keep going while true), `body` to the next state (same types). Returns the final state.
  std::vector<Value> while_loop(const std::vector<Value>& init, const RegionBody& cond,
                                const RegionBody& body);
  // stablehlo.case: runs branches[index] (an i32 scalar; out of range: the last branch),
  // each a region without block arguments (it reads values defined above it) yielding
  // values of `results`' types. Returns what the branch taken yielded.
  std::vector<Value> case_of(Value index, const std::vector<TensorType>& results,
                             const std::vector<RegionBody>& branches);

  // Constants. `constant` is a 0-d tensor; `splat` a tensor of one repeated value.
  Value constant(double v, DType t);
  Value splat(double v, const TensorType& t);
  Value zeros(const TensorType& t) { return splat(0, t); }
  // Integer constant without going through double (exact for all i64).
  Value constant_i64(int64_t v, DType t);
  // An i64 tensor of `dims` from host values in row-major order (structural data derived
  // from shapes and int arguments: gather positions, row offsets).
  Value constant_i64s(const std::vector<int64_t>& values, const Dims& dims);

  // Shape and type.
  // Element type conversion with PyTorch's CPU semantics: to bool means != 0; float to
  // integer follows x86-64's truncating casts (see float_to_integer), not XLA's saturation.
  Value convert(Value v, DType t);
  // An opaque copy of `v` (optimization_barrier): XLA cannot fold or rewrite through it,
  // e.g. a division by a constant into a multiplication by its rounded reciprocal.
  Value opaque(Value v);
  Value reshape(Value v, const Dims& dims);
  Value broadcast_in_dim(Value v, const Dims& out_dims, const Dims& broadcast_dims);
  // NumPy-style broadcast: right-aligns v's dims against out_dims.
  Value broadcast_to(Value v, const Dims& out_dims);
  Value transpose(Value v, const Dims& permutation);
  // When `v` is the result of transpose(source, permutation) on this builder: that source
  // and permutation (a consumer that can read its operand transposed, such as a host
  // GEMM, takes the source instead of materializing the transpose). nullptr otherwise.
  struct Transposed {
    Value source;
    Dims permutation;
  };
  const Transposed* transposed_from(const Value& v) const;
  Value slice(Value v, const Dims& start, const Dims& limit, const Dims& strides);
  Value concatenate(const std::vector<Value>& vs, int64_t dim);
  // stablehlo.pad with `value` (a 0-dim value of v's dtype): per dim `low` before, `high`
  // after (negative amounts crop) and `interior` between elements; empty `interior` is 0.
  Value pad(Value v, Value value, const Dims& low, const Dims& high, const Dims& interior = {});
  Value iota(const TensorType& t, int64_t dim);

  // Elementwise. Operands must already share type (use convert/broadcast_to first).
  // `name` without the "stablehlo." prefix, or with another dialect's ("chlo.erf",
  // "chlo.next_after"); the same holds for binary().
  Value unary(std::string_view name, Value a);
  Value trunc(Value a);  // round toward zero (floats only)
  Value binary(std::string_view name, Value a, Value b);
  Value add(Value a, Value b) { return binary("add", a, b); }
  Value sub(Value a, Value b) { return binary("subtract", a, b); }
  Value mul(Value a, Value b) { return binary("multiply", a, b); }
  Value div(Value a, Value b) { return binary("divide", a, b); }
  // NaN-propagating like PyTorch (XLA's CPU maximum/minimum return the non-NaN operand
  // when only the second one is NaN).
  Value max(Value a, Value b) { return nan_propagating("maximum", a, b); }
  Value min(Value a, Value b) { return nan_propagating("minimum", a, b); }
  // direction: EQ NE LT LE GT GE. Result is i1 with a's dims.
  Value compare(Value a, Value b, std::string_view direction);
  Value select(Value pred, Value on_true, Value on_false);
  Value clamp(Value lo, Value x, Value hi);
  // The complex conjugate (the identity on real types).
  Value conj(Value v);

  // Reduction of one operand over `dims` with a binary body op ("add", "maximum", ...).
  Value reduce(Value v, Value init, const Dims& dims, std::string_view body_op);
  // Common reductions with the right identity (max of floats starts at -inf, of ints at
  // the type's minimum). Reduced dims are dropped; use reshape to keep them.
  Value reduce_sum(Value v, const Dims& dims);
  Value reduce_max(Value v, const Dims& dims);
  Value reduce_min(Value v, const Dims& dims);
  // Whether every / any element of the i1 tensor `v` along `dims` is true (dims dropped).
  Value reduce_all(Value v, const Dims& dims);
  Value reduce_any(Value v, const Dims& dims);
  // The same over every dim: an i1 scalar (`v` itself when it is one).
  Value all_of(Value v);
  Value any_of(Value v);
  // The largest / smallest value of dtype t (infinities for floats).
  Value max_value(DType t);
  Value min_value(DType t);
  // `v` with the listed (already reduced) dims re-inserted as size 1.
  Value keep_dims(Value v, const Dims& input_dims, const Dims& reduced_dims);

  // dot_general with explicit dimension numbers; result dtype `out`.
  Value dot_general(Value lhs, Value rhs, const Dims& lhs_batch, const Dims& rhs_batch,
                    const Dims& lhs_contract, const Dims& rhs_contract, DType out);

  // Adds top-level ops (function definitions in generic form, e.g. a JAX export's
  // functions: lowering/module_call.h) to the module after @main, once per `key`: a
  // second call with the same key adds nothing. The text's symbols must not clash with
  // @main or with other keys' symbols.
  void add_functions(const std::string& key, const std::string& text);

  // Returns the module text with `results` as @main's results.
  std::string finish(const std::vector<Value>& results);

  // A helper called with operands it cannot take (a lowering's bug for some input: mixed
  // dtypes, a broadcast to a lower rank) records the first such misuse here and returns a
  // placeholder of the expected type, so the lowering runs to its end and the caller turns
  // this into an internal error naming the op, never an abort. Empty when all is well.
  const std::string& misuse_error() const { return error_; }
  // Records a misuse found outside the builder (a lowering's context asked for something
  // its op does not have) and returns a placeholder of type `result`, as above.
  Value report_misuse(std::string what, const TensorType& result) {
    return misuse(std::move(what), result);
  }
  // An elementwise op asked for an element type StableHLO does not define it on (abs of
  // bool, bitwise and of floats, sqrt of integers): the first such request, recorded the
  // same way. That is a case the lowering does not support, not a bug: the caller treats
  // it as unimplemented (eager mode then runs PyTorch's CPU kernel, which computes the
  // result or raises PyTorch's own dtype error).
  const std::string& unsupported_error() const { return unsupported_; }

 private:
  Value nan_propagating(std::string_view op, Value a, Value b);
  Value float_to_integer(Value v, DType t);
  Value misuse(std::string what, const TensorType& result);
  void check_element_type(const std::string& op, DType t);
  std::string name_of(const Value& v) const;
  std::string signature(const std::vector<Value>& operands,
                        const std::vector<TensorType>& results) const;
  Value fresh(const TensorType& t);
  // Fresh values for an op's `results` and the text that binds them ("%5 = "; several
  // results: a pack, "%m5:2 = ", whose values read as %m5#i).
  std::pair<std::vector<Value>, std::string> results_of(const std::vector<TensorType>& results);
  // Appends one region ("{ ^bb0(args): ... stablehlo.return }" without the braces' line
  // endings) whose block takes `block_args` and is filled by `body`.
  std::string region(const std::vector<TensorType>& block_args, const RegionBody& body);

  std::string module_name_;
  std::vector<Value> params_;
  std::map<size_t, size_t> param_aliases_;
  std::map<int, Transposed> transposes_;  // result id -> transpose(source, permutation)
  std::string body_;
  std::vector<std::string> function_keys_;
  std::string functions_;  // add_functions: top-level ops after @main
  int next_id_ = 0;
  std::string error_;
  std::string unsupported_;
  int indent_ = 4;
};

}  // namespace torchtpu::lowering
