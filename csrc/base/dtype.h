// Element types known to the torch-free core, with their StableHLO spelling and size.
#pragma once

#include <cstdint>
#include <string>

namespace torchtpu::base {

enum class DType : int8_t {
  kBool,
  kI8,
  kU8,
  kI16,
  kI32,
  kI64,
  kF16,
  kBF16,
  kF32,
  kF64,
  kU32,  // internal: random bits
  kU64,  // internal: random generator state
  kC64,   // complex<f32>
  kC128,  // complex<f64>
  kU16,
};

// "f32", "bf16", "i1", "i64", "ui8", ...: the element type in StableHLO text.
const char* dtype_mlir_name(DType t);
// "float32", "bfloat16", "bool", ...: PyTorch-style names for messages.
const char* dtype_name(DType t);
int64_t dtype_size_bytes(DType t);
bool is_floating(DType t);
bool is_half_float(DType t);  // float16 or bfloat16
bool is_integral(DType t);  // excludes bool
bool is_signed_integral(DType t);
bool is_complex(DType t);
// The type of a complex type's real and imaginary parts (f32 for c64); `t` itself otherwise.
DType complex_component(DType t);
// The complex type whose parts are `t` (f32 -> c64, f64 -> c128; f16/bf16 -> c64).
DType complex_of(DType t);

}  // namespace torchtpu::base
