"""F.embedding_bag / nn.EmbeddingBag forward on tpu (``_embedding_bag``), against the CPU.

Only the bag outputs are compared: the auxiliary results (offset2bag, bag_size,
max_indices) have device-specific shapes (CUDA's on tpu, PyTorch's meta kernel off the CPU)
and feed only the backward. Every test forbids CPU fallbacks.
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


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag_backward_is_a_known_fallback(mode: str) -> None:
    # The backward (_embedding_bag_backward) has no lowering yet and runs on the CPU from
    # the tpu forward's auxiliary results (CUDA's layout, max_indices -1 for empty bags);
    # its gradient must still be right, and it must be the only fallback.
    weight = make((10, 3), torch.float32).requires_grad_(True)
    tpu_weight = weight.detach().to("tpu").requires_grad_(True)
    offsets = torch.tensor([0, 4, 4, 7])
    F.embedding_bag(IDX, weight, offsets, mode=mode).sum().backward()
    before = fallbacks()
    F.embedding_bag(IDX.to("tpu"), tpu_weight, offsets.to("tpu"), mode=mode).sum().backward()
    assert set(new_fallbacks(before)) <= {"aten::_embedding_bag_backward"}
    torch.testing.assert_close(tpu_weight.grad.cpu(), weight.grad, rtol=1e-5, atol=1e-5)
