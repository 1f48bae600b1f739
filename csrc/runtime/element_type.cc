#include "runtime/element_type.h"

namespace torchtpu::runtime {

PJRT_Buffer_Type to_pjrt_type(base::DType t) {
  switch (t) {
    case base::DType::kBool: return PJRT_Buffer_Type_PRED;
    case base::DType::kI8: return PJRT_Buffer_Type_S8;
    case base::DType::kU8: return PJRT_Buffer_Type_U8;
    case base::DType::kI16: return PJRT_Buffer_Type_S16;
    case base::DType::kI32: return PJRT_Buffer_Type_S32;
    case base::DType::kI64: return PJRT_Buffer_Type_S64;
    case base::DType::kF16: return PJRT_Buffer_Type_F16;
    case base::DType::kBF16: return PJRT_Buffer_Type_BF16;
    case base::DType::kF32: return PJRT_Buffer_Type_F32;
    case base::DType::kF64: return PJRT_Buffer_Type_F64;
    case base::DType::kU16: return PJRT_Buffer_Type_U16;
    case base::DType::kU32: return PJRT_Buffer_Type_U32;
    case base::DType::kU64: return PJRT_Buffer_Type_U64;
    case base::DType::kC64: return PJRT_Buffer_Type_C64;
    case base::DType::kC128: return PJRT_Buffer_Type_C128;
  }
  return PJRT_Buffer_Type_INVALID;
}

base::StatusOr<base::DType> from_pjrt_type(PJRT_Buffer_Type t) {
  switch (t) {
    case PJRT_Buffer_Type_PRED: return base::DType::kBool;
    case PJRT_Buffer_Type_S8: return base::DType::kI8;
    case PJRT_Buffer_Type_U8: return base::DType::kU8;
    case PJRT_Buffer_Type_S16: return base::DType::kI16;
    case PJRT_Buffer_Type_S32: return base::DType::kI32;
    case PJRT_Buffer_Type_S64: return base::DType::kI64;
    case PJRT_Buffer_Type_F16: return base::DType::kF16;
    case PJRT_Buffer_Type_BF16: return base::DType::kBF16;
    case PJRT_Buffer_Type_F32: return base::DType::kF32;
    case PJRT_Buffer_Type_F64: return base::DType::kF64;
    case PJRT_Buffer_Type_U16: return base::DType::kU16;
    case PJRT_Buffer_Type_U32: return base::DType::kU32;
    case PJRT_Buffer_Type_U64: return base::DType::kU64;
    case PJRT_Buffer_Type_C64: return base::DType::kC64;
    case PJRT_Buffer_Type_C128: return base::DType::kC128;
    default: break;
  }
  return base::unimplemented("runtime: PJRT buffer type " + std::to_string(static_cast<int>(t)) +
                             " has no torchtpu dtype");
}

}  // namespace torchtpu::runtime
