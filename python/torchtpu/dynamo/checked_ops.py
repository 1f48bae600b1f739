"""The ops checked under shape buckets: the default bucket policy pads only graphs made of them.

XLA's dynamic padder keeps a padded computation exact op by op, and where it does not the
result is silently wrong or the process aborts (docs/architecture.md lists what was found).
So by default (``TORCHTPU_SHAPE_BUCKETS`` unset) a graph with symbolic sizes is padded to
buckets only when every op that touches a dynamic dimension is listed here; any other
graph compiles per exact size. ``TORCHTPU_SHAPE_BUCKETS=auto`` (or a bucket list) pads
every graph that has no known hazard.

Each op below has a case in ``tests/python/compile/test_bucket_checked_ops.py`` that runs
it on a dynamic dimension at several lengths in one bucket and compares with the CPU, a
reduction over the padded dimension included (padding that leaks into a sum shows there);
a test there keeps this list and those cases equal. Add an op only with its case.
"""

from __future__ import annotations

import torch

from torchtpu.dynamo.graph_spec import symbolic_dims

CHECKED_UNDER_BUCKETS: frozenset[str] = frozenset({
    # pointwise, one operand
    "aten.abs.default", "aten.neg.default", "aten.exp.default", "aten.log.default",
    "aten.sqrt.default", "aten.rsqrt.default", "aten.reciprocal.default",
    "aten.tanh.default", "aten.sigmoid.default", "aten.relu.default", "aten.gelu.default",
    "aten.sin.default", "aten.cos.default", "aten.erf.default",
    "aten.pow.Tensor_Scalar", "aten.clamp.default", "aten.bitwise_not.default",
    "aten.logical_not.default", "aten._to_copy.default",
    # pointwise, two or three operands
    "aten.add.Tensor", "aten.sub.Tensor", "aten.mul.Tensor", "aten.div.Tensor",
    "aten.maximum.default", "aten.minimum.default", "aten.lt.Tensor", "aten.gt.Scalar",
    "aten.le.Scalar", "aten.eq.Tensor", "aten.ne.Scalar", "aten.gt.Tensor", "aten.ge.Tensor",
    "aten.ne.Tensor", "aten.lt.Scalar", "aten.ge.Scalar", "aten.logical_and.default",
    "aten.logical_or.default", "aten.where.self",
    # reductions and normalizations, over the dynamic dim or another
    "aten.sum.dim_IntList", "aten.mean.dim", "aten.amax.default", "aten.amin.default",
    "aten._softmax.default", "aten._log_softmax.default",
    "aten.native_layer_norm.default",
    # products (batched linears' merged rows are rewritten first: merged_dims.py)
    "aten.mm.default", "aten.addmm.default", "aten.bmm.default",
    # views and copies
    "aten.view.default", "aten.permute.default",
    "aten.unsqueeze.default", "aten.squeeze.dims", "aten.expand.default",
    "aten.slice.Tensor", "aten.slice_scatter.default", "aten.select.int",
    "aten.split_with_sizes.default",
    "aten.clone.default", "aten.alias.default", "aten.cat.default",
    "aten.constant_pad_nd.default",
    # factories and lookups
    "aten.arange.start_step", "aten.full.default", "aten.embedding.default",
    "aten.index_select.default", "aten.index.Tensor", "aten.index_put.default",
    "aten.gather.default", "aten.scatter.value",
    # mask and position code (Hugging Face's Llama)
    "aten.any.dim", "aten.bitwise_and.Tensor", "aten.cumsum.default", "aten.eq.Scalar",
    "aten.full_like.default", "aten.le.Tensor", "aten.mul.Scalar",
    # and their backward graphs
    "aten.div.Scalar", "aten.add.Scalar", "aten.empty_permuted.default",
})

# Size arithmetic (reading a dynamic size, or computing with one) pads nothing.
_SIZE_OPS = frozenset({"aten.sym_size.int", "aten.sym_numel.default", "aten.sym_stride.int"})


def touched_ops(gm: torch.fx.GraphModule) -> list[tuple[str, str]]:
    """(op name, node name) of every op in `gm` that reads or makes a tensor with a
    dynamic dimension, in graph order. Ops on static tensors only are left out: padding
    never reaches them."""
    found = []
    for node in gm.graph.nodes:
        # Other call targets are size arithmetic and tuple items: they compute nothing.
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
            continue
        vals = [a.meta.get("val") for a in node.all_input_nodes] + [node.meta.get("val")]
        if any(symbolic_dims(v) for v in vals):
            found.append((str(node.target), node.name))
    return found


def unchecked_op(gm: torch.fx.GraphModule) -> str | None:
    """Why the default policy keeps `gm` exact-size: its first op on a dynamic dimension
    that is not checked under buckets. None when every such op is."""
    for name, node in touched_ops(gm):
        if name not in CHECKED_UNDER_BUCKETS and name not in _SIZE_OPS:
            return (f"{name} ({node}) is not among the ops checked under shape buckets "
                    "(TORCHTPU_SHAPE_BUCKETS=auto pads it anyway)")
    return None
