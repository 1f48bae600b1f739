#include "lowering/lowering.h"

#include <map>
#include <mutex>

#include "lowering/families.h"
#include "lowering/graph.h"
#include "lowering/module_call.h"

namespace torchtpu::lowering {
namespace {

std::map<std::string, LoweringFn, std::less<>>& table() {
  static auto* t = new std::map<std::string, LoweringFn, std::less<>>();
  return *t;
}

void ensure_registered() {
  static std::once_flag once;
  std::call_once(once, [] {
    register_elementwise_lowerings();
    register_activation_lowerings();
    register_reduction_lowerings();
    register_matmul_lowerings();
    register_nn_lowerings();
    register_shape_lowerings();
    register_indexing_lowerings();
    register_factory_lowerings();
    register_random_lowerings();
    register_multinomial_lowerings();
    register_sort_lowerings();
    register_elementwise_math_lowerings();
    register_interpolate_lowerings();
    register_patch_lowerings();
    register_pooling_lowerings();
    register_distance_lowerings();
    register_grid_sample_lowerings();
    register_fractional_pool_lowerings();
    register_ctc_loss_lowerings();
    register_incomplete_gamma_lowerings();
    register_unpool_lowerings();
    register_search_lowerings();
    register_index_reduce_lowerings();
    register_rnn_lowerings();
    register_amp_lowerings();
    register_optimizer_lowerings();
    register_assert_lowerings();
    register_embedding_bag_lowerings();
    register_linalg_factor_lowerings();
    register_linalg_decomp_lowerings();
    register_linalg_svd_lowerings();
    register_linalg_eigh_lowerings();
    register_linalg_matrix_exp_lowerings();
    register_complex_lowerings();
    register_fft_lowerings();
    register_weight_norm_lowerings();
    register_host_kernel_call_lowerings();
    register_foreach_lowerings();
    register_graph_lowerings();
    register_functional_collective_lowerings();
  });
}

const char* kind_tag(ArgKind k) {
  switch (k) {
    case ArgKind::kTensor: return "T";
    case ArgKind::kTensorList: return "L";
    case ArgKind::kScalar: return "S";
    case ArgKind::kScalarList: return "R";
    case ArgKind::kInt: return "i";
    case ArgKind::kDouble: return "d";
    case ArgKind::kBool: return "b";
    case ArgKind::kIntList: return "I";
    case ArgKind::kNone: return "N";
    case ArgKind::kString: return "s";
    case ArgKind::kDType: return "t";
  }
  return "?";
}

}  // namespace

void register_lowering(std::initializer_list<const char*> names, LoweringFn fn) {
  for (const char* n : names) table()[n] = fn;
}

const LoweringFn* find_lowering(std::string_view name) {
  ensure_registered();
  auto it = table().find(name);
  return it == table().end() ? find_module_call(name) : &it->second;
}

void remove_lowering(std::string_view name) {
  ensure_registered();
  auto it = table().find(name);
  if (it != table().end()) table().erase(it);
}

std::vector<std::string> registered_lowerings() {
  ensure_registered();
  std::vector<std::string> names;
  for (const auto& [n, fn] : table()) names.push_back(n);
  return names;
}

void OpArg::append_key(std::string* key) const {
  *key += kind_tag(kind);
  switch (kind) {
    case ArgKind::kTensor:
      *key += type.str();
      break;
    case ArgKind::kTensorList:
      for (const TensorType& t : list_types) *key += t.str() + ",";
      *key += i64_list(ints);  // positions of present items in an optional list
      break;
    case ArgKind::kScalar:
      *key += std::to_string(static_cast<int>(scalar_category));
      break;
    case ArgKind::kScalarList:
      for (ScalarCategory c : scalar_categories) *key += std::to_string(static_cast<int>(c));
      break;
    case ArgKind::kInt:
    case ArgKind::kBool:
      *key += std::to_string(int_value);
      break;
    case ArgKind::kDouble: {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.17g", double_value);
      *key += buf;
      break;
    }
    case ArgKind::kIntList:
      *key += i64_list(ints);
      break;
    case ArgKind::kString:
      *key += string_value;
      break;
    case ArgKind::kDType:
      *key += base::dtype_name(dtype);
      break;
    case ArgKind::kNone:
      break;
  }
  *key += ";";
}

LoweringContext::LoweringContext(Builder& builder, std::string op_name, std::vector<OpArg> args,
                                 std::vector<TensorType> out_types, ValueSource& source)
    : builder_(builder),
      op_name_(std::move(op_name)),
      args_(std::move(args)),
      out_types_(std::move(out_types)),
      source_(source) {
  tensor_values_.resize(args_.size());
  list_values_.resize(args_.size());
  for (size_t i = 0; i < args_.size(); ++i) {
    list_values_[i].resize(args_[i].list_types.size());
  }
}

Value LoweringContext::tensor(size_t i) {
  if (args_.at(i).kind == ArgKind::kScalar) {
    // A 0-dim CPU tensor where the schema takes a Tensor (index_put_'s values,
    // index_fill's value): a 0-d runtime scalar, wide enough to hold it exactly.
    ScalarCategory k = args_[i].scalar_category;
    return scalar(i, k == ScalarCategory::kComplex ? DType::kC128
                     : k == ScalarCategory::kFloat ? DType::kF64
                     : k == ScalarCategory::kInt ? DType::kI64
                                                 : DType::kBool);
  }
  if (!tensor_values_.at(i)) tensor_values_[i] = source_.tensor(i, -1);
  return *tensor_values_[i];
}

std::vector<Value> LoweringContext::tensor_list(size_t i) {
  std::vector<Value> out;
  for (size_t j = 0; j < list_values_.at(i).size(); ++j) {
    if (!list_values_[i][j]) list_values_[i][j] = source_.tensor(i, static_cast<int>(j));
    out.push_back(*list_values_[i][j]);
  }
  return out;
}

Value LoweringContext::scalar(size_t i, DType t, ScalarCast cast) {
  return source_.scalar(i, -1, t, cast);
}

Value LoweringContext::scalar_list_item(size_t i, size_t j, DType t, ScalarCast cast) {
  return source_.scalar(i, static_cast<int>(j), t, cast);
}

Value LoweringContext::operand(size_t i, DType t, const Dims& dims, ScalarCast cast) {
  Value v = arg(i).kind == ArgKind::kScalar ? scalar(i, t, cast)
                                            : builder_.convert(tensor(i), t);
  return builder_.broadcast_to(v, dims);
}

std::optional<DType> LoweringContext::dtype_arg(size_t i) const {
  if (is_none(i)) return std::nullopt;
  return args_.at(i).dtype;
}

Value LoweringContext::rng_state() {
  if (!rng_value_) rng_value_ = source_.rng_state();
  return *rng_value_;
}

namespace {

int type_rank(DType t) {
  switch (t) {
    case DType::kBool: return 0;
    case DType::kU8: return 1;
    case DType::kI8: return 1;
    case DType::kI16: return 2;
    case DType::kI32: return 3;
    case DType::kI64: return 4;
    case DType::kF16: return 5;
    case DType::kBF16: return 5;
    case DType::kF32: return 6;
    case DType::kF64: return 7;
    case DType::kU16: return 2;
    case DType::kU32: return 3;
    case DType::kU64: return 4;
    case DType::kC64: return 8;
    case DType::kC128: return 9;
  }
  return 0;
}

}  // namespace

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  if ((a == DType::kU8 && b == DType::kI8) || (a == DType::kI8 && b == DType::kU8)) {
    return DType::kI16;
  }
  if ((a == DType::kF16 && b == DType::kBF16) || (a == DType::kBF16 && b == DType::kF16)) {
    return DType::kF32;
  }
  if (base::is_complex(a) || base::is_complex(b)) {
    // complex64 with float64 is complex128 (c10's table); otherwise the complex type wins.
    if (a == DType::kC128 || b == DType::kC128 || a == DType::kF64 || b == DType::kF64) {
      return DType::kC128;
    }
    return DType::kC64;
  }
  return type_rank(a) >= type_rank(b) ? a : b;
}

DType LoweringContext::result_type(const std::vector<size_t>& arg_indices) const {
  // c10's ResultTypeState: dimensioned tensors > zero-dim tensors > wrapped scalars, and
  // a lower group only wins when it is of a higher category (bool < int < float).
  std::optional<DType> dim_result, zero_result, wrapped_result;
  auto update = [](std::optional<DType>& slot, DType t) {
    slot = slot ? promote_types(*slot, t) : t;
  };
  for (size_t i : arg_indices) {
    const OpArg& a = args_.at(i);
    if (a.kind == ArgKind::kTensor) {
      update(a.type.rank() > 0 ? dim_result : zero_result, a.type.dtype);
    } else if (a.kind == ArgKind::kScalar) {
      DType t = a.scalar_category == ScalarCategory::kComplex ? DType::kC64
                : a.scalar_category == ScalarCategory::kFloat ? DType::kF32
                : a.scalar_category == ScalarCategory::kInt   ? DType::kI64
                                                              : DType::kBool;
      update(wrapped_result, t);
    }
  }
  auto combine = [](std::optional<DType> higher, std::optional<DType> lower) -> std::optional<DType> {
    if (!higher) return lower;
    if (!lower) return higher;
    // Categories: bool < integer < floating < complex.
    auto category = [](DType t) {
      return base::is_complex(t) ? 3 : base::is_floating(t) ? 2 : t == DType::kBool ? 0 : 1;
    };
    if (category(*lower) <= category(*higher)) return higher;
    return promote_types(*higher, *lower);
  };
  std::optional<DType> r = combine(dim_result, combine(zero_result, wrapped_result));
  return r.value_or(DType::kF32);
}

void LoweringContext::require(Value ok, std::string message, CheckKind kind, bool guarded) {
  checks_.push_back(Check{ok, std::move(message), kind, guarded});
}

int64_t wrap_dim(int64_t dim, int64_t rank) {
  int64_t r = rank == 0 ? 1 : rank;
  return dim < 0 ? dim + r : dim;
}

Dims iota_dims(int64_t n) {
  Dims d;
  for (int64_t i = 0; i < n; ++i) d.push_back(i);
  return d;
}

Dims per_dim(const Dims& v, int64_t num_spatial, int64_t fallback) {
  if (v.empty()) return Dims(num_spatial, fallback);
  if (v.size() == 1) return Dims(num_spatial, v[0]);
  return v;
}

base::Status check_complex_support(const std::string& op_name, const std::vector<OpArg>& args,
                                   const std::vector<TensorType>& out_types) {
  bool complex = false;
  for (const OpArg& a : args) {
    complex |= a.kind == ArgKind::kTensor && base::is_complex(a.type.dtype);
    complex |= a.kind == ArgKind::kScalar && a.scalar_category == ScalarCategory::kComplex;
    complex |= a.kind == ArgKind::kDType && base::is_complex(a.dtype);
    for (const TensorType& t : a.list_types) complex |= base::is_complex(t.dtype);
    for (ScalarCategory k : a.scalar_categories) complex |= k == ScalarCategory::kComplex;
  }
  for (const TensorType& t : out_types) complex |= base::is_complex(t.dtype);
  if (!complex || accepts_complex(op_name)) return base::Status::ok_status();
  return base::unimplemented("lowering: " + op_name + " is not lowered for complex dtypes");
}

std::vector<std::pair<int, int>> op_inputs(const std::vector<OpArg>& args) {
  std::vector<std::pair<int, int>> inputs;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i].kind == ArgKind::kTensor) inputs.emplace_back(static_cast<int>(i), -1);
    if (args[i].kind != ArgKind::kTensorList) continue;
    for (size_t j = 0; j < args[i].list_types.size(); ++j) {
      inputs.emplace_back(static_cast<int>(i), static_cast<int>(j));
    }
  }
  return inputs;
}

base::StatusOr<LoweredGraph> lower_op(const std::string& op_name, std::vector<OpArg> args,
                                      std::vector<TensorType> out_types,
                                      std::vector<std::pair<int, int>> donations) {
  GraphSpec spec;
  GraphNode node;
  node.op = op_name;
  node.tensor_refs.assign(args.size(), -1);
  node.list_refs.resize(args.size());
  for (const auto& [arg, item] : op_inputs(args)) {
    int id = static_cast<int>(spec.inputs.size());
    if (item < 0) {
      spec.inputs.push_back(args[arg].type);
      node.tensor_refs[arg] = id;
    } else {
      spec.inputs.push_back(args[arg].list_types[item]);
      node.list_refs[arg].push_back(id);
    }
  }
  int next = static_cast<int>(spec.inputs.size());
  for (size_t k = 0; k < out_types.size(); ++k) {
    node.out_ids.push_back(next);
    spec.outputs.push_back(next++);
  }
  node.args = std::move(args);
  node.out_types = std::move(out_types);
  spec.nodes.push_back(std::move(node));
  spec.donations = std::move(donations);
  return lower_graph(spec, "torchtpu");
}

}  // namespace torchtpu::lowering
