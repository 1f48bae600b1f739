"""out= tensors of another dtype than the op computes: refused or cast exactly as on the CPU.

PyTorch's meta kernels (our result types) accept any safe cast into out; most CPU kernels
cast too, but a set writes out only in the dtype it computes. Each case here was wrong
before: accepted where the CPU refuses, or an "internal error" where the CPU names the
dtype it expects.
"""

from __future__ import annotations

import pytest
import torch
from tests.python._compare import assert_raises_like_cpu, assert_same


def _out(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return torch.empty(0, dtype=dtype, device=x.device)


def _matrix() -> torch.Tensor:
    return torch.tensor([[2.0, 1.0, 0.5], [1.0, 3.0, 0.25], [0.5, 0.25, 4.0]])


REFUSED = {
    "sort_int32_indices": lambda x: torch.sort(x, 1, out=(_out(x, x.dtype), _out(x, torch.int32))),
    "sort_f64_values": lambda x: torch.sort(x, 1, out=(_out(x, torch.float64),
                                                        _out(x, torch.int64))),
    "kthvalue_int32_indices": lambda x: torch.kthvalue(x, 2, 1, out=(_out(x, x.dtype),
                                                                      _out(x, torch.int32))),
    "median_int32_indices": lambda x: torch.median(x, 1, out=(_out(x, x.dtype),
                                                               _out(x, torch.int32))),
    "mode_f64_values": lambda x: torch.mode(x, 1, out=(_out(x, torch.float64),
                                                        _out(x, torch.int64))),
    "mode_int32_indices": lambda x: torch.mode(x, 1, out=(_out(x, x.dtype),
                                                           _out(x, torch.int32))),
    "amax_f64": lambda x: torch.amax(x, 1, out=_out(x, torch.float64)),
    "any_f32": lambda x: torch.any(x, 1, out=_out(x, torch.float32)),
    "all_int64": lambda x: torch.all(x, out=_out(x, torch.int64)),
    "histc_f64": lambda x: torch.histc(x, 4, out=_out(x, torch.float64)),
    "tril_f16": lambda x: torch.tril(x, out=_out(x, torch.float16)),
    "index_select_f64": lambda x: torch.index_select(
        x, 0, torch.tensor([1, 0], device=x.device), out=_out(x, torch.float64)),
    "softmax_f64": lambda x: torch.softmax(x, 1, out=_out(x, torch.float64)),
    "log_softmax_f64": lambda x: torch.log_softmax(x, 1, out=_out(x, torch.float64)),
    "gelu_f64": lambda x: torch._C._nn.gelu(x, out=_out(x, torch.float64)),
    "nan_to_num_f64": lambda x: torch.nan_to_num(x, out=_out(x, torch.float64)),
    "neg_f64": lambda x: torch.neg(x, out=_out(x, torch.float64)),
    "isin_f64": lambda x: torch.isin(x, x[0], out=_out(x, torch.float64)),
    "det_f64": lambda x: torch.linalg.det(_matrix().to(x.device), out=_out(x, torch.float64)),
    "slogdet_int32_logabsdet": lambda x: torch.linalg.slogdet(
        _matrix().to(x.device), out=(_out(x, x.dtype), _out(x, torch.int32))),
    "qr_f64": lambda x: torch.linalg.qr(_matrix().to(x.device),
                                        out=(_out(x, torch.float64), _out(x, torch.float64))),
    "eigvalsh_f64": lambda x: torch.linalg.eigvalsh(_matrix().to(x.device),
                                                     out=_out(x, torch.float64)),
    "cumsum_bool_out": lambda x: torch.cumsum(x > 0, 0, out=_out(x, torch.bool)),
    "cumsum_in_place_bool": lambda x: (x > 0).cumsum_(0),
    "cumprod_in_place_bool": lambda x: (x > 0).cumprod_(0),
    "cumsum_dtype_bool": lambda x: torch.cumsum(x, 0, dtype=torch.bool),
    "cumsum_in_place_other_dtype": lambda x: (x > 0).cumsum_(0, dtype=torch.int64),
    "cumsum_out_and_dtype_disagree": lambda x: torch.cumsum(x, 0, dtype=torch.int64,
                                                            out=_out(x, torch.bool)),
    "det_of_integers": lambda x: torch.linalg.det(_matrix().long().to(x.device),
                                                  out=_out(x, x.dtype)),
    "slogdet_of_integers": lambda x: torch.linalg.slogdet(_matrix().long().to(x.device)),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_an_out_of_another_dtype_is_refused_as_on_the_cpu(case: str) -> None:
    x = torch.tensor([[0.5, -1.0, 2.0, 3.0], [1.5, 0.25, -2.0, 4.0], [0.0, 1.0, 2.0, -3.0]])
    err = assert_raises_like_cpu(REFUSED[case], x)
    assert "internal error" not in str(err)


CAST = {  # the CPU casts into out for these
    "sum_f64": lambda x: torch.sum(x, 1, out=_out(x, torch.float64)),
    "add_f64": lambda x: torch.add(x, 1, out=_out(x, torch.float64)),
    "cumsum_f64": lambda x: torch.cumsum(x, 1, out=_out(x, torch.float64)),
    "any_uint8": lambda x: torch.any(x, 1, out=_out(x, torch.uint8)),
    "cumsum_int64_of_bool": lambda x: torch.cumsum(x > 0, 0, out=_out(x, torch.int64)),
    "sort_values": lambda x: torch.sort(x, 1, out=(_out(x, x.dtype), _out(x, torch.int64))),
}


@pytest.mark.parametrize("case", sorted(CAST))
def test_an_out_the_cpu_casts_into_is_written_as_on_the_cpu(case: str) -> None:
    x = torch.tensor([[0.5, -1.0, 2.0, 3.0], [1.5, 0.25, -2.0, 4.0], [0.0, 1.0, 2.0, -3.0]])
    assert_same(CAST[case], x)
