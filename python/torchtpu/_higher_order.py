"""Higher-order ops (torch.cond, while_loop, scan, ...) let tpu's autocast key fall through
to their implementations, as PyTorch makes them do for CPU's, CUDA's and XPU's autocast
keys: under ``torch.autocast("tpu")`` the ops inside their subgraphs are autocast, and the
higher-order op itself has no autocast kernel to miss."""

from __future__ import annotations

import torch


def register() -> None:
    key = torch._C.DispatchKey.AutocastPrivateUse1
    keys = torch._ops._HIGHER_ORDER_OP_DEFAULT_FALLTHROUGH_DISPATCH_KEYS
    if key not in keys:
        keys.append(key)  # higher-order ops defined from now on
    # One with an autocast kernel of its own (flex_attention casts its inputs) keeps its
    # behaviour: it has none for tpu to fall through from.
    own = torch._C.DispatchKey.AutocastCPU, torch._C.DispatchKey.AutocastCUDA
    for op in list(torch._ops._higher_order_ops.values()):
        if not any(k in op.py_kernels for k in own):
            op.fallthrough(key)
