"""Shape rules of aten ops for tpu fake tensors where PyTorch's own are CUDA's.

Dynamo traces with fake tensors whose meta kernels encode CUDA's limits for some ops.
``aten::_grouped_mm`` (transformers' default MoE experts path) takes bfloat16 only there,
so a float32 or float16 MoE model failed to compile on tpu although eager mode runs it in
every dtype; its tpu rule is the meta kernel's shape checks and result without the dtype
check (with offsets and no bias, the form transformers calls; any other form keeps
PyTorch's rule). PyTorch has no public hook for a device's fake behaviour of an aten op:
this uses FakeTensorMode's ``register_op_impl`` table, consulted before the meta kernel,
and declines (NotImplemented) for every other device. A torch release that moved these
internals leaves PyTorch's rule in place, with a warning, rather than break the import.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch


def _grouped_mm(fake_mode: Any, func: Any, mat_a: torch.Tensor, mat_b: torch.Tensor,
                offs: torch.Tensor | None = None, bias: torch.Tensor | None = None,
                out_dtype: torch.dtype | None = None) -> Any:
    from torch._meta_registrations import _create_grouped_mm_output_tensor

    if mat_a.device.type != "tpu" or offs is None or bias is not None:
        return NotImplemented  # PyTorch's rule, and its errors
    torch._check(mat_a.dtype == mat_b.dtype,
                 lambda: f"grouped_mm: mat_a is {mat_a.dtype} but mat_b is {mat_b.dtype}")
    torch._check(mat_a.dim() in (2, 3) and mat_b.dim() in (2, 3),
                 lambda: f"grouped_mm: multiplicands must be 2D or 3D (got {mat_a.dim()}D "
                         f"and {mat_b.dim()}D)")
    if mat_a.dim() == 3 or mat_b.dim() == 3:
        torch._check(mat_a.size(-1) == mat_b.size(-2),
                     lambda: f"grouped_mm: contraction dims differ ({mat_a.size(-1)} and "
                             f"{mat_b.size(-2)})")
    with fake_mode:
        return _create_grouped_mm_output_tensor(mat_a, mat_b, offs, out_dtype)


def _register() -> None:
    try:
        from torch._meta_registrations import _create_grouped_mm_output_tensor  # noqa: F401
        from torch._subclasses.fake_impls import register_op_impl

        register_op_impl(torch.ops.aten._grouped_mm.default)(_grouped_mm)
    except (ImportError, AttributeError, AssertionError) as e:
        warnings.warn(f"torchtpu: tpu's fake-tensor rule for aten::_grouped_mm is not "
                      f"installed ({e}); torch.compile of a float32 MoE model may fail in "
                      "Dynamo with PyTorch's bfloat16-only rule", stacklevel=2)


_register()
