#include "base/dtype.h"

namespace torchtpu::base {

const char* dtype_mlir_name(DType t) {
  switch (t) {
    case DType::kBool: return "i1";
    case DType::kI8: return "i8";
    case DType::kU8: return "ui8";
    case DType::kI16: return "i16";
    case DType::kI32: return "i32";
    case DType::kI64: return "i64";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
    case DType::kF32: return "f32";
    case DType::kF64: return "f64";
    case DType::kU16: return "ui16";
    case DType::kU32: return "ui32";
    case DType::kU64: return "ui64";
    case DType::kC64: return "complex<f32>";
    case DType::kC128: return "complex<f64>";
  }
  return "?";
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kBool: return "bool";
    case DType::kI8: return "int8";
    case DType::kU8: return "uint8";
    case DType::kI16: return "int16";
    case DType::kI32: return "int32";
    case DType::kI64: return "int64";
    case DType::kF16: return "float16";
    case DType::kBF16: return "bfloat16";
    case DType::kF32: return "float32";
    case DType::kF64: return "float64";
    case DType::kU16: return "uint16";
    case DType::kU32: return "uint32";
    case DType::kU64: return "uint64";
    case DType::kC64: return "complex64";
    case DType::kC128: return "complex128";
  }
  return "?";
}

int64_t dtype_size_bytes(DType t) {
  switch (t) {
    case DType::kBool:
    case DType::kI8:
    case DType::kU8: return 1;
    case DType::kI16:
    case DType::kU16:
    case DType::kF16:
    case DType::kBF16: return 2;
    case DType::kI32:
    case DType::kU32:
    case DType::kF32: return 4;
    case DType::kI64:
    case DType::kU64:
    case DType::kF64:
    case DType::kC64: return 8;
    case DType::kC128: return 16;
  }
  return 0;
}

bool is_half_float(DType t) { return t == DType::kF16 || t == DType::kBF16; }

bool is_floating(DType t) {
  return is_half_float(t) || t == DType::kF32 || t == DType::kF64;
}

bool is_integral(DType t) {
  return t == DType::kI8 || t == DType::kU8 || t == DType::kI16 || t == DType::kI32 ||
         t == DType::kI64 || t == DType::kU16 || t == DType::kU32 || t == DType::kU64;
}

bool is_signed_integral(DType t) {
  return is_integral(t) && t != DType::kU8 && t != DType::kU16 && t != DType::kU32 &&
         t != DType::kU64;
}

bool is_complex(DType t) { return t == DType::kC64 || t == DType::kC128; }

DType complex_component(DType t) {
  if (t == DType::kC64) return DType::kF32;
  if (t == DType::kC128) return DType::kF64;
  return t;
}

DType complex_of(DType t) { return t == DType::kF64 ? DType::kC128 : DType::kC64; }

}  // namespace torchtpu::base
