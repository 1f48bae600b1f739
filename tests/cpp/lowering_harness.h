// Runs one lowering on the real XLA CPU plugin with host data: lower_op -> compile ->
// transfer inputs per ParamBinding -> execute -> read back. Values travel as doubles and
// are converted to/from the element type (f32, f64, i32, i64, i1 supported here).
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <vector>

#include "lowering/lowering.h"
#include "test_plugin.h"

namespace torchtpu::testing {

using lowering::ArgKind;
using lowering::Dims;
using lowering::OpArg;
using lowering::TensorType;

struct HostTensor {
  TensorType type;
  std::vector<double> values;
};

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

inline std::vector<char> to_bytes(const std::vector<double>& v, base::DType t) {
  std::vector<char> out(v.size() * base::dtype_size_bytes(t));
  for (size_t i = 0; i < v.size(); ++i) {
    char* p = out.data() + i * base::dtype_size_bytes(t);
    switch (t) {
      case base::DType::kF32: { float x = static_cast<float>(v[i]); std::memcpy(p, &x, 4); break; }
      case base::DType::kF64: { std::memcpy(p, &v[i], 8); break; }
      case base::DType::kI32: { int32_t x = static_cast<int32_t>(v[i]); std::memcpy(p, &x, 4); break; }
      case base::DType::kI64: { int64_t x = static_cast<int64_t>(v[i]); std::memcpy(p, &x, 8); break; }
      case base::DType::kU64: { uint64_t x = static_cast<uint64_t>(v[i]); std::memcpy(p, &x, 8); break; }
      case base::DType::kBool: { *p = v[i] != 0; break; }
      default: ADD_FAILURE() << "harness: unsupported dtype " << base::dtype_name(t);
    }
  }
  return out;
}

inline std::vector<double> from_bytes(const std::vector<char>& b, base::DType t, int64_t n) {
  std::vector<double> out(n);
  for (int64_t i = 0; i < n; ++i) {
    const char* p = b.data() + i * base::dtype_size_bytes(t);
    switch (t) {
      case base::DType::kF32: { float x; std::memcpy(&x, p, 4); out[i] = x; break; }
      case base::DType::kF64: { std::memcpy(&out[i], p, 8); break; }
      case base::DType::kI32: { int32_t x; std::memcpy(&x, p, 4); out[i] = x; break; }
      case base::DType::kI64: { int64_t x; std::memcpy(&x, p, 8); out[i] = static_cast<double>(x); break; }
      case base::DType::kBool: { out[i] = *p != 0; break; }
      default: ADD_FAILURE() << "harness: unsupported dtype " << base::dtype_name(t);
    }
  }
  return out;
}

struct LoweringRun {
  std::vector<HostTensor> outputs;
  std::vector<bool> checks;  // one per LoweringContext::require, true when it held
  std::string text;
};

// `tensors` maps arg index -> data (tensor args); `lists` maps arg index -> items;
// `scalars` maps arg index -> value (kScalar args).
inline LoweringRun run_lowering(const std::string& op, const std::vector<OpArg>& args,
                                const std::vector<TensorType>& out_types,
                                const std::map<int, HostTensor>& tensors,
                                const std::map<int, double>& scalars = {},
                                const std::map<int, std::vector<HostTensor>>& lists = {}) {
  LoweringRun run;
  auto lowered = lowering::lower_op(op, args, out_types);
  EXPECT_TRUE(lowered.ok()) << lowered.status().to_string();
  if (!lowered.ok()) return run;
  run.text = lowered->text;
  auto client = test_client();
  auto exe = client->compile(lowered->text, 0);
  EXPECT_TRUE(exe.ok()) << exe.status().to_string() << "\n" << lowered->text;
  if (!exe.ok()) return run;
  std::vector<runtime::BufferPtr> keep;
  for (const lowering::ParamBinding& p : lowered->bindings) {
    HostTensor h;
    switch (p.source) {
      case lowering::ParamBinding::Source::kTensor: h = tensors.at(p.arg_index); break;
      case lowering::ParamBinding::Source::kTensorListItem:
        h = lists.at(p.arg_index).at(p.list_index);
        break;
      case lowering::ParamBinding::Source::kScalar:
        h = HostTensor{TensorType{p.dtype, {}}, {scalars.at(p.arg_index)}};
        break;
      case lowering::ParamBinding::Source::kRngState:
        h = HostTensor{TensorType{base::DType::kU64, {2}}, {42, 0}};
        break;
    }
    auto bytes = to_bytes(h.values, h.type.dtype);
    auto buf = client->buffer_from_host(bytes.data(), h.type.dtype, h.type.dims, 0);
    EXPECT_TRUE(buf.ok()) << buf.status().to_string();
    if (!buf.ok()) return run;
    keep.push_back(*buf);
  }
  std::vector<const runtime::Buffer*> raw;
  for (auto& b : keep) raw.push_back(b.get());
  auto outs = (*exe)->execute(raw);
  EXPECT_TRUE(outs.ok()) << outs.status().to_string();
  if (!outs.ok()) return run;
  for (size_t i = 0; i < outs->size(); ++i) {
    auto& buf = (*outs)[i];
    std::vector<char> bytes(buf->size_bytes());
    EXPECT_TRUE(buf->to_host(bytes.data(), bytes.size()).ok());
    auto values = from_bytes(bytes, buf->dtype(), buf->num_elements());
    if (i < out_types.size()) {
      run.outputs.push_back(HostTensor{TensorType{buf->dtype(), buf->dims()}, values});
    } else {
      run.checks.push_back(values.at(0) != 0);
    }
  }
  return run;
}

}  // namespace torchtpu::testing
