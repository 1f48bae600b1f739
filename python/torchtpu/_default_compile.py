"""``torch.compile(model)`` without a backend, on tpu tensors.

PyTorch's default backend is Inductor, and PyTorch 2.13's Inductor maps the device name
``tpu`` to its Pallas code generator for another project (it imports ``torch_tpu``), so a
graph with pointwise ops on tpu failed with ``No module named 'torch_tpu'``. A graph whose
inputs (parameters and buffers included, as Dynamo passes them) or values are on tpu goes
to the ``tpu`` backend instead, as if the user had passed ``backend="tpu"``; every other
graph goes to Inductor as before. Inductor's ``mode``/``options`` were checked by PyTorch when
``torch.compile`` was called and are ignored here, as the tpu backend ignores them.
"""

from __future__ import annotations

import logging
from typing import Any

import torch

log = logging.getLogger("torchtpu.compile")


def _on_tpu(model: Any, inputs: list[Any]) -> bool:
    """Whether the graph computes on tpu: an input, parameter or buffer is there, or a value
    the graph makes (``torch.ones(3, device="tpu")`` in a graph without tensor inputs)."""
    tensors = [x for x in inputs if isinstance(x, torch.Tensor)]
    if isinstance(model, torch.nn.Module):
        tensors += list(model.parameters()) + list(model.buffers())
    if isinstance(model, torch.fx.GraphModule):
        for node in model.graph.nodes:
            value = node.meta.get("example_value", node.meta.get("val"))
            if isinstance(value, torch.Tensor):
                tensors.append(value)
    return any(t.device.type == "tpu" for t in tensors)


def route_default_backend() -> None:
    """Wraps Inductor's ``torch.compile`` entry (idempotent)."""
    wrapper = torch._TorchCompileInductorWrapper
    inductor_call = wrapper.__call__
    if getattr(inductor_call, "_torchtpu_route", False):
        return

    def __call__(self, model_, inputs_, *, config_patches=None):
        if not _on_tpu(model_, inputs_):
            return inductor_call(self, model_, inputs_, config_patches=config_patches)
        from torchtpu.dynamo.backend import tpu_backend

        log.debug("torch.compile: a graph on tpu goes to the tpu backend (Inductor has no tpu "
                  "code generator here); its Inductor options are not used")
        return tpu_backend(model_, inputs_)

    __call__._torchtpu_route = True
    wrapper.__call__ = __call__
