"""torchtpu::paged_attention: the host kernel on tpu (eager and compiled) against the op's
CPU reference and against the serving model's gathered-pages formulation it replaces."""

from __future__ import annotations

import math

import pytest
import torch

from torchtpu import ops
from torchtpu.serve.model import _gathered_attention, decoder_layer

pytestmark = pytest.mark.skipif(not ops.has_host_kernel("torchtpu_paged_attention"),
                                reason="the plugin registered no host kernels (not the CPU plugin)")

PAGE = 8


def paged_inputs(counts=(1, 1, 1), padding=0, heads=6, kv_heads=2, dim=16, num_pages=24,
                 pages_per_seq=4, seed=0):
    """A ragged batch: counts[s] queries of sequence s, then `padding` queries of none."""
    g = torch.Generator().manual_seed(seed)
    tokens = sum(counts) + padding
    q = torch.randn(tokens, heads, dim, generator=g)
    k = torch.randn(num_pages * PAGE, kv_heads, dim, generator=g)
    v = torch.randn(num_pages * PAGE, kv_heads, dim, generator=g)
    pages = torch.stack([torch.randperm(num_pages, generator=g)[:pages_per_seq]
                         for _ in counts])
    ctx = pages_per_seq * PAGE
    positions = torch.randint(0, ctx, (tokens,), generator=g)
    query_start = torch.tensor([0, *counts]).cumsum(0)
    return q, k, v, pages, positions, query_start


def on_tpu(*tensors):
    return [t.to("tpu") for t in tensors]


@pytest.mark.parametrize("counts,padding,window", [((1, 1, 1), 0, 0), ((4, 4, 4), 0, 0),
                                                   ((3, 0, 20), 3, 5), ((1, 9, 2), 2, 0)])
def test_tpu_kernel_matches_the_cpu_reference(counts, padding, window):
    args = paged_inputs(counts, padding)
    want = ops.paged_attention(*args, PAGE, 0.25, window)
    eager = ops.paged_attention(*on_tpu(*args), PAGE, 0.25, window).cpu()
    torch.testing.assert_close(eager, want, rtol=1e-5, atol=1e-5)
    assert not want[sum(counts):].any()  # padding queries: zeros

    compiled = torch.compile(lambda *a: ops.paged_attention(*a, PAGE, 0.25, window) + 1,
                             backend="tpu", fullgraph=True)
    torch.testing.assert_close(compiled(*on_tpu(*args)).cpu(), want + 1, rtol=1e-5, atol=1e-5)


def test_a_query_that_sees_no_key_gets_zeros():
    q, k, v, pages, positions, starts = paged_inputs((2, 2))
    positions[2] = -1
    got = ops.paged_attention(*on_tpu(q, k, v, pages, positions, starts), PAGE, 0.25, 0).cpu()
    assert torch.equal(got[2], torch.zeros_like(got[2]))
    torch.testing.assert_close(got, ops.paged_attention(q, k, v, pages, positions, starts, PAGE,
                                                        0.25, 0))


def test_reference_matches_the_gathered_formulation():
    q, k, v, pages, positions, starts = paged_inputs((3, 1, 12), padding=2)
    tokens, heads, dim = q.shape
    for window in (0, 6):
        want = _gathered_attention(q, k, v, pages, positions, starts, PAGE, window)
        got = ops.paged_attention(q, k, v, pages, positions, starts, PAGE, 1 / math.sqrt(dim),
                                  window)
        torch.testing.assert_close(got.reshape(tokens, heads * dim), want)


def test_a_page_outside_the_pool_raises_and_the_device_stays_usable():
    q, k, v, pages, positions, starts = paged_inputs()
    pages[2, 1] = 24  # the pool holds pages 0..23
    with pytest.raises(RuntimeError, match="page id 24 .sequence 2. is outside the pool of 24"):
        ops.paged_attention(*on_tpu(q, k, v, pages, positions, starts), PAGE, 0.25, 0).cpu()
    pages[2, 1] = 0
    ops.paged_attention(*on_tpu(q, k, v, pages, positions, starts), PAGE, 0.25, 0).cpu()


def test_wrong_operand_types_fall_back_to_the_cpu_and_say_why(capfd):
    q, k, v, pages, positions, starts = paged_inputs()
    got = ops.paged_attention(*on_tpu(q, k, v, pages.int(), positions, starts), PAGE, 0.25, 0)
    torch.testing.assert_close(got.cpu(), ops.paged_attention(q, k, v, pages, positions, starts,
                                                              PAGE, 0.25, 0))
    assert "torchtpu::paged_attention ran on the CPU (torchtpu::paged_attention: expected q" \
        in capfd.readouterr().err


@pytest.mark.skipif(not ops.has_host_kernel("torchtpu_int8_matmul"),
                    reason="the plugin registered no int8 kernel (not the CPU plugin)")
@pytest.mark.parametrize("rows", [1, 5, 33])
def test_int8_matmul_matches_the_cpu_reference(rows):
    g = torch.Generator().manual_seed(rows)
    x = torch.randn(rows, 70, generator=g)
    w = torch.randint(-127, 128, (70, 130), generator=g, dtype=torch.int8)
    scale = torch.rand(130, generator=g) * 0.01
    packed = ops.pack_int8(w)
    want = ops.int8_matmul(x, packed, scale)
    torch.testing.assert_close(want, (x.double() @ w.double() * scale.double()).float())
    torch.testing.assert_close(ops.int8_matmul(*on_tpu(x, packed, scale)).cpu(), want)
    compiled = torch.compile(lambda *a: ops.int8_matmul(*a) * 2, backend="tpu", fullgraph=True)
    torch.testing.assert_close(compiled(*on_tpu(x, packed, scale)).cpu(), want * 2)


def test_decoder_layer_with_the_kernel_equals_the_gathered_layer():
    g = torch.Generator().manual_seed(1)
    hidden, heads, kv_heads, dim, inter, num_pages = 32, 4, 2, 8, 48, 16

    def rand(*shape):
        return (torch.randn(*shape, generator=g) * 0.2).to("tpu")

    weights = dict(w_in_norm=rand(hidden), w_qkv=rand(hidden, (heads + 2 * kv_heads) * dim),
                   b_qkv=None, w_q_norm=None, w_k_norm=None, w_o=rand(heads * dim, hidden),
                   w_post_norm=rand(hidden), w_gate_up=rand(hidden, 2 * inter),
                   w_down=rand(inter, hidden))
    inv_freq = (1.0 / 10000 ** (torch.arange(0, dim, 2) / dim)).to("tpu")
    scale = torch.tensor(1.0).to("tpu")
    pool = torch.randn((num_pages + 1) * PAGE, kv_heads, dim, generator=g)
    # Decodes of three sequences and a 5-token chunk of a fourth, then 2 padding tokens.
    pages = torch.stack([torch.randperm(num_pages, generator=g)[:4] for _ in range(4)])
    seq_pos = [(0, 5), (1, 17), (2, 0)] + [(3, p) for p in range(20, 25)]
    positions = torch.tensor([p for _, p in seq_pos] + [0, 0])
    slots = torch.tensor([pages[s, p // PAGE] * PAGE + p % PAGE for s, p in seq_pos]
                         + [num_pages * PAGE] * 2)
    starts = torch.tensor([0, 1, 2, 3, 8])
    h = rand(10, hidden)
    layer = torch.compile(decoder_layer, backend="tpu", dynamic=False, fullgraph=True)
    results = []
    for kernel in (False, True):
        k_cache, v_cache = pool.clone().to("tpu"), pool.flip(0).clone().to("tpu")
        out = layer(h, positions.to("tpu"), slots.to("tpu"), pages.to("tpu"), starts.to("tpu"),
                    k_cache, v_cache, inv_freq, scale, num_heads=heads, num_kv_heads=kv_heads,
                    page_size=PAGE, eps=1e-6, window=0, attention_kernel=kernel, **weights)
        results.append((out.cpu()[:8], k_cache.cpu(), v_cache.cpu()))
    (out0, k0, v0), (out1, k1, v1) = results
    torch.testing.assert_close(out1, out0, rtol=1e-5, atol=1e-5)
    assert torch.equal(k0, k1) and torch.equal(v0, v1)
