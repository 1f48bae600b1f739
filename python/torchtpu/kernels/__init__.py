"""Custom kernels on the tpu device: JAX and Pallas functions as PyTorch custom ops.

``torchtpu.jax_op("mylib::name", fn)`` registers ``fn`` as ``torch.ops.mylib.name``; see
``torchtpu.kernels.jax_op`` and docs/kernels.md. Importing this package does not import
JAX; defining an op does (and says what to install when it is missing).
"""

from __future__ import annotations

from torchtpu.kernels.export import JaxOpError
from torchtpu.kernels.jax_op import JaxOp, jax_op

__all__ = ["JaxOp", "JaxOpError", "jax_op"]
