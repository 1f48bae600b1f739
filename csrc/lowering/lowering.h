// The lowering table: aten overload name -> function that emits StableHLO.
//
// Shared by eager mode and compiled mode through one call path: a graph of nodes lowered
// into one module (graph.h), an eager op being the graph of one node (lower_op below). A
// lowering reads its arguments through a LoweringContext, which asks a ValueSource for the
// Value of a tensor argument on first use (so unused arguments cost nothing) and for each
// runtime parameter (scalars, generator states); the graph lowering records, per @main
// parameter, where its runtime value comes from (a GraphParam).
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
#include <utility>
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
  // The lowering leaves every written argument's value as it was when `ok` is false (an
  // index check whose failure drops every update), so a failed run's results may replace
  // the arguments' buffers: what lets an in-place op with checks donate them.
  bool guarded = false;
};

// What a lowering reads beyond its arguments' types: the Value of a tensor argument, and
// runtime parameters. The graph lowering answers for each node (a graph value, or a @main
// parameter declared on first use); a list op's per-item contexts and lowerings that
// delegate to another forward to their outer context.
// How a scalar argument becomes a runtime parameter of a narrower dtype. kChecked raises
// on a value the dtype cannot hold, as the CPU kernels that read a Scalar do (fill_,
// clamp); kWrapped casts as TensorIterator casts a wrapped Python number, as the binary
// ops' Scalar overloads do (uint8 < 1000 compares with 232, float32 < 1e300 with inf).
enum class ScalarCast { kChecked, kWrapped };
// A fill's number in `out`'s dtype (fill_, full, scalar_tensor): checked, except into one
// float16/bfloat16 element, whose CPU fill takes another path: inf for 70000.0 in float16,
// 65504 for 65519.0.
ScalarCast fill_cast(const TensorType& out);

class ValueSource {
 public:
  virtual ~ValueSource() = default;
  // Tensor argument `arg`; `item` >= 0: that item of a Tensor[] argument.
  virtual Value tensor(size_t arg, int item) = 0;
  // A new 0-d runtime parameter of dtype `t` holding scalar argument `arg` (`item` >= 0:
  // that item of a Scalar[] argument), converted by `cast`.
  virtual Value scalar(size_t arg, int item, DType t, ScalarCast cast) = 0;
  // The u64[2] generator state (seed, offset) of the op; one per op.
  virtual Value rng_state() = 0;
};

class LoweringContext {
 public:
  LoweringContext(Builder& builder, std::string op_name, std::vector<OpArg> args,
                  std::vector<TensorType> out_types, ValueSource& source);

  Builder& b() { return builder_; }
  const std::string& op_name() const { return op_name_; }
  size_t num_args() const { return args_.size(); }
  const OpArg& arg(size_t i) const { return args_.at(i); }
  bool is_none(size_t i) const { return i >= args_.size() || args_[i].kind == ArgKind::kNone; }

  // Tensor arguments (asked of the source once each). A 0-dim CPU tensor passed as a
  // Tensor is a runtime scalar (f64, i64 or bool by its category).
  Value tensor(size_t i);
  const TensorType& tensor_type(size_t i) const { return args_.at(i).type; }
  std::vector<Value> tensor_list(size_t i);
  // A scalar argument as a 0-d runtime parameter of dtype `t` (each request its own: the
  // same scalar may be wanted in two dtypes).
  Value scalar(size_t i, DType t, ScalarCast cast = ScalarCast::kChecked);
  // Item `j` of a Scalar[] argument as a 0-d runtime parameter of dtype `t`.
  Value scalar_list_item(size_t i, size_t j, DType t, ScalarCast cast = ScalarCast::kChecked);
  // Tensor or scalar argument `i` as a value of dtype `t` broadcast to `dims`.
  Value operand(size_t i, DType t, const Dims& dims, ScalarCast cast = ScalarCast::kChecked);

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
  // `kind` picks the Python exception PyTorch raises for the same condition; `guarded` as
  // Check::guarded.
  void require(Value ok, std::string message, CheckKind kind = CheckKind::kIndexError,
               bool guarded = false);
  const std::vector<Check>& checks() const { return checks_; }

  const std::vector<TensorType>& out_types() const { return out_types_; }
  const TensorType& out_type(size_t i = 0) const { return out_types_.at(i); }

  // PyTorch type promotion over the listed tensor/scalar arguments.
  DType result_type(const std::vector<size_t>& arg_indices) const;

 private:
  Builder& builder_;
  std::string op_name_;
  std::vector<OpArg> args_;
  std::vector<TensorType> out_types_;
  ValueSource& source_;
  std::vector<std::optional<Value>> tensor_values_;
  std::vector<std::vector<std::optional<Value>>> list_values_;
  std::optional<Value> rng_value_;
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

// A per-spatial-dim int list (a convolution's or pooling's kernel, stride, ...) that PyTorch
// may pass with one entry for all `num_spatial` dims, or none (`fallback` for each).
Dims per_dim(const Dims& v, int64_t num_spatial, int64_t fallback);

// The dims 0, 1, ..., n - 1 (every dim of a rank-n value: full reductions, batch dims).
Dims iota_dims(int64_t n);

// PyTorch's linspace: `steps` (> 1) values of dtype `t` from `start` to `end` (0-d values of
// dtype t), rounded as its CPU kernel rounds them (factory.cc).
Value linspace_values(Builder& b, Value start, Value end, int64_t steps, DType t);

struct GraphScalar {
  ScalarCategory category = ScalarCategory::kFloat;
  double float_value = 0;  // kFloat; kComplex: the real part
  double imag_value = 0;   // kComplex: the imaginary part
  int64_t int_value = 0;   // exact for kInt and kBool
  bool is_unsigned = false;  // kInt: int_value holds the bits of a uint64 above int64's range
  int symbol = -1;         // >= 0: the value is size symbol `symbol`'s runtime value
};

// Where the runtime value of one @main parameter comes from: the one binding vocabulary
// of eager ops and compiled graphs.
struct GraphParam {
  enum class Source { kInput, kScalar, kRngState } source = Source::kInput;
  int input_index = -1;  // kInput: the graph input
  int node = -1;         // kScalar, kRngState: the node (an eager op: 0) that asked
  int arg = -1;          // kScalar: that node's argument
  int item = -1;         // kScalar: the item of a Scalar[] argument, else -1
  GraphScalar scalar;    // kScalar of a compiled graph: the value its node fixed, or
                         // (scalar.symbol >= 0) the runtime size value it reads
  DType dtype = DType::kF32;
  ScalarCast cast = ScalarCast::kChecked;  // kScalar: how the value becomes `dtype`
};

// A lowered module: @main takes `params` and returns output_types.size() results followed,
// when it has checks, by one i1 vector of check_messages.size() flags (true: the check
// held), so a run's checks are read in one transfer.
struct LoweredGraph {
  std::string text;
  std::vector<GraphParam> params;
  std::vector<TensorType> output_types;
  std::vector<std::string> check_messages;  // one per flag of the check vector
  std::vector<CheckKind> check_kinds;
  std::vector<int> check_nodes;  // per check: the graph node whose lowering required it
  // Every check is guarded (Check::guarded): a failed run wrote nothing it was given.
  bool checks_guarded = true;
};

// The graph inputs of an eager op: its tensor arguments and the items of its Tensor[]
// arguments, in argument order, as (argument, item or -1).
std::vector<std::pair<int, int>> op_inputs(const std::vector<OpArg>& args);

// Lowers `op_name` with `args` into a module whose @main returns `out_types`: the graph of
// one node whose inputs are op_inputs(args). `donations`: (graph input, output) pairs whose
// output may take the input's buffer (an in-place op's written argument), as
// GraphSpec::donations.
base::StatusOr<LoweredGraph> lower_op(const std::string& op_name, std::vector<OpArg> args,
                                      std::vector<TensorType> out_types,
                                      std::vector<std::pair<int, int>> donations = {});

}  // namespace torchtpu::lowering
