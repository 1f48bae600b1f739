"""User errors raise PyTorch's exceptions (same type as on CPU), never crash the process."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from _compare import assert_raises_like_cpu, eager_mode, fallbacks, make, new_fallbacks

TPU = "tpu"


def test_shape_mismatch_binary() -> None:
    assert_raises_like_cpu(torch.add, make((3, 4), torch.float32), make((5,), torch.float32))


def test_shape_mismatch_matmul() -> None:
    e = assert_raises_like_cpu(torch.mm, make((3, 4), torch.float32), make((5, 2), torch.float32))
    assert "3x4" in str(e) and "5x2" in str(e), e


def test_shape_mismatch_cat_and_view() -> None:
    assert_raises_like_cpu(lambda a, b: torch.cat([a, b]), make((2, 3), torch.float32),
                           make((2, 4), torch.float32))
    assert_raises_like_cpu(lambda a: a.view(5, 5), make((3, 4), torch.float32))
    assert_raises_like_cpu(lambda a: a.t().view(12), make((3, 4), torch.float32))


def test_inplace_dtype_mismatch() -> None:
    # result type float can't be cast to the desired output type Long
    assert_raises_like_cpu(lambda a, b: a.add_(b), make((3,), torch.int64),
                           make((3,), torch.float32))
    assert_raises_like_cpu(lambda a, b: a.mul_(b), make((3,), torch.bool),
                           make((3,), torch.int64))


@pytest.mark.parametrize("mode", ["op", "fused"])
@pytest.mark.parametrize("op", [torch.cummax, torch.cummin])
@pytest.mark.parametrize("dtypes", [(torch.float32, torch.int32), (torch.float64, torch.int64)],
                         ids=["int32_indices", "float64_values"])
def test_out_of_another_dtype_is_refused_and_left_unwritten(op, dtypes, mode: str) -> None:
    """An out= tensor of another dtype than the op computes there is refused (in fused mode
    it took the other dtype's bytes, or a storage of another size)."""
    def call(x: torch.Tensor, values: torch.Tensor, indices: torch.Tensor) -> None:
        op(x, 1, out=(values, indices))

    x = make((2, 5), torch.float32)
    values, indices = torch.full((2, 5), 7, dtype=dtypes[0]), torch.full((2, 5), 7, dtype=dtypes[1])
    with eager_mode(mode):
        e = assert_raises_like_cpu(call, x, values, indices)
        assert "expected the out tensor" in str(e), e
        v, i = values.to(TPU), indices.to(TPU)
        with pytest.raises(RuntimeError):
            call(x.to(TPU), v, i)
        assert torch.equal(v.cpu(), values) and torch.equal(i.cpu(), indices)


def test_inplace_broadcast_to_smaller_self() -> None:
    assert_raises_like_cpu(lambda a, b: a.add_(b), make((3,), torch.float32),
                           make((2, 3), torch.float32))


def test_cpu_tensor_mixed_with_tpu() -> None:
    a = torch.ones(3, device=TPU)
    with pytest.raises(RuntimeError, match="same device"):
        a + torch.ones(3)
    with pytest.raises(RuntimeError, match="same device"):
        torch.mm(torch.ones(2, 2, device=TPU), torch.ones(2, 2))
    with pytest.raises(RuntimeError, match="same device"):
        torch.cat([a, torch.ones(3)])
    with pytest.raises(RuntimeError):
        torch.ones(3).index_select(0, torch.tensor([0], device=TPU))


@pytest.mark.parametrize("bad", [3, -4, 100])
def test_index_select_out_of_range(bad: int) -> None:
    x = make((3, 4), torch.float32)
    e = assert_raises_like_cpu(lambda t, i: t.index_select(0, i), x, torch.tensor([0, bad]))
    assert isinstance(e, IndexError)


def test_embedding_out_of_range() -> None:
    assert_raises_like_cpu(F.embedding, torch.tensor([[0, 10]]), make((10, 3), torch.float32))
    assert_raises_like_cpu(F.embedding, torch.tensor([-1]), make((10, 3), torch.float32))


def test_gather_out_of_range() -> None:
    assert_raises_like_cpu(lambda t, i: t.gather(1, i), make((2, 3), torch.float32),
                           torch.tensor([[0, 3], [1, 1]]))


def test_scatter_out_of_range() -> None:
    assert_raises_like_cpu(lambda t, i, s: t.scatter(0, i, s), make((2, 3), torch.float32),
                           torch.tensor([[2, 0, 0]]), make((1, 3), torch.float32))


def test_index_tensor_out_of_range() -> None:
    assert_raises_like_cpu(lambda t, i: t[i], make((3, 4), torch.float32), torch.tensor([0, 5]))


def test_failed_indexing_leaves_tensor_unchanged_and_device_usable() -> None:
    # Op by op the error comes at the call; fused eager reports it at the next flush
    # (test_fused_eager.py checks that contract).
    with eager_mode("op"):
        x = torch.arange(6.0).to(TPU)
        with pytest.raises(IndexError):
            x.index_select(0, torch.tensor([7], device=TPU))
        assert x.cpu().tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
        assert (x * 2).sum().item() == 30.0


def test_item_on_multi_element() -> None:
    assert_raises_like_cpu(lambda t: t.item(), make((2,), torch.float32))


def test_cross_entropy_bad_target() -> None:
    assert_raises_like_cpu(F.cross_entropy, make((3, 4), torch.float32), torch.tensor([0, 1]))


def test_reduction_bad_dim() -> None:
    assert_raises_like_cpu(lambda t: t.sum(dim=2), make((3, 4), torch.float32))
    assert_raises_like_cpu(lambda t: t.softmax(dim=-3), make((3, 4), torch.float32))


def test_unsupported_dtype_is_a_clear_error() -> None:
    # complex has no lowering; creating one is either supported or a clear error, never a crash.
    try:
        t = torch.zeros(2, dtype=torch.complex64, device=TPU)
    except (RuntimeError, TypeError, NotImplementedError) as e:
        assert "complex" in str(e).lower() or "dtype" in str(e).lower(), e
    else:
        assert torch.equal(t.cpu(), torch.zeros(2, dtype=torch.complex64))


# index_put's values must broadcast to the indexing result; a 0-dim bool mask made the
# lowering broadcast to a lower rank, which aborted the process.
def test_index_put_with_values_that_do_not_broadcast_raises_like_cpu() -> None:
    def put(a):
        a[torch.tensor(True, device=a.device)] = a.expand(5, 1, 2, 3)
    assert_raises_like_cpu(put, make((2, 3), torch.float32))

    def put_index(a):
        a.index_put_((torch.tensor([0, 1], device=a.device),), torch.ones(3, 3, device=a.device))
    assert_raises_like_cpu(put_index, make((2, 3), torch.float32))



def _first_line(e: BaseException) -> str:
    return str(e).split("\n")[0]


@pytest.mark.parametrize("call", [
    # Python reference meta kernels word these differently from the CPU kernels; the CPU
    # kernel decides where a meta kernel rejects a call (small tensors).
    lambda x, i: torch.add(x, x, out=torch.zeros(4, dtype=torch.long, device=x.device)),
    lambda x, i: torch.addcdiv(i, i, i, out=i),
    lambda x, i: i.addcdiv_(i, i),
    # The unary TensorIterator of these CPU kernels requires one dtype for self and out.
    lambda x, i: torch.neg(x, out=torch.empty(0, dtype=torch.float64, device=x.device)),
    lambda x, i: torch.floor(x, out=torch.empty(0, dtype=torch.float64, device=x.device)),
    lambda x, i: torch.round(x, out=torch.empty(0, dtype=torch.float16, device=x.device)),
    # The boundaries' rank: the CPU kernel checks it, the meta kernel does not.
    lambda x, i: torch.bucketize(x, x.reshape(2, 2)),
    lambda x, i: torch.bucketize(3.0, x.reshape(2, 2)),
    # searchsorted's sorter: its size, dtype and range (the range checked on the device).
    lambda x, i: torch.searchsorted(x, x, sorter=torch.tensor([0, 1], device=x.device)),
    lambda x, i: torch.searchsorted(x, x, sorter=i.to(torch.int32)),
    lambda x, i: torch.searchsorted(x, x, sorter=torch.tensor([0, 1, 2, 5], device=x.device)),
    lambda x, i: torch.searchsorted(x, 0.5, sorter=torch.tensor([0, 1, -1, 3], device=x.device)),
    # searchsorted's side, a 0-d sequence and out's dtype against out_int32: the meta kernel
    # took them (side="middle" searched as "left").
    lambda x, i: torch.searchsorted(x, x, side="middle"),
    lambda x, i: torch.searchsorted(x, x, side="left", right=True),
    lambda x, i: torch.searchsorted(x[0], x),
    lambda x, i: torch.searchsorted(x, x, out_int32=True,
                                    out=torch.empty(4, dtype=torch.long, device=x.device)),
    lambda x, i: torch.searchsorted(x, 0.5, out=torch.empty((), dtype=torch.int32, device=x.device)),
    # sort's dim (an internal compile error before; stable sort was checked).
    lambda x, i: torch.sort(x, dim=1),
    lambda x, i: torch.sort(x.view(2, 2), dim=-3),
    lambda x, i: x.argsort(dim=2, descending=True),
    # Scalars the CPU kernels convert to the tensor's dtype with an overflow check (the
    # lowerings compute float16 in float32, where 1e5 fits: the results were inf or 1).
    lambda x, i: torch.add(x.half(), x.half(), alpha=1e5),
    lambda x, i: x.half().sub(2.0, alpha=-1e5),
    lambda x, i: torch.add(x.bfloat16(), x, alpha=1e39),
    lambda x, i: F.hardtanh(x.half(), -1e5, 1e5),
    lambda x, i: torch.pow(x.half(), 1e5),
    lambda x, i: torch.pow(x.bfloat16(), 1e39),
    # Accepted before, computing in float32: code that ran here failed on CPU and CUDA.
    *[lambda x, i, f=f, t=t: f(x.view(2, 2), x.view(2, 2).to(t))
      for f in (torch.mm, torch.matmul, F.linear) for t in (torch.float64, torch.float16)],
    # uniform_ bounds outside the dtype: the draw saturated to a constant (3.4e38, 65504).
    *[lambda x, i, t=t, b=b: torch.empty(3, device=x.device, dtype=t).uniform_(*b)
      for t, b in [(torch.float32, (0.0, float("inf"))), (torch.float32, (-3e38, 3e38)),
                   (torch.float16, (0.0, 7e4)), (torch.bfloat16, (-4e38, 0.0)),
                   (torch.int64, (0.0, 1.0))]],
    # randperm of more values than the dtype holds: the permutation wrapped around.
    *[lambda x, i, n=n, t=t: torch.randperm(n, dtype=t, device=x.device)
      for n, t in [(300, torch.uint8), (129, torch.int8), (40000, torch.int16),
                   (2050, torch.float16)]],
])
def test_errors_have_the_cpu_kernels_wording(call) -> None:
    x, i = make((4,), torch.float32), torch.tensor([1, 2, 3, 4], dtype=torch.int8)
    e = assert_raises_like_cpu(call, x, i)
    with pytest.raises(type(e)) as cpu:
        call(x, i)
    assert _first_line(e) == _first_line(cpu.value)


def test_index_put_requires_matching_dtypes_like_cpu() -> None:
    def put(a, b):
        a[:, [1]] = b.unsqueeze(-1)

    e = assert_raises_like_cpu(put, torch.ones(5, 2, dtype=torch.double),
                               torch.zeros(5, dtype=torch.int))
    assert "Index put requires the source and destination dtypes match" in str(e)


def test_wrapped_numbers_cast_like_tensor_iterator() -> None:
    u = torch.tensor([0, 0, 1], dtype=torch.uint8)
    # Python numbers in arithmetic wrap (uint8 + 1000 == 232 + x) ...
    assert torch.equal((u.to("tpu") + 1000).cpu(), u + 1000)
    assert torch.equal((u.to("tpu") * torch.tensor(300)).cpu(), u * torch.tensor(300))
    # ... while Scalar arguments keep their kernels' overflow check.
    assert_raises_like_cpu(lambda t: t.fill_(300), u.clone())


def test_uint8_masks_warn_like_cpu() -> None:
    import warnings

    def count(device: str) -> int:
        mask = torch.zeros(10, dtype=torch.uint8, device=device)
        y = torch.ones(10, 10, device=device)
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            y.index_put_((mask,), y[mask], accumulate=True)
        return sum("torch.uint8 is now deprecated" in str(x.message) for x in w)

    assert count("tpu") == count("cpu") == 2


def test_index_reduce_says_it_is_beta_like_cpu() -> None:
    import warnings

    def warned(device: str) -> bool:
        x = torch.zeros(3, device=device)
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            x.index_reduce_(0, torch.tensor([0, 1, 0], device=device), torch.ones(3, device=device),
                            "prod")
        return any("index_reduce() is in beta" in str(m.message) for m in w)

    always = torch.is_warn_always_enabled()
    torch.set_warn_always(True)  # a once-per-process warning, every time
    try:
        assert warned("tpu") and warned("cpu")
    finally:
        torch.set_warn_always(always)


def test_index_put_checks_the_shape_before_the_dtype_like_cpu() -> None:
    def put(a, mask, v):
        a[mask] = v

    a = torch.arange(6).reshape(2, 3)
    mask = torch.tensor([[True, False, True], [False, False, True]])
    e = assert_raises_like_cpu(put, a, mask, torch.tensor([1.0, 2.0]))
    assert "shape mismatch" in str(e)
    # A one-element value of another dtype goes through the CPU's masked_fill path.
    ref, dev = a.clone(), a.to("tpu")
    put(ref, mask, torch.tensor(7.0))
    put(dev, mask.to("tpu"), torch.tensor(7.0, device="tpu"))
    assert torch.equal(dev.cpu(), ref)


@pytest.mark.parametrize("mode", ["op", "fused"])
def test_out_resized_into_an_input_is_refused_like_cpu(mode: str) -> None:
    # gather's CPU kernel resizes `out` first, then refuses any overlap with self or index:
    # an out= slice of the index's storage that grows into the index is an error, and
    # the call changes no input.
    def call(device: str) -> tuple[torch.Tensor, torch.Tensor, BaseException]:
        base = torch.tensor([0, 1, 0], device=device)
        idx, out = base[1:], base[:1]
        with pytest.raises(RuntimeError) as e:
            torch.gather(torch.tensor([5, 6], device=device), 0, idx, out=out)
        return base, out, e.value

    with eager_mode(mode):
        base, out, err = call("tpu")
        ref_base, ref_out, ref_err = call("cpu")
    assert _first_line(err) == _first_line(ref_err)
    assert torch.equal(base.cpu(), ref_base) and out.shape == ref_out.shape
    # Not overlapping once resized: computed as on the CPU.
    idx = torch.tensor([1, 0])
    out = torch.empty(0, dtype=torch.long)
    torch.gather(torch.tensor([5, 6]), 0, idx, out=out)
    dev_out = torch.empty(0, dtype=torch.long, device="tpu")
    torch.gather(torch.tensor([5, 6], device="tpu"), 0, idx.to("tpu"), out=dev_out)
    assert torch.equal(dev_out.cpu(), out)


@pytest.mark.parametrize("dim", [3, -4])
def test_narrow_copy_dim_out_of_range_like_cpu(dim: int) -> None:
    # The CPU kernel checks a non-negative dim itself (RuntimeError) and wraps a negative
    # one (IndexError).
    e = assert_raises_like_cpu(lambda t: torch.narrow_copy(t, dim, 0, 1),
                               make((2, 3, 4), torch.float32))
    with pytest.raises(type(e)) as cpu:
        torch.narrow_copy(make((2, 3, 4), torch.float32), dim, 0, 1)
    assert _first_line(e).split("  (")[0] == _first_line(cpu.value).split("  (")[0]


@pytest.mark.parametrize("case", ["partial", "internal"])
def test_copy_into_overlapping_memory_raises_like_cpu(case: str) -> None:
    def run(device: str) -> torch.Tensor:
        x = torch.arange(6.0, device=device)
        if case == "partial":
            x[2:4].copy_(x[1:3])
        else:
            torch.zeros(1, device=device).expand(3).copy_(torch.ones(3, device=device))
        return x

    with pytest.raises(RuntimeError, match="unsupported operation") as cpu:
        run("cpu")
    with pytest.raises(RuntimeError, match="unsupported operation") as tpu:
        run(TPU)
    assert str(tpu.value).split(".")[0] == str(cpu.value).split(".")[0]


@pytest.mark.parametrize("dst_shape,src_shape", [((3,), (4,)), ((3,), (2, 3)),
                                                 ((0, 3), (0, 4)), ((2, 1), (2, 3))])
@pytest.mark.parametrize("src_device", ["cpu", TPU])
def test_copy_of_a_shape_that_does_not_broadcast_raises_like_cpu(dst_shape, src_shape,
                                                                 src_device) -> None:
    # Checked before any program is built: the destination keeps its value.
    with pytest.raises(RuntimeError) as cpu:
        torch.zeros(dst_shape).copy_(torch.ones(src_shape))
    dst = torch.zeros(dst_shape, device=TPU)
    with pytest.raises(RuntimeError) as tpu:
        dst.copy_(torch.ones(src_shape, device=src_device))
    assert str(tpu.value) == str(cpu.value)
    assert torch.equal(dst.cpu(), torch.zeros(dst_shape))
    with pytest.raises(RuntimeError) as back:
        torch.zeros(dst_shape).copy_(torch.ones(src_shape, device=TPU))
    assert str(back.value) == str(cpu.value)


def test_copy_of_a_view_onto_itself_and_from_the_host_is_accepted() -> None:
    x = torch.arange(6.0, device=TPU)
    x[2:4].copy_(x[2:4])
    x[2:4].copy_(x[1:3].cpu())
    assert x.cpu().tolist() == [0.0, 1.0, 1.0, 2.0, 4.0, 5.0]


def test_generator_of_another_device_is_refused_like_cuda() -> None:
    with pytest.raises(RuntimeError, match="Expected a 'tpu' device type for generator but "
                       "found 'cpu'"):
        torch.rand(3, device=TPU, generator=torch.Generator())
    with pytest.raises(RuntimeError, match="Expected a 'tpu' device type for generator"):
        torch.empty(4, device=TPU).normal_(generator=torch.Generator())
    with pytest.raises(RuntimeError, match="Expected a 'cpu' device type for generator but "
                       "found 'tpu'"):
        torch.rand(3, generator=torch.Generator(TPU))
    # A 0-d CPU tensor drawn with a tpu generator (a DataLoader's shuffle seed) reaches the
    # tpu kernel: it raised an internal dispatcher error about _copy_from_and_resize.
    from torch.utils.data import DataLoader

    for draw in (lambda g: torch.empty((), dtype=torch.int64).random_(generator=g),
                 lambda g: list(DataLoader(torch.arange(6), batch_size=3, shuffle=True,
                                           generator=g))):
        with pytest.raises(RuntimeError, match="Expected a 'cpu' device type for generator "
                           "but found 'tpu'"):
            draw(torch.Generator(TPU))
    g = torch.Generator(TPU).manual_seed(3)
    a = torch.rand(3, device=TPU, generator=g)
    g.manual_seed(3)
    torch.testing.assert_close(torch.rand(3, device=TPU, generator=g).cpu(), a.cpu())


@pytest.mark.parametrize("factory", [lambda: torch.empty(2, device=TPU, pin_memory=True),
                                     lambda: torch.zeros(2, 3, device=TPU, pin_memory=True),
                                     lambda: torch.empty_strided((2,), (1,), device=TPU,
                                                                 pin_memory=True)],
                         ids=["empty", "zeros", "empty_strided"])
def test_pinned_device_tensors_are_refused_like_cuda(factory) -> None:
    # pin_memory=True on a tpu factory was ignored (a tpu tensor, is_pinned() False).
    with pytest.raises(RuntimeError, match="Only dense CPU tensors can be pinned"):
        factory()


def test_equal_compares_values_across_dtypes_like_cpu() -> None:
    x = torch.arange(6.0)
    for a, b in [(x.int(), x), (x, x.double()), (x.int(), x + 0.5), (x.bool(), x),
                 (x, x[:3])]:
        assert torch.equal(a.to(TPU), b.to(TPU)) == torch.equal(a, b), (a.dtype, b.dtype)


def test_quantized_tensors_are_refused_with_the_reason() -> None:
    # It was the dispatcher's "Could not run 'aten::empty_quantized' ... 'Quantizedtpu'".
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # quantize_per_tensor is deprecated
        q = torch.quantize_per_tensor(torch.randn(4), 0.1, 0, torch.qint8)
    with pytest.raises(NotImplementedError, match="quantized tensors .* are not supported on "
                       r"tpu. Call .dequantize\(\)"):
        q.to(TPU)
    assert torch.equal(q.dequantize().to(TPU).cpu(), q.dequantize())


def test_sparse_tensors_are_refused_with_the_reason() -> None:
    # No sparse tpu kernels: making a COO tensor, or using a CSR one (its constructor needs
    # no kernel), raises NotImplementedError naming the op and what to do instead of the
    # dispatcher's "Could not run ... 'Sparsetpu' backend".
    x = torch.tensor([[0.0, 1.0], [2.0, 0.0]])
    reason = "sparse layouts .* are not supported on tpu"
    for make_sparse in (lambda: x.to(TPU).to_sparse(), lambda: x.to_sparse().to(TPU),
                        lambda: torch.nn.Embedding(4, 2, sparse=True).to(TPU)(
                            torch.tensor([1], device=TPU)).sum().backward()):
        with pytest.raises(NotImplementedError, match=reason):
            make_sparse()
    csr = x.to_sparse_csr().to(TPU)
    for use in (repr, lambda c: c.cpu(), lambda c: c.to_dense(), lambda c: c.crow_indices(),
                lambda c: c @ torch.ones(2, 2, device=TPU)):
        with pytest.raises(NotImplementedError, match=reason):
            use(csr)
    torch.testing.assert_close((x.to(TPU) + 1).cpu(), x + 1)


def test_strided_nested_tensor_of_a_tensor_that_requires_grad_is_made_then_refused() -> None:
    # Autograd reads a nested result's sizes when it records it; that read was refused in a
    # noexcept path and aborted Python (jagged SDPA with grad makes such a tensor). Run in a
    # child so a regression fails this test instead of killing the run.
    import subprocess
    import sys

    code = """
import warnings, torch
warnings.simplefilter("ignore")
a = torch.randn(2, 4, device="tpu", requires_grad=True)
nt = torch.nested.as_nested_tensor([a, torch.randn(3, 4, device="tpu")])
assert nt.is_nested and nt.requires_grad
assert nt._nested_tensor_size().tolist() == [[2, 4], [3, 4]]
try:
    nt + 1
except NotImplementedError as e:
    assert "nested tensors are not supported on tpu" in str(e), e
    print("refused")
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == "refused"


def test_rng_state_of_a_missing_device_names_its_index() -> None:
    # The index was streamed as a char ("device \x05").
    for call in (lambda: torch.tpu.get_rng_state(5), lambda: torch.tpu.get_rng_state("tpu:2"),
                 lambda: torch.tpu.set_rng_state(torch.tpu.get_rng_state(), 5)):
        with pytest.raises(RuntimeError, match=r"no generator for device index [25] \(have 1 "):
            call()


def test_transformer_encoder_nested_fast_path_names_the_switch() -> None:
    # In eval mode with a padding mask, nn.TransformerEncoder converts its input to a nested
    # tensor, which tpu does not run: the error says how to turn that path off, and with it
    # off the outputs match the CPU's on the unpadded positions.
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(16, 2, 32, batch_first=True)
    enc = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=True).eval()
    x = torch.randn(2, 5, 16)
    pad = torch.tensor([[False] * 5, [False, False, False, True, True]])
    with torch.no_grad():
        want = enc(x, src_key_padding_mask=pad)
        enc.to(TPU)
        with pytest.raises(NotImplementedError, match="use_nested_tensor = False"):
            enc(x.to(TPU), src_key_padding_mask=pad.to(TPU))
        enc.use_nested_tensor = False
        got = enc(x.to(TPU), src_key_padding_mask=pad.to(TPU)).cpu()
    torch.testing.assert_close(got[~pad], want[~pad], rtol=1e-4, atol=1e-5)


def test_ctrl_c_in_a_meta_kernel_reaches_the_caller() -> None:
    """A KeyboardInterrupt raised while an op's Python meta kernel runs (Ctrl-C during the
    imports an op's first call makes) reaches the caller: it is no verdict of the meta
    kernel on the call, which would have run the op on the CPU."""
    import warnings

    x = make((3, 19), torch.float32)
    x_t = x.to(TPU)
    lib = torch.library.Library("aten", "IMPL")

    def interrupted(*args: object, **kwargs: object) -> torch.Tensor:
        raise KeyboardInterrupt

    before = fallbacks()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # overriding the op's registered meta kernel
            lib.impl("native_layer_norm", interrupted, "Meta")
        with pytest.raises(KeyboardInterrupt):
            F.layer_norm(x_t, (19,))
    finally:
        lib._destroy()
    assert new_fallbacks(before) == {}
    torch.testing.assert_close(F.layer_norm(x_t, (19,)).cpu(), F.layer_norm(x, (19,)))
    assert new_fallbacks(before) == {}
