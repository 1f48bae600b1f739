"""A sweep of every lowering family over dtypes and mismatched ranks, compared with the CPU.

Run as a script (``python _sweep.py``) it prints one line per disagreement and exits 0;
``test_no_abort_sweep.py`` runs it in subprocesses (two shards at once, ``SWEEP_SHARD``), so
an abort shows as a failed test rather than a dead test run. Each case runs on the CPU
first: where the CPU raises, tpu must raise too (any exception); where the CPU succeeds, tpu
must give the same dtype, shape and values (within the dtype's tolerance). A tpu result
where the CPU raises (an op the CPU does not implement for a dtype, such as gelu of
integers) is counted as lenient, not as a disagreement: CUDA too implements dtypes the CPU
does not.
"""

from __future__ import annotations

import os
import sys
import warnings

import torch
import torch.nn.functional as F

import torchtpu

DTYPES = [torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32,
          torch.uint8, torch.bool, torch.complex64]
# (self, other) shapes: equal, broadcast from a lower rank, to a higher rank, 0-dim, empty.
SHAPE_PAIRS = [((3, 4), (3, 4)), ((2, 1, 4), (4,)), ((), (3, 4)), ((0, 4), (1, 4))]

UNARY = {
    "abs": torch.abs, "neg": torch.neg, "exp": torch.exp, "sqrt": torch.sqrt, "sin": torch.sin,
    "floor": torch.floor, "sign": torch.sign, "sigmoid": torch.sigmoid, "relu": torch.relu,
    "gelu": F.gelu, "tanh": torch.tanh, "erf": torch.erf, "log1p": torch.log1p,
    "reciprocal": torch.reciprocal, "bitwise_not": torch.bitwise_not, "isnan": torch.isnan,
    "round": torch.round, "softplus": F.softplus, "silu": F.silu, "logical_not": torch.logical_not,
}
BINARY = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div,
    "floor_divide": torch.floor_divide, "remainder": torch.remainder, "pow": torch.pow,
    "atan2": torch.atan2, "maximum": torch.maximum, "minimum": torch.minimum, "eq": torch.eq,
    "lt": torch.lt, "logical_and": torch.logical_and, "bitwise_and": torch.bitwise_and,
    "where": lambda a, b: torch.where(a > 0 if a.dtype != torch.bool else a, a, b),
    "hypot": torch.hypot, "fmod": torch.fmod, "copysign": torch.copysign,
    "xlogy": torch.xlogy, "lerp": lambda a, b: torch.lerp(a, b, 0.5),
}
REDUCE = {
    "sum": lambda x: x.sum(-1), "prod": lambda x: x.prod(), "mean": lambda x: x.mean(-1),
    "amax": lambda x: x.amax(-1), "argmax": lambda x: x.argmax(-1),
    "cumsum": lambda x: x.cumsum(-1), "softmax": lambda x: x.softmax(-1),
    "logsumexp": lambda x: x.logsumexp(-1), "var": lambda x: x.var(-1),
    "norm": lambda x: torch.linalg.vector_norm(x, dim=-1), "any": lambda x: x.any(-1),
    "sort": lambda x: x.sort(-1).values, "topk": lambda x: x.topk(1, -1).values,
    "std_mean": lambda x: torch.std_mean(x, -1)[0],
}
SHAPE = {
    "cat": lambda a, b: torch.cat([a, b.expand_as(a) if b.dim() <= a.dim() else b], 0),
    "stack": lambda a, b: torch.stack([a, a]), "flip": lambda a, b: a.flip(-1),
    "roll": lambda a, b: a.roll(1, -1), "repeat": lambda a, b: a.repeat(2, 1),
    "transpose": lambda a, b: a.transpose(0, -1).contiguous(),
    "gather": lambda a, b: a.gather(-1, torch.zeros_like(a, dtype=torch.long)),
    "index_select": lambda a, b: a.index_select(-1, torch.tensor([0, 0], device=a.device)),
    "masked_fill": lambda a, b: a.masked_fill(torch.ones_like(a, dtype=torch.bool), 1),
    "clamp": lambda a, b: a.clamp(0, 1), "tril": lambda a, b: a.tril(),
    "scatter_add": lambda a, b: a.scatter_add(-1, torch.zeros_like(a, dtype=torch.long), a),
    "index_put": lambda a, b: a.index_put((torch.tensor([0], device=a.device),), b),
    "take": lambda a, b: a.take(torch.tensor([0, 1], device=a.device)),
    "pad": lambda a, b: F.pad(a, (1, 2)), "narrow": lambda a, b: a.narrow(-1, 1, 2) * 1,
    "expand_add": lambda a, b: a.expand(2, *a.shape) + b,
}
MATMUL = {
    "matmul": lambda a, b: a @ b.transpose(-1, -2) if b.dim() >= 2 else a @ b,
    "mm": lambda a, b: torch.mm(a, b.t()), "bmm": lambda a, b: torch.bmm(a, b.transpose(1, 2)),
    "addmm": lambda a, b: torch.addmm(a[:1], a, b.t()), "einsum": lambda a, b: torch.einsum(
        "ij,kj->ik", a, b), "outer": lambda a, b: torch.outer(a.flatten(), b.flatten()),
    "linear": lambda a, b: F.linear(a, b),
}
NN = {
    "conv1d": lambda x: F.conv1d(x, torch.ones(2, x.shape[1], 2, dtype=x.dtype, device=x.device)),
    "conv2d": lambda x: F.conv2d(x.unsqueeze(0), torch.ones(2, x.shape[0], 2, 2, dtype=x.dtype,
                                                            device=x.device)),
    "max_pool2d": lambda x: F.max_pool2d(x.unsqueeze(0), 2),
    "avg_pool2d": lambda x: F.avg_pool2d(x.unsqueeze(0), 2),
    "adaptive_avg_pool2d": lambda x: F.adaptive_avg_pool2d(x.unsqueeze(0), (2, 3)),
    "bilinear": lambda x: F.interpolate(x.unsqueeze(0), size=(5, 7), mode="bilinear"),
    "bicubic": lambda x: F.interpolate(x.unsqueeze(0), size=(5, 7), mode="bicubic"),
    "nearest": lambda x: F.interpolate(x.unsqueeze(0), size=(5, 7), mode="nearest"),
    "reflect": lambda x: F.pad(x.unsqueeze(0), (1, 1, 1, 1), mode="reflect"),
    "layer_norm": lambda x: F.layer_norm(x, x.shape[-1:]),
    "group_norm": lambda x: F.group_norm(x.unsqueeze(0), 1),
    "embedding": lambda x: F.embedding(torch.tensor([[0, 1]], device=x.device), x.flatten(0, 1)),
    "cross_entropy": lambda x: F.cross_entropy(x.flatten(0, 1),
                                               torch.zeros(x.shape[0] * x.shape[1],
                                                           dtype=torch.long, device=x.device)),
    "mse_loss": lambda x: F.mse_loss(x, x * 2), "dropout_eval": lambda x: F.dropout(x, 0.5, False),
    "log_softmax": lambda x: F.log_softmax(x, -1), "hardtanh": lambda x: F.hardtanh(x),
}
NN_SHAPES = [(3, 4, 5), (2, 6, 6)]


def make(shape, dtype) -> torch.Tensor:
    g = torch.Generator().manual_seed(len(shape) * 31 + DTYPES.index(dtype))
    x = torch.randn(shape, generator=g) * 3
    if dtype == torch.bool:
        return x > 0
    if dtype.is_complex:
        return torch.complex(x, torch.randn(shape, generator=g) * 3)
    if not dtype.is_floating_point:
        x = x.abs() if dtype == torch.uint8 else x
        return x.round().to(dtype)
    return x.to(dtype)


TOLS = {torch.float64: 1e-7, torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 5e-2,
        torch.complex64: 1e-4}


# PyTorch's CPU kernel for uint8 bilinear images (an AVX2 path) computes in fixed point
# with its own rounding; ours rounds a float sum per pass, and a few pixels differ by one.
UINT8_OFF_BY_ONE = {"bilinear"}


def same(a, b, atol_int: int = 0) -> str | None:
    if isinstance(a, torch.Tensor):
        if b.device.type != "tpu":
            return f"result on {b.device}"
        b = b.cpu()
        if a.dtype != b.dtype or a.shape != b.shape:
            return f"cpu {a.dtype}{list(a.shape)} tpu {b.dtype}{list(b.shape)}"
        if a.dtype.is_complex:
            a, b = torch.view_as_real(a.resolve_conj()), torch.view_as_real(b.resolve_conj())
            tol = TOLS[torch.complex64]
            if not torch.allclose(a.double(), b.double(), rtol=tol, atol=tol, equal_nan=True):
                return "values differ"
            return None
        if a.dtype.is_floating_point:
            tol = TOLS[a.dtype]
            if not torch.allclose(a.double(), b.double(), rtol=tol, atol=tol, equal_nan=True):
                d = (a.double() - b.double()).abs().nan_to_num(0).max().item()
                return f"values differ (max {d:.3g})"
            return None
        if atol_int and a.dtype == torch.uint8:
            ok = (a.int() - b.int()).abs().max().item() <= atol_int if a.numel() else True
            return None if ok else "values differ"
        return None if torch.equal(a, b) else "values differ"
    return None if a == b else f"cpu {a} tpu {b}"


LENIENT = "lenient"


def run_case(name: str, fn, args) -> str | None:
    try:
        expected = fn(*args)
    except Exception:  # noqa: BLE001
        cpu_raised = True
    else:
        cpu_raised = False
    try:
        got = fn(*[a.to("tpu") for a in args])
        if isinstance(got, torch.Tensor):
            got.cpu()
    except Exception as e:  # noqa: BLE001
        if cpu_raised:
            return None
        return f"tpu raised {type(e).__name__}: {str(e).splitlines()[0][:160]}"
    if cpu_raised:
        return LENIENT
    return same(expected, got, 1 if name.split()[0] in UINT8_OFF_BY_ONE else 0)


def cases():
    for dtype in DTYPES:
        for shape in [(2, 3, 4), ()]:
            for name, fn in {**UNARY, **REDUCE}.items():
                yield f"{name} {dtype} {shape}", fn, (make(shape, dtype),)
        for a_shape, b_shape in SHAPE_PAIRS:
            for name, fn in {**BINARY, **SHAPE}.items():
                yield f"{name} {dtype} {a_shape} {b_shape}", fn, (make(a_shape, dtype),
                                                                  make(b_shape, dtype))
        for a_shape, b_shape in [((3, 4), (5, 4)), ((2, 3, 4), (2, 5, 4)), ((4,), (4,))]:
            for name, fn in MATMUL.items():
                yield f"{name} {dtype} {a_shape} {b_shape}", fn, (make(a_shape, dtype),
                                                                  make(b_shape, dtype))
        for shape in NN_SHAPES:
            for name, fn in NN.items():
                yield f"{name} {dtype} {shape}", fn, (make(shape, dtype),)
    # Mixed dtypes: every pair through the promoting binaries.
    for a in DTYPES:
        for b in DTYPES:
            for name in ["add", "mul", "div", "maximum", "where", "atan2"]:
                yield f"{name} {a}x{b}", BINARY[name], (make((3, 4), a), make((4,), b))


def main() -> int:
    warnings.simplefilter("ignore")
    # SWEEP_SHARD=k/n runs every n-th case from the k-th: the test runs the shards at once.
    shard, shards = (int(x) for x in os.environ.get("SWEEP_SHARD", "0/1").split("/"))
    n = lenient = 0
    for i, (name, fn, args) in enumerate(cases()):
        if i % shards != shard:
            continue
        n += 1
        problem = run_case(name, fn, args)
        if problem == LENIENT:
            lenient += 1
        elif problem:
            print(f"MISMATCH {name}: {problem}", flush=True)
    m = torchtpu.debug.metrics()
    print(f"cases {n}, lenient {lenient}")
    print(f"lowering_errors {m['lowering_errors']}")
    print(f"fallbacks {sorted(m['fallback_ops'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
