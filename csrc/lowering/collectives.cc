#include "lowering/collectives.h"

#include <cmath>
#include <set>

namespace torchtpu::lowering {

namespace {

// "dense<[[0, 1], [2, 3]]> : tensor<2x2xi64>"
std::string dense_i64_matrix(const std::vector<std::vector<int64_t>>& rows, size_t row_size) {
  std::string s = "dense<[";
  for (size_t i = 0; i < rows.size(); ++i) {
    s += (i ? ", " : "") + i64_list(rows[i]);
  }
  return s + "]> : tensor<" + std::to_string(rows.size()) + "x" + std::to_string(row_size) +
         "xi64>";
}

std::string groups_attr(const ReplicaGroups& groups) {
  return "replica_groups = " + dense_i64_matrix(groups, groups[0].size());
}

base::Status check_groups(const char* collective, const ReplicaGroups& groups) {
  auto fail = [&](const std::string& what) {
    return base::invalid_argument(std::string("lowering: ") + collective + ": " + what);
  };
  if (groups.empty() || groups[0].empty()) return fail("no replica groups");
  std::set<int64_t> seen;
  size_t total = 0;
  for (const auto& g : groups) {
    if (g.size() != groups[0].size()) {
      return fail("replica groups differ in size (" + std::to_string(groups[0].size()) +
                  " and " + std::to_string(g.size()) + ")");
    }
    for (int64_t r : g) {
      if (!seen.insert(r).second) return fail("replica " + std::to_string(r) + " is in two groups");
      ++total;
    }
  }
  if (*seen.begin() != 0 || *seen.rbegin() != static_cast<int64_t>(total) - 1) {
    return fail("replica groups must cover replicas [0, " + std::to_string(total) + ")");
  }
  return base::Status::ok_status();
}

base::Status check_reduce(const char* collective, ReduceKind op, DType dtype) {
  if (dtype == DType::kBool && (op == ReduceKind::kAvg || op == ReduceKind::kPremulSum)) {
    return base::invalid_argument(std::string("lowering: ") + collective + ": " +
                                  reduce_kind_name(op) +
                                  " is not defined on bool tensors; use sum, min, max or "
                                  "product (or convert to an integer dtype)");
  }
  if (is_bitwise(op) && (base::is_floating(dtype) || base::is_complex(dtype))) {
    return base::invalid_argument(std::string("lowering: ") + collective + ": " +
                                  reduce_kind_name(op) + " is defined on integer and bool "
                                  "tensors only, not " + base::dtype_name(dtype));
  }
  if (base::dtype_size_bytes(dtype) == 0 || dtype == DType::kU32 || dtype == DType::kU64) {
    return base::invalid_argument(std::string("lowering: ") + collective +
                                  ": no collectives for dtype " + base::dtype_name(dtype));
  }
  return base::Status::ok_status();
}

base::Status check_split(const char* collective, const TensorType& t, size_t parts) {
  if (t.rank() == 0 || t.dims[0] % static_cast<int64_t>(parts) != 0) {
    return base::invalid_argument(
        std::string("lowering: ") + collective + ": dim 0 of " + t.str() +
        " must split into " + std::to_string(parts) + " equal parts (one per group member)");
  }
  return base::Status::ok_status();
}

base::Status check_factor(const char* collective, ReduceKind op,
                          const std::optional<Value>& factor) {
  if ((op == ReduceKind::kPremulSum) != factor.has_value()) {
    return base::invalid_argument(std::string("lowering: ") + collective +
                                  ": a factor goes with premul_sum, and only with it");
  }
  return base::Status::ok_status();
}

// The StableHLO op of a bitwise reduction.
const char* bitwise_op(ReduceKind op) {
  return op == ReduceKind::kBand ? "and" : op == ReduceKind::kBor ? "or" : "xor";
}

// The scalar combiner of a reduction region. The CPU plugin runs only single-op regions
// (add, multiply, minimum, maximum, and, or: a compare-and-select refuses to compile with
// "Unsupported reduction computation"), so NaN is propagated outside the region.
Value combine(Builder& b, ReduceKind op, Value x, Value y) {
  bool is_bool = x.dtype() == DType::kBool;
  switch (op) {
    case ReduceKind::kMin:
      return b.binary(is_bool ? "and" : "minimum", x, y);
    case ReduceKind::kMax:
      return b.binary(is_bool ? "or" : "maximum", x, y);
    case ReduceKind::kProduct:
      return is_bool ? b.binary("and", x, y) : b.mul(x, y);
    case ReduceKind::kSum:
    case ReduceKind::kAvg:
    case ReduceKind::kPremulSum:
      return is_bool ? b.binary("or", x, y) : b.add(x, y);
    case ReduceKind::kBand:
    case ReduceKind::kBor:
    case ReduceKind::kBxor:
      return b.binary(bitwise_op(op), x, y);
  }
  return b.add(x, y);
}

// Runs a reducing collective (`name` with `attrs`) over `x`, with the premultiply (by
// `factor`, PREMUL_SUM only) and the average's division around it.
Value reducing(Builder& b, std::string_view name, ReduceKind op, Value x,
               const TensorType& result, std::string_view attrs, int64_t group_size,
               std::optional<Value> factor = std::nullopt) {
  if (op == ReduceKind::kPremulSum) {
    x = b.mul(x, b.broadcast_in_dim(*factor, x.dims(), {}));
  }
  auto collective = [&](ReduceKind kind, Value v, const TensorType& out) {
    TensorType scalar{v.dtype(), {}};
    return b.op_with_region(
        name, {v}, {out}, {scalar, scalar},
        [kind](Builder& rb, const std::vector<Value>& a) {
          return std::vector<Value>{combine(rb, kind, a[0], a[1])};
        },
        attrs)[0];
  };
  Value r = collective(op, x, result);
  if (base::is_floating(x.dtype()) && (op == ReduceKind::kMin || op == ReduceKind::kMax)) {
    // PyTorch's min/max propagate NaN; XLA's CPU minimum/maximum may drop it. A second
    // collective (or over a bool mask) says where any rank had NaN.
    Value has_nan = collective(ReduceKind::kMax, b.compare(x, x, "NE"),
                               TensorType{DType::kBool, result.dims});
    r = b.select(has_nan, b.splat(std::nan(""), result), r);
  }
  if (op == ReduceKind::kAvg) {
    // Integer division truncates toward zero, as stablehlo.divide does on integers.
    r = b.div(r, b.splat(static_cast<double>(group_size), r.type));
  }
  return r;
}

// A bitwise all-reduce: every member's value gathered and folded here. XLA's CPU runtime
// refuses an all_reduce whose region is a bitwise op on integers ("Unsupported reduction
// computation"); these reduce flags and masks, so n times the data is no cost that matters.
Value gathered_fold(Builder& b, ReduceKind op, Value x, const ReplicaGroups& groups) {
  const TensorType t = x.type;
  const int64_t n = static_cast<int64_t>(groups[0].size()), numel = t.num_elements();
  Value all = b.op("stablehlo.all_gather", {b.reshape(x, {numel})},
                   TensorType{t.dtype, {n * numel}},
                   "all_gather_dim = 0 : i64, " + groups_attr(groups));
  TensorType scalar{t.dtype, {}};
  Value init = op == ReduceKind::kBand ? b.unary("not", b.zeros(scalar)) : b.zeros(scalar);
  return b.reshape(b.reduce(b.reshape(all, {n, numel}), init, {0}, bitwise_op(op)), t.dims);
}

}  // namespace

bool is_bitwise(ReduceKind op) {
  return op == ReduceKind::kBand || op == ReduceKind::kBor || op == ReduceKind::kBxor;
}

const char* reduce_kind_name(ReduceKind op) {
  switch (op) {
    case ReduceKind::kSum: return "sum";
    case ReduceKind::kAvg: return "avg";
    case ReduceKind::kMin: return "min";
    case ReduceKind::kMax: return "max";
    case ReduceKind::kProduct: return "product";
    case ReduceKind::kPremulSum: return "premul_sum";
    case ReduceKind::kBand: return "band";
    case ReduceKind::kBor: return "bor";
    case ReduceKind::kBxor: return "bxor";
  }
  return "?";
}

ReplicaGroups whole_world(int64_t n) {
  std::vector<int64_t> g;
  for (int64_t r = 0; r < n; ++r) g.push_back(r);
  return {g};
}

namespace {
constexpr std::string_view kGroupsPrefix = "tpu_replica_groups:";
}  // namespace

std::string encode_replica_groups(const ReplicaGroups& groups) {
  std::string s(kGroupsPrefix);
  for (size_t g = 0; g < groups.size(); ++g) {
    if (g) s += ";";
    for (size_t i = 0; i < groups[g].size(); ++i) {
      s += (i ? "," : "") + std::to_string(groups[g][i]);
    }
  }
  return s;
}

base::StatusOr<ReplicaGroups> parse_replica_groups(std::string_view text) {
  auto fail = [&] {
    return base::invalid_argument(
        "lowering: functional collective: group '" + std::string(text) +
        "' was not resolved to the replicas of the graph's program (only graphs whose groups "
        "run in-plugin carry their collectives)");
  };
  if (text.substr(0, kGroupsPrefix.size()) != kGroupsPrefix) return fail();
  ReplicaGroups groups(1);
  int64_t value = -1;
  for (char c : text.substr(kGroupsPrefix.size())) {
    if (c >= '0' && c <= '9') {
      value = (value < 0 ? 0 : value * 10) + (c - '0');
      continue;
    }
    if ((c != ',' && c != ';') || value < 0) return fail();
    groups.back().push_back(value);
    value = -1;
    if (c == ';') groups.emplace_back();
  }
  if (value < 0) return fail();
  groups.back().push_back(value);
  TORCHTPU_RETURN_IF_ERROR(check_groups("functional collective", groups));
  return groups;
}

base::StatusOr<ReduceKind> parse_reduce_kind(std::string_view name) {
  if (name == "sum") return ReduceKind::kSum;
  if (name == "avg") return ReduceKind::kAvg;
  if (name == "product") return ReduceKind::kProduct;
  if (name == "min") return ReduceKind::kMin;
  if (name == "max") return ReduceKind::kMax;
  if (name == "band") return ReduceKind::kBand;
  if (name == "bor") return ReduceKind::kBor;
  if (name == "bxor") return ReduceKind::kBxor;
  return base::unimplemented("lowering: functional collective: reduce op '" + std::string(name) +
                             "' has no lowering (sum, avg, product, min, max, band, bor, bxor)");
}

base::StatusOr<Value> all_reduce_value(Builder& b, Value x, ReduceKind op,
                                      const ReplicaGroups& groups, std::optional<Value> factor) {
  TORCHTPU_RETURN_IF_ERROR(check_groups("all_reduce", groups));
  TORCHTPU_RETURN_IF_ERROR(check_reduce("all_reduce", op, x.dtype()));
  TORCHTPU_RETURN_IF_ERROR(check_factor("all_reduce", op, factor));
  const TensorType t = x.type;
  const int64_t n = static_cast<int64_t>(groups[0].size());
  const int64_t numel = t.num_elements();
  if (is_bitwise(op)) return numel == 0 ? x : gathered_fold(b, op, x, groups);
  if (n == 1 || numel * base::dtype_size_bytes(t.dtype) < kSplitAllReduceBytes) {
    return reducing(b, "stablehlo.all_reduce", op, x, t, groups_attr(groups), n, factor);
  }
  // Large: reduce_scatter then all_gather of the flat value, padded to n equal chunks.
  const int64_t chunk = (numel + n - 1) / n;
  Value flat = b.reshape(x, {numel});
  if (chunk * n != numel) {
    flat = b.concatenate({flat, b.zeros(TensorType{t.dtype, {chunk * n - numel}})}, 0);
  }
  Value part = reducing(b, "stablehlo.reduce_scatter", op, flat, TensorType{t.dtype, {chunk}},
                        "scatter_dimension = 0 : i64, " + groups_attr(groups), n, factor);
  Value whole = b.op("stablehlo.all_gather", {part}, TensorType{t.dtype, {chunk * n}},
                     "all_gather_dim = 0 : i64, " + groups_attr(groups));
  if (chunk * n != numel) whole = b.slice(whole, {0}, {numel}, {1});
  return b.reshape(whole, t.dims);
}

base::StatusOr<std::string> all_reduce_module(const TensorType& t, ReduceKind op,
                                              const ReplicaGroups& groups) {
  Builder b("all_reduce");
  Value x = b.param(t);
  std::optional<Value> factor;
  if (op == ReduceKind::kPremulSum) factor = b.param(TensorType{t.dtype, {}});
  TORCHTPU_ASSIGN_OR_RETURN(Value r, all_reduce_value(b, x, op, groups, factor));
  b.alias_param(0, 0);  // in place: a donated input's memory holds the result
  return b.finish({r});
}

namespace {

int64_t product(const Dims& d) {
  int64_t n = 1;
  for (int64_t x : d) n *= x;
  return n;
}

// The result dims of a collective whose result has `numel` elements: `requested` when
// given (it must hold exactly `numel`), else `fallback`.
base::StatusOr<Dims> result_dims_of(const char* collective,
                                    const std::optional<Dims>& requested, const Dims& fallback,
                                    int64_t numel) {
  if (!requested) return fallback;
  if (product(*requested) != numel) {
    return base::invalid_argument(std::string("lowering: ") + collective + ": result dims " +
                                  i64_list(*requested) + " do not hold " +
                                  std::to_string(numel) + " elements");
  }
  return *requested;
}

}  // namespace

base::StatusOr<Value> all_gather_value(Builder& b, Value x, const ReplicaGroups& groups,
                                      const std::optional<Dims>& result_dims) {
  TORCHTPU_RETURN_IF_ERROR(check_groups("all_gather", groups));
  TORCHTPU_RETURN_IF_ERROR(check_reduce("all_gather", ReduceKind::kSum, x.dtype()));
  const TensorType t = x.type;
  const int64_t n = static_cast<int64_t>(groups[0].size());
  Dims fallback = t.dims.empty() ? Dims{n} : t.dims;
  if (!t.dims.empty()) fallback[0] *= n;
  TORCHTPU_ASSIGN_OR_RETURN(
      Dims out_dims, result_dims_of("all_gather", result_dims, fallback, n * t.num_elements()));
  // Nothing to move (every member's tensor is empty: their shapes agree): XLA refuses a
  // collective over a zero-size dim.
  if (t.num_elements() == 0) return b.zeros(TensorType{t.dtype, out_dims});
  Value flat = b.reshape(x, {t.num_elements()});
  Value r = b.op("stablehlo.all_gather", {flat}, TensorType{t.dtype, {n * t.num_elements()}},
                 "all_gather_dim = 0 : i64, " + groups_attr(groups));
  return b.reshape(r, out_dims);
}

base::StatusOr<std::string> all_gather_module(const TensorType& t, const ReplicaGroups& groups,
                                              const std::optional<Dims>& result_dims) {
  Builder b("all_gather");
  TORCHTPU_ASSIGN_OR_RETURN(Value r, all_gather_value(b, b.param(t), groups, result_dims));
  return b.finish({r});
}

base::StatusOr<Value> reduce_scatter_value(Builder& b, Value x, ReduceKind op,
                                          const ReplicaGroups& groups,
                                          const std::optional<Dims>& result_dims,
                                          std::optional<Value> factor) {
  TORCHTPU_RETURN_IF_ERROR(check_groups("reduce_scatter", groups));
  TORCHTPU_RETURN_IF_ERROR(check_reduce("reduce_scatter", op, x.dtype()));
  TORCHTPU_RETURN_IF_ERROR(check_factor("reduce_scatter", op, factor));
  if (is_bitwise(op)) {
    return base::unimplemented(std::string("lowering: reduce_scatter: ") + reduce_kind_name(op) +
                               " is not supported in a program (all_reduce is); reduce with "
                               "all_reduce and keep this rank's part");
  }
  const TensorType t = x.type;
  const int64_t n = static_cast<int64_t>(groups[0].size());
  if (!result_dims) TORCHTPU_RETURN_IF_ERROR(check_split("reduce_scatter", t, n));
  if (t.num_elements() % n != 0) {
    return base::invalid_argument("lowering: reduce_scatter: " + t.str() + " does not split into " +
                                  std::to_string(n) + " equal parts (one per group member)");
  }
  Dims fallback = t.dims;
  if (!fallback.empty()) fallback[0] /= n;
  TORCHTPU_ASSIGN_OR_RETURN(Dims out_dims, result_dims_of("reduce_scatter", result_dims,
                                                          fallback, t.num_elements() / n));
  if (t.num_elements() == 0) return b.zeros(TensorType{t.dtype, out_dims});  // as all_gather
  Value flat = b.reshape(x, {t.num_elements()});
  Value r = reducing(b, "stablehlo.reduce_scatter", op, flat,
                     TensorType{t.dtype, {t.num_elements() / n}},
                     "scatter_dimension = 0 : i64, " + groups_attr(groups), n, factor);
  return b.reshape(r, out_dims);
}

base::StatusOr<std::string> reduce_scatter_module(const TensorType& t, ReduceKind op,
                                                  const ReplicaGroups& groups,
                                                  const std::optional<Dims>& result_dims) {
  Builder b("reduce_scatter");
  Value x = b.param(t);
  std::optional<Value> factor;
  if (op == ReduceKind::kPremulSum) factor = b.param(TensorType{t.dtype, {}});
  TORCHTPU_ASSIGN_OR_RETURN(Value r, reduce_scatter_value(b, x, op, groups, result_dims, factor));
  return b.finish({r});
}

base::StatusOr<Value> all_to_all_value(Builder& b, Value x, const ReplicaGroups& groups,
                                      const std::optional<Dims>& result_dims) {
  TORCHTPU_RETURN_IF_ERROR(check_groups("all_to_all", groups));
  TORCHTPU_RETURN_IF_ERROR(check_reduce("all_to_all", ReduceKind::kSum, x.dtype()));
  const TensorType t = x.type;
  const int64_t n = static_cast<int64_t>(groups[0].size());
  TORCHTPU_RETURN_IF_ERROR(check_split("all_to_all", t, n));
  TORCHTPU_ASSIGN_OR_RETURN(Dims out_dims,
                            result_dims_of("all_to_all", result_dims, t.dims, t.num_elements()));
  if (t.num_elements() == 0) return b.zeros(TensorType{t.dtype, out_dims});  // as all_gather
  Value flat = b.reshape(x, {t.num_elements()});
  std::string attrs = "split_dimension = 0 : i64, concat_dimension = 0 : i64, split_count = " +
                      std::to_string(n) + " : i64, " + groups_attr(groups);
  Value r = b.op("stablehlo.all_to_all", {flat}, flat.type, attrs);
  return b.reshape(r, out_dims);
}

base::StatusOr<std::string> all_to_all_module(const TensorType& t, const ReplicaGroups& groups,
                                              const std::optional<Dims>& result_dims) {
  Builder b("all_to_all");
  TORCHTPU_ASSIGN_OR_RETURN(Value r, all_to_all_value(b, b.param(t), groups, result_dims));
  return b.finish({r});
}

base::StatusOr<std::string> collective_permute_module(
    const TensorType& t, int64_t num_replicas,
    const std::vector<std::pair<int64_t, int64_t>>& source_target_pairs) {
  std::set<int64_t> sources, targets;
  std::vector<std::vector<int64_t>> rows;
  for (auto [s, d] : source_target_pairs) {
    if (s < 0 || s >= num_replicas || d < 0 || d >= num_replicas) {
      return base::invalid_argument("lowering: collective_permute: pair (" + std::to_string(s) +
                                    ", " + std::to_string(d) + ") names a replica outside [0, " +
                                    std::to_string(num_replicas) + ")");
    }
    if (!sources.insert(s).second || !targets.insert(d).second) {
      return base::invalid_argument(
          "lowering: collective_permute: replica " + std::to_string(s) + " or " +
          std::to_string(d) + " appears twice as a source or a target; each replica sends to "
          "at most one and receives from at most one");
    }
    rows.push_back({s, d});
  }
  if (rows.empty()) {
    return base::invalid_argument("lowering: collective_permute: no source-target pairs");
  }
  TORCHTPU_RETURN_IF_ERROR(check_reduce("collective_permute", ReduceKind::kSum, t.dtype));
  Builder b("collective_permute");
  Value x = b.param(t);
  return b.finish({b.op("stablehlo.collective_permute", {x}, t,
                        "source_target_pairs = " + dense_i64_matrix(rows, 2))});
}

base::StatusOr<Value> broadcast_value(Builder& b, Value x, int64_t root,
                                     const ReplicaGroups& groups) {
  TORCHTPU_RETURN_IF_ERROR(check_groups("broadcast", groups));
  TORCHTPU_RETURN_IF_ERROR(check_reduce("broadcast", ReduceKind::kSum, x.dtype()));
  const TensorType t = x.type;
  const int64_t n = static_cast<int64_t>(groups[0].size());
  if (root < 0 || root >= n) {
    return base::invalid_argument("lowering: broadcast: root " + std::to_string(root) +
                                  " is not a position in a group of " + std::to_string(n));
  }
  // The plugin refuses stablehlo.collective_broadcast ("HLO opcode `collective-broadcast`
  // is not supported by XLA:CPU ThunkEmitter"). So: every replica but the roots zeroes its
  // value's bits, and an integer sum over the group (one non-zero addend) yields the
  // root's bits exactly, NaN payloads and -0.0 included.
  DType bits_type = t.dtype;
  switch (base::dtype_size_bytes(t.dtype)) {
    case 2: bits_type = DType::kI16; break;
    case 4: bits_type = DType::kI32; break;
    case 8: bits_type = DType::kI64; break;
    default: bits_type = DType::kI8; break;
  }
  Value bits = t.dtype == DType::kBool ? b.convert(x, DType::kI8)
               : base::is_floating(t.dtype)
                   ? b.op("stablehlo.bitcast_convert", {x}, TensorType{bits_type, t.dims})
                   : x;
  Value replica = b.op("stablehlo.replica_id", {}, TensorType{DType::kU32, {}});
  Value is_root;
  for (size_t g = 0; g < groups.size(); ++g) {
    Value here = b.compare(replica, b.constant_i64(groups[g][root], DType::kU32), "EQ");
    is_root = g == 0 ? here : b.binary("or", is_root, here);
  }
  Value kept = b.select(b.broadcast_in_dim(is_root, bits.dims(), {}), bits, b.zeros(bits.type));
  Value summed = reducing(b, "stablehlo.all_reduce", ReduceKind::kSum, kept, kept.type,
                          groups_attr(groups), n);
  return t.dtype == DType::kBool ? b.convert(summed, DType::kBool)
         : base::is_floating(t.dtype) ? b.op("stablehlo.bitcast_convert", {summed}, t)
                                      : summed;
}

base::StatusOr<std::string> broadcast_module(const TensorType& t, int64_t root,
                                             const ReplicaGroups& groups) {
  Builder b("broadcast");
  TORCHTPU_ASSIGN_OR_RETURN(Value r, broadcast_value(b, b.param(t), root, groups));
  return b.finish({r});
}

}  // namespace torchtpu::lowering
