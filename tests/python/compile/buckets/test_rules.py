"""The buckets pass, FX in and FX out: each rule kind on a traced graph, and the layouts.

A rule's rewrite must leave the graph computing the same values at the true sizes (a mask
is all true there), so every case runs the original and the rewritten graph on the CPU on
the same inputs and compares; then it checks the rewrite itself (which values are masked,
with what, what was replaced). Padded execution on the device is
test_padded_ops.py's and test_varying_lengths.py's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import sympy
import torch
import torch.nn.functional as F
from functorch.compile import make_boxed_func
from torch._decomp import core_aten_decompositions
from torch._dynamo.backends.common import aot_autograd

from torchtpu.dynamo.buckets import Hazard, plan
from torchtpu.dynamo.buckets import layout as L
from torchtpu.dynamo.buckets.rules import RULES
from torchtpu.dynamo.graph_spec import copy_graph_module as _copy

aten = torch.ops.aten


def capture(fn: Callable, args: list[torch.Tensor], dynamic: list[tuple[int, int]]
            ) -> tuple[torch.fx.GraphModule, list[Any]]:
    """The inference graph of `fn` (CPU tensors; (input, dim) pairs marked dynamic) and the
    arguments it was called with."""
    graphs: list[Any] = []

    def compiler(gm: torch.fx.GraphModule, example: list[Any]) -> Callable:
        def run(*real: Any) -> Any:
            graphs.append((gm, list(real)))
            return gm(*real)
        return make_boxed_func(run)

    backend = aot_autograd(fw_compiler=compiler, inference_compiler=compiler,
                           decompositions=core_aten_decompositions())
    torch._dynamo.reset()
    for i, d in dynamic:
        torch._dynamo.mark_dynamic(args[i], d)
    with torch.no_grad():
        torch.compile(fn, backend=backend, fullgraph=True)(*args)
    return graphs[-1]


def rewritten(fn: Callable, args: list[torch.Tensor], dynamic: list[tuple[int, int]]
              ) -> torch.fx.GraphModule:
    """`fn`'s graph through the pass; checks that it still computes `fn` at true sizes."""
    gm, real = capture(fn, args, dynamic)
    new = _copy(gm)
    result = plan(new)
    want = gm(*real)
    got = new(*real)
    for w, g, form in zip(want, got, result.outputs):
        if isinstance(w, torch.Tensor) and form is not None and form.kind == "compact":
            g = g[:w.numel()].view(w.shape)
        torch.testing.assert_close(g, w)
    return new


def calls(gm: torch.fx.GraphModule, op: Any) -> list[torch.fx.Node]:
    return [n for n in gm.graph.nodes if n.op == "call_function" and n.target is op]


def fill_of(node: torch.fx.Node) -> Any:
    """The fill of a mask ``where(valid, x, fill)``, or None when `node` is not one."""
    if node.target is not aten.where.self:
        return None
    fill = node.args[2]
    if isinstance(fill, torch.fx.Node) and fill.target is aten.scalar_tensor.default:
        return fill.args[0]
    return None


def rows(n: int) -> torch.Tensor:
    return torch.randn(3, n)


# --- layouts --------------------------------------------------------------------------------
def test_views_merge_and_split_components() -> None:
    b, n = sympy.symbols("b n", positive=True, integer=True)
    assert L.reshape([(b,), (n,), ()], [b, n, 32], [b * n, 32]) == [(b, n), ()]
    # Heads: [n, b, 32] -> [n, 4b, 8]: 4 folds into b's component (a prefix of 4b rows).
    assert L.reshape([(n,), (b,), ()], [n, b, 32], [n, 4 * b, 8]) == [(n,), (4 * b,), ()]
    assert L.reshape([(4 * b,), (n,), ()], [4 * b, n, 8], [b, 4, n, 8]) == [
        (b,), (), (n,), ()]
    assert L.reshape([(b, n), ()], [b * n, 96], [b, n, 96]) == [(b,), (n,), ()]
    # Rows of a factory's b*n prefix do not split into b runs of n.
    assert L.reshape([(b * n,), ()], [b * n, 96], [b, n, 96]) is None
    assert L.canonical([4, n, 8]) == (4, 8 * n)


# --- exact, view, factory ---------------------------------------------------------------------
def test_pointwise_ops_need_no_rule_entry_and_no_mask() -> None:
    assert RULES.get(aten.atan.default).kind == "exact"
    gm = rewritten(lambda x, y: x.sin() + y * 2, [rows(5), rows(5)], [(0, 1), (1, 1)])
    assert calls(gm, aten.sin.default)[0].args[0].op == "placeholder"


def test_a_view_that_splits_merged_rows_out_of_line_is_a_hazard() -> None:
    gm, _ = capture(lambda x: x.reshape(-1).view(x.shape[1], 3).sum(0), [rows(5)], [(0, 1)])
    with pytest.raises(Hazard, match="splits a padded dim"):
        plan(_copy(gm))


def test_factory_output_is_returned_as_a_view_of_its_prefix() -> None:
    gm = rewritten(lambda x: torch.arange(x.shape[0]) * 2, [torch.randn(5)], [(0, 0)])
    assert not calls(gm, aten.index.Tensor)  # compact already: no gather


def test_output_with_a_padded_inner_dim_is_compacted_by_one_gather() -> None:
    gm = rewritten(lambda x: x * 2, [rows(5)], [(0, 1)])
    assert len(calls(gm, aten.index.Tensor)) == 1


def test_op_without_a_rule_is_a_hazard_naming_it() -> None:
    gm, _ = capture(lambda x: x.flip(-1), [rows(5)], [(0, 1)])
    with pytest.raises(Hazard, match=r"aten.flip.default .* has no rule"):
        plan(_copy(gm))


# --- masked ----------------------------------------------------------------------------------
@pytest.mark.parametrize("fn,op,fill", [
    (lambda x: x.sum(-1), aten.sum.dim_IntList, 0),
    (lambda x: x.amax(-1), aten.amax.default, float("-inf")),
    (lambda x: x.amin(-1), aten.amin.default, float("inf")),
    (lambda x: x.softmax(-1), aten._softmax.default, float("-inf")),
    (lambda x: (x > 0).any(-1), aten.any.dim, False),
])
def test_reading_across_a_padded_dim_masks_it_with_the_identity(fn: Callable, op: Any,
                                                                fill: Any) -> None:
    gm = rewritten(fn, [rows(5)], [(0, 1)])
    assert fill_of(calls(gm, op)[0].args[0]) == fill


def test_reading_along_a_static_dim_masks_nothing() -> None:
    gm = rewritten(lambda x: x.sum(0), [rows(5)], [(0, 1)])
    assert calls(gm, aten.sum.dim_IntList)[0].args[0].op == "placeholder"


def test_contraction_over_a_padded_dim_zeroes_both_operands() -> None:
    gm = rewritten(lambda a, b: a @ b, [torch.randn(4, 5), torch.randn(5, 2)], [(0, 1), (1, 0)])
    mm = calls(gm, aten.mm.default)[0]
    assert fill_of(mm.args[0]) == 0 and fill_of(mm.args[1]) == 0


def test_rows_of_a_product_need_no_mask() -> None:
    gm = rewritten(lambda a, w: a @ w, [torch.randn(5, 4), torch.randn(4, 2)], [(0, 0)])
    mm = calls(gm, aten.mm.default)[0]
    assert fill_of(mm.args[0]) is None


def test_running_sum_over_a_prefix_needs_no_mask_over_merged_rows_does() -> None:
    gm = rewritten(lambda x: x.cumsum(-1), [rows(5)], [(0, 1)])
    assert fill_of(calls(gm, aten.cumsum.default)[0].args[0]) is None
    gm = rewritten(lambda x: x.reshape(-1).cumsum(0), [rows(5)], [(0, 1)])
    assert fill_of(calls(gm, aten.cumsum.default)[0].args[0]) == 0


# --- indexed ---------------------------------------------------------------------------------
def test_padded_indices_point_at_row_zero() -> None:
    table = torch.randn(10, 4)
    gm = rewritten(lambda t, w: F.embedding(t, w), [torch.randint(0, 10, (2, 5)), table],
                   [(0, 1)])
    assert fill_of(calls(gm, aten.embedding.default)[0].args[1]) == 0


def test_indices_into_a_padded_dim_are_checked_against_its_true_size() -> None:
    # The op's bounds check compares with the bucket's size: entries outside the true size
    # move past every bucket. Along a static dim the check's size is the true one already.
    past = torch.iinfo(torch.int64).max
    gm = rewritten(lambda x, i: x.index_select(1, i), [rows(5), torch.tensor([0, 4])], [(0, 1)])
    assert fill_of(calls(gm, aten.index_select.default)[0].args[2]) == past
    gm = rewritten(lambda x, i: x.index_select(0, i), [rows(5), torch.tensor([0, 2])], [(0, 1)])
    assert fill_of(calls(gm, aten.index_select.default)[0].args[2]) is None
    # Negative positions count from the true end (the rewritten graph reads x[:, 4] at -1).
    gm = rewritten(lambda x, i: x[:, i], [rows(5), torch.tensor([0, -1])], [(0, 1)])
    checked = calls(gm, aten.index.Tensor)[0].args[1][1]
    assert fill_of(checked) == past
    assert checked.args[1].target is aten.where.self  # negatives wrapped at the true size
    assert calls(gm, aten.add.Tensor)


def test_loss_over_padded_rows_counts_and_sums_true_rows_only() -> None:
    # cross_entropy decomposes into a gather of each row's target and two sums over the
    # rows (the losses and the count of targets not ignored).
    gm = rewritten(lambda x, t: F.cross_entropy(x, t, ignore_index=-7),
                   [torch.randn(5, 6), torch.randint(0, 6, (5,))], [(0, 0), (1, 0)])
    sums = calls(gm, aten.sum.dim_IntList)
    assert len(sums) == 2 and all(fill_of(n.args[0]) in (0, False) for n in sums)
    assert fill_of(calls(gm, aten.gather.default)[0].args[2]) == 0


# --- rewritten -------------------------------------------------------------------------------
def test_mean_divides_the_masked_sum_by_the_true_count() -> None:
    gm = rewritten(lambda x: x.mean(-1), [rows(5)], [(0, 1)])
    assert not calls(gm, aten.mean.dim)
    assert fill_of(calls(gm, aten.sum.dim_IntList)[0].args[0]) == 0


def test_cat_along_a_padded_dim_places_pieces_at_true_offsets() -> None:
    gm = rewritten(lambda x, y: torch.cat([x, y], 1), [rows(5), rows(4)], [(0, 1), (1, 1)])
    assert not calls(gm, aten.cat.default)
    assert calls(gm, aten.index_select.default)


def test_cat_along_a_static_dim_stays() -> None:
    gm = rewritten(lambda x, y: torch.cat([x, y]), [rows(5), torch.randn(2, 5)],
                   [(0, 1), (1, 1)])
    assert calls(gm, aten.cat.default)


def test_pad_after_a_padded_dim_fills_its_padding_first() -> None:
    gm = rewritten(lambda x: F.pad(x, (0, 2), value=-1.0), [rows(5)], [(0, 1)])
    assert fill_of(calls(gm, aten.constant_pad_nd.default)[0].args[0]) == -1.0


def test_positions_from_the_true_end_are_read_at_run_time() -> None:
    gm = rewritten(lambda x: x[:, -1] + x[:, -3:].sum(-1), [rows(5)], [(0, 1)])
    assert not calls(gm, aten.select.int)
    assert len(calls(gm, aten.index_select.default)) == 2


# --- plans across forward and backward ---------------------------------------------------------
def test_forward_saves_padded_and_its_plan_tells_the_backward() -> None:
    captured: dict[str, Any] = {}

    def forward(gm: torch.fx.GraphModule, example: list[Any]) -> Callable:
        ctx = torch._guards.TracingContext.try_get()
        captured["forward"], captured["first_saved"] = gm, ctx.fw_metadata.num_forward
        return make_boxed_func(gm.forward)

    def backward(gm: torch.fx.GraphModule, example: list[Any]) -> Callable:
        def run(*real: Any) -> Any:
            captured["backward_args"] = list(real)
            return gm(*real)
        captured["backward"] = gm
        return make_boxed_func(run)

    backend = aot_autograd(fw_compiler=forward, bw_compiler=backward,
                           decompositions=core_aten_decompositions())
    torch._dynamo.reset()
    x, w = torch.randn(2, 5, 4), torch.randn(3, 4, requires_grad=True)
    torch._dynamo.mark_dynamic(x, 1)
    torch.compile(lambda x, w: F.linear(x, w).relu().sum(), backend=backend)(x, w).backward()
    fw = plan(_copy(captured["forward"]), first_saved=captured["first_saved"])
    # The batched linear's activation rows are saved merged: b runs of padded rows.
    assert any(len(lay) == 2 for lays in fw.saved.values() for lay in lays)
    assert all(f.kind == "padded" for f in fw.outputs[captured["first_saved"]:] if f)
    bw_gm = _copy(captured["backward"])
    bw = plan(bw_gm, carried=fw.saved)
    names = [n.name for n in bw_gm.graph.nodes if n.op == "placeholder"]
    assert {names[i] for i in bw.carried} == set(fw.saved) & set(names)
    for i in bw.carried:
        assert bw.inputs[i] == fw.saved[names[i]]
    want = captured["backward"](*captured["backward_args"])
    got = bw_gm(*captured["backward_args"])
    for g, v in zip(got, want):
        if isinstance(v, torch.Tensor):
            torch.testing.assert_close(g.reshape(-1)[:v.numel()].view(v.shape), v)
