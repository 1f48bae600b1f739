"""Complex dtypes on tpu: storages and transfers, casts, views and math bits, elementwise
math, products, reductions, and TorchTitan's rotary embedding (eager and compiled).

Every comparison is against PyTorch on the CPU, and every test forbids CPU fallbacks (the
ops are lowered), except the one that checks an unlowered complex op falls back.
"""

from __future__ import annotations

import pytest
import torch
from _compare import assert_close, assert_same, fallbacks, make, new_fallbacks
from _subprocess import run_python

import torchtpu

COMPLEX = [torch.complex64, torch.complex128]


@pytest.mark.parametrize("dtype", COMPLEX)
def test_round_trip_is_bit_exact(dtype: torch.dtype) -> None:
    x = make((3, 5), dtype)
    x[0, 0] = complex(float("nan"), float("-inf"))
    x[0, 1] = complex(-0.0, 1e-40)
    y = x.to("tpu")
    assert y.dtype == dtype and y.device.type == "tpu"
    part = torch.float64 if dtype == torch.complex128 else torch.float32
    bits = torch.int64 if part == torch.float64 else torch.int32
    back = y.cpu()
    assert torch.equal(torch.view_as_real(back).view(bits), torch.view_as_real(x).view(bits))


@pytest.mark.parametrize("dtype", COMPLEX)
def test_factories_and_fill(dtype: torch.dtype) -> None:
    before = fallbacks()
    assert_close(torch.zeros(2, 3, dtype=dtype, device="tpu"), torch.zeros(2, 3, dtype=dtype))
    assert_close(torch.ones(2, dtype=dtype, device="tpu"), torch.ones(2, dtype=dtype))
    assert_close(torch.full((2,), 1 - 2j, dtype=dtype, device="tpu"),
                 torch.full((2,), 1 - 2j, dtype=dtype))
    assert not new_fallbacks(before), new_fallbacks(before)
    for value in (2.5, 3):
        t = torch.empty(4, dtype=dtype, device="tpu").fill_(value)
        assert torch.equal(t.cpu(), torch.full((4,), value, dtype=dtype))


def test_casts_follow_pytorch() -> None:
    z = make((4, 3), torch.complex64)
    assert_same(lambda a: a.to(torch.complex128), z)
    assert_same(lambda a: a.to(torch.complex64), make((4,), torch.float32))
    assert_same(lambda a: a.to(torch.complex64), make((4,), torch.int64))
    assert_same(lambda a: (a * 0).to(torch.bool), z)
    # complex -> real keeps the real part, and warns once per process, as on the CPU.
    assert torch.equal(z.to("tpu").to(torch.float32).cpu(), z.real)
    out = run_python(
        "import warnings, torch, torchtpu\n"
        "z = torch.tensor([1 + 2j], device='tpu')\n"
        "with warnings.catch_warnings(record=True) as w:\n"
        "    warnings.simplefilter('always')\n"
        "    r = z.to(torch.float32).cpu()\n"
        "print(r.tolist(), [str(m.message) for m in w])\n")
    assert out.returncode == 0, out.stderr
    assert "[1.0]" in out.stdout and "discards the imaginary part" in out.stdout, out.stdout


@pytest.mark.parametrize("dtype", COMPLEX)
def test_views_share_storage(dtype: torch.dtype) -> None:
    z = make((2, 3), dtype).to("tpu")
    r = torch.view_as_real(z)
    assert r.dtype == (torch.float64 if dtype == torch.complex128 else torch.float32)
    assert r._base is z or r.untyped_storage().data_ptr() == z.untyped_storage().data_ptr()
    r[0, 1, 1] = 7.0  # writes the imaginary part of z[0, 1]
    assert z[0, 1].item().imag == 7.0
    xc = make((4, 2), r.dtype)
    x = xc.to("tpu")
    c = torch.view_as_complex(x)
    c.mul_(2)  # writes through to x
    assert_close(x, xc * 2)
    assert_close(z.real, z.cpu().real)
    assert_close(z.imag, z.cpu().imag)


def test_complex_view_of_float16_is_refused_at_the_view() -> None:
    # complex32 runs no op here: the view was made, and every use of it raised.
    x = torch.randn(3, 2, dtype=torch.float16, device="tpu")
    with pytest.raises(NotImplementedError, match="ComplexHalf is not supported"):
        torch.view_as_complex(x)
    assert torch.view_as_complex(x.float()).dtype == torch.complex64


def test_real_imag_write_through() -> None:
    zc = make((3,), torch.complex64)
    z = zc.to("tpu")
    z.real.mul_(3)
    z.imag.add_(1)
    zc.real.mul_(3)
    zc.imag.add_(1)
    assert_close(z, zc)


def test_conj_is_lazy_and_resolves_like_cpu() -> None:
    zc = make((3, 4), torch.complex64)
    z = zc.to("tpu")
    before = fallbacks()
    c = z.conj()
    assert c.is_conj()
    assert_close(c.resolve_conj(), zc.conj().resolve_conj())
    assert not c.resolve_conj().is_conj()
    assert_close(c.clone(), zc.conj().clone())
    assert_close(c.cpu(), zc.conj(), check_device=False)
    assert_close(c.imag, zc.conj().imag)  # the negative bit
    assert_close(c.imag.clone(), zc.conj().imag.clone())
    assert_close(torch.conj_physical(z), torch.conj_physical(zc))
    assert_close(c + 1, zc.conj() + 1)
    assert_close(c @ z.T, zc.conj() @ zc.T)  # mm sees the conjugate bit (passed through)
    assert_close(torch.view_as_real(c.resolve_conj()), torch.view_as_real(zc.conj().resolve_conj()))
    # Copies into a conjugate view store conjugated elements.
    d = torch.zeros(3, 4, dtype=torch.complex64, device="tpu")
    dc = torch.zeros(3, 4, dtype=torch.complex64)
    d.conj().copy_(z)
    dc.conj().copy_(zc)
    assert_close(d, dc)
    # A conjugated CPU source, and a negated (imag of conj) one.
    e = torch.zeros(3, 4, dtype=torch.complex64, device="tpu").copy_(zc.conj())
    assert_close(e, zc.conj().resolve_conj())
    f = torch.zeros(3, 4, device="tpu").copy_(zc.conj().imag)
    assert_close(f, zc.conj().imag.resolve_neg())
    assert not new_fallbacks(before), new_fallbacks(before)


UNARY = ["exp", "log", "sqrt", "rsqrt", "sin", "cos", "tanh", "sigmoid", "reciprocal", "neg",
         "abs", "sgn", "angle", "log2", "log10", "exp2", "expm1", "log1p", "sinc", "tan", "sinh",
         "cosh", "asin", "acos", "atan", "asinh", "acosh", "atanh", "isnan", "isinf",
         "logical_not"]


@pytest.mark.parametrize("dtype", COMPLEX)
@pytest.mark.parametrize("name", UNARY)
def test_unary(name: str, dtype: torch.dtype) -> None:
    fn = getattr(torch, name)
    tols = {torch.complex64: (2e-5, 2e-5), torch.float32: (2e-5, 2e-5)}
    assert_same(fn, make((5, 7), dtype, low=-2, high=2), dtype_tols=tols)


@pytest.mark.parametrize("dtype", COMPLEX)
def test_binary_and_promotion(dtype: torch.dtype) -> None:
    a, b = make((4, 5), dtype), make((4, 5), dtype)
    real = make((4, 5), torch.float32)
    tols = {torch.complex64: (1e-5, 1e-5)}
    for fn in (torch.add, torch.sub, torch.mul, torch.div):
        assert_same(fn, a, b, dtype_tols=tols)
        assert_same(fn, a, real, dtype_tols=tols)  # real operand: promoted
        assert_same(fn, real, a, dtype_tols=tols)
    assert_same(lambda x: x * 2.5 + 1, a)
    assert_same(lambda x: x * (1 + 2j), a)  # a complex Python scalar
    assert_same(lambda x, y: torch.add(x, y, alpha=2), a, b)
    assert_same(torch.pow, a, make((4, 5), dtype, low=0.5, high=2), dtype_tols={
        torch.complex64: (1e-4, 1e-4), torch.complex128: (1e-10, 1e-10)})
    assert_same(lambda x: x.pow(2), a, dtype_tols={torch.complex64: (1e-5, 1e-4)})
    assert_same(lambda x, y: x == y, a, a.clone())
    assert_same(lambda x, y: x != y, a, b)
    assert_same(lambda x, y: torch.isclose(x, y), a, a + 1e-9)
    assert_same(lambda x, y, m: torch.where(m, x, y), a, b, make((4, 5), torch.bool))


@pytest.mark.parametrize("dtype", COMPLEX)
def test_polar_complex(dtype: torch.dtype) -> None:
    part = torch.float64 if dtype == torch.complex128 else torch.float32
    r, theta = make((6,), part, low=0, high=3), make((6,), part)
    assert_same(torch.polar, r, theta)
    assert_same(torch.complex, r, theta)


@pytest.mark.parametrize("dtype", COMPLEX)
def test_products_and_reductions(dtype: torch.dtype) -> None:
    tols = {torch.complex64: (1e-5, 1e-4)}
    a, b = make((3, 4), dtype), make((4, 5), dtype)
    assert_same(torch.mm, a, b, dtype_tols=tols)
    assert_same(torch.matmul, a, b, dtype_tols=tols)
    assert_same(torch.bmm, make((2, 3, 4), dtype), make((2, 4, 2), dtype), dtype_tols=tols)
    assert_same(lambda x, y: torch.einsum("ij,jk->ik", x, y), a, b, dtype_tols=tols)
    assert_same(lambda x, y, c: torch.addmm(c, x, y, alpha=2, beta=0.5), a, b, make((3, 5), dtype),
                dtype_tols=tols)
    v, w = make((6,), dtype), make((6,), dtype)
    assert_same(torch.dot, v, w, dtype_tols=tols)
    assert_same(torch.vdot, v, w, dtype_tols=tols)  # conjugates its first argument
    for fn in (torch.sum, torch.mean, torch.prod):
        assert_same(fn, a, dtype_tols=tols)
        assert_same(lambda x, f=fn: f(x, dim=1), a, dtype_tols=tols)
    assert_same(lambda x: x.sum(0, keepdim=True), a, dtype_tols=tols)
    # Shifted by the max real part; large real parts would overflow exp unshifted, and a
    # row whose max is -inf is shifted by 0.
    big = a * 50
    big[1] = torch.tensor(float("-inf"), dtype=dtype)
    for dim, keepdim in ((1, False), (0, True), ((0, 1), False)):
        assert_same(lambda x, d=dim, k=keepdim: torch.logsumexp(x, d, k), big, dtype_tols=tols)


@pytest.mark.parametrize("dtype", COMPLEX)
def test_backward(dtype: torch.dtype) -> None:
    def run(device: str) -> list[torch.Tensor]:
        torch.manual_seed(3)
        a = make((3, 4), dtype).to(device).requires_grad_(True)
        b = make((4, 2), dtype).to(device).requires_grad_(True)
        w = make((3, 2), dtype).to(device)
        y = (torch.exp(a * 0.3) @ b) * w + torch.tanh(a * 0.2).sum() + torch.sigmoid(b).sum()
        loss = torch.view_as_real(y).pow(2).sum() + (a.conj() * a).real.sum()
        loss.backward()
        return [loss.detach(), a.grad, b.grad]

    expected = run("cpu")
    before = fallbacks()
    actual = run("tpu")
    assert not new_fallbacks(before), new_fallbacks(before)
    assert_close(actual, expected, dtype_tols={torch.complex64: (1e-4, 1e-4),
                                               torch.float32: (1e-4, 1e-4)})


def test_unlowered_complex_op_falls_back_or_raises() -> None:
    z = make((6,), torch.complex64)
    before = fallbacks()
    out = torch.logcumsumexp(z.to("tpu"), 0)  # lowered for real dtypes only
    assert sum(new_fallbacks(before).values()) >= 1, new_fallbacks(before)
    assert_close(out, torch.logcumsumexp(z, 0))


def _index_ops(z: torch.Tensor) -> list:
    idx = torch.tensor([2, 0, 2], device=z.device)
    mask = z.real > 0
    y = z.clone()
    y[idx] = z[:3]
    return [y, z.index_add(0, idx, z[:3], alpha=2), z.index_copy(0, torch.tensor([1, 0, 3],
            device=z.device), z[:3]), z.index_fill(1, idx, 1 - 1j), z.masked_fill(mask, 2j),
            z.masked_scatter(mask, z * 3), z.scatter_add(0, idx.expand(4, 3).T.contiguous()[:, :4],
            z[:3, :4]), z.tril(-1), z.triu(1), z.take(idx), z.narrow_copy(1, 1, 2),
            torch.nn.functional.pad(z[None], (2, 1), mode="reflect"),
            torch.nn.functional.pad(z[None], (2, 1), mode="replicate"), z.trace()]


def _reductions(z: torch.Tensor) -> list:
    return [z.cumsum(0), z.cumprod(1), z.var(0), z.std(1, correction=0), *torch.var_mean(z, 1),
            *torch.std_mean(z), z.norm(), torch.linalg.vector_norm(z, 3, dim=1),
            z.renorm(2, 0, 1.5), z.all(), z.any(1), torch.count_nonzero(z, 0),
            torch.lerp(z, z.flip(0), 0.3), torch.lerp(z, z.flip(0), 0.7 + 0.1j),
            torch.mv(z, z[0]), torch.linalg.cross(z[:, :3], z[:, 2:]),
            torch.logical_and(z, z.flip(1)), torch.nn.functional.normalize(z, dim=1)]


@pytest.mark.parametrize("dtype", COMPLEX)
@pytest.mark.parametrize("ops", [_index_ops, _reductions], ids=["indexing", "reductions"])
def test_data_movement_and_reductions_on_device(ops, dtype: torch.dtype) -> None:
    # Indexing, masked writes, pads, scans, variances and norms ran PyTorch's CPU kernel on
    # complex inputs (one host round trip each); each now runs its lowering.
    z = make((4, 5), dtype)
    z[1, 2] = 0
    z[3] = z[3].real.to(dtype)
    before = fallbacks()
    got = ops(z.to("tpu"))
    assert not new_fallbacks(before), new_fallbacks(before)
    assert_close(got, ops(z), dtype_tols={torch.complex64: (1e-5, 1e-5),
                                          torch.float32: (1e-5, 1e-5)})


@pytest.mark.parametrize("dtype", COMPLEX)
def test_list_ops_and_factories_on_device(dtype: torch.dtype) -> None:
    xs = [make((3,), dtype), make((2, 2), dtype)]
    before = fallbacks()
    ts = [x.to("tpu") for x in xs]
    got = [torch._foreach_mul(ts, 2 - 1j), torch._foreach_add(ts, ts, alpha=0.5),
           torch._foreach_norm(ts), torch._foreach_exp(ts),
           torch.linspace(-1, 3, 7, dtype=dtype, device="tpu"),
           torch.logspace(-1, 2, 5, base=3, dtype=dtype, device="tpu"),
           torch.eye(3, dtype=dtype, device="tpu")]
    assert not new_fallbacks(before), new_fallbacks(before)
    want = [torch._foreach_mul(xs, 2 - 1j), torch._foreach_add(xs, xs, alpha=0.5),
            torch._foreach_norm(xs), torch._foreach_exp(xs),
            torch.linspace(-1, 3, 7, dtype=dtype), torch.logspace(-1, 2, 5, base=3, dtype=dtype),
            torch.eye(3, dtype=dtype)]
    assert_close(got, want, dtype_tols={torch.complex64: (1e-5, 1e-5), torch.float32: (1e-5, 1e-5)})


@pytest.mark.parametrize("dtype", COMPLEX)
def test_random_fills_both_parts(dtype: torch.dtype) -> None:
    # PyTorch fills view_as_real(self): uniform_ draws each part in [from, to); normal_ and
    # randn give each part half the variance.
    before = fallbacks()
    u = torch.empty(40000, dtype=dtype, device="tpu").uniform_(2, 3).cpu()
    n = torch.empty(40000, dtype=dtype, device="tpu").normal_(1, 2).cpu()
    r = torch.randn(40000, dtype=dtype, device="tpu").cpu()
    assert not new_fallbacks(before), new_fallbacks(before)
    for part in (u.real, u.imag):
        assert 2 <= float(part.min()) and float(part.max()) < 3
        assert abs(float(part.mean()) - 2.5) < 0.01
    for part in (n.real, n.imag):
        assert abs(float(part.mean()) - 1) < 0.03 and abs(float(part.std()) - 2 ** 0.5) < 0.03
    for part in (r.real, r.imag):
        assert abs(float(part.mean())) < 0.02 and abs(float(part.std()) - 0.5 ** 0.5) < 0.02
    assert abs(float((r.real * r.imag).mean())) < 0.02  # the parts are independent


def check_exact(fn, args: tuple, mode: str, dtype: torch.dtype) -> None:
    """`fn` on tpu (eager, or compiled whole) equals the CPU's bit for bit, with no fallback."""
    run = fn
    if mode == "compiled":
        torch._dynamo.reset()
        run = torch.compile(fn, backend="tpu", fullgraph=True)
    before = fallbacks()
    actual = run(*(a.to("tpu") for a in args))
    assert not new_fallbacks(before), new_fallbacks(before)
    assert_close(actual, fn(*args), dtype_tols={dtype: (0, 0)})


@pytest.mark.parametrize("mode", ["eager", "compiled"])
@pytest.mark.parametrize("dtype", COMPLEX)
def test_gather_and_indexing(mode: str, dtype: torch.dtype) -> None:
    # TorchTitan's ComplexRoPE reads its cache rows at the batch's positions with gather
    # (per-batch positions) or advanced indexing (one row of positions).
    def rows(cache: torch.Tensor, pos: torch.Tensor) -> list[torch.Tensor]:
        per_batch = torch.gather(cache[None].expand(2, -1, -1), 1,
                                 pos[:, :, None].expand(-1, -1, cache.shape[1]))
        return [per_batch, cache[pos[0]], torch.index_select(cache, 0, pos[1])]

    check_exact(rows, (make((16, 4), dtype), torch.tensor([[0, 3, 5, 15], [7, 7, 1, 0]])),
                mode, dtype)


@pytest.mark.parametrize("mode", ["eager", "compiled"])
@pytest.mark.parametrize("dtype", COMPLEX)
def test_stack_and_diagonals(mode: str, dtype: torch.dtype) -> None:
    # Data movement with lowerings of their own (not decomposed into lowered ops), so each
    # must be on the complex list: a complex operand is otherwise refused and falls back.
    def moves(x: torch.Tensor, d: torch.Tensor) -> list[torch.Tensor]:
        return [torch.stack([x, x.conj().resolve_conj()], 1), torch.diag_embed(d, 1),
                torch.diagonal(x, -1).clone(), torch.diagonal_copy(x, 1),
                torch.diagonal_scatter(x, d, 0), torch.diag(d), torch.cartesian_prod(d, d)]

    check_exact(moves, (make((4, 4), dtype), make((4,), dtype)), mode, dtype)


# ---- TorchTitan's rotary embedding ---------------------------------------------------------
# The computation of torchtitan/models/common/rope.py (precompute the complex frequencies
# with torch.polar, rotate query and key as complex numbers), written here.

def precompute_freqs_cis(dim: int, end: int, theta: float = 10000.0) -> torch.Tensor:
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: dim // 2].float() / dim))
    t = torch.arange(end, device=freqs.device)
    freqs = torch.outer(t, freqs).float()
    return torch.polar(torch.ones_like(freqs), freqs)


def apply_rotary_emb(xq: torch.Tensor, xk: torch.Tensor, freqs_cis: torch.Tensor
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
    freqs_cis = freqs_cis.view(1, xq_.shape[1], 1, xq_.shape[-1])
    xq_out = torch.view_as_real(xq_ * freqs_cis).flatten(3)
    xk_out = torch.view_as_real(xk_ * freqs_cis).flatten(3)
    return xq_out.type_as(xq), xk_out.type_as(xk)


def rope_step(xq: torch.Tensor, xk: torch.Tensor, freqs_cis: torch.Tensor,
              fn=apply_rotary_emb) -> list[torch.Tensor]:
    q, k = fn(xq, xk, freqs_cis)
    gen = torch.Generator().manual_seed(5)
    wq = torch.randn(q.shape, generator=gen).to(q.device)
    wk = torch.randn(k.shape, generator=gen).to(k.device)
    ((q * wq).sum() + (k * wk).sum()).backward()
    return [q.detach(), k.detach(), xq.grad, xk.grad]


@pytest.mark.parametrize("mode", ["eager", "compiled"])
def test_torchtitan_rope(mode: str) -> None:
    bsz, seqlen, heads, head_dim = 2, 8, 4, 16
    xq = make((bsz, seqlen, heads, head_dim), torch.float32)
    xk = make((bsz, seqlen, heads, head_dim), torch.float32)
    freqs = precompute_freqs_cis(head_dim, seqlen)
    expected = rope_step(xq.clone().requires_grad_(True), xk.clone().requires_grad_(True), freqs)

    fn = apply_rotary_emb
    if mode == "compiled":
        torch._dynamo.reset()
        fn = torch.compile(apply_rotary_emb, backend="tpu", fullgraph=True)
    before = fallbacks()
    freqs_tpu = precompute_freqs_cis(head_dim, seqlen).to("tpu") if mode == "compiled" else (
        torch.polar(torch.ones(seqlen, head_dim // 2, device="tpu"),
                    torch.outer(torch.arange(seqlen, device="tpu").float(),
                                (1.0 / (10000.0 ** (torch.arange(0, head_dim, 2)[: head_dim // 2]
                                                    .float() / head_dim))).to("tpu"))))
    actual = rope_step(xq.to("tpu").requires_grad_(True), xk.to("tpu").requires_grad_(True),
                       freqs_tpu, fn)
    torchtpu.synchronize()
    assert not new_fallbacks(before), new_fallbacks(before)
    assert_close(actual, expected, dtype_tols={torch.float32: (1e-5, 1e-5)})


def test_compiled_complex_graph() -> None:
    # Complex inputs, outputs and a complex Python scalar in one compiled graph.
    def f(z: torch.Tensor, r: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        w = z * (0.5 - 1j) + r
        return torch.exp(w).sum(0), torch.view_as_real(w.conj().resolve_conj())

    torch._dynamo.reset()
    compiled = torch.compile(f, backend="tpu", fullgraph=True)
    z, r = make((4, 3), torch.complex64), make((4, 3), torch.float32)
    before = fallbacks()
    actual = compiled(z.to("tpu"), r.to("tpu"))
    assert not new_fallbacks(before), new_fallbacks(before)
    assert_close(actual, f(z, r), dtype_tols={torch.complex64: (1e-5, 1e-4)})


def _special_grid(dtype: torch.dtype) -> torch.Tensor:
    inf, nan = float("inf"), float("nan")
    parts = [0.0, -0.0, 1.0, -1.0, inf, -inf, nan, 1e30]
    return torch.tensor([complex(a, b) for a in parts for b in parts], dtype=dtype)


@pytest.mark.parametrize("dtype", COMPLEX)
@pytest.mark.parametrize("p", [0.5, 1.5, 3, -0.5, -1, -2, 2.5])
def test_pow_by_real_constant_like_cpu(p: float, dtype: torch.dtype) -> None:
    # The CPU's own forms (sqrt for 0.5, reciprocals for -1 and -2, ...) and cpow for the
    # rest; XLA's complex power turned (0 + NaN i) ** 0.5 into 0 and overflowed
    # (3e38 + 3e38i) ** 0.5 to NaN through |z|^2 in log|z|. Every special value for the
    # square root; finite parts, and magnitudes past the largest float, for all.
    big = 3e38 if dtype == torch.complex64 else 1e308
    grid = _special_grid(dtype)
    z = grid if p == 0.5 else grid[torch.isfinite(grid.real) & torch.isfinite(grid.imag) &
                                   (grid.abs() < 1e10)]
    huge = torch.tensor([big + big * 1j, big + 0j, 0.5 - 2j], dtype=dtype)
    if p == 0.5:  # elsewhere |z|^p overflows, or its inverse is subnormal (flushed to zero)
        z = torch.cat([z, huge])
    _same_bits_of_nan((z.to("tpu") ** p).cpu(), z ** p)
    torch.testing.assert_close(torch.log(huge.to("tpu")).cpu(), torch.log(huge))


@pytest.mark.parametrize("dtype", COMPLEX)
@pytest.mark.parametrize("p", [0, 0.0, 1, 1.0])
def test_pow_by_zero_is_one_and_by_one_a_copy_for_every_base(p: float, dtype: torch.dtype
                                                               ) -> None:
    # PyTorch fills ones for ** 0 and copies for ** 1: 0, inf and NaN bases too (exp(p log z)
    # gave NaN there, and ** 1 lost the last bit of finite values).
    grid = _special_grid(dtype)
    _same_bits_of_nan((grid.to("tpu") ** p).cpu(), grid ** p)
    z = grid.to("tpu")
    z.pow_(p)
    _same_bits_of_nan(z.cpu(), grid ** p)


@pytest.mark.parametrize("dtype", COMPLEX)
def test_pow_by_complex_tensor_like_cpu(dtype: torch.dtype) -> None:
    # cpow: 0 ** (1 + i) is 0 and 0 ** 0i NaN (XLA's power gave NaN, then 1).
    base = torch.tensor([0j, 0j, 2 + 1j, -1 + 0j, 3 + 4j], dtype=dtype)
    exp = torch.tensor([1 + 1j, 0j, 0.5 - 1j, 0.5 + 0j, 2 + 0j], dtype=dtype)
    got, want = (base.to("tpu") ** exp.to("tpu")).cpu(), base ** exp
    _same_bits_of_nan(got[:2], want[:2])
    torch.testing.assert_close(got[2:], want[2:], rtol=1e-5, atol=1e-6)


def _same_bits_of_nan(a: torch.Tensor, b: torch.Tensor, rtol: float = 1e-6,
                      atol: float = 0) -> None:
    # Equal parts, or NaN in both; the sign of a NaN or of a zero from NaN is not compared.
    for x, y in ((a.real, b.real), (a.imag, b.imag)):
        both_nan = x.isnan() & y.isnan()
        close = torch.isclose(x, y, rtol=rtol, atol=atol) | (x == y)
        assert bool((both_nan | (close & ~x.isnan() & ~y.isnan())).all()), (a, b)


@pytest.mark.parametrize("dtype", COMPLEX)
@pytest.mark.parametrize("fn", [torch.abs, torch.sqrt, torch.log, torch.log2, torch.log10,
                                torch.sgn, torch.exp, torch.sin, torch.cos, torch.tanh,
                                torch.sigmoid, torch.reciprocal, torch.rsqrt],
                         ids=lambda f: f.__name__)
def test_special_values_like_cpu(fn, dtype: torch.dtype) -> None:
    # XLA's complex abs read abs(1 + NaN i) as sqrt(2), and log and sqrt built on it: a NaN
    # became a finite number; sin(0 + 100i) was NaN + inf i (0 * cosh(100)). C's special
    # values (Annex G), as the CPU gives them.
    z = _special_grid(dtype)
    want, got = fn(z), fn(z.to("tpu")).cpu()
    if not want.is_complex():
        want, got = torch.complex(want, torch.zeros_like(want)), torch.complex(got, torch.zeros_like(got))
    _same_bits_of_nan(got, want)
    if fn is torch.sqrt:  # the imaginary part keeps y's sign: sqrt(-1 - 0i) = -i
        assert torch.equal(torch.signbit(got.imag[~got.imag.isnan()]),
                           torch.signbit(want.imag[~want.imag.isnan()]))


@pytest.mark.parametrize("dtype", COMPLEX)
@pytest.mark.parametrize("fn", [torch.tan, torch.sinh, torch.cosh, torch.asin, torch.acos,
                                torch.atan, torch.asinh, torch.acosh, torch.atanh],
                         ids=lambda f: f.__name__)
def test_branch_cuts_and_special_values_like_cpu(fn, dtype: torch.dtype) -> None:
    # On a branch cut the sign of a zero part picks the side (acos(2 - 0i) = +1.317i,
    # acos(2 + 0i) = -1.317i), which XLA's inverse functions ignored; atanh(inf + NaN i) is
    # 0 + NaN i (C), not -pi/2 i. The circular and hyperbolic functions keep C's special
    # values through its identities (ctan(z) = -i ctanh(iz), ...).
    parts = [0.0, -0.0, 0.5, -0.5, 1.0, -1.0, 2.0, -2.0, 1e3, -1e20, float("inf"),
             -float("inf"), float("nan")]
    z = torch.tensor([complex(a, b) for a in parts for b in parts], dtype=dtype)
    # XLA's CPU runtime flushes subnormal results to zero (atan(-1e20 + 0.5i)'s imaginary
    # part is 5e-41 on the CPU): a difference below the smallest normal float passes.
    _same_bits_of_nan(fn(z.to("tpu")).cpu(), fn(z), rtol=1e-5, atol=torch.finfo(torch.float32).tiny)


@pytest.mark.parametrize("dtype", COMPLEX)
@pytest.mark.parametrize("fn", [torch.sin, torch.cos, torch.sinh, torch.cosh],
                         ids=lambda f: f.__name__)
def test_hyperbolic_parts_near_overflow_like_cpu(fn, dtype: torch.dtype) -> None:
    # cosh(89.4 + 0i) is 3.35e38 in complex64 (cosh 710.4 1.67e308 in complex128): XLA's
    # complex sine and cosine built cosh y from exp(y) and gave inf; sin(1e-30 + 100i) is
    # finite too (a tiny factor times an overflowing cosh).
    top = 89.4 if dtype == torch.complex64 else 710.4
    parts = [0.0, 1e-30, 0.5, -2.0, 88.8, top, -top, 100.0, -100.0, 1e3]
    z = torch.tensor([complex(a, b) for a in parts for b in parts], dtype=dtype)
    for inputs in (z, z * 1j):
        _same_bits_of_nan(fn(inputs.to("tpu")).cpu(), fn(inputs), rtol=1e-5)


@pytest.mark.parametrize("dtype", COMPLEX)
@pytest.mark.parametrize("fn", [torch.div, lambda a, b: torch.addcdiv(a, a, b, value=0.5 - 2j)],
                         ids=["div", "addcdiv"])
def test_division_special_values_like_cpu(fn, dtype: torch.dtype) -> None:
    # c10::complex divides by Smith's algorithm (scaled by den's larger part): 1 / (inf + inf i)
    # is NaN + NaN i and 1 / 0 is inf + NaN i there; XLA's complex divide gave 0 and NaN.
    # Every pair of the grid, plus parts whose squares overflow (1e200 in complex128).
    z = _special_grid(dtype)
    if dtype == torch.complex128:
        z = torch.cat([z, torch.tensor([1e200 + 1e200j, 1e-200 - 1e200j], dtype=dtype)])
    num, den = z.repeat_interleave(len(z)), z.repeat(len(z))
    before = fallbacks()
    _same_bits_of_nan(fn(num.to("tpu"), den.to("tpu")).cpu(), fn(num, den))
    assert not new_fallbacks(before), new_fallbacks(before)
    # A real Python scalar divisor takes the same path.
    _same_bits_of_nan((z.to("tpu") / 0.0).cpu(), z / 0.0)
    # Divisors near the top of the range: c10's 1 / (scaled divisor) is subnormal there, which
    # XLA flushes to zero (2e38 / 1e38 was 0); the quotients themselves are normal.
    top = 1e38 if dtype == torch.complex64 else 1e307
    den = torch.tensor([top, top * (1 + 1j), -top * 1j, 0.5 * top + 2 * top * 1j], dtype=dtype)
    num = torch.tensor([3 - 2j, -1 + 0.5j, 2j, 1], dtype=dtype) * (top / 8)
    torch.testing.assert_close(fn(num.to("tpu"), den.to("tpu")).cpu(), fn(num, den))


@pytest.mark.parametrize("dtype", COMPLEX)
@pytest.mark.parametrize("op", [torch.addcmul, torch.addcdiv], ids=lambda f: f.__name__)
def test_addcmul_addcdiv_complex(op, dtype: torch.dtype) -> None:
    # Broadcast operands and a complex value, on the device (they ran on the CPU before).
    a, t1, t2 = make((3, 4), dtype), make((4,), dtype), make((3, 1), dtype)
    before = fallbacks()
    actual = op(a.to("tpu"), t1.to("tpu"), t2.to("tpu"), value=0.5 - 2j)
    assert not new_fallbacks(before), new_fallbacks(before)
    assert_close(actual, op(a, t1, t2, value=0.5 - 2j))


def test_unfold_copy_and_unfold_gradients() -> None:
    # unfold_copy (its lowering, a slice per window element) takes complex tensors; the
    # gradient of a 0-d tensor's one window is the window's gradient.
    z = make((4, 6), torch.complex64)
    before = fallbacks()
    assert_same(lambda t: torch.unfold_copy(t, 1, 3, 2), z)
    x = torch.tensor(2.5)
    x_tpu = x.to("tpu").requires_grad_(True)
    (x_tpu.unfold(0, 1, 1) * 3).sum().backward()
    assert not new_fallbacks(before), new_fallbacks(before)
    assert x_tpu.grad.shape == () and x_tpu.grad.item() == 3.0
