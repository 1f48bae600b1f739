"""The decompositions compiled graphs and fused eager's retrace use: PyTorch's core ATen
table, with ours in place of those that compute other values than PyTorch's own kernels.

- ``multilabel_margin_loss_forward``: PyTorch's decomposition ignores the labels after a
  row's first -1 when it marks targets but not in the pairwise terms, so a row such as
  ``[1, 1, -1, 3]`` also gets the margins of its ignored label 3 (its CPU kernel and
  ``lowering/nn.cc`` stop at the -1; Inductor on the CPU gives the wrong values too). It is
  registered for the Autograd key, which tracing runs before any table is consulted, so
  ours is registered for tpu's autograd key (AutogradPrivateUse1) as well as in the table.
- ``index_put`` with a bool mask (``y[mask] = v``, ``y[:, mask] = v``): which positions a
  mask selects is data, which a compiled graph of static shapes cannot index by; where the
  value is the same for every selected position (it broadcasts over the dims after the
  mask's), the put is a ``where`` over the mask. Other bool puts keep the op (and its error).
- ``affine_grid_generator``: PyTorch's decomposition makes a size-1 dim's coordinate with
  ``torch.tensor(0)``, a constant a functional graph cannot hold (aot_autograd refused
  ``F.affine_grid(theta, (2, 3, 1, 7))``), and so does the C++ composite of its backward
  (a tensor without data under tracing); ours makes it with ``zeros`` and multiplies as the
  CPU kernel does (the base grid times theta transposed, one batched matmul). Registered for
  tpu's autograd key too (as above), autograd differentiates it, not that composite.
- ``max_unpool2d`` / ``max_unpool3d`` are not decomposed: their lowering checks the indices
  as the CPU kernel does (a RuntimeError naming the op), the decomposition's index put
  raises an IndexError about a flattened dim.
- ``nan_to_num`` is not decomposed: its kernel casts the replacements as a wrapped number
  (``nan=1e39`` into float32 is inf), the decomposition's ``scalar_tensor`` of them raises on
  an overflow.
"""

from __future__ import annotations

from typing import Any

import torch
from torch._C import DispatchKey
from torch._decomp import core_aten_decompositions
from torch.fx.experimental.symbolic_shapes import statically_known_true

aten = torch.ops.aten


def _multilabel_margin_loss_forward(input: torch.Tensor, target: torch.Tensor,
                                    reduction: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(loss, is_target) of multilabel_margin_loss over (), (C) or (N, C): for each label j
    of a row (its entries before the first -1) and each class i that is none of its labels,
    max(0, 1 - x[label_j] + x[i]) / C, summed per row."""
    x, t = torch.atleast_2d(input), torch.atleast_2d(target)
    classes = x.shape[1]
    pos = torch.arange(classes, device=t.device)
    first_end = torch.where(t == -1, pos, classes).amin(dim=-1, keepdim=True)
    listed = pos < first_end  # [n, j]: entry j is one of the row's labels
    labels = torch.where(listed, t, 0)
    is_target = ((labels.unsqueeze(-1) == pos) & listed.unsqueeze(-1)).any(dim=1)  # [n, i]
    label_score = torch.gather(x, 1, labels)
    margin = (1 - label_score.unsqueeze(-1) + x.unsqueeze(1)).clamp_min(0) / classes
    counted = listed.unsqueeze(-1) & ~is_target.unsqueeze(1)  # [n, j, i]
    per_row = torch.where(counted, margin, 0).sum(dim=(1, 2))
    if reduction == 1:  # mean
        loss = per_row.mean()
    elif reduction == 2:  # sum
        loss = per_row.sum()
    else:
        loss = per_row.reshape(target.shape[:-1] if target.dim() == 2 else ())
    return loss, is_target.to(x.dtype).reshape(target.shape)


def _masked_put(x: torch.Tensor, indices: list, values: torch.Tensor,
                accumulate: bool = False) -> Any:
    """index_put(x, [None]*p + [mask], values) as where(mask, values, x), when `mask` is
    the only index and `values` broadcast over the dims after it; else NotImplemented."""
    masks = [(p, i) for p, i in enumerate(indices) if i is not None]
    if len(masks) != 1 or masks[0][1].dtype not in (torch.bool, torch.uint8):
        return NotImplemented
    p, mask = masks[0]
    if any(i is not None for i in indices[p + 1:]):
        return NotImplemented
    trailing = x.dim() - p - mask.dim()
    v = values
    # (A size known only from data, such as the count of x[mask] in its backward, is not
    # known to be 1: no guard on it.)
    if p == 0 and v.dim() == trailing + 1 and statically_known_true(v.shape[0] == 1):
        v = v.squeeze(0)
    if trailing < 0 or v.dim() > trailing:
        return NotImplemented
    m = mask.to(torch.bool).reshape((1,) * p + tuple(mask.shape) + (1,) * trailing)
    v = v.to(x.dtype)
    return x + torch.where(m, v, 0) if accumulate else torch.where(m, v, x)


def _affine_base_grid(size: list, align_corners: bool, like: torch.Tensor) -> torch.Tensor:
    """affine_grid's base grid, (P, k + 1) for the P positions of `size`'s k = 2 or 3
    spatial dims: each position's coordinates (x, y[, z], 1), each over [-a, a] (a = 1
    with align_corners, else (n - 1) / n; 0 for a size-1 dim)."""
    torch._check(len(size) in (4, 5), lambda: "affine_grid_generator needs 4d (spatial) or "
                 "5d (volumetric) inputs.")
    spatial = list(size[2:])
    opts = {"dtype": like.dtype, "device": like.device}

    def coords(n: int) -> torch.Tensor:
        if n <= 1:
            return torch.zeros(n, **opts)
        a = 1.0 if align_corners else (n - 1) / n
        return torch.linspace(-a, a, n, **opts)

    per_dim = torch.meshgrid(*[coords(n) for n in spatial], indexing="ij")
    base = torch.stack([*reversed(per_dim), torch.ones(spatial, **opts)], dim=-1)
    return base.reshape(-1, len(spatial) + 1)


def _affine_grid_generator(theta: torch.Tensor, size: list, align_corners: bool) -> torch.Tensor:
    """The grid, (N, *spatial, k): the base grid times theta transposed."""
    grid = _affine_base_grid(size, align_corners, theta) @ theta.mT
    return grid.reshape(size[0], *size[2:], len(size) - 2)


_CORRECTED = {aten.multilabel_margin_loss_forward.default: _multilabel_margin_loss_forward,
              aten.affine_grid_generator.default: _affine_grid_generator}

for _op, _fn in _CORRECTED.items():
    if DispatchKey.AutogradPrivateUse1 not in _op.py_kernels:
        _op.py_impl(DispatchKey.AutogradPrivateUse1)(_fn)


def decompositions() -> dict[Any, Any]:
    table = dict(core_aten_decompositions())
    table.update(_CORRECTED)
    table[aten.index_put.default] = _masked_put
    # detach has a lowering. Decomposed (to alias) together with alias_copy, it makes the
    # functionalization of scan's backward see its combine function alias an input
    # ("scan might be aliasing the input or the output!"), on the CPU with these
    # decompositions too.
    table.pop(aten.detach.default, None)
    # max_unpool and nan_to_num: see the module's docstring.
    for op in (aten.max_unpool2d, aten.max_unpool3d, aten.nan_to_num, aten.nan_to_num_):
        table.pop(op.default, None)
        table.pop(getattr(op, "out", None), None)
    return table
