"""torchtpu: PyTorch on XLA accelerators through a device named ``tpu``.

Importing this package registers the device: tensors created with ``device="tpu"`` live in
PJRT buffers, every op is lowered to StableHLO and run by a PJRT plugin (the XLA CPU plugin
by default; ``TORCHTPU_PJRT_PLUGIN`` selects another by name, e.g. ``jax-cuda12-pjrt`` or
``libtpu``, or by the path of its ``.so``; ``torchtpu.debug.plugins()`` lists them).
"""

from __future__ import annotations

import atexit
import os

# The XLA plugins log INFO lines to stderr when a client starts; keep warnings and errors.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")


def _autoload() -> None:
    """PyTorch's device-backend autoload calls this at ``import torch`` (the package's
    ``torch.backends`` entry point): importing torchtpu registers the device. Defined before
    ``import torch`` below: when torchtpu is imported first, that import autoloads this
    module while it is still being initialized."""


import torch  # noqa: E402

from torchtpu import _plugin  # noqa: E402

# Torch's own libraries must be loaded before our extension resolves against them.
from torchtpu import _C  # noqa: E402

_C._init(_plugin.search_path())

torch.utils.rename_privateuse1_backend("tpu")

from torchtpu import device as _device_module  # noqa: E402

torch._register_device_module("tpu", _device_module)
torch.utils.generate_methods_for_privateuse1_backend(
    for_tensor=True, for_module=True, for_storage=True, for_packed_sequence=True
)

from torchtpu import _exit  # noqa: E402,F401  (brings our threads to rest before finalization)
from torchtpu import _default_compile, _dlpack, _sharing, _storage  # noqa: E402
# tpu shape rules for Dynamo's fake tensors (not under torchtpu.dynamo: that package imports
# AOTAutograd, which would cost every import ~1.5 s)
from torchtpu import _fake_kernels  # noqa: E402,F401

_sharing.register()
_storage.register()
_dlpack.register()

from torchtpu import _higher_order  # noqa: E402

_higher_order.register()
_default_compile.route_default_backend()
from torchtpu import debug  # noqa: E402
from torchtpu import models  # noqa: E402  (stdlib-only until a model is converted)
from torchtpu import ops  # noqa: E402,F401  (defines the torchtpu:: ops)
from torchtpu import distributed  # noqa: E402,F401  (registers the "tpu" c10d backend)
from torchtpu.kernels import jax_op  # noqa: E402  (JAX is imported when an op is defined)


def block_until_ready(tensor: torch.Tensor) -> torch.Tensor:
    """Waits until ``tensor``'s value is computed (ops are asynchronous) and returns it."""
    _C.block_until_ready(tensor)
    return tensor


def eager_mode() -> str:
    """The eager mode: ``"op"`` (each op runs at its call; the default) or ``"fused"``.

    Fused eager records ops into a pending graph per device and runs it as one compiled
    program when a value is needed (a host read, ``synchronize``, an op that cannot be
    deferred) or at a size limit, with op-by-op semantics. ``TORCHTPU_EAGER=fused`` selects
    it at startup.
    """
    return str(_C.eager_mode())


def set_eager_mode(mode: str) -> None:
    """Selects the eager mode (``"op"`` or ``"fused"``); leaving fused mode runs the pending
    graphs first. Raises ValueError for any other name."""
    if mode not in ("op", "fused"):
        raise ValueError(
            f"tpu: eager mode {mode!r} is not one of 'op' (each op runs at its call) or "
            "'fused' (ops are recorded and run as fused graphs)"
        )
    _C.set_eager_mode(mode)


def _fused_graph_hook(inputs: list, nodes: object, outputs: list, dims: list,
                      key: bytes | None, dtypes: list) -> list | None:
    """Fused eager graphs not compiled for their exact sizes try their shape class first
    (dynamo/buckets/fused_graph.py; imported on first use)."""
    from torchtpu.dynamo.buckets import fused_graph

    return fused_graph.run(inputs, nodes, outputs, dims, key, dtypes)


_C.set_fused_graph_hook(_fused_graph_hook)
atexit.register(_C.set_fused_graph_hook, None)


from torchtpu.device import (  # noqa: E402
    current_device,
    device_count,
    is_available,
    manual_seed,
    set_device,
    synchronize,
)

__all__ = [
    "block_until_ready",
    "current_device",
    "debug",
    "device_count",
    "eager_mode",
    "is_available",
    "jax_op",
    "models",
    "manual_seed",
    "set_device",
    "set_eager_mode",
    "synchronize",
]

# Submodules imported on first use (`torchtpu.flops.peak_flops()` after `import torchtpu`):
# they pull in what `import torchtpu` should not pay for (the serving engine, TorchTitan,
# Dynamo, a measurement through the plugin).
_LAZY_SUBMODULES = frozenset({"amp", "dynamo", "flops", "serve", "testing", "train"})


def __getattr__(name: str):
    if name in _LAZY_SUBMODULES:
        import importlib

        return importlib.import_module(f"torchtpu.{name}")
    raise AttributeError(f"module 'torchtpu' has no attribute {name!r}")
