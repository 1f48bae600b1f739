// Helpers of the collective tests (collectives_test.cc, collectives_functional_test.cc):
// host encodings of small integer values, per-replica inputs, and running one program
// replicated over devices of the test client with each replica's single result read back.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "lowering/collectives.h"
#include "runtime/compile_cache.h"
#include "test_plugin.h"

namespace torchtpu {
namespace {

using base::DType;
using lowering::Dims;
using lowering::ReduceKind;
using lowering::ReplicaGroups;
using lowering::TensorType;

std::vector<uint8_t> encode(const std::vector<double>& v, DType t) {
  std::vector<uint8_t> out(v.size() * base::dtype_size_bytes(t));
  for (size_t i = 0; i < v.size(); ++i) {
    uint8_t* p = out.data() + i * base::dtype_size_bytes(t);
    auto put = [p](auto x) { std::memcpy(p, &x, sizeof(x)); };
    switch (t) {
      case DType::kBool: put(static_cast<uint8_t>(v[i] != 0)); break;
      case DType::kI8: put(static_cast<int8_t>(v[i])); break;
      case DType::kI32: put(static_cast<int32_t>(v[i])); break;
      case DType::kI64: put(static_cast<int64_t>(v[i])); break;
      case DType::kF32: put(static_cast<float>(v[i])); break;
      case DType::kF64: put(v[i]); break;
      case DType::kBF16: {  // the values are exact in bf16: truncating the bits is exact
        float f = static_cast<float>(v[i]);
        uint32_t bits;
        std::memcpy(&bits, &f, 4);
        put(static_cast<uint16_t>(bits >> 16));
        break;
      }
      default: ADD_FAILURE() << "encode: dtype " << base::dtype_name(t);
    }
  }
  return out;
}

std::vector<double> decode(const std::vector<uint8_t>& bytes, DType t) {
  size_t n = bytes.size() / base::dtype_size_bytes(t);
  std::vector<double> out(n);
  for (size_t i = 0; i < n; ++i) {
    const uint8_t* p = bytes.data() + i * base::dtype_size_bytes(t);
    auto get = [p](auto x) { std::memcpy(&x, p, sizeof(x)); return static_cast<double>(x); };
    switch (t) {
      case DType::kBool: out[i] = get(uint8_t{}) != 0; break;
      case DType::kI8: out[i] = get(int8_t{}); break;
      case DType::kI32: out[i] = get(int32_t{}); break;
      case DType::kI64: out[i] = get(int64_t{}); break;
      case DType::kF32: out[i] = get(float{}); break;
      case DType::kF64: out[i] = get(double{}); break;
      case DType::kBF16: {
        uint16_t h;
        std::memcpy(&h, p, 2);
        uint32_t bits = static_cast<uint32_t>(h) << 16;
        float f;
        std::memcpy(&f, &bits, 4);
        out[i] = f;
        break;
      }
      default: ADD_FAILURE() << "decode: dtype " << base::dtype_name(t);
    }
  }
  return out;
}

// Replica r's input: small integers in [-3, 3] (bool: 0/1) that differ per replica.
std::vector<double> input_of(int r, int64_t n, DType t) {
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) {
    int64_t k = (i * 7 + r * 5 + 3) % 7;  // 0..6
    v[i] = t == DType::kBool ? static_cast<double>((i + r) % 3 == 0) : static_cast<double>(k - 3);
  }
  return v;
}

// Compiles `module` over `devices` (through a memory-only cache), runs replica r with
// args[r] (each a list of host values of the listed types) and returns each replica's
// single result.
std::vector<std::vector<double>> run(const std::string& module, const std::vector<int>& devices,
                                     const std::vector<std::vector<std::vector<double>>>& args,
                                     const std::vector<TensorType>& arg_types, DType out_dtype) {
  auto client = testing::test_client();
  static runtime::CompileCache cache(client, "");
  auto exe = cache.get_or_compile(module, devices);
  EXPECT_TRUE(exe.ok()) << exe.status().to_string() << "\n" << module;
  if (!exe.ok()) return {};
  std::vector<std::vector<runtime::BufferPtr>> held(devices.size());
  std::vector<std::vector<const runtime::Buffer*>> lists(devices.size());
  for (size_t r = 0; r < devices.size(); ++r) {
    for (size_t a = 0; a < arg_types.size(); ++a) {
      auto bytes = encode(args[r][a], arg_types[a].dtype);
      auto b = client->buffer_from_host(bytes.data(), arg_types[a].dtype, arg_types[a].dims,
                                        devices[r]);
      EXPECT_TRUE(b.ok()) << b.status().to_string();
      held[r].push_back(*b);
      lists[r].push_back(held[r].back().get());
    }
  }
  auto outs = (*exe)->execute_replicated(lists);
  EXPECT_TRUE(outs.ok()) << outs.status().to_string();
  if (!outs.ok()) return {};
  std::vector<std::vector<double>> results;
  for (size_t r = 0; r < devices.size(); ++r) {
    EXPECT_EQ((*outs)[r].size(), 1u);
    const runtime::BufferPtr& out = (*outs)[r][0];
    EXPECT_EQ(out->device_index(), devices[r]);
    EXPECT_EQ(out->dtype(), out_dtype);
    std::vector<uint8_t> bytes(out->size_bytes());
    EXPECT_TRUE(out->to_host(bytes.data(), bytes.size()).ok());
    results.push_back(decode(bytes, out_dtype));
  }
  return results;
}

const std::vector<int> kWorld{0, 1, 2, 3};
const ReplicaGroups kPairs{{0, 1}, {2, 3}};

// The group of replica r and r's position in it.
std::pair<std::vector<int64_t>, size_t> group_of(const ReplicaGroups& groups, int r) {
  for (const auto& g : groups) {
    for (size_t k = 0; k < g.size(); ++k) {
      if (g[k] == r) return {g, k};
    }
  }
  ADD_FAILURE() << "replica " << r << " in no group";
  return {};
}

}  // namespace
}  // namespace torchtpu
