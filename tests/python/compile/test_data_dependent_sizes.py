"""Sizes known only from data in compiled graphs (nonzero, a boolean-mask index, .item()
used as a size or an index): with fullgraph=True or capture_scalar_outputs, Dynamo hands
the backend graphs holding such sizes (unbacked symbols). Those nodes run eagerly between
compiled pieces, which read the sizes from the tensors the eager runs made; forward and
backward compare with the CPU."""

from __future__ import annotations

import warnings

import pytest
import torch

import torchtpu  # noqa: F401

CASES = {
    "mask_index": lambda x: x[x > 0] * 2,
    "nonzero": lambda x: x.nonzero().sum(0),
    "item_as_size": lambda x: torch.arange(int((x > 0).sum().item()), device=x.device).float()
    .sum() + x.sum(),
    "item_as_index": lambda x: x[x.argmax().item() // x.shape[1]],
    # A result whose rows come from data, used in the next piece (its contiguity is not
    # known when the piece is planned for buckets).
    "nonzero_plus_one": lambda x: torch.nonzero(x > 0) + 1,
    "mask_rows_transposed": lambda x: x[x[:, 0] > 0].t() + 1,
    "argwhere_plus_one": lambda x: torch.argwhere(x > 0) + 1,
}


@pytest.fixture
def scalar_outputs():
    torch._dynamo.reset()
    with torch._dynamo.config.patch(capture_scalar_outputs=True):
        yield


@pytest.mark.parametrize("name", list(CASES))
def test_data_dependent_sizes_match_the_cpu(name: str, scalar_outputs: None) -> None:
    # Each failed to compile ("size u0 depends on unbound symbols") or ran an eager
    # runtime assert on an unevaluated expression ("Cannot cast u0 >= 0 to number").
    fn = CASES[name]
    compiled = torch.compile(fn, backend="tpu", fullgraph=True)
    torch.manual_seed(0)
    for rows in (4, 7):
        x = torch.randn(rows, 3)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the eager-pieces warning
            got = compiled(x.to("tpu"))
        torch.testing.assert_close(got.cpu(), fn(x))


def test_training_through_a_mask_and_nonzero(scalar_outputs: None) -> None:
    def loss(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        y = x[x > 0] * w.sum()
        return (y ** 2).sum() + x.nonzero().float().mean()

    compiled = torch.compile(loss, backend="tpu", fullgraph=True)
    torch.manual_seed(0)
    for rows in (12, 7):
        x, w = torch.randn(rows, 3), torch.randn(4)
        xc, wc = x.clone().requires_grad_(), w.clone().requires_grad_()
        xt, wt = x.to("tpu").requires_grad_(), w.to("tpu").requires_grad_()
        want = loss(xc, wc)
        want.backward()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = compiled(xt, wt)
            got.backward()
        torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(xt.grad.cpu(), xc.grad, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(wt.grad.cpu(), wc.grad, rtol=1e-5, atol=1e-5)
