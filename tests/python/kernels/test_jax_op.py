"""JAX and Pallas kernels as PyTorch ops (torchtpu.jax_op): each inside a torch model, in
eager mode and compiled, against the same model with the computation written in PyTorch
and run on the CPU."""

from __future__ import annotations

import copy
import math

import jax.numpy as jnp
import pytest
import torch
from _jax_kernels import (
    RMS_ROPE,
    ROW_STATS,
    SOFTMAX,
    WRITE_ROWS,
    rms_rope_torch,
    rope_tables,
    row_stats_torch,
)

import torchtpu

TOL = {"rtol": 1e-5, "atol": 1e-5}


class Attention(torch.nn.Module):
    """Query projection, RMSNorm + rotary embedding per head, softmax over the head dim
    (a stand-in for attention scores), output projection: the norm/rope and softmax are
    given as functions, so the same module runs the JAX ops or PyTorch code."""

    def __init__(self, norm_rope, softmax, dim: int = 32, heads: int = 2) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.q = torch.nn.Linear(dim, dim)
        self.norm = torch.nn.Parameter(torch.linspace(0.5, 1.5, dim // heads))
        self.out = torch.nn.Linear(dim, dim)
        self.norm_rope, self.softmax = norm_rope, softmax

    def forward(self, x, cos, sin):
        b, s, d = x.shape
        q = self.norm_rope(self.q(x).view(b, s, self.heads, self.head_dim), self.norm, cos, sin)
        p = self.softmax(q.reshape(b * s * self.heads, self.head_dim))
        return self.out(p.view(b, s, d))


def _models():
    torch.manual_seed(0)
    reference = Attention(rms_rope_torch, lambda x: torch.softmax(x, dim=-1))
    jax_model = copy.deepcopy(reference)
    jax_model.norm_rope = lambda x, w, c, s: RMS_ROPE(x, w, c, s, eps=1e-6)
    jax_model.softmax = lambda x: SOFTMAX(x, block_rows=8)
    return reference, jax_model.to("tpu")


def _delta(before: dict, after: dict, key: str) -> int:
    return after.get(key, 0) - before.get(key, 0)


def test_rms_rope_and_pallas_softmax_in_a_model_eager() -> None:
    reference, model = _models()
    x = torch.randn(2, 4, 32)
    cos, sin = rope_tables(4, 16)
    want = reference(x, cos, sin)
    got = model(x.to("tpu"), cos.to("tpu"), sin.to("tpu"))
    torch.testing.assert_close(got.cpu(), want, **TOL)


def test_rms_rope_and_pallas_softmax_compiled_in_one_graph() -> None:
    torch._dynamo.reset()
    reference, model = _models()
    compiled = torch.compile(model, backend="tpu")
    cos, sin = rope_tables(4, 16)
    cos_t, sin_t = cos.to("tpu"), sin.to("tpu")
    breaks = torchtpu.debug.metrics()["num_graph_breaks"]  # counted per process
    for step in range(2):
        x = torch.randn(2, 4, 32)
        before = torchtpu.debug.metrics()
        got = compiled(x.to("tpu"), cos_t, sin_t)
        after = torchtpu.debug.metrics()
        torch.testing.assert_close(got.cpu(), reference(x, cos, sin), **TOL)
        if step == 1:
            # The JAX functions are inside the graph's module: one program per call, no
            # eager op, no graph break.
            assert _delta(before, after, "num_graph_executions") == 1
            assert _delta(before, after, "num_eager_ops") == 0
    assert torchtpu.debug.metrics()["num_graph_breaks"] == breaks


def test_cpu_tensors_have_no_kernel() -> None:
    cos, sin = rope_tables(3, 8)
    with pytest.raises(NotImplementedError, match="jaxtest::rms_rope.*CPU"):
        RMS_ROPE(torch.randn(2, 3, 2, 8), torch.ones(8), cos, sin)


class KVWriter(torch.nn.Module):
    """A cache buffer written in place by the donated JAX update."""

    def __init__(self, update) -> None:
        super().__init__()
        self.register_buffer("cache", torch.zeros(16, 8))
        self.update = update

    def forward(self, rows, start):
        written = self.update(self.cache, rows, start)
        return written, self.cache.sum(dim=0)


def _torch_update(cache, rows, start):
    s = int(start[0])
    cache[s:s + rows.shape[0]] = rows
    return cache


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_donated_update_writes_the_argument_in_place(compiled: bool) -> None:
    torch._dynamo.reset()
    reference = KVWriter(_torch_update)
    model = KVWriter(WRITE_ROWS).to("tpu")
    run = torch.compile(model, backend="tpu") if compiled else model
    cache_before = model.cache
    for start in (3, 9, 3):
        rows = torch.randn(4, 8)
        pos = torch.tensor([start], dtype=torch.int32)
        before = torchtpu.debug.metrics()
        written, sums = run(rows.to("tpu"), pos.to("tpu"))
        after = torchtpu.debug.metrics()
        want_written, want_sums = reference(rows, pos)
        assert model.cache is cache_before  # updated in place, not replaced
        torch.testing.assert_close(model.cache.cpu(), reference.cache, **TOL)
        torch.testing.assert_close(written.cpu(), want_written, **TOL)
        torch.testing.assert_close(sums.cpu(), want_sums, **TOL)
        if not compiled:
            assert written is model.cache  # the op hands the donated argument back
        elif start == 9:
            # XLA wrote into the cache's buffer: the graph donated it.
            assert _delta(before, after, "num_donated_inputs") == 1


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_multi_output_structure_and_dtypes(compiled: bool) -> None:
    torch._dynamo.reset()

    def head(x, stats):
        top, index, moments = stats(torch.tanh(x))
        return top + moments["mean"] * moments["var"], index

    fn = torch.compile(head, backend="tpu") if compiled else head
    x = torch.randn(6, 10)
    got_value, got_index = fn(x.to("tpu"), ROW_STATS)
    want_value, want_index = head(x, row_stats_torch)
    torch.testing.assert_close(got_value.cpu(), want_value, **TOL)
    assert got_index.dtype == torch.int32
    assert torch.equal(got_index.cpu(), want_index)


def test_one_export_per_signature() -> None:
    # Shapes no other test uses, so the count below is this test's own.
    x = torch.randn(40, 8, device="tpu")
    SOFTMAX(x, block_rows=8)
    n = len(SOFTMAX._exports)
    SOFTMAX(torch.randn(40, 8, device="tpu"), block_rows=8)  # same signature: cached
    assert len(SOFTMAX._exports) == n
    SOFTMAX(x, block_rows=4)  # a static argument is part of the signature
    SOFTMAX(torch.randn(80, 8, device="tpu"), block_rows=8)  # so is a shape
    assert len(SOFTMAX._exports) == n + 2


def test_dynamic_sizes_are_specialized_per_size() -> None:
    torch._dynamo.reset()
    fn = torch.compile(lambda x: SOFTMAX(x, block_rows=4) * 2, backend="tpu", dynamic=True)
    for rows in (8, 12, 8):
        x = torch.randn(rows, 8)
        torch.testing.assert_close(fn(x.to("tpu")).cpu(), torch.softmax(x, -1) * 2, **TOL)


def test_torch_library_opcheck() -> None:
    # PyTorch's own checks of a custom op: schema, fake implementation against the real
    # one, and AOTAutograd with dynamic shapes. (Its autograd-registration check handles
    # CPU, CUDA and XPU tensors only.)
    cos, sin = rope_tables(4, 16)
    cases = [
        (RMS_ROPE, (torch.randn(2, 4, 2, 16), torch.rand(16), cos, sin), True),
        (SOFTMAX, (torch.randn(16, 8),), True),
        (ROW_STATS, (torch.randn(4, 5),), False),
    ]
    for op, args, grad in cases:
        args = tuple(a.to("tpu").requires_grad_(grad and a.is_floating_point()) for a in args)
        result = torch.library.opcheck(
            op.custom_op, args,
            test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_dynamic"))
        assert set(result.values()) == {"SUCCESS"}, (op.qualname, result)


def _reduce(x, axes: tuple = (0,), mode: str = "sum", keepdims: bool = False,
            scale: float = 1.0, offset: int = 0):
    fn = {"sum": jnp.sum, "max": jnp.max}[mode]
    return fn(x, axis=axes, keepdims=keepdims) * scale + offset


REDUCE = torchtpu.jax_op("jaxtest::reduce", _reduce,
                         static_argnames=("axes", "mode", "keepdims", "scale", "offset"))


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_static_arguments_of_every_kind(compiled: bool) -> None:
    torch._dynamo.reset()
    assert REDUCE.schema == ("(Tensor x, int[] axes=[0], str mode=\"sum\", bool keepdims=False, "
                             "float scale=1.0, int offset=0) -> Tensor[]")

    def f(x):
        return (REDUCE(x, (0, 2), "max", True, 0.5, 3) + REDUCE(x, axes=(0,))[None])

    run = torch.compile(f, backend="tpu") if compiled else f
    x = torch.randn(3, 4, 5)
    want = x.amax(dim=(0, 2), keepdim=True) * 0.5 + 3 + x.sum(0)[None]
    torch.testing.assert_close(run(x.to("tpu")).cpu(), want, **TOL)


def _same_and_sum(x):
    return x, jnp.sum(x, dtype=x.dtype)


SAME_AND_SUM = torchtpu.jax_op("jaxtest::same_and_sum", _same_and_sum)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("dtype", [torch.bool, torch.int8, torch.uint8, torch.int16,
                                   torch.uint16, torch.int32, torch.uint32, torch.int64,
                                   torch.uint64, torch.float16, torch.bfloat16, torch.float32,
                                   torch.float64, torch.complex64, torch.complex128], ids=str)
def test_every_documented_dtype_goes_in_and_out(dtype: torch.dtype, compiled: bool) -> None:
    # Each dtype docs/kernels.md lists: values come back bit for bit, integers at their
    # extremes, and a sum in the dtype wraps as JAX's does (min + 1 + max is 0 for every
    # integer dtype).
    torch._dynamo.reset()
    if dtype == torch.bool:
        x, want_sum = torch.tensor([True, False, True]), torch.tensor(True)
    elif dtype.is_floating_point or dtype.is_complex:
        x = torch.tensor([0.0, -1.5, 3.25]).to(dtype)
        want_sum = torch.tensor(1.75).to(dtype)
    else:
        info = torch.iinfo(dtype)
        x, want_sum = torch.tensor([info.min, 1, info.max], dtype=dtype), torch.tensor(0)
    fn = torch.compile(SAME_AND_SUM, backend="tpu") if compiled else SAME_AND_SUM
    same, total = fn(x.to("tpu"))
    assert same.dtype == dtype and torch.equal(same.cpu(), x)
    assert total.dtype == dtype and total.shape == ()
    assert torch.equal(total.cpu().to(torch.complex128), want_sum.to(torch.complex128))


def _with_none(x):
    return x + 1, None, {"twice": x * 2, "gone": None}


_WITH_NONE = torchtpu.jax_op("tpu_test::with_none", _with_none)
_AXPY = torchtpu.jax_op("tpu_test::axpy", lambda a, x: a * x + 1)


@pytest.mark.parametrize("compiled", [False, True])
def test_outputs_with_none_keep_fns_structure(compiled: bool) -> None:
    x = torch.randn(3)
    torch._dynamo.reset()
    op = torch.compile(_WITH_NONE, backend="tpu") if compiled else _WITH_NONE
    first, none, rest = op(x.to("tpu"))
    assert none is None and rest["gone"] is None and set(rest) == {"twice", "gone"}
    torch.testing.assert_close(first.cpu(), x + 1)
    torch.testing.assert_close(rest["twice"].cpu(), x * 2)


def test_outputs_in_a_structure_registered_with_jax() -> None:
    import dataclasses

    import jax

    @jax.tree_util.register_dataclass
    @dataclasses.dataclass
    class Stats:
        mean: jax.Array
        scale: jax.Array

    op = torchtpu.jax_op("tpu_test::stats", lambda x: Stats(x.mean(), x.std()))
    x = torch.randn(8)
    out = op(x.to("tpu"))
    assert isinstance(out, Stats)
    torch.testing.assert_close(out.mean.cpu(), x.mean(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(out.scale.cpu(), x.std(unbiased=False), rtol=1e-5, atol=1e-6)


def test_a_zero_dim_cpu_tensor_argument_is_a_scalar() -> None:
    x = torch.randn(4)
    out = _AXPY(torch.tensor(2.0), x.to("tpu"))
    assert out.device.type == "tpu"
    torch.testing.assert_close(out.cpu(), 2.0 * x + 1)


class _HoldsAnOp(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.op = _AXPY
        self.a = torch.nn.Parameter(torch.tensor(3.0))

    def forward(self, x):
        return self.op(self.a, x)


def test_a_module_holding_an_op_copies_and_pickles() -> None:
    import io

    m = _HoldsAnOp().to("tpu")
    clone = copy.deepcopy(m)
    assert clone.op is _AXPY
    buf = io.BytesIO()
    torch.save(m, buf)
    buf.seek(0)
    loaded = torch.load(buf, weights_only=False)
    x = torch.randn(4)
    torch.testing.assert_close(loaded(x.to("tpu")).cpu(), 3.0 * x + 1)


_DIV = torchtpu.jax_op("jaxtest::div_static", lambda x, f=1.0: x / f, static_argnames=("f",))


def test_static_floats_are_keyed_by_their_bits() -> None:
    # -0.0 == 0.0 as numbers: both calls shared one export, and x / 0.0 gave -inf. A NaN
    # equals no NaN: every call with a fresh NaN exported again.
    x = torch.ones(2, device="tpu")
    assert _DIV(x, f=-0.0).cpu().tolist() == [-math.inf, -math.inf]
    assert _DIV(x, f=0.0).cpu().tolist() == [math.inf, math.inf]
    _DIV(x, f=float("nan")).cpu()
    exports = len(_DIV._exports)
    assert all(math.isnan(v) for v in _DIV(x, f=float("nan")).cpu().tolist())
    assert len(_DIV._exports) == exports


_SCALE_DONATED = torchtpu.jax_op("jaxtest::scale_donated", lambda c, w: c * w,
                                 donate_argnums=(0,))


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_donated_update_has_gradients(compiled: bool) -> None:
    # The backward read the donated argument after the op had written it (autograd's
    # "modified by an inplace operation"): it saves the value from before the call, which
    # the gradient of c * w in w is made of.
    torch._dynamo.reset()

    def step(cache: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        _SCALE_DONATED(cache, w)
        return (cache * torch.arange(12.0, device=cache.device).view(3, 4)).sum()

    run = torch.compile(step, backend="tpu") if compiled else step
    cache, w = torch.randn(3, 4), torch.randn(3, 4)
    w_t = w.to("tpu").requires_grad_()
    run(cache.to("tpu"), w_t).backward()
    torch.testing.assert_close(w_t.grad.cpu(), cache * torch.arange(12.0).view(3, 4), **TOL)


_ADD = torchtpu.jax_op("jaxtest::add_devices", lambda x, y: x + y)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_cpu_tensors_are_refused_in_compiled_graphs_too(compiled: bool) -> None:
    # A compiled graph ran the call on tpu and handed back a CPU tensor.
    torch._dynamo.reset()
    run = torch.compile(lambda a, b: _ADD(a, b), backend="tpu") if compiled else _ADD
    with pytest.raises(Exception, match="same device|expected all tensors"):
        run(torch.ones(3), torch.ones(3, device="tpu"))
    torch._dynamo.reset()
    with pytest.raises(Exception, match="CPU|cpu"):
        run(torch.ones(3), torch.ones(3))
