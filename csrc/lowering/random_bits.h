// Random bits for the random lowerings (random.cc, multinomial.cc): a THREE_FRY stream
// keyed by a hash of the call's generator state, and uniform floats drawn from it.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>

#include "lowering/lowering.h"

namespace torchtpu::lowering {

// An unsigned 64-bit constant (Builder::constant_i64 cannot spell values >= 2^63).
inline Value u64_constant(Builder& b, uint64_t v, const Dims& dims = {}) {
  TensorType t{DType::kU64, dims};
  return b.op("stablehlo.constant", {}, t, "value = dense<" + std::to_string(v) + "> : " + t.str());
}

inline Value u64_binary(Builder& b, const char* op, Value x, uint64_t k) {
  return b.binary(op, x, u64_constant(b, k, x.dims()));
}

// splitmix64's finalizer: a bijection on u64 that scatters nearby inputs.
inline Value mix64(Builder& b, Value z) {
  z = u64_binary(b, "multiply", b.binary("xor", z, u64_binary(b, "shift_right_logical", z, 30)),
                 0xbf58476d1ce4e5b9ull);
  z = u64_binary(b, "multiply", b.binary("xor", z, u64_binary(b, "shift_right_logical", z, 27)),
                 0x94d049bb133111ebull);
  return b.binary("xor", z, u64_binary(b, "shift_right_logical", z, 31));
}

// A sequence of random bit tensors from one op's generator state. Successive draws thread
// rng_bit_generator's output state, so they never overlap.
class RandomBits {
 public:
  explicit RandomBits(LoweringContext& c) : b_(c.b()) {
    Value state = c.rng_state();
    Value seed = b_.slice(state, {0}, {1}, {1});
    Value offset = b_.slice(state, {1}, {2}, {1});
    Value salted_offset = u64_binary(b_, "add", offset, 0x9e3779b97f4a7c15ull);
    Value key = mix64(b_, b_.binary("xor", mix64(b_, seed), mix64(b_, salted_offset)));
    state_ = b_.concatenate({key, u64_constant(b_, 0, {1})}, 0);
  }

  // Uniform bits of `dims`; `t` is kU32 or kU64.
  Value draw(const Dims& dims, DType t) {
    std::vector<Value> r = b_.op_multi("stablehlo.rng_bit_generator", {state_},
                                       {state_.type, TensorType{t, dims}},
                                       "rng_algorithm = #stablehlo<rng_algorithm THREE_FRY>");
    state_ = r[0];
    return r[1];
  }

 private:
  Builder& b_;
  Value state_;
};

inline int mantissa_digits(DType t) {
  switch (t) {
    case DType::kF16: return 11;
    case DType::kBF16: return 8;
    case DType::kF64: return 53;
    default: return 24;
  }
}

// Transformations run in f64 for f64 outputs and in f32 otherwise (PyTorch's dist_acctype).
inline DType compute_type(DType out) { return out == DType::kF64 ? DType::kF64 : DType::kF32; }

// Uniform [0, 1) in `t` (f32 or f64) from the top `digits` bits: every value is k * 2^-digits,
// exact in `t`, so 1.0 can never appear.
inline Value unit_uniform(Builder& b, RandomBits& bits, const Dims& dims, DType t, int digits) {
  bool wide = t == DType::kF64;
  Value raw = bits.draw(dims, wide ? DType::kU64 : DType::kU32);
  int width = wide ? 64 : 32;
  Value shift = wide ? u64_constant(b, width - digits, dims)
                     : b.convert(u64_constant(b, width - digits, dims), DType::kU32);
  Value top = b.convert(b.binary("shift_right_logical", raw, shift), t);
  return b.mul(top, b.splat(std::ldexp(1.0, -digits), TensorType{t, dims}));
}

inline Value unit_uniform(Builder& b, RandomBits& bits, const Dims& dims, DType t) {
  return unit_uniform(b, bits, dims, t, mantissa_digits(t));
}

}  // namespace torchtpu::lowering
