"""The dtypes the lowerings take: PyTorch's dtype -> the C++ side's DType (compiled graphs
describe their tensors with it, jax ops read their calls back through it)."""

from __future__ import annotations

import torch

from torchtpu import _C

DTYPES = {
    torch.bool: _C.DType.bool,
    torch.int8: _C.DType.int8,
    torch.uint8: _C.DType.uint8,
    torch.int16: _C.DType.int16,
    torch.uint16: _C.DType.uint16,
    torch.int32: _C.DType.int32,
    torch.uint32: _C.DType.uint32,
    torch.int64: _C.DType.int64,
    torch.uint64: _C.DType.uint64,
    torch.float16: _C.DType.float16,
    torch.bfloat16: _C.DType.bfloat16,
    torch.float32: _C.DType.float32,
    torch.float64: _C.DType.float64,
    torch.complex64: _C.DType.complex64,
    torch.complex128: _C.DType.complex128,
}
