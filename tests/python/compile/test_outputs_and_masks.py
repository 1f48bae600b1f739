"""Compiled graphs as users write them, against eager on the CPU: outputs that are views
of each other share storage as in eager; an output aliasing an input mutated through a
view, in a graph padded to buckets, at sizes below the bucket; an input updated in place
and returned, in one program; a value assigned through a
bool mask (`y[y < 0] = 0`); a view with a dim of size 0 in a dynamic graph (torch.cond:
test_control_flow.py)."""

from __future__ import annotations

import pytest
import torch

TPU = "tpu"


def compiled(fn, **kwargs):
    torch._dynamo.reset()
    return torch.compile(fn, backend="tpu", **kwargs)


@pytest.mark.parametrize("dynamic", [False, True])
def test_outputs_that_view_each_other_share_storage(dynamic: bool) -> None:
    # A no-grad graph's outputs were each a buffer of its own: a write into y did not
    # show in y.view(-1) or y[::2], as it does in eager.
    def f(x):
        y = x * 2
        return y, y.view(-1), y[::2], y.t()

    for n in (4, 6):
        y, flat, every_other, t = compiled(f, dynamic=dynamic)(torch.ones(n, 6, device=TPU))
        ref = f(torch.ones(n, 6))
        y[0, 0] = -1.0
        y[2, 1] = -2.0
        ref[0][0, 0] = -1.0
        ref[0][2, 1] = -2.0
        for got, want in zip((flat, every_other, t), ref[1:]):
            assert torch.equal(got.cpu(), want)
        assert flat.untyped_storage().data_ptr() == y.untyped_storage().data_ptr()


def test_output_aliasing_an_input_mutated_through_a_view_below_the_bucket() -> None:
    # The output came back as a view of the bucket-sized result, and AOTAutograd replayed
    # that base's size on the caller's smaller input: "setStorage: ... out of bounds".
    def f(x):
        v = x.view(-1)
        v.mul_(3)
        return v[: x.shape[0]]

    c = compiled(f)
    for n in (3, 5, 4, 6, 7):
        x = torch.randn(n, 3)
        xt = x.to(TPU)
        out = c(xt)
        assert torch.equal(out.cpu(), f(x.clone()))
        torch.testing.assert_close(xt.cpu(), x * 3)


@pytest.mark.parametrize("case", ["scalar", "accumulate", "leading_dims", "in_place_input"])
def test_assignment_through_a_bool_mask_compiles(case: str) -> None:
    def f(x):
        y = x.clone()
        if case == "scalar":
            y[y < 0] = 0.0
        elif case == "accumulate":
            y.index_put_((y > 0.5,), torch.tensor(10.0, device=y.device), accumulate=True)
        elif case == "leading_dims":
            y[y[:, 0] > 0] = -7.0
        return y

    def g(x):
        x[x > 0] = 1.0
        return x * 2

    x = torch.randn(5, 4)
    if case == "in_place_input":
        xt = x.to(TPU)
        out = compiled(g)(xt)
        expected_x = x.clone()
        assert torch.equal(out.cpu(), g(expected_x))
        assert torch.equal(xt.cpu(), expected_x)
    else:
        assert torch.equal(compiled(f)(x.to(TPU)).cpu(), f(x))


def test_a_view_with_an_empty_dim_in_a_dynamic_graph() -> None:
    fn = compiled(lambda x: x[1:, 2:] * 2, dynamic=True)
    for shape in ((3, 2), (5, 2), (4, 3)):
        x = torch.randn(*shape)
        out = fn(x.to(TPU))
        assert out.shape == x[1:, 2:].shape
        torch.testing.assert_close(out.cpu(), x[1:, 2:] * 2)



def _update_and_return(x, y):
    x.mul_(2)
    x[:, 1] = y
    return x


def _update_and_return_twice(x, y):
    x.add_(y[:, None])
    return y, x, x * 3, x


@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.parametrize("fn", [_update_and_return, _update_and_return_twice])
def test_an_input_updated_in_place_and_returned_is_one_program(fn, dynamic: bool) -> None:
    # AOTAutograd returns such an input through its trailing copy_, which was left in the
    # graph and run eagerly between two compiled pieces (with a "no lowering" warning).
    from torchtpu.dynamo.backend import compile_stats

    splits = dict(compile_stats()["graph_unlowered_splits"])
    f = compiled(fn, dynamic=dynamic)
    for n in (3, 4, 6):
        x, y = torch.randn(n, 3), torch.randn(n)
        tx, ty = x.to(TPU), y.to(TPU)
        expected, actual = fn(x, y), f(tx, ty)
        expected = expected if isinstance(expected, tuple) else (expected,)
        actual = actual if isinstance(actual, tuple) else (actual,)
        for a, e in zip(actual, expected, strict=True):
            torch.testing.assert_close(a.cpu(), e)
        torch.testing.assert_close(tx.cpu(), x)
        assert any(a is tx for a in actual)  # the caller's tensor itself, as in eager
    assert dict(compile_stats()["graph_unlowered_splits"]) == splits
