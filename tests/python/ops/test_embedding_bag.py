"""F.embedding_bag / nn.EmbeddingBag on tpu (``_embedding_bag`` and its backward ops).

Outputs and weight gradients are compared against the CPU; of the forward's results only
the bag output is: the auxiliary ones (offset2bag, bag_size, max_indices) have
device-specific shapes (CUDA's on tpu, PyTorch's meta kernel off the CPU) and feed only the
backward. Every test forbids CPU fallbacks.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from _compare import assert_same, fallbacks, make, new_fallbacks, to_device

import torchtpu

BAG_TOLS = {torch.float32: (1e-5, 1e-5), torch.bfloat16: (1.6e-2, 1e-2)}

IDX = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9, 0, 7])


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_embedding_bag_offsets(mode: str, dtype: torch.dtype) -> None:
    weight = make((10, 3), dtype)
    offsets = torch.tensor([0, 4, 4, 7])  # bag 1 is empty
    with torch.no_grad():
        assert_same(lambda w, i, o: F.embedding_bag(i, w, o, mode=mode), weight, IDX, offsets,
                    dtype_tols=BAG_TOLS)


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag_2d_input_with_grad_enabled(mode: str) -> None:
    # Requires grad: PyTorch calls _embedding_bag rather than the forward-only op.
    weight = make((10, 4), torch.float32).requires_grad_(True)
    idx = IDX.reshape(2, 5)
    assert_same(lambda w, i: F.embedding_bag(i, w, mode=mode), weight, idx, dtype_tols=BAG_TOLS)


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag_padding_idx(mode: str) -> None:
    weight = make((10, 3), torch.float32)
    offsets = torch.tensor([0, 3, 6])
    with torch.no_grad():
        assert_same(lambda w, i, o: F.embedding_bag(i, w, o, mode=mode, padding_idx=4), weight,
                    IDX, offsets, dtype_tols=BAG_TOLS)


def test_embedding_bag_per_sample_weights_and_last_offset() -> None:
    weight = make((10, 3), torch.float32)
    psw = make((10,), torch.float32)
    offsets = torch.tensor([0, 2, 6, 10])
    with torch.no_grad():
        assert_same(lambda w, i, o, p: F.embedding_bag(i, w, o, mode="sum", per_sample_weights=p,
                                                       include_last_offset=True),
                    weight, IDX, offsets, psw, dtype_tols=BAG_TOLS)


def test_embedding_bag_module() -> None:
    bag = torch.nn.EmbeddingBag(10, 5, mode="mean")
    tpu_bag = torch.nn.EmbeddingBag(10, 5, mode="mean").to("tpu")
    tpu_bag.load_state_dict(bag.state_dict())
    offsets = torch.tensor([0, 3])
    with torch.no_grad():
        expected = bag(IDX, offsets)
        actual = tpu_bag(*to_device((IDX, offsets), "tpu"))
    torch.testing.assert_close(actual.cpu(), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("idx, offsets, match", [
    ([0, 10], [0], "valid range"),
    ([0, -1], [0], "valid range"),
    ([0, 1], [1], "offsets\\[0\\] has to be 0"),
    ([0, 1], [0, 3], "can not be greater"),
])
def test_embedding_bag_bad_inputs_raise(idx: list[int], offsets: list[int], match: str) -> None:
    weight = torch.zeros(10, 3)
    for device in ["cpu", "tpu"]:
        with pytest.raises(RuntimeError, match=match):
            F.embedding_bag(torch.tensor(idx, device=device), weight.to(device),
                            torch.tensor(offsets, device=device))
            torchtpu.synchronize()


@pytest.mark.parametrize("offsets, error", [([0, 2, 1], RuntimeError), ([0, -1], IndexError)])
def test_embedding_bag_offsets_out_of_order_raise_like_cpu(offsets: list[int], error) -> None:
    # Accepted before, with bags read from the disordered offsets.
    idx, weight = torch.tensor([1, 2, 3, 4, 5]), torch.randn(10, 3)
    for device in ["cpu", "tpu"]:
        with pytest.raises(error):
            F.embedding_bag(idx.to(device), weight.to(device), torch.tensor(offsets, device=device))
            torchtpu.synchronize()


def _bag_grads(device: str, mode: str, weight: torch.Tensor, offsets: torch.Tensor,
               psw: torch.Tensor | None = None, **kwargs: object) -> list[torch.Tensor]:
    w = weight.detach().to(device).requires_grad_(True)
    p = None if psw is None else psw.detach().to(device).requires_grad_(True)
    out = F.embedding_bag(IDX.to(device), w, offsets.to(device), mode=mode, per_sample_weights=p,
                          **kwargs)
    upstream = torch.linspace(-1, 1, out.numel()).reshape(out.shape).to(device)
    (out * upstream).sum().backward()
    return [w.grad.cpu()] + ([] if p is None else [p.grad.cpu()])


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("padding_idx", [None, 4])
def test_embedding_bag_backward(mode: str, padding_idx: int | None) -> None:
    weight = make((10, 3), torch.float32)
    offsets = torch.tensor([0, 4, 4, 7])  # bag 1 is empty
    expected = _bag_grads("cpu", mode, weight, offsets, padding_idx=padding_idx)
    before = fallbacks()
    actual = _bag_grads("tpu", mode, weight, offsets, padding_idx=padding_idx)
    assert not new_fallbacks(before), f"tpu run fell back to the CPU: {new_fallbacks(before)}"
    torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5)


def test_embedding_bag_per_sample_weights_backward() -> None:
    weight, psw = make((10, 3), torch.float32), make((10,), torch.float32)
    offsets = torch.tensor([0, 4, 4, 7])
    expected = _bag_grads("cpu", "sum", weight, offsets, psw, padding_idx=2)
    before = fallbacks()
    actual = _bag_grads("tpu", "sum", weight, offsets, psw, padding_idx=2)
    assert not new_fallbacks(before), f"tpu run fell back to the CPU: {new_fallbacks(before)}"
    torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", ["sum", "mean"])
def test_embedding_bag_scale_grad_by_freq(mode: str) -> None:
    # Against the documented rule (each index's gradient over its frequency in the batch,
    # as CUDA and F.embedding do), not against PyTorch's CPU kernel: in torch 2.13 it reads
    # the count of the wrong index for repeated indices (`counts[indices_data[i]]` with i the
    # group number, not its start), so index 4 (seen twice) is not scaled and 3, 5, 7 are.
    weight = make((10, 3), torch.float32)
    offsets = torch.tensor([0, 4, 4, 7])
    (grad,) = _bag_grads("tpu", mode, weight, offsets, scale_grad_by_freq=True)
    (plain,) = _bag_grads("cpu", mode, weight, offsets)
    counts = torch.bincount(IDX, minlength=10).clamp(min=1).float()
    torch.testing.assert_close(grad, plain / counts[:, None], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0, float("inf")])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("bag", [False, True], ids=["Embedding", "EmbeddingBag"])
def test_max_norm_renormalizes_the_named_rows_in_place(norm_type: float, dtype: torch.dtype,
                                                        bag: bool) -> None:
    # embedding_renorm_ (what max_norm runs before the lookup) ran on the CPU.
    torch.manual_seed(0)
    kind = torch.nn.EmbeddingBag if bag else torch.nn.Embedding
    cpu = kind(20, 6, max_norm=1.0, norm_type=norm_type).to(dtype)
    tpu = kind(20, 6, max_norm=1.0, norm_type=norm_type).to(dtype).to("tpu")
    tpu.load_state_dict(cpu.state_dict())
    idx = torch.tensor([[1, 3, 3], [7, 1, 19]])  # row 1 and 3 named twice: scaled once
    before = fallbacks()
    with torch.no_grad():
        got = tpu(idx.to("tpu")).cpu()
    assert new_fallbacks(before) == {}
    rtol, atol = BAG_TOLS[dtype]
    torch.testing.assert_close(got, cpu(idx).detach(), rtol=rtol, atol=atol)
    torch.testing.assert_close(tpu.weight.detach().cpu(), cpu.weight.detach(), rtol=rtol,
                               atol=atol)
    # Rows at the threshold: the norm is compared in the weight's dtype (a bfloat16 row of
    # float32 norm 1.002 has norm 1.0 and stays), exactly as the CPU decides.
    near = torch.tensor([[0.5, 0.5, 0.5, 0.50390625], [0.5, 0.5, 0.5, 0.5],
                         [0.6, 0.6, 0.6, 0.6], [0.25, 0.25, 0.25, 0.25]], dtype=dtype)
    rows = torch.tensor([0, 1, 2, 3, 2])
    want = torch.embedding_renorm_(near.clone(), rows, 1.0, norm_type)
    got = torch.embedding_renorm_(near.to("tpu"), rows.to("tpu"), 1.0, norm_type).cpu()
    assert torch.equal(got, want), (got, want)
    with pytest.raises(IndexError, match="index out of range"):
        torch.embedding_renorm_(tpu.weight.detach(), torch.tensor([25], device="tpu"), 1.0, 2.0)
        torchtpu.synchronize()


@pytest.mark.parametrize("mode", ["sum", "max"])
def test_memory_grows_with_the_ids_not_with_bags_times_ids(mode: str, tmp_path) -> None:
    """A batch of many small bags (a recommender's: 300 bags of 8 ids) reduces each id's row
    into its bag: no value of the compiled programs is [bags, ids] (a membership mask) or
    [bags, ids, D], which grow with the square of the batch (20 GB at 2,000 bags of 50)."""
    from _subprocess import run_python

    bags, per_bag, dim = 300, 8, 5
    code = f"""
        import torch, torchtpu, torch.nn.functional as F
        torch.manual_seed(0)
        w = torch.randn(1000, {dim}, requires_grad=True)
        ids = torch.randint(0, 1000, ({bags * per_bag},))
        offsets = torch.arange(0, {bags * per_bag}, {per_bag})
        w_t = w.detach().to("tpu").requires_grad_()
        got = F.embedding_bag(ids.to("tpu"), w_t, offsets.to("tpu"), mode="{mode}")
        got.pow(2).sum().backward()
        expected = F.embedding_bag(ids, w, offsets, mode="{mode}")
        expected.pow(2).sum().backward()
        torch.testing.assert_close(got.cpu(), expected)
        torch.testing.assert_close(w_t.grad.cpu(), w.grad)
    """
    proc = run_python(code, timeout=300, TORCHTPU_DUMP_DIR=str(tmp_path / "dump"),
                      TORCHTPU_CACHE_DIR=str(tmp_path / "cache"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    modules = [p.read_text() for p in (tmp_path / "dump").glob("*.mlir")]
    assert any("embedding_bag" in m or f"tensor<{bags}x{dim}xf32>" in m for m in modules)
    for text in modules:
        assert f"{bags}x{bags * per_bag}x" not in text and f"{bags * per_bag}x{bags}x" not in text


def test_per_sample_weights_of_another_dtype_raise_as_on_the_cpu() -> None:
    weight, ids, offsets = torch.randn(10, 3), torch.tensor([1, 2, 3]), torch.tensor([0, 2])
    psw = torch.ones(3, dtype=torch.float64)
    with pytest.raises(RuntimeError, match="same type as tensor for argument #1 "
                                           "'per_sample_weights'"):
        F.embedding_bag(ids, weight, offsets, mode="sum", per_sample_weights=psw)
    with pytest.raises(RuntimeError, match="same type as tensor for argument #1 "
                                           "'per_sample_weights'.*Float does not equal Double"):
        F.embedding_bag(ids.to("tpu"), weight.to("tpu"), offsets.to("tpu"), mode="sum",
                        per_sample_weights=psw.to("tpu"))
