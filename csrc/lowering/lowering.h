// The lowering table: aten overload name -> function that emits StableHLO.
//
// Shared by eager mode (one op = one module) and compiled mode (one graph = one module).
// A lowering reads its arguments through a LoweringContext, which turns tensor and
// scalar arguments into @main parameters on first use (so unused arguments cost nothing)
// and records, per parameter, where its runtime value comes from (a ParamBinding).
//
// Arguments arrive as the op's schema lists them, as torch-free OpArgs. Scalars that are
// data (`Scalar` in the schema, and 0-dim CPU tensors) are runtime parameters whose dtype
// the lowering chooses; structural arguments (ints, int lists, bools, dtypes, strings)
// are compile-time and part of the cache key.
//
// Output types come from the caller (PyTorch's meta kernels): out_types()[i] is the type
// of the i-th tensor result, and a lowering must return values of exactly those types.
// Lowerings registered under in-place and out= names compute the functional result; the
// caller writes it into the mutable arguments.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "lowering/hlo_builder.h"

namespace torchtpu::lowering {

enum class ArgKind {
  kTensor, kTensorList, kScalar, kScalarList, kInt, kDouble, kBool, kIntList, kNone, kString, kDType
};
enum class ScalarCategory { kBool, kInt, kFloat, kComplex };

struct OpArg {
  ArgKind kind = ArgKind::kNone;
  TensorType type;                      // kTensor
  std::vector<TensorType> list_types;   // kTensorList
  ScalarCategory scalar_category = ScalarCategory::kFloat;  // kScalar
  std::vector<ScalarCategory> scalar_categories;             // kScalarList, one per item
  int64_t int_value = 0;                // kInt, kBool (0/1)
  double double_value = 0;              // kDouble
  Dims ints;                            // kIntList; kTensorList from a Tensor?[]: the
                                        // position of each present item (empty: 0..n-1)
  std::string string_value;             // kString
  DType dtype = DType::kF32;            // kDType

  // Appends this argument's compile-time identity to a cache key.
  void append_key(std::string* key) const;
};

// kLinalgError: torch.linalg.LinAlgError (a RuntimeError subclass), as PyTorch's linalg
// kernels raise for singular or not positive-definite inputs.
enum class CheckKind { kIndexError, kRuntimeError, kLinalgError };

// A data check: `ok` (i1 scalar) must hold, else the caller raises `message`.
struct Check {
  Value ok;
  std::string message;
  CheckKind kind = CheckKind::kIndexError;
};

// Where the runtime value of one @main parameter comes from.
struct ParamBinding {
  enum class Source { kTensor, kTensorListItem, kScalar, kScalarListItem, kRngState } source;
  int arg_index = -1;
  int list_index = -1;
  DType dtype = DType::kF32;  // for kScalar: the dtype the lowering asked for
};

class LoweringContext {
 public:
  LoweringContext(Builder& builder, std::string op_name, std::vector<OpArg> args,
                  std::vector<TensorType> out_types);

  Builder& b() { return builder_; }
  const std::string& op_name() const { return op_name_; }
  size_t num_args() const { return args_.size(); }
  const OpArg& arg(size_t i) const { return args_.at(i); }
  bool is_none(size_t i) const { return i >= args_.size() || args_[i].kind == ArgKind::kNone; }

  // Graph mode: argument `i` is an existing value, not a parameter.
  void bind_tensor(size_t i, Value v) { tensor_params_.at(i) = v; }
  void bind_tensor_list(size_t i, const std::vector<Value>& vs);

  // Tensor arguments (declared as parameters on first use unless bound). A 0-dim CPU tensor
  // passed as a Tensor is a runtime scalar (f64, i64 or bool by its category).
  Value tensor(size_t i);
  const TensorType& tensor_type(size_t i) const { return args_.at(i).type; }
  std::vector<Value> tensor_list(size_t i);
  // A scalar argument as a 0-d runtime parameter of dtype `t`.
  Value scalar(size_t i, DType t);
  // Item `j` of a Scalar[] argument as a 0-d runtime parameter of dtype `t`.
  Value scalar_list_item(size_t i, size_t j, DType t);
  // Records a parameter that another context (a per-item context of a list op sharing this
  // builder) declared; bindings must follow the builder's parameter order.
  void add_binding(const ParamBinding& binding) { bindings_.push_back(binding); }
  // Tensor or scalar argument `i` as a value of dtype `t` broadcast to `dims`.
  Value operand(size_t i, DType t, const Dims& dims);

  // Structural arguments.
  int64_t int_arg(size_t i) const { return args_.at(i).int_value; }
  bool bool_arg(size_t i) const { return args_.at(i).int_value != 0; }
  double double_arg(size_t i) const { return args_.at(i).double_value; }
  const Dims& int_list(size_t i) const { return args_.at(i).ints; }
  const std::string& string_arg(size_t i) const { return args_.at(i).string_value; }
  std::optional<DType> dtype_arg(size_t i) const;

  // A u64[2] parameter holding (seed, offset) from the device's generator. Each call of
  // the executable gets a fresh offset.
  Value rng_state();

  // Data checks the caller must run after execution (XLA clamps out-of-range indices
  // where PyTorch raises): `ok` is an i1 scalar; when it is false the caller raises
  // `message` as an IndexError-style error (message shape: "index out of range: ...").
  // `kind` picks the Python exception PyTorch raises for the same condition.
  void require(Value ok, std::string message, CheckKind kind = CheckKind::kIndexError);
  const std::vector<Check>& checks() const { return checks_; }

  const std::vector<TensorType>& out_types() const { return out_types_; }
  const TensorType& out_type(size_t i = 0) const { return out_types_.at(i); }

  // PyTorch type promotion over the listed tensor/scalar arguments.
  DType result_type(const std::vector<size_t>& arg_indices) const;

  const std::vector<ParamBinding>& bindings() const { return bindings_; }

 private:
  Builder& builder_;
  std::string op_name_;
  std::vector<OpArg> args_;
  std::vector<TensorType> out_types_;
  std::vector<ParamBinding> bindings_;
  std::vector<std::optional<Value>> tensor_params_;
  std::vector<std::vector<std::optional<Value>>> list_params_;
  std::optional<Value> rng_param_;
  std::vector<Check> checks_;
};

using LoweringFn = std::function<base::StatusOr<std::vector<Value>>(LoweringContext&)>;

// Registers `fn` under each of `names` ("aten::add.Tensor", "aten::add_.Tensor", ...).
// Called only from the family registration functions (families.h), which the table runs
// once on first lookup; explicit calls keep static-library linking from dropping them.
void register_lowering(std::initializer_list<const char*> names, LoweringFn fn);
// nullptr when `name` has no lowering.
const LoweringFn* find_lowering(std::string_view name);
std::vector<std::string> registered_lowerings();
// Drops an entry (the aten layer prunes names that are not overloads of the running
// PyTorch, so the table and coverage reports list only reachable ops).
void remove_lowering(std::string_view name);

// Whether the lowering registered as `op_name` is written for complex operands and
// results (complex.cc keeps the list). Every other lowering sees only real dtypes: a call
// with a complex tensor, scalar or dtype is unimplemented (eager mode falls back to the
// CPU), never a lowering that was not written for complex numbers.
bool accepts_complex(std::string_view op_name);
// unimplemented when the call involves a complex dtype that `op_name` does not accept.
base::Status check_complex_support(const std::string& op_name, const std::vector<OpArg>& args,
                                   const std::vector<TensorType>& out_types);

// Type promotion primitives (c10's table).
DType promote_types(DType a, DType b);

// Normalizes a possibly negative dim against `rank` (rank 0 accepts -1 and 0).
int64_t wrap_dim(int64_t dim, int64_t rank);

// Result of lowering one op into a standalone module.
// @main returns out_types.size() results followed by one i1 scalar per check.
struct LoweredModule {
  std::string text;
  std::vector<ParamBinding> bindings;
  std::vector<TensorType> out_types;
  std::vector<std::string> check_messages;
  std::vector<CheckKind> check_kinds;
};

// Lowers `op_name` with `args` into a module whose @main returns `out_types`.
base::StatusOr<LoweredModule> lower_op(const std::string& op_name, std::vector<OpArg> args,
                                       std::vector<TensorType> out_types);

}  // namespace torchtpu::lowering
