"""Elementwise ops, differential against CPU per dtype, with broadcasting and strided inputs."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from _compare import FLOAT_DTYPES, assert_raises_like_cpu, assert_same, make

import torchtpu

TPU = "tpu"

UNARY_FLOAT = {
    "abs": torch.abs,
    "neg": torch.neg,
    "exp": torch.exp,
    "expm1": torch.expm1,
    "log": lambda x: torch.log(x.abs() + 0.5),
    "log1p": lambda x: torch.log1p(x.abs()),
    "log2": lambda x: torch.log2(x.abs() + 0.5),
    "sqrt": lambda x: torch.sqrt(x.abs()),
    "rsqrt": lambda x: torch.rsqrt(x.abs() + 0.5),
    "sin": torch.sin,
    "cos": torch.cos,
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
    "erf": torch.erf,
    "reciprocal": lambda x: torch.reciprocal(x.abs() + 0.5),
    "floor": torch.floor,
    "ceil": torch.ceil,
    "trunc": torch.trunc,
    "round": torch.round,
    "sign": torch.sign,
}

BINARY = {
    "add": torch.add,
    "sub": torch.sub,
    "mul": torch.mul,
    "maximum": torch.maximum,
    "minimum": torch.minimum,
    "eq": torch.eq,
    "ne": torch.ne,
    "lt": torch.lt,
    "le": torch.le,
    "gt": torch.gt,
    "ge": torch.ge,
}

# Transcendentals over [-3, 3]: exp(3) ~ 20, so 1e-5 relative is a few f32 ulp.
F32_TRANS = {torch.float32: (2e-5, 2e-5)}


@pytest.mark.parametrize("name", sorted(UNARY_FLOAT))
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_unary_float(name: str, dtype: torch.dtype) -> None:
    assert_same(UNARY_FLOAT[name], make((4, 7), dtype), dtype_tols=F32_TRANS)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_tan(dtype: torch.dtype) -> None:
    # Away from the poles, where one ulp of input is many ulps of output.
    assert_same(torch.tan, make((4, 7), dtype, low=-1.2, high=1.2), dtype_tols=F32_TRANS)


def test_bf16_times_python_scalar_rounds_once() -> None:
    # PyTorch computes bf16 (op) python-float in f32 and rounds the result once; rounding the
    # scalar to bf16 first (0.4 -> 0.40039) changes results by one bf16 ulp. Exact match.
    x = make((64,), torch.bfloat16)
    assert_same(lambda t: t * 0.4, x, dtype_tols={torch.bfloat16: (0.0, 0.0)})
    assert_same(lambda t: t + 0.1, x, dtype_tols={torch.bfloat16: (0.0, 0.0)})


@pytest.mark.parametrize("name", ["abs", "neg", "sign"])
def test_unary_int64(name: str) -> None:
    assert_same(UNARY_FLOAT[name], make((4, 7), torch.int64, low=-50, high=50))


def test_unary_noncontiguous() -> None:
    x = make((5, 6), torch.float32, noncontiguous=True)
    assert_same(torch.exp, x)
    assert_same(torch.tanh, make((6, 5), torch.float32).t())


@pytest.mark.parametrize("name", sorted(BINARY))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
def test_binary(name: str, dtype: torch.dtype) -> None:
    a = make((3, 4), dtype, low=-5, high=5)
    b = make((3, 4), dtype, low=-5, high=5)
    assert_same(BINARY[name], a, b)


@pytest.mark.parametrize("name", ["add", "mul", "maximum", "lt"])
def test_binary_broadcast(name: str) -> None:
    fn = BINARY[name]
    assert_same(fn, make((3, 1, 5), torch.float32), make((4, 1), torch.float32))
    assert_same(fn, make((2, 3), torch.float32), make((3,), torch.float32))
    assert_same(fn, make((2, 3), torch.float32), make((), torch.float32))


def test_binary_noncontiguous() -> None:
    a = make((4, 5), torch.float32, noncontiguous=True)
    b = make((5, 4), torch.float32).t()
    assert_same(torch.add, a, b)
    assert_same(torch.mul, a, b)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_div(dtype: torch.dtype) -> None:
    a = make((3, 4), dtype)
    b = make((3, 4), dtype, low=0.5, high=3.0)
    assert_same(torch.div, a, b)
    assert_same(lambda x, y: torch.div(x, y, rounding_mode="floor"), a, b)
    assert_same(lambda x, y: torch.div(x, y, rounding_mode="trunc"), a, b)


def test_div_int64() -> None:
    a = make((3, 4), torch.int64, low=-20, high=20)
    b = make((3, 4), torch.int64, low=1, high=7)
    assert_same(torch.div, a, b)  # true division promotes to float32
    assert_same(lambda x, y: torch.div(x, y, rounding_mode="floor"), a, b)
    assert_same(lambda x, y: torch.div(x, y, rounding_mode="trunc"), a, -b)
    assert_same(torch.remainder, a, b)
    assert_same(torch.fmod, a, b)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
def test_remainder_fmod_signs(dtype: torch.dtype) -> None:
    a = torch.tensor([-7, -3, 0, 3, 7], dtype=dtype)
    b = torch.tensor([2, -2, 3, -4, 5], dtype=dtype)
    assert_same(torch.remainder, a, b)
    assert_same(torch.fmod, a, b)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_pow(dtype: torch.dtype) -> None:
    a = make((3, 4), dtype, low=0.5, high=2.0)
    b = make((3, 4), dtype, low=-2.0, high=2.0)
    assert_same(torch.pow, a, b, dtype_tols=F32_TRANS)
    assert_same(lambda x: x ** 2, a)
    assert_same(lambda x: 2.0 ** x, b, dtype_tols=F32_TRANS)


def test_pow_int64() -> None:
    a = make((3, 4), torch.int64, low=-4, high=4)
    assert_same(lambda x: x ** 3, a)
    assert_same(lambda x: x ** 2, a)
    assert_same(lambda x: x ** 2.0, a)  # a float exponent makes the result float32
    assert_same(lambda x: x ** 0.5, a.abs())


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int16, torch.int32,
                                   torch.int64])
def test_pow_integer_wraps_over_every_exponent_bit(dtype: torch.dtype) -> None:
    # Squaring over all the exponent's bits, wrapping as the CPU does (XLA's own integer
    # power stopped at 6 bits: 3**64 was 1, 0**64 was 1).
    signed = dtype.is_signed
    x = torch.tensor([0, 1, 2, 3, 5, -1, -2, -3, 7] if signed else [0, 1, 2, 3, 5, 255],
                     dtype=dtype)
    for p in (0, 1, 3, 7, 31, 33, 63, 64, 65, 127):
        assert_same(lambda t: t ** p, x)
    e = torch.tensor([0, 1, 64, 65, 100, 127, -1, -2, -3] if signed else [0, 64, 65, 100, 200, 255],
                     dtype=dtype)
    assert_same(torch.pow, x, e)  # negative exponents: 1, +-1 for +-1, else 0
    assert_same(lambda t: 2 ** t, e.abs())
    assert_same(torch.pow, x, e.to(torch.int64))


# Exponents of pow(Tensor, Scalar): each is structure (its own program with a constant
# exponent); 2 is x*x, the others XLA simplifies or computes by power.
POW_EXPONENTS = [2, 3, 0.5, -0.5, 1, -1, 0, 2.5, -2]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("p", POW_EXPONENTS)
def test_pow_scalar_exponents(p: float, dtype: torch.dtype) -> None:
    a = make((3, 4), dtype, low=0.5, high=2.0)
    assert_same(lambda x: x.pow(p), a, dtype_tols=F32_TRANS)
    if float(p).is_integer():
        assert_same(lambda x: torch.pow(x, p), -a, dtype_tols=F32_TRANS)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
def test_scalar_operands(dtype: torch.dtype) -> None:
    x = make((2, 5), dtype, low=-5, high=5)
    assert_same(lambda t: t + 3, x)
    assert_same(lambda t: 2 * t - 1, x)
    assert_same(lambda t: t * 2.5, x)  # int64 * float scalar -> float32
    assert_same(lambda t: t > 1, x)


def test_type_promotion() -> None:
    i = make((3,), torch.int64)
    f = make((3,), torch.float32)
    b = make((3,), torch.bfloat16)
    assert_same(torch.add, i, f)
    assert_same(torch.mul, f, b)
    assert_same(torch.add, i, make((3,), torch.bool))
    assert_same(torch.add, b, torch.tensor(2.5))  # 0-dim f32 tensor does not promote bf16


def test_zero_dim_cpu_tensor_as_scalar() -> None:
    x = make((3, 3), torch.float32)
    out = x.to("tpu") * torch.tensor(2.0)
    assert out.device.type == "tpu"
    torch.testing.assert_close(out.cpu(), x * 2.0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_clamp(dtype: torch.dtype) -> None:
    x = make((4, 5), dtype)
    assert_same(lambda t: t.clamp(-1, 1), x)
    assert_same(lambda t: t.clamp(min=0.5), x)
    assert_same(lambda t: t.clamp(max=-0.5), x)
    lo = make((5,), dtype, low=-2, high=0)
    hi = make((4, 1), dtype, low=0, high=2)
    assert_same(lambda t, a, b: torch.clamp(t, a, b), x, lo, hi)


def test_clamp_int64() -> None:
    assert_same(lambda t: t.clamp(-2, 3), make((4, 5), torch.int64, low=-9, high=9))


def test_where() -> None:
    c = make((3, 4), torch.bool)
    a = make((3, 4), torch.float32)
    b = make((4,), torch.float32)
    assert_same(torch.where, c, a, b)
    assert_same(lambda cc, x: torch.where(cc, x, 0.0), c, a)
    assert_same(torch.where, c, make((3, 4), torch.int64), make((3, 4), torch.int64))


@pytest.mark.parametrize("name", ["logical_and", "logical_or", "logical_xor"])
def test_logical(name: str) -> None:
    fn = getattr(torch, name)
    assert_same(fn, make((3, 4), torch.bool), make((3, 4), torch.bool))
    assert_same(fn, make((3, 4), torch.float32), make((3, 4), torch.int64))


@pytest.mark.parametrize("dtype", [torch.int64, torch.bool])
def test_bitwise(dtype: torch.dtype) -> None:
    a = make((3, 4), dtype, low=0, high=100)
    b = make((3, 4), dtype, low=0, high=100)
    assert_same(torch.bitwise_and, a, b)
    assert_same(torch.bitwise_or, a, b)
    assert_same(torch.bitwise_xor, a, b)
    assert_same(torch.bitwise_not, a)
    assert_same(lambda x, y: x & y, a, b)


def test_logical_not_isnan() -> None:
    assert_same(torch.logical_not, make((5,), torch.bool))
    x = torch.tensor([1.0, float("nan"), float("inf"), -float("inf"), 0.0])
    assert_same(torch.isnan, x)
    assert_same(torch.exp, x)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_addcmul_addcdiv_lerp(dtype: torch.dtype) -> None:
    a, b = make((3, 4), dtype), make((3, 4), dtype)
    c = make((3, 4), dtype, low=0.5, high=2.0)
    assert_same(lambda x, y, z: torch.addcmul(x, y, z, value=0.5), a, b, c)
    assert_same(lambda x, y, z: torch.addcdiv(x, y, z, value=-2), a, b, c)
    assert_same(lambda x, y: torch.lerp(x, y, 0.3), a, b)


def test_atan2_exp2_logit() -> None:
    a, b = make((3, 4), torch.float32), make((3, 4), torch.float32)
    assert_same(torch.atan2, a, b)
    assert_same(torch.exp2, a)
    assert_same(torch.logit, make((3, 4), torch.float32, low=0.05, high=0.95))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_exp2_is_exact_at_integers(dtype: torch.dtype) -> None:
    # exp(x ln 2) was several ulps off at integers (2^30 by 960 in float32); C's exp2 is exact.
    n = torch.arange(-60, 61, dtype=dtype)
    assert torch.equal(torch.exp2(n.to(TPU)).cpu(), torch.exp2(n))
    edges = torch.tensor([127.0, 127.5, -126.0, 200.0, -200.0, float("inf"), float("-inf"),
                          float("nan"), 0.0, -0.0, 1e30, -1e30, 15.0, 16.0, 1023.5, 1024.0,
                          -1022.0, 2300.0], dtype=dtype)
    torch.testing.assert_close(torch.exp2(edges.to(TPU)).cpu(), torch.exp2(edges), equal_nan=True)
    x = make((64,), torch.float32, low=-20, high=20)
    torch.testing.assert_close(torch.exp2(x.to(TPU)).cpu(), torch.exp2(x), rtol=2e-7, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_ldexp_like_cpu(dtype: torch.dtype) -> None:
    # Integer exponents scale exactly (0.5 * 2^128 is 2^127 in float32: it was inf, as
    # 2^128 overflowed first); int64 exponents wrap to int32 as in the CPU kernel.
    x = torch.tensor([0.5, 0.0, 3.0, 1.0, -0.75, float("inf"), float("nan"), 1e-30, 6e4],
                     dtype=torch.float32).to(dtype)
    for e in ([128, 1000, -1100, 2, -3, -2000, 3, 200, -20],
              [16, 1, -30, 2**40, -(2**40) + 5, 0, 0, 120, -1],
              [-1, -2, 0, 1, 2, 3, 4, 5, 6]):
        e = torch.tensor(e)
        want = torch.ldexp(x, e)
        got = torch.ldexp(x.to(TPU), e.to(TPU)).cpu()
        assert got.dtype == want.dtype
        # Subnormal results flush to zero on XLA (docs/architecture.md).
        normal = (want == 0) | (want.abs() >= torch.finfo(want.dtype).tiny) | ~want.isfinite()
        assert torch.equal(got[normal].isnan(), want[normal].isnan())
        assert torch.equal(got[normal].nan_to_num(), want[normal].nan_to_num()), (e, got, want)
    # A float exponent multiplies by pow(2, e) of its own dtype; out= and in place too.
    e = torch.tensor([128.0, 2.5, -0.5, 3.0, 0.0, 1.0, -1.0, 10.0, 1.0])
    assert_same(torch.ldexp, x, e)
    assert_same(lambda a, b: torch.ldexp(a, b, out=torch.empty_like(a)),
                x, torch.arange(9))
    assert_same(lambda a, b: a.clone().ldexp_(b), x, torch.arange(9))
    assert_same(torch.ldexp, torch.tensor([1, 3]), torch.tensor([2, -1]))
    # The CPU's integer exponents: not bool or the wide unsigned types.
    for t in (torch.bool, torch.uint16, torch.uint32):
        assert_raises_like_cpu(torch.ldexp, x, torch.ones(9, dtype=t))


def test_round_decimals_divides_exactly() -> None:
    # The division by 10^d ran as a product with its rounded reciprocal: round(1.5, 3) was
    # 1.5000001 and round(1e30, -2) 9.9999994e29.
    x = torch.tensor([1.5, 2.675, 12345.678, -0.125, 1e30, 3.14159, 1e-3, 7.0])
    for d in (-2, -1, 1, 2, 3, 5):
        for t in (torch.float32, torch.float64):
            assert torch.equal(torch.round(x.to(t).to(TPU), decimals=d).cpu(),
                               torch.round(x.to(t), decimals=d)), (d, t)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool])
def test_cast(dtype: torch.dtype) -> None:
    x = make((3, 4), torch.float32, low=-4, high=4)
    assert_same(lambda t: t.to(dtype), x)
    assert_same(lambda t: t.to(torch.float32), make((3, 4), dtype))


@pytest.mark.parametrize("dtype", [torch.int32, torch.uint8, torch.int8, torch.float16,
                                   torch.float64])
def test_other_dtypes(dtype: torch.dtype) -> None:
    low, high = (0, 9) if dtype == torch.uint8 else (-9, 9)
    a, b = make((3, 4), dtype, low=low, high=high), make((3, 4), dtype, low=low, high=high)
    assert_same(torch.add, a, b)
    assert_same(torch.mul, a, b)
    assert_same(torch.maximum, a, b)
    assert_same(torch.lt, a, b)


def test_uint8_wraps_like_cpu() -> None:
    a = torch.tensor([250, 3, 128], dtype=torch.uint8)
    assert_same(lambda x: x + 10, a)
    assert_same(lambda x: x * 2, a)


def test_scalar_values_are_not_baked_into_the_program() -> None:
    # Programs are cached per op signature; scalar operands must be runtime inputs.
    x = make((4,), torch.float32)
    for s in (1.0, -2.5, 7.0):
        assert_same(lambda t, s=s: t * s + s, x)
    for s in (1, 5):
        assert_same(lambda t, s=s: t.clamp(-s, s), make((4,), torch.int64, low=-9, high=9))


def test_same_shape_different_strides_share_no_stale_layout() -> None:
    x = make((4, 4), torch.float32)
    assert_same(lambda t: t + 1, x)
    assert_same(lambda t: t.t() + 1, x)
    assert_same(lambda t: t[::1, :].flip(0)[:, ::1] * 1, x)


OUT_BINARY = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div,
    "remainder": torch.remainder, "fmod": torch.fmod, "pow": torch.pow,
    "maximum": torch.maximum, "atan2": torch.atan2,
}


@pytest.mark.parametrize("name", sorted(OUT_BINARY))
def test_binary_out_variant(name: str) -> None:
    def fn(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        out = torch.empty(3, 4, device=a.device)
        result = OUT_BINARY[name](a, b, out=out)
        assert result is out
        return out

    assert_same(fn, make((3, 4), torch.float32, low=0.5, high=2), make((4,), torch.float32,
                low=0.5, high=2), dtype_tols=F32_TRANS)


@pytest.mark.parametrize("name", ["bitwise_and", "bitwise_or", "bitwise_xor"])
def test_bitwise_out_variant(name: str) -> None:
    def fn(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        out = torch.empty(3, 4, dtype=torch.int64, device=a.device)
        getattr(torch, name)(a, b, out=out)
        return out

    assert_same(fn, make((3, 4), torch.int64, low=0, high=99), make((3, 4), torch.int64, low=0,
                high=99))


# Float -> integer casts follow PyTorch's CPU (x86-64 truncating conversions through int32,
# or int64 for 64-bit targets), not XLA's saturation: float32 max -> int16 is 0, -2.0 ->
# uint8 is 254, NaN and inf -> the intermediate's minimum; uint64 is exact up to 2^64.
_CAST_VALUES = [float("nan"), float("inf"), -float("inf"), 3e9, -3e9, 1e20, -1e20, 300.7, -2.5,
                70000.0, -70000.0, 2.0**31, -(2.0**31), 2.0**31 - 128, 2.0**63, 5e9, 0.0, -0.9,
                1.5 * 2.0**63, 1.8e19, 2.0**64, -(2.0**63)]


@pytest.mark.parametrize("src", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("dst", [torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64,
                                 torch.uint16, torch.uint64, torch.bool])
def test_out_of_range_float_to_int_casts_match_cpu(src: torch.dtype, dst: torch.dtype) -> None:
    x = torch.tensor(_CAST_VALUES, dtype=src)
    assert torch.equal(x.to(TPU).to(dst).cpu(), x.to(dst))
    # Through an op's own convert (a copy into an integer tensor) as well.
    out = torch.empty(len(_CAST_VALUES), dtype=dst, device=TPU)
    out.copy_(x.to(TPU))
    assert torch.equal(out.cpu(), x.to(dst))


# An out= call computes in the op's own dtype, then casts into out.
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("op", [torch.add, torch.mul, torch.sub, torch.maximum, torch.atan2])
def test_out_of_a_wider_dtype_rounds_to_the_ops_dtype_first(dtype, op) -> None:
    big = 6e4 if dtype == torch.float16 else 3e38
    a = torch.tensor([big, -big, 1.1, 3.3], dtype=dtype)
    b = torch.tensor([big, big, 2.2, -7.7], dtype=dtype)
    cpu = op(a, b, out=torch.empty(4, dtype=torch.float64))
    dev = op(a.to(TPU), b.to(TPU), out=torch.empty(4, dtype=torch.float64, device=TPU))
    assert torch.equal(dev.cpu(), cpu)


# These emitted programs the plugin rejected (and then ran on the CPU in silence).
@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int32, torch.int64])
def test_abs_of_integers_runs_on_tpu(dtype: torch.dtype) -> None:
    x = torch.tensor([0, 1, 7, 100], dtype=dtype)
    if dtype.is_signed:
        x = torch.tensor([-3, 0, 5, -100], dtype=dtype)
    before = torchtpu.debug.metrics()["fallback_ops"].get("aten::abs", 0)
    assert torch.equal(x.to(TPU).abs().cpu(), x.abs())
    assert torchtpu.debug.metrics()["fallback_ops"].get("aten::abs", 0) == before


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.uint8])
def test_atan2_of_integers_promotes_to_float(dtype: torch.dtype) -> None:
    a, b = torch.tensor([1, 2, 0, 5], dtype=dtype), torch.tensor([3, 4, 1, 0], dtype=dtype)
    got = torch.atan2(a.to(TPU), b.to(TPU))
    assert got.dtype == torch.float32
    assert torch.allclose(got.cpu(), torch.atan2(a, b))
    assert "aten::atan2.out" not in torchtpu.debug.metrics()["fallback_ops"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_bool_operands_keep_float_special_values(dtype: torch.dtype) -> None:
    # A bool promoted to a float is 0 or 1 and nothing else: inf * False and 0 / 0 are NaN,
    # -1 * False is -0, also when the bool operand is broadcast.
    x = torch.tensor([[float("inf"), float("nan"), -1.0, 2.0],
                      [-float("inf"), 0.0, 3.0, -0.0]], dtype=dtype)
    p = torch.tensor([False, False, False, True])
    q = torch.tensor([[True, False, False, True], [False, True, False, False]])
    cases = {
        "mul": lambda x, p, q: x * p,
        "mul_expanded": lambda x, p, q: x[0] * p.view(1, 4).expand(2, 4),
        "bool_div_bool": lambda x, p, q: q / p,
        "bool_div_bool_row": lambda x, p, q: p / q[:, :1],
        "bool_div_float": lambda x, p, q: p / x,
        "float_div_bool": lambda x, p, q: x / p,
    }
    for name, fn in cases.items():
        expected = fn(x, p, q)
        got = fn(x.to(TPU), p.to(TPU), q.to(TPU)).cpu()
        assert got.dtype == expected.dtype, name
        torch.testing.assert_close(got, expected, equal_nan=True, msg=name)
        number = ~expected.isnan()  # a NaN's sign bit is not specified
        assert torch.equal(torch.signbit(got[number]), torch.signbit(expected[number])), name


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_atan_values_and_through_a_gather(dtype: torch.dtype) -> None:
    # Edge values (subnormals, infinities, the largest floats) and atan read by a gather in
    # one compiled program, where XLA's CPU code generator vectorizes the loop around it.
    info = torch.finfo(dtype)
    special = torch.tensor([0.0, -0.0, info.tiny / 4, -info.tiny / 8, info.max, -info.max,
                            float("inf"), -float("inf"), float("nan"), 1.0, -1.0], dtype=dtype)
    x = torch.cat([special, torch.randn(53, dtype=dtype) * 10])
    got = x.to(TPU).atan().cpu()
    torch.testing.assert_close(got, x.atan(), equal_nan=True)
    number = ~x.isnan()
    assert torch.equal(torch.signbit(got[number]), torch.signbit(x.atan()[number]))
    idx = torch.randperm(x.numel())[:40]
    fn = torch.compile(lambda v, i: v.atan()[i] * 2, backend="tpu")
    torch.testing.assert_close(fn(x.to(TPU), idx.to(TPU)).cpu(), x.atan()[idx] * 2,
                               equal_nan=True)


INT_DIVISIONS = {
    "floor_divide": torch.floor_divide,
    "remainder": torch.remainder,
    "fmod": torch.fmod,
    "div_trunc": lambda a, b: torch.div(a, b, rounding_mode="trunc"),
    "div_floor": lambda a, b: torch.div(a, b, rounding_mode="floor"),
    "floordiv_op": lambda a, b: a // b,
}


@pytest.mark.parametrize("dtype", [torch.int8, torch.uint8, torch.int32, torch.int64])
@pytest.mark.parametrize("name", list(INT_DIVISIONS))
def test_integer_division_by_zero_raises(name: str, dtype: torch.dtype) -> None:
    # PyTorch's CPU kernels raise "ZeroDivisionError" for an integer zero divisor; the
    # hardware's division would return an arbitrary value.
    fn = INT_DIVISIONS[name]
    a = torch.tensor([7, 3, 1, 100], dtype=dtype)
    b = torch.tensor([2, 0, 3, 5], dtype=dtype)
    e = assert_raises_like_cpu(fn, a, b)
    assert "ZeroDivisionError" in str(e)
    assert "ZeroDivisionError" in str(assert_raises_like_cpu(lambda x: fn(x, 0), a))
    # Nonzero divisors (negative ones included) still give the CPU's values.
    nz = torch.tensor([2, 5, 3, 7], dtype=dtype) if dtype == torch.uint8 else \
        torch.tensor([2, -5, 3, -7], dtype=dtype)
    assert_same(fn, a, nz)


def test_integer_division_by_zero_in_place_leaves_input() -> None:
    a = torch.tensor([7, 3, 1], device=TPU)
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        a.floor_divide_(torch.tensor([1, 0, 2], device=TPU))
        a.cpu()  # fused eager reports the op's data check at the next read
    assert a.cpu().tolist() == [7, 3, 1]


def test_float_division_by_zero_does_not_raise() -> None:
    a, b = torch.tensor([1.0, -1.0, 0.0]), torch.tensor([0.0, 0.0, 0.0])
    for fn in INT_DIVISIONS.values():
        assert_same(fn, a, b)
    assert_same(lambda x: x // 0, torch.tensor([3, 4]).float())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_hypot_extremes(dtype: torch.dtype) -> None:
    # Squares that overflow / underflow in the dtype, and inf beside NaN (inf, as in C).
    inf, nan = float("inf"), float("nan")
    big = 1e30 if dtype in (torch.float32, torch.float64, torch.bfloat16) else 4e4
    tiny = 1e-30 if dtype in (torch.float32, torch.float64, torch.bfloat16) else 1e-4
    x = torch.tensor([big, -big, tiny, 0.0, -0.0, inf, nan, -inf, 3.0, nan], dtype=dtype)
    y = torch.tensor([big, big, 0.0, 0.0, 0.0, nan, inf, 2.0, -4.0, 1.0], dtype=dtype)
    assert_same(torch.hypot, x, y)
    assert_same(torch.hypot, make((7, 5), dtype), make((5,), dtype))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_nextafter_steps_in_own_dtype(dtype: torch.dtype) -> None:
    inf = float("inf")
    x = torch.tensor([1.5, -2.5, 0.0, 3.0, 0.5, -0.5, inf, 1.0], dtype=dtype)
    y = torch.tensor([0.0, 0.0, 1.0, 10.0, -1.0, 1.0, 0.0, 1.0], dtype=dtype)
    got = assert_same(torch.nextafter, x, y, dtype_tols={dtype: (0.0, 0.0)})
    assert (got.cpu() != x).sum().item() == 7  # every step moved except x == y


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
@pytest.mark.parametrize("fn", [torch.log2, torch.log10], ids=["log2", "log10"])
def test_complex_scaled_log_special_values(fn, dtype: torch.dtype) -> None:
    # log(0) = -inf + 0i and log(inf) = inf + 0i: the real scale must not turn 0i into NaN.
    inf = float("inf")
    z = torch.tensor([0j, complex(inf, 0), complex(-inf, 0), 1 + 1j, -2 - 0.5j], dtype=dtype)
    got = torch.view_as_real(fn(z.to(TPU)).cpu())
    want = torch.view_as_real(fn(z))
    tol = 1e-5 if dtype == torch.complex64 else 1e-12
    torch.testing.assert_close(got, want, rtol=tol, atol=tol, equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_lerp_weight_at_or_above_half(dtype: torch.dtype) -> None:
    # Weight 1 gives end exactly (1e8 -> 0.1), and inf ends as the CPU's two-sided formula.
    inf = float("inf")
    s = torch.tensor([1e8, 1.0, 1.0, 2.0, -3.0, 0.5], dtype=dtype)
    e = torch.tensor([0.1, inf, inf, 4.0, 7.0, -inf], dtype=dtype)
    w = torch.tensor([1.0, 0.5, 0.2, 0.7, -0.6, 0.9], dtype=dtype)
    assert_same(torch.lerp, s, e, w)
    assert_same(lambda a, b: torch.lerp(a, b, 0.75), s, e)
    assert_same(lambda a, b: torch.lerp(a, b, 0.25), make((4, 5), dtype), make((5,), dtype))


def test_integer_true_division_follows_default_dtype() -> None:
    # The same call under another default dtype is another program (result float64, not a
    # float32 program's result reused), and computes in float64.
    a, b = torch.tensor([1, 2, 7]), torch.tensor([3, 4, 9])
    assert_same(torch.div, a, b)
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        assert_same(torch.div, a, b, dtype_tols={torch.float64: (0.0, 0.0)})
        assert_same(lambda x: x * 2.5, a)
    finally:
        torch.set_default_dtype(old)
    assert_same(torch.div, a, b)


# A binary op's Scalar overload is its Tensor overload on a wrapped number, which
# TensorIterator casts without an overflow check; kernels that read a Scalar themselves
# (fill_, clamp, masked_fill, add's alpha) raise on a value the dtype cannot hold.
_WRAPPED_SCALAR_CASES = {
    "uint8 < 1000": lambda u, i, x: u < 1000,
    "uint8 == 256": lambda u, i, x: u == 256,
    "int8 >= 300": lambda u, i, x: i >= 300,
    "float32 < 1e300": lambda u, i, x: x < 1e300,
    "float32 ne 1e300": lambda u, i, x: x.ne(1e300),
    "add.Scalar 1e300": lambda u, i, x: torch.ops.aten.add.Scalar(x, 1e300),
    "sub.Scalar uint8 1000": lambda u, i, x: torch.ops.aten.sub.Scalar(u, 1000),
    "mul.Scalar int8 300": lambda u, i, x: torch.ops.aten.mul.Scalar(i, 300),
    "bitwise_and.Scalar": lambda u, i, x: torch.ops.aten.bitwise_and.Scalar(i, 300),
    "remainder.Scalar": lambda u, i, x: torch.ops.aten.remainder.Scalar(i, 300),
    "fmod": lambda u, i, x: torch.fmod(i, 300),
    "div floor": lambda u, i, x: torch.div(i, 300, rounding_mode="floor"),
    "foreach_add": lambda u, i, x: torch._foreach_add([u], 1000)[0],
    # Past int64's range a Python int is an unsigned scalar: still an int, still wrapped.
    "uint8 < 2**63": lambda u, i, x: u < 2**63,
    "uint8 + 2**64-1": lambda u, i, x: u + (2**64 - 1),
    "int64 < 2**63": lambda u, i, x: i.long() < 2**63,
    "int64 * 2**63": lambda u, i, x: i.long() * 2**63,
    "foreach_add [2**63]": lambda u, i, x: torch._foreach_add([i.long()], [2**63])[0],
}


@pytest.mark.parametrize("name", list(_WRAPPED_SCALAR_CASES))
def test_binary_scalar_overloads_cast_like_a_wrapped_number(name: str) -> None:
    assert_same(_WRAPPED_SCALAR_CASES[name],
                torch.tensor([0, 2, 232, 255], dtype=torch.uint8),
                torch.tensor([-128, 0, 44, 127], dtype=torch.int8),
                torch.tensor([-3.0e38, 0.0, 1.0, 3.0e38]))


@pytest.mark.parametrize("name,fn", [
    ("fill_", lambda u: u.clone().fill_(300)),
    ("clamp", lambda u: u.clamp(max=300)),
    ("masked_fill", lambda u: u.masked_fill(u > 0, 300)),
    ("add alpha", lambda u: torch.add(u, 1, alpha=300)),
    ("fill_ 2**63", lambda u: u.long().fill_(2**63)),
])
def test_scalar_reading_kernels_still_raise_on_overflow(name: str, fn) -> None:
    assert_raises_like_cpu(fn, torch.tensor([0, 2, 255], dtype=torch.uint8))


@pytest.mark.parametrize("name,fn", [
    ("threshold value", lambda h: F.threshold(h, 0.5, 1e30)),
    ("hardshrink lambd", lambda h: F.hardshrink(h, 1e30)),
    ("hardtanh bounds", lambda h: F.hardtanh(h, -1e30, 1e30)),
])
def test_half_scalar_arguments_raise_on_overflow_like_cpu(name: str, fn) -> None:
    # The CPU kernels convert these Scalars to float16 with the overflow check, although
    # they compute in float32.
    assert_raises_like_cpu(fn, torch.tensor([0.1, 2.0, -3.0], dtype=torch.float16))


def test_half_scalar_arguments_in_range_round_like_cpu() -> None:
    h = torch.tensor([0.5, 0.50048828125, 0.5009765625, -0.50048828125], dtype=torch.float16)
    assert_same(lambda x: F.hardshrink(x, 0.5003), h)  # lambd rounded to half first
    assert_same(lambda x: F.threshold(x, 0.5003, -7.0), h)
    assert_same(lambda x: F.threshold(x, 0.5, -1e30), h.float())


def test_search_scalar_casts_like_a_wrapped_number() -> None:
    # A scalar searched in half boundaries is a wrapped number: 1e30 becomes inf, unchecked.
    s = torch.tensor([-1.0, 0.0, 2.0, 60000.0], dtype=torch.float16)
    assert_same(lambda b: torch.bucketize(1e30, b), s)
    assert_same(lambda b: torch.searchsorted(b, -1e30), s)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int16, torch.int8,
                                   torch.uint8])
def test_gcd_lcm_like_cpu(dtype: torch.dtype) -> None:
    # Euclid's algorithm on the device, with the CPU kernel's wraparounds at the ends of
    # the type (abs of the minimum, lcm of narrow types computed in int).
    info = torch.iinfo(dtype)
    a = torch.randint(info.min, info.max, (200,), dtype=dtype)
    b = torch.randint(info.min, info.max, (200,), dtype=dtype)
    lo = -1 if info.min < 0 else 1
    a[:8] = torch.tensor([0, 0, 1, info.min, info.min, info.max, 12, 7], dtype=dtype)
    b[:8] = torch.tensor([0, 5, 0, info.min, lo, info.max, 18, 0], dtype=dtype)
    small = torch.randint(max(info.min, -50), 50, (2, 100), dtype=dtype)
    for fn in (torch.gcd, torch.lcm):
        assert_same(fn, a, b)
        assert_same(fn, small[0], small[1])
        assert_same(fn, small[:, :3].T, small[0, :2])  # broadcast
    assert_same(lambda x, y: x.gcd_(y), small[0].clone(), small[1])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_frexp_like_cpu(dtype: torch.dtype) -> None:
    # Bit for bit, subnormals included (which the plugin's float arithmetic reads as zero),
    # and (x, 0) for 0, -0, inf and NaN.
    fi = torch.finfo(dtype)
    special = [0., -0., 1., -1., 0.5, 0.75, float("inf"), float("-inf"), float("nan"), fi.max,
               -fi.max, fi.tiny, fi.tiny / 2, fi.tiny / 7, -fi.tiny / 3, 3.0]
    wide = torch.float64
    x = torch.cat([torch.randn(300, dtype=wide) * 1e3, torch.tensor(special, dtype=wide),
                   torch.randn(100, dtype=wide) * fi.tiny]).to(dtype)
    m, e = torch.frexp(x)
    md, ed = (t.cpu() for t in torch.frexp(x.to("tpu")))
    assert md.dtype == m.dtype and ed.dtype == e.dtype == torch.int32
    assert torch.equal(ed, e)
    assert torch.equal(md.nan_to_num(7.0), m.nan_to_num(7.0))
    assert torch.equal(torch.signbit(md[~m.isnan()]), torch.signbit(m[~m.isnan()]))
    out = (torch.empty(0, dtype=dtype, device="tpu"),
           torch.empty(0, dtype=torch.int32, device="tpu"))
    torch.frexp(x.to("tpu"), out=out)
    assert torch.equal(out[1].cpu(), e)


@pytest.mark.parametrize("fn", [torch.i0, torch.special.i0e, torch.special.i1, torch.special.i1e],
                         ids=["i0", "i0e", "i1", "i1e"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_bessel_i_like_cpu(fn, dtype: torch.dtype) -> None:
    # Both series and their seam at 20, float32's early overflow of the unscaled ones (e^x
    # in float32 on the CPU), NaN (unscaled) or +-0 (scaled) at +-inf as on the CPU, i1's
    # odd symmetry; integers promote to float32.
    x = torch.cat([torch.linspace(-100, 100, 2001),
                   torch.tensor([0., -0., 1e-30, 19.999999, 20.0, 20.000001, 88.72, 88.7228,
                                 88.723, 89., float("inf"), float("-inf"), float("nan")])])
    tol = {torch.float32: 1.3e-6, torch.float64: 1e-12, torch.bfloat16: 1.6e-2,
           torch.float16: 1e-3}[dtype]
    # (float16: one subnormal ulp near 0, where i1(x) ~ x / 2 rounds either way.)
    atol = 6e-8 if dtype == torch.float16 else 0
    out = assert_same(fn, x.to(dtype), dtype_tols={dtype: (tol, atol)})
    expected = fn(x.to(dtype))
    finite = ~expected.isnan()
    assert torch.equal(out.cpu()[finite].signbit(), expected[finite].signbit())
    if dtype == torch.float64:
        assert_same(fn, torch.linspace(-700, 715, 1001, dtype=dtype), dtype_tols={dtype: (tol, 0)})
    assert_same(fn, torch.arange(-5, 6))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_sign_of_zeros_and_nan_is_plus_zero(dtype: torch.dtype) -> None:
    # XLA's sign keeps -0.0 (1 / sign(-0.0) was -inf) and NaN; PyTorch's is +0.0 for both.
    x = torch.tensor([-0.0, 0.0, float("nan"), -2.0, 3.0], dtype=dtype)
    for fn in (torch.sign, torch.sgn, lambda t: t.clone().sign_()):
        got, want = fn(x.to(TPU)).cpu(), fn(x)
        assert torch.equal(got, want) and torch.equal(got.signbit(), want.signbit()), got


def test_sign_gradients_are_zero_tensors_on_the_device() -> None:
    # Autograd gives sgn/sign of a real tensor an _efficientzerotensor gradient: an ordinary
    # zero tensor made on tpu (it ran on the CPU and was copied).
    def grads(x):
        x = x.clone().requires_grad_(True)
        (torch.sgn(x) * 2 + torch.sign(x)).sum().backward()
        return x.grad

    assert_same(grads, make((6,), torch.float32))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_mixed_operands_promote_as_the_cpu(dtype: torch.dtype) -> None:
    # TensorIterator casts a tensor of another dtype to the common dtype before computing
    # (float16 + a float32 tensor 0.1 adds float16(0.1); int32 70000 is inf in float16);
    # comparisons cast numbers too (float16(0.1) == 0.1); add/sub read a number cast to the
    # result dtype, mul/div its original value, as does mul/div of a one-element tensor.
    h = torch.tensor([-65504.0, 0.2, 0.0, 0.1, 0.3336], dtype=dtype)
    i32 = torch.tensor([70000, 3, 0, -1, 3000], dtype=torch.int32)
    f32 = torch.tensor(0.1)
    cases = {
        "h + f32 0-dim": lambda a, i, f: a + f,
        "h + f32 vector": lambda a, i, f: a + f.expand(5).clone(),
        "h * i32": lambda a, i, f: a * i,
        "i32 - h": lambda a, i, f: i - a,
        "h * f32 0-dim": lambda a, i, f: a * (f * 1e-7),
        "h / f32 0-dim": lambda a, i, f: a / (f * 3),
        "maximum(h, f32)": lambda a, i, f: torch.maximum(a, f),
        "fmod(h, f32)": lambda a, i, f: torch.fmod(a, f),
        "h == 0.1": lambda a, i, f: a == 0.1,
        "h < 0.1": lambda a, i, f: a < 0.1,
        "h == f32 0-dim": lambda a, i, f: a == f,
        "h >= f32 vector": lambda a, i, f: a >= f.expand(5).clone(),
        "1e39 - h": lambda a, i, f: 1e39 - a,
        "rsub(h, 70000.0)": lambda a, i, f: torch.rsub(a, 70000.0),
    }
    for name, fn in cases.items():
        want = fn(h, i32, f32)
        got = fn(h.to(TPU), i32.to(TPU), f32.to(TPU)).cpu()
        assert got.dtype == want.dtype, name
        assert torch.equal(got.isnan(), want.isnan()), (name, got, want)
        assert torch.equal(got[~got.isnan()], want[~want.isnan()]), (name, got, want)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_fill_with_a_number_out_of_range_as_the_cpu(dtype: torch.dtype, compiled: bool
                                                    ) -> None:
    # The CPU's fill of one float16/bfloat16 element makes inf of a number past the range
    # (and rounds 65519.0 to 65504); of more elements, and of float32, it raises.
    # scalar_tensor, and where with a number branch, fill one element (tpu raised), as
    # graphs do (where's number branch is a scalar_tensor there); nan_to_num casts its
    # replacements unchecked (its decomposition's scalar_tensor raised in graphs).
    big = 1e39 if dtype != torch.float16 else 70000.0
    special = torch.tensor([float("nan"), float("inf"), -float("inf"), 1.0], dtype=dtype)
    for value in (big, 65519.0):
        calls = [lambda d: torch.full((2,), value, dtype=dtype, device=d),
                 lambda d: torch.empty(2, dtype=dtype, device=d).fill_(value),
                 lambda d: torch.empty(1, dtype=dtype, device=d).fill_(value),
                 lambda d: torch.zeros(1, dtype=dtype, device=d).new_full((2,), value),
                 lambda d: torch.scalar_tensor(value, dtype=dtype, device=d),
                 lambda d: torch.where(torch.tensor([True, False], device=d), value,
                                       torch.zeros(2, dtype=dtype, device=d)),
                 lambda d: torch.nan_to_num(special.to(d), nan=value, posinf=value,
                                            neginf=-value)]
        for call in calls:
            torch._dynamo.reset()
            on_tpu = torch.compile(call, backend="tpu") if compiled else call
            try:
                want = call("cpu")
            except RuntimeError:
                with pytest.raises(RuntimeError, match="without overflow"):
                    on_tpu(TPU)
                continue
            assert torch.equal(on_tpu(TPU).cpu(), want), (value, want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_division_by_a_divisor_near_the_top_of_the_range(dtype: torch.dtype) -> None:
    # XLA divides by a broadcast divisor through its reciprocal, subnormal (flushed to zero)
    # past 2^126: x / 1e38 and x / x.max() were all zeros. Results that are normal match the
    # CPU to an ulp (the reciprocal's rounding, as CUDA's division by a scalar has it).
    top = 1e38 if dtype != torch.float64 else 1e307
    x = torch.tensor([3.0, 1.0, 0.9, -2.5], dtype=dtype) * top
    for name, fn in {"x / number": lambda a: a / top,
                     "x / max": lambda a: a / a.abs().max(),
                     "x / column": lambda a: a.reshape(2, 2) / a.reshape(2, 2)[:, :1],
                     "trunc": lambda a: torch.div(a, top, rounding_mode="trunc"),
                     "x / 3e38 tensor": lambda a: a / torch.full_like(a, 3 * top)}.items():
        want, got = fn(x), fn(x.to(TPU)).cpu()
        torch.testing.assert_close(got, want, rtol=2 * torch.finfo(dtype).eps, atol=0,
                                   msg=lambda m: f"{name}: {m}")


@pytest.mark.parametrize("n", [0, 1, 3])
def test_polygamma_in_place_takes_self_first(n: int) -> None:
    # polygamma_(self, n) lowered as polygamma(n, self): an internal error.
    assert_same(lambda x: x.clone().polygamma_(n), torch.linspace(0.3, 4, 7))


@pytest.mark.parametrize("n", [1, 2, 4])
def test_polygamma_far_below_zero_against_float64(n: int) -> None:
    # Below -23 the fixed shift of 24 terms left x + 24 < 1, where XLA's polygamma is wrong
    # (trigamma(-100.2) was -0.0099): the shift now takes as many terms as x needs.
    x = torch.tensor([-0.7, -10.2, -30.5, -100.2, -1001.2, 0.3, 7.5], dtype=torch.float64)
    exact = torch.polygamma(n, x)
    got = torch.polygamma(n, x.to(TPU)).cpu()
    torch.testing.assert_close(got, exact, rtol=1e-10, atol=0)
    # float32: the shift's terms of both signs (+-32 at x + k = +-0.5 for n = 4) cancel to
    # results of order 1e-6, so the error is absolute.
    got32 = torch.polygamma(n, x.float().to(TPU)).cpu().double()
    torch.testing.assert_close(got32, torch.polygamma(n, x.float().double()), rtol=1e-3,
                               atol=2e-6)
