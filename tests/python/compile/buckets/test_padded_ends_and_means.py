"""Padded graphs against the CPU where a wrong rule once gave silently wrong numbers: writes
into a window that starts a symbolic distance before the true end (slice_scatter, and the
gradient of such a slice), and means of half-precision values over a padded dim."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from _compare import eager_mode

import torchtpu  # noqa: F401

torch._dynamo.config.cache_size_limit = 64


def _writes(buf, x):
    b = buf.clone()
    b[:, -x.shape[1]:] = x  # start -n: counted from the true end
    c = buf.clone()
    c[:, -x.shape[1] - 1:-1] += x
    return b, c


@pytest.mark.parametrize("n", [3, 5, 7])
def test_a_write_starting_a_size_before_the_end(n):
    buf = torch.randn(2, 10 + n)
    x = torch.randn(2, n)
    got = torch.compile(_writes, backend="tpu", dynamic=True)(buf.to("tpu"), x.to("tpu"))
    for g, e in zip(got, _writes(buf, x)):
        torch.testing.assert_close(g.cpu(), e)


def test_a_write_at_an_int_that_is_negative_at_run_time():
    def f(b, v, k: int):
        b = b.clone()
        b[k:k + 2] += v
        return b

    fn = torch.compile(f, backend="tpu")
    for n, k in [(10, -5), (12, -4), (20, -7), (20, 3)]:
        b, v = torch.arange(float(n)), torch.tensor([100.0, 200.0])
        torch.testing.assert_close(fn(b.to("tpu"), v.to("tpu"), k).cpu(), f(b, v, k))


@pytest.mark.parametrize("n,m", [(10, 3), (12, 4), (15, 6)])
def test_the_gradient_of_a_slice_from_the_end(n, m):
    def f(x, y):
        return (x[:, -y.shape[0]:] * y).sum()

    x = torch.randn(2, n, requires_grad=True)
    y = torch.randn(m)
    f(x, y).backward()
    xt = x.detach().to("tpu").requires_grad_(True)
    torch.compile(f, backend="tpu", dynamic=True)(xt, y.to("tpu")).backward()
    torch.testing.assert_close(xt.grad.cpu(), x.grad)


def _means(x):
    return x.mean(0), x.mean(), F.adaptive_avg_pool1d(x.t().unsqueeze(0), 1)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_means_over_a_padded_dim_round_once(dtype):
    """PyTorch sums half-precision values in float32 and rounds the mean once: 40 values of
    2000 in float16 overflowed a float16 sum, and bfloat16 means were off in the last bit."""
    fn = torch.compile(_means, backend="tpu", dynamic=True)
    for n in (7, 13, 40, 50):
        x = torch.full((n, 2), 2000.0, dtype=dtype) if n >= 40 else \
            torch.randn(n, 2).to(dtype)
        for g, e in zip(fn(x.to("tpu")), _means(x)):
            torch.testing.assert_close(g.cpu(), e, rtol=0, atol=0)


def test_half_precision_means_in_fused_eager():
    with eager_mode("fused"):
        for n in (24, 30, 40, 50):
            x = torch.full((n, 2), 3000.0, dtype=torch.float16)
            got = [t.cpu() for t in _means(x.to("tpu"))]
            for g, e in zip(got, _means(x)):
                torch.testing.assert_close(g, e, rtol=0, atol=0)


def test_a_scatter_whose_index_varies_and_source_does_not(caplog):
    """scatter_add with the index's dim symbolic and the source's fixed: the padded index
    is larger than the source, which XLA refuses; the rule keeps such a graph at exact
    sizes up front (no refused compile at each new size)."""
    def f(x, i):
        return torch.zeros_like(x).scatter_add(1, i, x), x.take_along_dim(i, 1)

    g = torch.compile(f, backend="tpu", dynamic=True)
    x = torch.randn(3, 8)
    with caplog.at_level("WARNING"):
        for n in (2, 3, 5, 7):
            i = torch.randint(0, 8, (3, n))
            for got, want in zip(g(x.to("tpu"), i.to("tpu")), f(x, i)):
                torch.testing.assert_close(got.cpu(), want)
    assert "XLA did not compile it padded" not in caplog.text
