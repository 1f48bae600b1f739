// Runs one lowering on the real XLA CPU plugin with host data: lower_op -> compile ->
// transfer inputs per GraphParam -> execute -> read back. Values travel as doubles and
// are converted to/from the element type; every base::DType is supported (bf16 and f16
// round to nearest even from f32, as the device would store a float).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "lowering/lowering.h"
#include "test_plugin.h"

namespace torchtpu::testing {

using lowering::ArgKind;
using lowering::Dims;
using lowering::OpArg;
using lowering::TensorType;

// Special values the lowering tests feed and expect.
inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
inline constexpr double kInf = std::numeric_limits<double>::infinity();

struct HostTensor {
  TensorType type;
  std::vector<double> values;
};

// 0, 1, 2, ... (plus `start`) in row-major order.
inline HostTensor arange(base::DType t, Dims dims, double start = 0) {
  HostTensor h{{t, std::move(dims)}, {}};
  for (int64_t i = 0; i < h.type.num_elements(); ++i) h.values.push_back(start + i);
  return h;
}

inline OpArg tensor_arg(const HostTensor& t) {
  OpArg a;
  a.kind = ArgKind::kTensor;
  a.type = t.type;
  return a;
}
inline OpArg int_arg(int64_t v) { OpArg a; a.kind = ArgKind::kInt; a.int_value = v; return a; }
inline OpArg bool_arg(bool v) { OpArg a; a.kind = ArgKind::kBool; a.int_value = v; return a; }
inline OpArg double_arg(double v) { OpArg a; a.kind = ArgKind::kDouble; a.double_value = v; return a; }
inline OpArg ints_arg(Dims v) { OpArg a; a.kind = ArgKind::kIntList; a.ints = std::move(v); return a; }
inline OpArg none_arg() { return OpArg{}; }
inline OpArg string_arg(std::string s) { OpArg a; a.kind = ArgKind::kString; a.string_value = std::move(s); return a; }
inline OpArg scalar_arg(lowering::ScalarCategory c) {
  OpArg a;
  a.kind = ArgKind::kScalar;
  a.scalar_category = c;
  return a;
}

// v narrowed to f32, then rounded to the nearest even bf16; NaN stays a (quiet) NaN.
inline uint16_t bf16_bits(double v) {
  float f = static_cast<float>(v);
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}

inline double bf16_value(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// v as a bf16 tensor holds it: the reference for results the device rounds to bf16.
inline double round_to_bf16(double v) { return bf16_value(bf16_bits(v)); }

// v narrowed to f32, then rounded to the nearest even f16 (overflow gives inf, tiny values
// become subnormals or zero); NaN stays a (quiet) NaN.
inline uint16_t f16_bits(double v) {
  float f = static_cast<float>(v);
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000);
  const uint32_t magnitude = u & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return sign | 0x7e00;
  // 65520 (halfway between the largest f16, 65504, and 2^16) and above round to inf.
  if (magnitude >= 0x477ff000u) return sign | 0x7c00;
  if (magnitude < 0x38800000u) {
    // Below 2^-14 the f16 is subnormal: a count of 2^-24 steps. Scaling by 2^24 is exact
    // and rint rounds half to even in the default rounding mode.
    return sign | static_cast<uint16_t>(std::rint(std::fabs(f) * 16777216.0f));
  }
  // Rebias the exponent (127 -> 15) and round the 13 dropped mantissa bits to even; a
  // mantissa carry correctly bumps the exponent.
  uint32_t rebiased = magnitude - (112u << 23);
  rebiased += 0xfffu + ((rebiased >> 13) & 1);
  return sign | static_cast<uint16_t>(rebiased >> 13);
}

inline double f16_value(uint16_t h) {
  int exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
  double magnitude = exponent == 0    ? std::ldexp(mantissa, -24)
                     : exponent == 31 ? (mantissa ? std::numeric_limits<double>::quiet_NaN()
                                                  : std::numeric_limits<double>::infinity())
                                      : std::ldexp(mantissa + 1024, exponent - 25);
  return (h & 0x8000) ? -magnitude : magnitude;
}

namespace harness_detail {
template <typename T>
void put(char* p, T x) { std::memcpy(p, &x, sizeof(T)); }
template <typename T>
T get(const char* p) { T x; std::memcpy(&x, p, sizeof(T)); return x; }
}  // namespace harness_detail

// Complex tensors travel as interleaved (real, imag) doubles: 2 values per element.
inline std::vector<char> to_bytes(const std::vector<double>& v, base::DType t) {
  using harness_detail::put;
  if (base::is_complex(t)) return to_bytes(v, base::complex_component(t));
  std::vector<char> out(v.size() * base::dtype_size_bytes(t));
  for (size_t i = 0; i < v.size(); ++i) {
    char* p = out.data() + i * base::dtype_size_bytes(t);
    switch (t) {
      case base::DType::kBool: *p = v[i] != 0; break;
      case base::DType::kI8: put(p, static_cast<int8_t>(v[i])); break;
      case base::DType::kU8: put(p, static_cast<uint8_t>(v[i])); break;
      case base::DType::kI16: put(p, static_cast<int16_t>(v[i])); break;
      case base::DType::kI32: put(p, static_cast<int32_t>(v[i])); break;
      case base::DType::kI64: put(p, static_cast<int64_t>(v[i])); break;
      case base::DType::kF16: put(p, f16_bits(v[i])); break;
      case base::DType::kBF16: put(p, bf16_bits(v[i])); break;
      case base::DType::kF32: put(p, static_cast<float>(v[i])); break;
      case base::DType::kF64: put(p, v[i]); break;
      case base::DType::kU32: put(p, static_cast<uint32_t>(v[i])); break;
      case base::DType::kU64: put(p, static_cast<uint64_t>(v[i])); break;
      case base::DType::kC64:
      case base::DType::kC128: break;  // handled above
    }
  }
  return out;
}

inline std::vector<double> from_bytes(const std::vector<char>& b, base::DType t, int64_t n) {
  using harness_detail::get;
  if (base::is_complex(t)) return from_bytes(b, base::complex_component(t), 2 * n);
  std::vector<double> out(n);
  for (int64_t i = 0; i < n; ++i) {
    const char* p = b.data() + i * base::dtype_size_bytes(t);
    switch (t) {
      case base::DType::kBool: out[i] = *p != 0; break;
      case base::DType::kI8: out[i] = get<int8_t>(p); break;
      case base::DType::kU8: out[i] = get<uint8_t>(p); break;
      case base::DType::kI16: out[i] = get<int16_t>(p); break;
      case base::DType::kI32: out[i] = get<int32_t>(p); break;
      case base::DType::kI64: out[i] = static_cast<double>(get<int64_t>(p)); break;
      case base::DType::kF16: out[i] = f16_value(get<uint16_t>(p)); break;
      case base::DType::kBF16: out[i] = bf16_value(get<uint16_t>(p)); break;
      case base::DType::kF32: out[i] = get<float>(p); break;
      case base::DType::kF64: out[i] = get<double>(p); break;
      case base::DType::kU32: out[i] = get<uint32_t>(p); break;
      case base::DType::kU64: out[i] = static_cast<double>(get<uint64_t>(p)); break;
      case base::DType::kC64:
      case base::DType::kC128: break;  // handled above
    }
  }
  return out;
}

// Compiles `text` and runs it with `inputs` as its parameters, in order; returns every
// result (empty, with a test failure recorded, when a step fails).
inline std::vector<HostTensor> run_module(const std::string& text,
                                          const std::vector<HostTensor>& inputs) {
  auto client = test_client();
  auto exe = client->compile(text, 0);
  EXPECT_TRUE(exe.ok()) << exe.status().to_string() << "\n" << text;
  if (!exe.ok()) return {};
  std::vector<runtime::BufferPtr> keep;
  for (const HostTensor& h : inputs) {
    std::vector<char> bytes = to_bytes(h.values, h.type.dtype);
    // A 0-element input still needs a valid host pointer.
    if (bytes.empty()) bytes.reserve(1);
    auto buf = client->buffer_from_host(bytes.data(), h.type.dtype, h.type.dims, 0);
    EXPECT_TRUE(buf.ok()) << buf.status().to_string();
    if (!buf.ok()) return {};
    keep.push_back(*buf);
  }
  std::vector<const runtime::Buffer*> raw;
  for (auto& b : keep) raw.push_back(b.get());
  auto outs = (*exe)->execute(raw);
  EXPECT_TRUE(outs.ok()) << outs.status().to_string();
  if (!outs.ok()) return {};
  std::vector<HostTensor> results;
  for (const runtime::BufferPtr& buf : *outs) {
    std::vector<char> bytes(buf->size_bytes());
    EXPECT_TRUE(buf->to_host(bytes.data(), static_cast<int64_t>(bytes.size())).ok());
    results.push_back(HostTensor{TensorType{buf->dtype(), buf->dims()},
                                 from_bytes(bytes, buf->dtype(), buf->num_elements())});
  }
  return results;
}

// The generator state a lowering's kRngState parameter receives (it travels as doubles,
// so values up to 2^53 are exact).
struct RngState {
  uint64_t seed = 42;
  uint64_t offset = 0;
};

struct LoweringRun {
  std::vector<HostTensor> outputs;
  std::vector<bool> checks;  // one per LoweringContext::require, true when it held
  bool checks_guarded = true;  // LoweredGraph::checks_guarded
  std::string text;
};

// `tensors` maps arg index -> data (tensor args); `lists` maps arg index -> items;
// `scalars` maps arg index -> value (kScalar args); `rng` is the generator state for
// random ops.
inline LoweringRun run_lowering(const std::string& op, const std::vector<OpArg>& args,
                                const std::vector<TensorType>& out_types,
                                const std::map<int, HostTensor>& tensors,
                                const std::map<int, double>& scalars = {},
                                const std::map<int, std::vector<HostTensor>>& lists = {},
                                const RngState& rng = {},
                                const std::map<int, std::vector<double>>& scalar_lists = {}) {
  LoweringRun run;
  auto lowered = lowering::lower_op(op, args, out_types);
  EXPECT_TRUE(lowered.ok()) << lowered.status().to_string();
  if (!lowered.ok()) return run;
  run.text = lowered->text;
  run.checks_guarded = lowered->checks_guarded;
  std::vector<HostTensor> inputs;
  const std::vector<std::pair<int, int>> graph_inputs = lowering::op_inputs(args);
  for (const lowering::GraphParam& p : lowered->params) {
    switch (p.source) {
      case lowering::GraphParam::Source::kInput: {
        const auto& [arg, item] = graph_inputs.at(p.input_index);
        inputs.push_back(item < 0 ? tensors.at(arg) : lists.at(arg).at(item));
        break;
      }
      case lowering::GraphParam::Source::kScalar:
        inputs.push_back(HostTensor{TensorType{p.dtype, {}},
                                    {p.item < 0 ? scalars.at(p.arg)
                                                : scalar_lists.at(p.arg).at(p.item)}});
        break;
      case lowering::GraphParam::Source::kRngState:
        inputs.push_back(HostTensor{TensorType{base::DType::kU64, {2}},
                                    {static_cast<double>(rng.seed),
                                     static_cast<double>(rng.offset)}});
        break;
    }
  }
  std::vector<HostTensor> results = run_module(lowered->text, inputs);
  for (size_t i = 0; i < results.size(); ++i) {
    if (i < out_types.size()) {
      run.outputs.push_back(std::move(results[i]));
    } else {  // the check vector
      for (double flag : results[i].values) run.checks.push_back(flag != 0);
    }
  }
  return run;
}

// The values of the only output of `run`, which must have type `dtype` (a test failure is
// recorded otherwise); empty when the run did not give exactly one output.
inline std::vector<double> output_values(const LoweringRun& run, base::DType dtype) {
  EXPECT_EQ(run.outputs.size(), 1u);
  if (run.outputs.size() != 1) return {};
  EXPECT_EQ(run.outputs[0].type.dtype, dtype) << base::dtype_name(run.outputs[0].type.dtype);
  return run.outputs[0].values;
}

}  // namespace torchtpu::testing
