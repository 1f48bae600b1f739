#include "lowering/hlo_builder.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <sstream>

#include "base/check.h"

namespace torchtpu::lowering {

int64_t TensorType::num_elements() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

std::string TensorType::str() const {
  std::string s = "tensor<";
  for (int64_t d : dims) s += std::to_string(d) + "x";
  s += base::dtype_mlir_name(dtype);
  return s + ">";
}

std::string i64_array(const Dims& v) {
  std::string s = "array<i64";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : ": ") + std::to_string(v[i]);
  return s + ">";
}

std::string i64_list(const Dims& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

Builder::Builder(std::string module_name) : module_name_(std::move(module_name)) {}

Value Builder::fresh(const TensorType& t) { return Value{next_id_++, t}; }

std::string Builder::name_of(const Value& v) const {
  TORCHTPU_CHECK(v.id >= 0, "use of an undefined Value");
  if (v.result_index >= 0) return "%m" + std::to_string(v.id) + "#" + std::to_string(v.result_index);
  return "%v" + std::to_string(v.id);
}

Value Builder::param(const TensorType& type) {
  Value v = fresh(type);
  params_.push_back(v);
  return v;
}

void Builder::alias_param(size_t param_index, size_t result_index) {
  param_aliases_[param_index] = result_index;
}

std::string Builder::signature(const std::vector<Value>& operands,
                               const std::vector<TensorType>& results) const {
  std::string s = " : (";
  for (size_t i = 0; i < operands.size(); ++i) s += (i ? ", " : "") + operands[i].type.str();
  s += ") -> ";
  if (results.size() == 1) return s + results[0].str();
  s += "(";
  for (size_t i = 0; i < results.size(); ++i) s += (i ? ", " : "") + results[i].str();
  return s + ")";
}

std::vector<Value> Builder::op_multi(std::string_view name, const std::vector<Value>& operands,
                                     const std::vector<TensorType>& results,
                                     std::string_view attrs) {
  return op_with_region(name, operands, results, {}, nullptr, attrs);
}

std::vector<Value> Builder::op_with_region(std::string_view name,
                                           const std::vector<Value>& operands,
                                           const std::vector<TensorType>& results,
                                           const std::vector<TensorType>& block_args,
                                           const RegionBody& body, std::string_view attrs) {
  auto [outs, bind] = results_of(results);
  std::string line = std::string(indent_, ' ') + bind;
  line += "\"" + std::string(name) + "\"(";
  for (size_t i = 0; i < operands.size(); ++i) line += (i ? ", " : "") + name_of(operands[i]);
  line += ")";
  if (body) {
    body_ += line + " (";
    std::string closing = region(block_args, body);
    line = closing + ")";
  }
  if (!attrs.empty()) line += " {" + std::string(attrs) + "}";
  line += signature(operands, results) + "\n";
  body_ += line;
  return outs;
}

std::pair<std::vector<Value>, std::string> Builder::results_of(
    const std::vector<TensorType>& results) {
  std::vector<Value> outs;
  for (const TensorType& t : results) outs.push_back(fresh(t));
  if (outs.size() == 1) return {outs, name_of(outs[0]) + " = "};
  if (outs.empty()) return {outs, ""};
  // Several results bind a pack name and read as %pack#i.
  std::string bind = "%m" + std::to_string(outs[0].id) + ":" + std::to_string(outs.size()) + " = ";
  for (size_t i = 0; i < outs.size(); ++i) outs[i] = Value{outs[0].id, outs[i].type, (int)i};
  return {outs, bind};
}

std::string Builder::region(const std::vector<TensorType>& block_args, const RegionBody& body) {
  std::string line = "{\n" + std::string(indent_, ' ') + "^bb0(";
  std::vector<Value> args;
  for (size_t i = 0; i < block_args.size(); ++i) {
    args.push_back(fresh(block_args[i]));
    line += (i ? ", " : "") + name_of(args.back()) + ": " + block_args[i].str();
  }
  line += "):\n";
  body_ += line;
  indent_ += 2;
  std::vector<Value> yielded = body(*this, args);
  std::string ret(indent_, ' ');
  ret += "\"stablehlo.return\"(";
  for (size_t i = 0; i < yielded.size(); ++i) ret += (i ? ", " : "") + name_of(yielded[i]);
  ret += ") : (";
  for (size_t i = 0; i < yielded.size(); ++i) ret += (i ? ", " : "") + yielded[i].type.str();
  body_ += ret + ") -> ()\n";
  indent_ -= 2;
  // The caller's text continues after the region's closing brace.
  return std::string(indent_, ' ') + "}";
}

std::vector<Value> Builder::while_loop(const std::vector<Value>& init, const RegionBody& cond,
                                       const RegionBody& body) {
  std::vector<TensorType> types;
  for (const Value& v : init) types.push_back(v.type);
  auto [outs, bind] = results_of(types);
  std::string line = std::string(indent_, ' ') + bind;
  line += "\"stablehlo.while\"(";
  for (size_t i = 0; i < init.size(); ++i) line += (i ? ", " : "") + name_of(init[i]);
  body_ += line + ") (";
  std::string closing = region(types, cond);
  body_ += closing + ", ";
  closing = region(types, body);
  body_ += closing + ")" + signature(init, types) + "\n";
  return outs;
}

std::vector<Value> Builder::case_of(Value index, const std::vector<TensorType>& results,
                                    const std::vector<RegionBody>& branches) {
  auto [outs, bind] = results_of(results);
  body_ += std::string(indent_, ' ') + bind + "\"stablehlo.case\"(" + name_of(index) + ") (";
  for (size_t b = 0; b < branches.size(); ++b) {
    std::string closing = region({}, branches[b]);
    body_ += closing + (b + 1 < branches.size() ? ", " : "");
  }
  body_ += ")" + signature({index}, results) + "\n";
  return outs;
}

Value Builder::op(std::string_view name, const std::vector<Value>& operands,
                  const TensorType& result, std::string_view attrs) {
  return op_multi(name, operands, {result}, attrs)[0];
}

namespace {

std::string float_literal(double v, DType t) {
  char buf[40];
  if (t == DType::kF64) {
    uint64_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    std::snprintf(buf, sizeof buf, "0x%016llX", static_cast<unsigned long long>(bits));
  } else {
    float f = static_cast<float>(v);
    uint32_t bits;
    std::memcpy(&bits, &f, sizeof bits);
    std::snprintf(buf, sizeof buf, "0x%08X", bits);
  }
  return buf;
}

}  // namespace

Value Builder::constant(double v, DType t) { return splat(v, TensorType{t, {}}); }

Value Builder::splat(double v, const TensorType& t) {
  if (base::is_half_float(t.dtype)) {
    // Emit in f32 and convert: keeps literal formatting to f32/f64 bit patterns.
    return convert(splat(v, TensorType{DType::kF32, t.dims}), t.dtype);
  }
  if (base::is_complex(t.dtype)) {
    // (v, 0): built from its parts, which keeps literal formatting to real bit patterns.
    TensorType part{base::complex_component(t.dtype), t.dims};
    return op("stablehlo.complex", {splat(v, part), splat(0, part)}, t);
  }
  std::string lit;
  if (t.dtype == DType::kBool) {
    lit = v != 0 ? "true" : "false";
  } else if (base::is_floating(t.dtype)) {
    lit = float_literal(v, t.dtype);
  } else {
    lit = std::to_string(static_cast<long long>(v));
  }
  return op("stablehlo.constant", {}, t, "value = dense<" + lit + "> : " + t.str());
}

Value Builder::constant_i64(int64_t v, DType t) {
  TensorType type{t, {}};
  return op("stablehlo.constant", {}, type,
            "value = dense<" + std::to_string(v) + "> : " + type.str());
}

Value Builder::constant_i64s(const std::vector<int64_t>& values, const Dims& dims) {
  TensorType flat{DType::kI64, {static_cast<int64_t>(values.size())}};
  std::string lit = "[";
  for (size_t i = 0; i < values.size(); ++i) {
    lit += (i ? ", " : "") + std::to_string(values[i]);
  }
  Value v = op("stablehlo.constant", {}, flat, "value = dense<" + lit + "]> : " + flat.str());
  return reshape(v, dims);
}

Value Builder::convert(Value v, DType t) {
  if (v.dtype() == t) return v;
  if (base::is_complex(v.dtype()) && !base::is_complex(t)) {
    // PyTorch's complex -> real casts keep the real part, except to bool: z != 0.
    TensorType part{base::complex_component(v.dtype()), v.dims()};
    if (t == DType::kBool) {
      return binary("or", compare(op("stablehlo.real", {v}, part), zeros(part), "NE"),
                    compare(op("stablehlo.imag", {v}, part), zeros(part), "NE"));
    }
    return convert(op("stablehlo.real", {v}, part), t);
  }
  if (base::is_complex(t) && !base::is_complex(v.dtype())) {
    TensorType part{base::complex_component(t), v.dims()};
    Value re = convert(v, part.dtype);
    return op("stablehlo.complex", {re, zeros(part)}, TensorType{t, v.dims()});
  }
  if (t == DType::kBool) {
    // Converting to i1 must mean "!= 0" (PyTorch semantics), not truncation.
    return compare(v, zeros(v.type), "NE");
  }
  if (base::is_floating(v.dtype()) && base::is_integral(t)) return float_to_integer(v, t);
  if (v.dtype() == DType::kBool && base::is_floating(t)) {
    // Through uint8: XLA's simplifier rewrites a product with convert(i1) as a select
    // (x * convert(p) -> select(p, x, 0), and x / broadcast(y) becomes x * (1 / y)), which
    // is wrong for floats: inf * 0 and 0 / 0 are NaN, -1 * 0 is -0. A convert from u8
    // is not one it matches, and 0/1 are exact in every float type.
    Value bits = op("stablehlo.convert", {v}, TensorType{DType::kU8, v.dims()});
    return op("stablehlo.convert", {bits}, TensorType{t, v.dims()});
  }
  return op("stablehlo.convert", {v}, TensorType{t, v.dims()});
}

// XLA's float -> integer convert saturates. PyTorch's CPU casts are C++ static_casts,
// which x86-64 compiles to cvttss2si/cvttsd2si on an int32 (an int64 for 64-bit and
// uint32 targets): a value outside that range, or NaN, becomes its minimum ("integer
// indefinite"), and narrower types keep the low bits (float 300 -> uint8 44, -2 -> 254).
// A uint64 target takes the compiler's unsigned sequence: from 2^63 up, x - 2^63 converted
// and its top bit flipped (so [2^63, 2^64) is exact and 2^64 and beyond give 0).
Value Builder::float_to_integer(Value v, DType t) {
  bool wide = t == DType::kI64 || t == DType::kU64 || t == DType::kU32;
  DType via = wide ? DType::kI64 : DType::kI32;
  Value x = base::is_half_float(v.dtype()) ? convert(v, DType::kF32) : v;
  double bound = wide ? 9223372036854775808.0 : 2147483648.0;  // 2^63, 2^31: exact in f32
  int64_t indefinite = wide ? INT64_MIN : INT32_MIN;
  auto truncate = [&](Value y) {
    Value in_range = binary("and", compare(y, splat(-bound, y.type), "GE"),
                            compare(y, splat(bound, y.type), "LT"));  // false for NaN
    Value truncated = op("stablehlo.convert", {y}, TensorType{via, y.dims()});
    return select(in_range, truncated, broadcast_to(constant_i64(indefinite, via), y.dims()));
  };
  Value r = truncate(x);
  if (t == DType::kU64) {
    Value top = broadcast_to(constant_i64(INT64_MIN, via), x.dims());
    Value high = binary("xor", truncate(sub(x, splat(bound, x.type))), top);
    r = select(compare(x, splat(bound, x.type), "GE"), high, r);
  }
  return via == t ? r : op("stablehlo.convert", {r}, TensorType{t, x.dims()});
}

Value Builder::misuse(std::string what, const TensorType& result) {
  if (error_.empty()) error_ = std::move(what);
  return fresh(result);
}

Value Builder::opaque(Value v) { return op("stablehlo.optimization_barrier", {v}, v.type); }

Value Builder::reshape(Value v, const Dims& dims) {
  if (v.dims() == dims) return v;
  return op("stablehlo.reshape", {v}, TensorType{v.dtype(), dims});
}

Value Builder::broadcast_in_dim(Value v, const Dims& out_dims, const Dims& broadcast_dims) {
  return op("stablehlo.broadcast_in_dim", {v}, TensorType{v.dtype(), out_dims},
            "broadcast_dimensions = " + i64_array(broadcast_dims));
}

Value Builder::broadcast_to(Value v, const Dims& out_dims) {
  if (v.dims() == out_dims) return v;
  int64_t offset = static_cast<int64_t>(out_dims.size()) - v.rank();
  if (offset < 0) {
    return misuse("broadcast_to: " + v.type.str() + " to dims " + i64_list(out_dims) +
                      " (target rank smaller than the operand's)",
                  TensorType{v.dtype(), out_dims});
  }
  Dims bdims;
  for (int64_t i = 0; i < v.rank(); ++i) bdims.push_back(i + offset);
  return broadcast_in_dim(v, out_dims, bdims);
}

Value Builder::transpose(Value v, const Dims& permutation) {
  bool identity = true;
  for (size_t i = 0; i < permutation.size(); ++i) identity &= permutation[i] == (int64_t)i;
  if (identity) return v;
  Dims out;
  for (int64_t p : permutation) out.push_back(v.dims()[p]);
  Value t = op("stablehlo.transpose", {v}, TensorType{v.dtype(), out},
               "permutation = " + i64_array(permutation));
  if (t.result_index < 0) transposes_[t.id] = Transposed{v, permutation};
  return t;
}

const Builder::Transposed* Builder::transposed_from(const Value& v) const {
  if (v.result_index >= 0) return nullptr;
  auto it = transposes_.find(v.id);
  return it == transposes_.end() ? nullptr : &it->second;
}

Value Builder::slice(Value v, const Dims& start, const Dims& limit, const Dims& strides) {
  Dims out;
  for (size_t i = 0; i < start.size(); ++i) {
    int64_t n = limit[i] - start[i];
    out.push_back(n <= 0 ? 0 : (n + strides[i] - 1) / strides[i]);
  }
  if (out == v.dims()) return v;
  return op("stablehlo.slice", {v}, TensorType{v.dtype(), out},
            "start_indices = " + i64_array(start) + ", limit_indices = " + i64_array(limit) +
                ", strides = " + i64_array(strides));
}

Value Builder::concatenate(const std::vector<Value>& vs, int64_t dim) {
  if (vs.empty()) return misuse("concatenate of no values", TensorType{});
  if (vs.size() == 1) return vs[0];
  Dims out = vs[0].dims();
  out[dim] = 0;
  for (const Value& v : vs) out[dim] += v.dims()[dim];
  return op("stablehlo.concatenate", vs, TensorType{vs[0].dtype(), out},
            "dimension = " + std::to_string(dim) + " : i64");
}

Value Builder::pad(Value v, Value value, const Dims& low, const Dims& high,
                   const Dims& interior) {
  Dims between = interior.empty() ? Dims(v.rank(), 0) : interior;
  Dims out = v.dims();
  for (size_t i = 0; i < out.size(); ++i) {
    int64_t n = out[i];
    out[i] = low[i] + high[i] + n + (n > 0 ? (n - 1) * between[i] : 0);
  }
  auto zero = [](const Dims& d) {
    return std::all_of(d.begin(), d.end(), [](int64_t x) { return x == 0; });
  };
  if (zero(low) && zero(high) && zero(between)) return v;
  return op("stablehlo.pad", {v, value}, TensorType{v.dtype(), out},
            "edge_padding_low = " + i64_array(low) + ", edge_padding_high = " + i64_array(high) +
                ", interior_padding = " + i64_array(between));
}

Value Builder::iota(const TensorType& t, int64_t dim) {
  return op("stablehlo.iota", {}, t, "iota_dimension = " + std::to_string(dim) + " : i64");
}

namespace {

// Which element types an elementwise op takes (the plugin rejects a program otherwise).
// kFloatOrComplex: defined on complex numbers too, with the principal branch PyTorch uses.
enum class Takes { kAny, kFloat, kFloatOrComplex, kIntegerOrBool, kSignedOrFloat, kNumber };

Takes element_types_of(std::string_view op) {
  if (op == "chlo.acos" || op == "chlo.asinh" || op == "chlo.acosh" || op == "chlo.atanh") {
    return Takes::kFloatOrComplex;  // (complex.cc keeps C's branch cuts around them)
  }
  if (op.rfind("chlo.", 0) == 0) return Takes::kFloat;
  static const std::map<std::string_view, Takes> kTable = {
      {"stablehlo.sqrt", Takes::kFloatOrComplex}, {"stablehlo.rsqrt", Takes::kFloatOrComplex},
      {"stablehlo.cbrt", Takes::kFloat}, {"stablehlo.exponential", Takes::kFloatOrComplex},
      {"stablehlo.exponential_minus_one", Takes::kFloatOrComplex},
      {"stablehlo.log", Takes::kFloatOrComplex},
      {"stablehlo.log_plus_one", Takes::kFloatOrComplex},
      {"stablehlo.logistic", Takes::kFloatOrComplex},
      {"stablehlo.sine", Takes::kFloatOrComplex}, {"stablehlo.cosine", Takes::kFloatOrComplex},
      {"stablehlo.tan", Takes::kFloatOrComplex}, {"stablehlo.tanh", Takes::kFloatOrComplex},
      {"stablehlo.atan2", Takes::kFloat}, {"stablehlo.floor", Takes::kFloat},
      {"stablehlo.ceil", Takes::kFloat}, {"stablehlo.round_nearest_even", Takes::kFloat},
      {"stablehlo.round_nearest_afz", Takes::kFloat}, {"stablehlo.is_finite", Takes::kFloat},
      {"stablehlo.and", Takes::kIntegerOrBool}, {"stablehlo.or", Takes::kIntegerOrBool},
      {"stablehlo.xor", Takes::kIntegerOrBool}, {"stablehlo.not", Takes::kIntegerOrBool},
      {"stablehlo.shift_left", Takes::kIntegerOrBool},
      {"stablehlo.shift_right_logical", Takes::kIntegerOrBool},
      {"stablehlo.shift_right_arithmetic", Takes::kIntegerOrBool},
      {"stablehlo.popcnt", Takes::kIntegerOrBool},
      {"stablehlo.abs", Takes::kSignedOrFloat}, {"stablehlo.sign", Takes::kSignedOrFloat},
      {"stablehlo.negate", Takes::kNumber}, {"stablehlo.subtract", Takes::kNumber},
      {"stablehlo.divide", Takes::kNumber}, {"stablehlo.remainder", Takes::kNumber},
      {"stablehlo.power", Takes::kNumber},
  };
  auto it = kTable.find(op);
  return it == kTable.end() ? Takes::kAny : it->second;
}

bool takes(Takes kind, DType t) {
  switch (kind) {
    case Takes::kAny: return true;
    case Takes::kFloat: return base::is_floating(t);
    case Takes::kFloatOrComplex: return base::is_floating(t) || base::is_complex(t);
    case Takes::kIntegerOrBool: return !base::is_floating(t) && !base::is_complex(t);
    case Takes::kSignedOrFloat: return base::is_floating(t) || base::is_signed_integral(t);
    case Takes::kNumber: return t != DType::kBool;
  }
  return true;
}

std::string full_op_name(std::string_view name) {
  // Names with a dialect prefix ("chlo.erf") are used as given.
  return name.find('.') == std::string_view::npos ? "stablehlo." + std::string(name)
                                                  : std::string(name);
}

}  // namespace

void Builder::check_element_type(const std::string& op, DType t) {
  if (takes(element_types_of(op), t) || !unsupported_.empty()) return;
  unsupported_ = op + " does not take " + base::dtype_name(t) + " elements";
}

Value Builder::unary(std::string_view name, Value a) {
  std::string full = full_op_name(name);
  check_element_type(full, a.dtype());
  if (base::is_complex(a.dtype()) && (full == "stablehlo.abs" || full == "stablehlo.sign")) {
    // abs of a complex value is real (a different result type); complex lowerings emit it.
    if (unsupported_.empty()) unsupported_ = full + " of complex elements is not a unary() op";
  }
  return op(full, {a}, a.type);
}

Value Builder::trunc(Value a) {
  return select(compare(a, zeros(a.type), "LT"), unary("ceil", a), unary("floor", a));
}

Value Builder::binary(std::string_view name, Value a, Value b) {
  if (!(a.type == b.type)) {
    return misuse(std::string(name) + ": operands differ in type (" + a.type.str() + ", " +
                      b.type.str() + ")",
                  a.type);
  }
  std::string full = full_op_name(name);
  check_element_type(full, a.dtype());
  return op(full, {a, b}, a.type);
}

Value Builder::compare(Value a, Value b, std::string_view direction) {
  if (!(a.type == b.type)) {
    return misuse("compare: operands differ in type (" + a.type.str() + ", " + b.type.str() +
                      ")",
                  TensorType{DType::kBool, a.dims()});
  }
  if (base::is_complex(a.dtype()) && direction != "EQ" && direction != "NE" &&
      unsupported_.empty()) {
    unsupported_ = "compare " + std::string(direction) + " is not defined on complex elements";
  }
  const char* kind = base::is_floating(a.dtype()) || base::is_complex(a.dtype()) ? "FLOAT"
                     : base::is_signed_integral(a.dtype()) ? "SIGNED"
                                                           : "UNSIGNED";
  return op("stablehlo.compare", {a, b}, TensorType{DType::kBool, a.dims()},
            "comparison_direction = #stablehlo<comparison_direction " + std::string(direction) +
                ">, compare_type = #stablehlo<comparison_type " + kind + ">");
}

Value Builder::select(Value pred, Value on_true, Value on_false) {
  return op("stablehlo.select", {pred, on_true, on_false}, on_true.type);
}

Value Builder::conj(Value v) {
  if (!base::is_complex(v.dtype())) return v;
  TensorType part{base::complex_component(v.dtype()), v.dims()};
  Value re = op("stablehlo.real", {v}, part);
  Value im = unary("negate", op("stablehlo.imag", {v}, part));
  return op("stablehlo.complex", {re, im}, v.type);
}

Value Builder::clamp(Value lo, Value x, Value hi) {
  return op("stablehlo.clamp", {lo, x, hi}, x.type);
}

namespace {

// stablehlo.reduce of one operand over `dims`, the region computing body(acc, x).
Value reduce_region(Builder& b, Value v, Value init, const Dims& dims,
                    const std::function<Value(Builder&, Value, Value)>& body) {
  Dims out;
  for (int64_t i = 0; i < v.rank(); ++i) {
    bool reduced = false;
    for (int64_t d : dims) reduced |= d == i;
    if (!reduced) out.push_back(v.dims()[i]);
  }
  TensorType scalar{v.dtype(), {}};
  return b.op_with_region(
      "stablehlo.reduce", {v, init}, {TensorType{v.dtype(), out}}, {scalar, scalar},
      [&](Builder& rb, const std::vector<Value>& args) {
        return std::vector<Value>{body(rb, args[0], args[1])};
      },
      "dimensions = " + i64_array(dims))[0];
}

}  // namespace

Value Builder::reduce(Value v, Value init, const Dims& dims, std::string_view body_op) {
  std::string name(body_op);
  return reduce_region(*this, v, init, dims,
                       [&](Builder& b, Value acc, Value x) { return b.binary(name, acc, x); });
}

Value Builder::reduce_sum(Value v, const Dims& dims) {
  return reduce(v, zeros(TensorType{v.dtype(), {}}), dims, v.dtype() == DType::kBool ? "or" : "add");
}

Value Builder::reduce_all(Value v, const Dims& dims) {
  return reduce(v, constant(1, DType::kBool), dims, "and");
}

Value Builder::reduce_any(Value v, const Dims& dims) {
  return reduce(v, constant(0, DType::kBool), dims, "or");
}

namespace {
Dims every_dim(const Value& v) {
  Dims dims(v.rank());
  for (int64_t d = 0; d < v.rank(); ++d) dims[d] = d;
  return dims;
}
}  // namespace

Value Builder::all_of(Value v) { return v.rank() == 0 ? v : reduce_all(v, every_dim(v)); }

Value Builder::any_of(Value v) { return v.rank() == 0 ? v : reduce_any(v, every_dim(v)); }

Value Builder::nan_propagating(std::string_view name, Value a, Value b) {
  if (base::is_complex(a.dtype()) && unsupported_.empty()) {
    unsupported_ = "stablehlo." + std::string(name) + " is not defined on complex elements";
  }
  Value r = binary(name, a, b);
  if (!base::is_floating(a.dtype())) return r;
  return select(compare(a, a, "NE"), a, select(compare(b, b, "NE"), b, r));
}

Value Builder::reduce_max(Value v, const Dims& dims) {
  return reduce_region(*this, v, min_value(v.dtype()), dims,
                       [](Builder& b, Value acc, Value x) { return b.max(acc, x); });
}

Value Builder::reduce_min(Value v, const Dims& dims) {
  return reduce_region(*this, v, max_value(v.dtype()), dims,
                       [](Builder& b, Value acc, Value x) { return b.min(acc, x); });
}

Value Builder::max_value(DType t) {
  switch (t) {
    case DType::kBool: return constant(1, t);
    case DType::kI8: return constant_i64(127, t);
    case DType::kU8: return constant_i64(255, t);
    case DType::kI16: return constant_i64(32767, t);
    case DType::kI32: return constant_i64(2147483647ll, t);
    case DType::kI64: return constant_i64(9223372036854775807ll, t);
    case DType::kU16: return constant_i64(65535, t);
    case DType::kU32: return constant_i64(4294967295ll, t);
    case DType::kU64: return op("stablehlo.constant", {}, TensorType{t, {}},
                                "value = dense<18446744073709551615> : tensor<ui64>");
    default: return constant(INFINITY, t);
  }
}

Value Builder::min_value(DType t) {
  switch (t) {
    case DType::kBool:
    case DType::kU8:
    case DType::kU16:
    case DType::kU32:
    case DType::kU64: return constant(0, t);
    case DType::kI8: return constant_i64(-128, t);
    case DType::kI16: return constant_i64(-32768, t);
    case DType::kI32: return constant_i64(-2147483648ll, t);
    case DType::kI64: return constant_i64(INT64_MIN, t);
    default: return constant(-INFINITY, t);
  }
}

Value Builder::keep_dims(Value v, const Dims& input_dims, const Dims& reduced_dims) {
  Dims out = input_dims;
  for (int64_t d : reduced_dims) out[d] = 1;
  return reshape(v, out);
}

Value Builder::dot_general(Value lhs, Value rhs, const Dims& lhs_batch, const Dims& rhs_batch,
                           const Dims& lhs_contract, const Dims& rhs_contract, DType out) {
  auto contains = [](const Dims& d, int64_t x) {
    for (int64_t y : d) if (y == x) return true;
    return false;
  };
  Dims out_dims;
  for (int64_t d : lhs_batch) out_dims.push_back(lhs.dims()[d]);
  for (int64_t i = 0; i < lhs.rank(); ++i)
    if (!contains(lhs_batch, i) && !contains(lhs_contract, i)) out_dims.push_back(lhs.dims()[i]);
  for (int64_t i = 0; i < rhs.rank(); ++i)
    if (!contains(rhs_batch, i) && !contains(rhs_contract, i)) out_dims.push_back(rhs.dims()[i]);
  return op("stablehlo.dot_general", {lhs, rhs}, TensorType{out, out_dims},
            "dot_dimension_numbers = #stablehlo.dot<lhs_batching_dimensions = " +
                i64_list(lhs_batch) + ", rhs_batching_dimensions = " + i64_list(rhs_batch) +
                ", lhs_contracting_dimensions = " + i64_list(lhs_contract) +
                ", rhs_contracting_dimensions = " + i64_list(rhs_contract) + ">");
}

void Builder::add_functions(const std::string& key, const std::string& text) {
  if (std::find(function_keys_.begin(), function_keys_.end(), key) != function_keys_.end()) return;
  function_keys_.push_back(key);
  functions_ += text;
  if (!text.empty() && text.back() != '\n') functions_ += '\n';
}

std::string Builder::finish(const std::vector<Value>& results) {
  std::ostringstream os;
  os << "module @" << module_name_ << " {\n  func.func public @main(";
  for (size_t i = 0; i < params_.size(); ++i) {
    os << (i ? ", " : "") << name_of(params_[i]) << ": " << params_[i].type.str();
    auto alias = param_aliases_.find(i);
    if (alias != param_aliases_.end()) {
      os << " {tf.aliasing_output = " << alias->second << " : i32}";
    }
  }
  os << ") -> (";
  for (size_t i = 0; i < results.size(); ++i) os << (i ? ", " : "") << results[i].type.str();
  os << ") {\n" << body_ << "    \"func.return\"(";
  for (size_t i = 0; i < results.size(); ++i) os << (i ? ", " : "") << name_of(results[i]);
  os << ")";
  os << " : (";
  for (size_t i = 0; i < results.size(); ++i) os << (i ? ", " : "") << results[i].type.str();
  os << ") -> ()\n  }\n" << functions_ << "}\n";
  return os.str();
}

}  // namespace torchtpu::lowering
