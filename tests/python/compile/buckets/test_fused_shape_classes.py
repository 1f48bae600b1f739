"""Fused eager graphs through shape classes (dynamo/buckets/shape_class.py, fused_graph.py):
a graph recorded at a new length inside a known bucket runs a program compiled for the
bucket; an op without a padding rule keeps its graph at exact sizes, with the reason.

Every program the process obtains is counted (`programs_obtained`), host transfers and
eager helpers included. Results are compared with the CPU's.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable

import pytest
import torch
from _compare import eager_mode, programs_obtained

import torchtpu
from torchtpu.dynamo.buckets import bucket_size
from torchtpu.dynamo.buckets.fused_graph import (
    NotAView,
    _target,
    build_graph,
    view_read,
    view_write,
)
from torchtpu.dynamo.buckets.recorded import Graph, TensorMeta
from torchtpu.dynamo.buckets.shape_class import _evaluator, key_and_ints


def attention(x: torch.Tensor, w: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor
              ) -> torch.Tensor:
    """Causal attention over a length that varies: views, a slice of a parameter, a
    masked softmax and a contraction over the padded dim."""
    t = x.shape[0]
    q, k = (x + pos[:t]) @ w, x @ w.t()
    q, k = (z.view(t, 2, 4).transpose(0, 1) for z in (q, k))
    att = (q @ k.transpose(-2, -1)) / math.sqrt(4)
    att = att.masked_fill(~mask[:t, :t], float("-inf")).softmax(-1)
    return (att @ k).transpose(0, 1).reshape(t, 8).sum(0) + x.sum()


def test_fused_graph_compiles_per_bucket_not_per_length(monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    monkeypatch.delenv("TORCHTPU_SHAPE_BUCKETS", raising=False)
    monkeypatch.setenv("TORCHTPU_MIN_BUCKET", "8")
    torch.manual_seed(0)
    w, pos = torch.randn(8, 8), torch.randn(32, 8)
    mask = torch.tril(torch.ones(32, 32, dtype=torch.bool))
    w_t, pos_t, mask_t = w.to("tpu"), pos.to("tpu"), mask.to("tpu")
    seen: set[int] = set()
    needed_at: dict[int, int] = {}
    with eager_mode("fused"):
        for t in range(5, 21):
            x = torch.randn(t, 8)
            before = programs_obtained()
            got = attention(x.to("tpu"), w_t, pos_t, mask_t).cpu()
            needed_at[t] = programs_obtained() - before
            torch.testing.assert_close(got, attention(x, w, pos, mask), rtol=1e-5, atol=1e-5)
            # The first length compiles at its size; the second makes the class symbolic.
            if t > 6 and bucket_size(t) in seen:
                assert needed_at[t] == 0, f"length {t}: {needed_at} programs"
            if t > 5:
                seen.add(bucket_size(t))
    assert sum(needed_at[t] for t in range(7, 21)) <= 2 * len(seen), needed_at


def test_window_read_whole_joins_its_class(monkeypatch: pytest.MonkeyPatch) -> None:
    """A slice covering its whole buffer (`pos[:8]`, `mask[:8, :8]` of an 8-row window) is
    read as the view it is, so the full length runs the program of its bucket."""
    monkeypatch.delenv("TORCHTPU_SHAPE_BUCKETS", raising=False)
    monkeypatch.setenv("TORCHTPU_MIN_BUCKET", "8")
    torch.manual_seed(0)
    pos = torch.randn(8, 4)
    mask = torch.tril(torch.ones(8, 8, dtype=torch.bool))
    pos_t, mask_t = pos.to("tpu"), mask.to("tpu")

    def f(x: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        t = x.shape[0]
        y = x + pos[:t]
        return (y @ y.t()).masked_fill(~mask[:t, :t], 0.0).sum(-1)

    needed_at: dict[int, int] = {}
    with eager_mode("fused"):
        for t in range(5, 9):
            x = torch.randn(t, 4)
            before = programs_obtained()
            got = f(x.to("tpu"), pos_t, mask_t).cpu()
            needed_at[t] = programs_obtained() - before
            torch.testing.assert_close(got, f(x, pos, mask), rtol=1e-5, atol=1e-5)
    # 5: exact; 6: the class turns symbolic (bucket 8); 7 and 8 (the whole window): none.
    assert needed_at[7] == 0 and needed_at[8] == 0, needed_at


def test_scalar_arguments_are_part_of_a_graph_seen_before(monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    """A padded graph is found again by its recorder's key, which holds every argument's
    value: the same structure at the same length with another Python number (a wrapped
    scalar tensor), another `alpha` (a Scalar) or another dim runs with its own value,
    never the first one's."""
    monkeypatch.delenv("TORCHTPU_SHAPE_BUCKETS", raising=False)
    monkeypatch.setenv("TORCHTPU_MIN_BUCKET", "8")
    torch.manual_seed(0)
    w = torch.randn(8, 8)
    w_t = w.to("tpu")

    def f(x: torch.Tensor, w: torch.Tensor, scale: float, alpha: int, dim: int
          ) -> torch.Tensor:
        y = torch.add(x @ w * scale, x, alpha=alpha)
        return y.sum(dim)

    with eager_mode("fused"):
        for t in (5, 6, 7, 7, 6):
            x = torch.randn(t, 8)
            for scale, alpha, dim in ((0.5, 1, 0), (3.0, 1, 0), (0.5, 4, 0), (0.5, 1, 1)):
                got = f(x.to("tpu"), w_t, scale, alpha, dim).cpu()
                torch.testing.assert_close(got, f(x, w, scale, alpha, dim), rtol=1e-5,
                                           atol=1e-5)


def _other_structure_first(f: Callable[..., torch.Tensor], lengths: range,
                           ) -> dict[int, int]:
    """Programs per length of `f(x, w, first)` in fused mode, its first length recording
    another structure over the same inputs; results compared with the CPU's."""
    return _programs_per_length(lambda x, w: f(x, w, x.shape[0] == lengths[0]), lengths)


def test_first_graph_takes_its_sizes_from_another_structure(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A loop whose first length records another structure (a context of one token): the
    next structure's first graph is made symbolic from the two, so its second length,
    inside the bucket of the first, compiles nothing."""
    monkeypatch.delenv("TORCHTPU_SHAPE_BUCKETS", raising=False)
    monkeypatch.setenv("TORCHTPU_MIN_BUCKET", "8")

    def f(x: torch.Tensor, w: torch.Tensor, first: bool) -> torch.Tensor:
        y = torch.relu(x @ w)
        return (y * 2 if first else y).sum(0) + x[-1]

    needed_at = _other_structure_first(f, range(5, 8))
    assert needed_at[7] == 0, needed_at


def test_int_equal_to_a_length_is_guarded(monkeypatch: pytest.MonkeyPatch) -> None:
    """A constant equal to the length when the class is guessed (the slice's 6 at length
    6) is taken for the length; the next length fails the guard and the class is made
    symbolic from its own two graphs, its results right at every length."""
    monkeypatch.delenv("TORCHTPU_SHAPE_BUCKETS", raising=False)
    monkeypatch.setenv("TORCHTPU_MIN_BUCKET", "8")

    def f(x: torch.Tensor, w: torch.Tensor, first: bool) -> torch.Tensor:
        y = x @ w
        return y.sum(0) if first else y[:, :6].sum(0) + x.sum()

    needed_at = _other_structure_first(f, range(5, 9))
    assert needed_at[8] == 0, needed_at


def test_op_without_padding_rule_stays_exact(monkeypatch: pytest.MonkeyPatch,
                                             caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.delenv("TORCHTPU_SHAPE_BUCKETS", raising=False)
    monkeypatch.setenv("TORCHTPU_MIN_BUCKET", "8")

    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.flip(x * 2, dims=[0]).cumsum(0) + 1

    with eager_mode("fused"), caplog.at_level(logging.INFO, logger="torchtpu"):
        for t in (9, 10, 11):
            x = torch.randn(t, 3)
            torch.testing.assert_close(f(x.to("tpu")).cpu(), f(x))
    reasons = [r.getMessage() for r in caplog.records if "per exact size" in r.getMessage()]
    assert reasons and any("flip" in r for r in reasons), reasons


def _programs_per_length(step: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
                         lengths: range) -> dict[int, int]:
    """The programs `step(x, w)` obtains in fused eager mode at each length of x ([t, 8]),
    each result compared with the CPU's."""
    torch.manual_seed(0)
    w = torch.randn(8, 8)
    w_t = w.to("tpu")
    needed_at: dict[int, int] = {}
    with eager_mode("fused"):
        for t in lengths:
            x = torch.randn(t, 8)
            x_t = x.to("tpu")
            before = programs_obtained()
            got = step(x_t, w_t).cpu()
            needed_at[t] = programs_obtained() - before
            torch.testing.assert_close(got, step(x, w), rtol=1e-5, atol=1e-5)
    return needed_at


def _factories(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Tensors made at the length (torch.ones/zeros/full are an empty tensor and an in-place
    fill; torch.arange writes an empty out= tensor), a causal mask made from it, SDPA (whose
    softmax makes a scalar tensor), in-place ops on a fresh tensor, an out= variant and
    conversions to other dtypes (copies across dtypes)."""
    t, dev = x.shape[0], x.device
    mask = torch.ones(t, t, dtype=torch.bool, device=dev).tril()
    pos = torch.arange(t, device=dev)[:, None] * 0.25 + torch.arange(
        1, t + 1, device=dev, dtype=torch.float64)[:, None].float()
    y = torch.zeros(t, 8, device=dev).add_(x @ w) + torch.full((t, 1), 0.5, device=dev) + pos
    q = y.view(t, 2, 4).transpose(0, 1)[None]
    att = torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
    att2 = torch.nn.functional.scaled_dot_product_attention(q, q, q, attn_mask=mask)
    out = torch.empty(t, 8, device=dev)
    torch.where(y > 0, y, torch.ones_like(y), out=out)
    heads = (att + att2)[0].transpose(0, 1).reshape(t, 8)
    converted = (y > 0.5).float() + (x * 4).to(torch.int32).double().float()
    # In place keeps self's dtype (adds in float32, rounds to float16); a range into an
    # out of another shape keeps the out's shape.
    half = torch.zeros(t, 8, dtype=torch.float16, device=dev).add_(y * 1.001)
    grid = torch.arange(4.0, out=torch.empty(2, 2, device=dev))
    return (heads + out + torch.empty(t, 1, device=dev).fill_(2) + converted + half.float()
            + grid[1, 1])


# (A range into an out of another shape of as many elements: the meta kernel warns it
# resizes, which the CPU kernel does not do.)
@pytest.mark.filterwarnings("ignore:An output with one or more elements was resized")
def test_factories_and_in_place_writes_compile_per_bucket(monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    """A storage no call wrote reads as zeros computed in the graph (no buffer filled per
    size), and an op writing a whole storage is computed by its functional form: graphs
    making tensors at the length run padded to buckets like any other."""
    monkeypatch.delenv("TORCHTPU_SHAPE_BUCKETS", raising=False)
    monkeypatch.setenv("TORCHTPU_MIN_BUCKET", "8")
    needed_at = _programs_per_length(_factories, range(9, 17))
    # Lengths 9 and 10 compile (exact, then the bucket of 16); the others run its program.
    assert all(needed_at[t] == 0 for t in range(11, 17)), needed_at


def test_batched_heads_of_a_transposed_view_compile_per_bucket(monkeypatch: pytest.MonkeyPatch
                                                               ) -> None:
    """nanoGPT's layout with a batch of 2: q = x.view(B, t, H, d).transpose(1, 2), scaled
    before SDPA flattens it. The scaled value is row-major here, while its retraced fake
    keeps the transpose's strides: the view read of it is a reshape, not a view."""
    monkeypatch.delenv("TORCHTPU_SHAPE_BUCKETS", raising=False)
    monkeypatch.setenv("TORCHTPU_MIN_BUCKET", "8")
    torch.manual_seed(0)

    def f(x: torch.Tensor) -> torch.Tensor:
        q = x.view(2, x.shape[1], 4, 8).transpose(1, 2)
        return torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)

    needed_at: dict[int, int] = {}
    with eager_mode("fused"):
        for t in range(9, 17):
            x = torch.randn(2, t, 32)
            before = programs_obtained()
            got = f(x.to("tpu")).cpu()
            needed_at[t] = programs_obtained() - before
            torch.testing.assert_close(got, f(x), rtol=1e-4, atol=1e-5)
    assert all(needed_at[t] == 0 for t in range(11, 17)), needed_at


def test_in_place_and_out_ops_take_their_functional_forms() -> None:
    aten = torch.ops.aten

    def how(name: str) -> tuple:
        t = _target(name)
        return t.op, t.keep, t.typed_by

    assert how("aten::fill_.Scalar") == (aten.fill.Scalar, [0, 1], None)
    assert how("aten::where.self_out") == (aten.where.self, [0, 1, 2], 3)
    assert how("aten::max.dim_max") == (aten.max.dim, [0, 1, 2], None)
    assert how("aten::set_.source_Tensor") == (aten.set.source_Tensor, [0, 1], None)
    assert how("aten::add.Tensor") == (aten.add.Tensor, [0, 1, 2], None)
    # A factory's out= variant: the functional factory, of the out tensor's dtype and device.
    assert how("aten::arange.start_out") == (aten.arange.start_step, [0, 1, 2], 3)
    with pytest.raises(NotAView, match="no functional form"):
        _target("aten::normal_")  # its functional form takes other arguments


def _base_graph() -> tuple[torch.fx.Graph, torch.fx.Node]:
    """An FX graph (to run) over a 6x4 base."""
    g = torch.fx.Graph()
    p = g.placeholder("base")
    p.meta["val"] = TensorMeta((6, 4), torch.float32, torch.device("cpu"))
    return g, p


# Views of a 6x4 base (id: view), written through as well as read unless broadcast.
VIEWS = {
    "cols": lambda b: b[:, 1:3],
    "rows": lambda b: b[2:5],
    "t": lambda b: b.t(),
    "split_heads": lambda b: b.view(4, 2, 3).transpose(0, 1)[:, 1:],
    "row_slice": lambda b: b[1, 2:4],
    "element": lambda b: b[3, 2],
    "unsqueeze": lambda b: b.view(4, 6)[:, None, 2:],
    "one_row": lambda b: b[2:3],
    "one_col": lambda b: b[:, 1:2],
    "one_row_transposed": lambda b: b.view(1, 6, 4)[:, 4:5].transpose(0, 1),
    "size1_any_stride": lambda b: b.as_strided((2, 1, 4), (4, 5, 1), 8),
    "expand_size1": lambda b: b[:, 1:2].expand(6, 1),
}
BROADCAST = {"expand": lambda b: b[:, 1:2].expand(6, 5)}


@pytest.mark.parametrize("make_view", [*VIEWS.values(), *BROADCAST.values()],
                         ids=[*VIEWS, *BROADCAST])
def test_view_read_is_view_ops(make_view: Callable[[torch.Tensor], torch.Tensor]) -> None:
    """`as_strided` of a whole value as view ops, checked on the CPU."""
    base = torch.arange(24.0).view(6, 4)
    v = make_view(base)
    g, p = _base_graph()
    g.output(view_read(g, p, [6, 4], list(v.shape), list(v.stride()), v.storage_offset()))
    torch.testing.assert_close(torch.fx.GraphModule(torch.nn.Module(), g)(base), v)


@pytest.mark.parametrize("make_view", VIEWS.values(), ids=VIEWS)
def test_view_write_is_view_ops_and_scatters(make_view: Callable[[torch.Tensor], torch.Tensor]
                                             ) -> None:
    """`as_strided_scatter` of a whole value (a write into its view) as view ops and their
    scatters, checked on the CPU against a write through the view itself."""
    base = torch.arange(24.0).view(6, 4)
    v = make_view(base)
    value = -1.0 - torch.arange(float(v.numel())).view(v.shape)
    g, p = _base_graph()
    src = g.placeholder("value")
    src.meta["val"] = TensorMeta(tuple(v.shape), torch.float32, torch.device("cpu"))
    g.output(view_write(g, p, src, [6, 4], list(v.shape), list(v.stride()), v.storage_offset()))
    expected = base.clone()
    make_view(expected).copy_(value)
    torch.testing.assert_close(torch.fx.GraphModule(torch.nn.Module(), g)(base, value),
                               expected)


def test_write_through_a_broadcast_view_is_refused() -> None:
    g, p = _base_graph()
    with pytest.raises(NotAView, match="broadcast"):
        view_write(g, p, p, [6, 4], [6, 2], [4, 0], 1)


def _decode(cache: torch.Tensor, w: torch.Tensor, x: torch.Tensor, pos: int) -> torch.Tensor:
    """One step of decoding against a preallocated cache: write at `pos`, attend over the
    first pos + 1 rows."""
    cache[pos] = (x @ w)[0]
    ctx = cache[:pos + 1]
    return (x @ ctx.t()).softmax(-1) @ ctx


def _append(ids: torch.Tensor, table: torch.Tensor, token: torch.Tensor, pos: int
            ) -> torch.Tensor:
    """A token buffer written at `pos` (an offset that moves by 1 from 0) and read up to it."""
    ids[pos] = token[0, 0]
    return table[ids[:pos + 1]].sum(0)


@pytest.mark.parametrize("step,buffer", [
    (_decode, lambda: torch.zeros(32, 8)),
    (_append, lambda: torch.zeros(32, dtype=torch.long)),
], ids=["cache_rows", "token_buffer"])
def test_writes_into_views_compile_per_bucket(monkeypatch: pytest.MonkeyPatch,
                                              step: Callable, buffer: Callable) -> None:
    """A buffer written at a moving position and read up to it (a length and an offset that
    both vary; a position from 0 is fitted to the length read, pos + 1) joins a shape class:
    one program per bucket, not one per position."""
    monkeypatch.delenv("TORCHTPU_SHAPE_BUCKETS", raising=False)
    monkeypatch.setenv("TORCHTPU_MIN_BUCKET", "8")
    torch.manual_seed(0)
    w = torch.randn(8, 8)
    xs = [torch.randint(0, 8, (1, 8)) if step is _append else torch.randn(1, 8)
          for _ in range(20)]
    cache, cache_t, w_t = buffer(), buffer().to("tpu"), w.to("tpu")
    needed_at: dict[int, int] = {}
    with eager_mode("fused"):
        for pos, x in enumerate(xs):
            x_t = x.to("tpu")
            before = programs_obtained()
            got = step(cache_t, w_t, x_t, pos).cpu()
            needed_at[pos] = programs_obtained() - before
            torch.testing.assert_close(got, step(cache, w, x, pos), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(cache_t.cpu(), cache, rtol=1e-5, atol=1e-5)
    # Positions 0 and 1 compile (a length of 1 runs exact; the second graph makes the class
    # symbolic), then a program per bucket of the length pos + 1: 16 at position 8, 32 at 16.
    compiled = {p for p, n in needed_at.items() if n}
    assert compiled <= {0, 1, 2, 8, 16} and sum(needed_at.values()) <= 6, needed_at


def _update_after_a_cut(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """A graph cut between an op and its in-place update, as SDPA's softmax and its
    where(..., out=) are when a layer's first factory call repeats: the second graph writes
    the first one's output, a prefix of a padded buffer, at its true size."""
    s = (x @ w).softmax(-1)
    if s.device.type == "tpu":
        torch.tpu.synchronize()
    torch.where(s > 0.2, torch.zeros((), device=s.device), s, out=s)
    return (s @ w).sum(0)


def test_in_place_write_over_a_padded_output_compiles_per_bucket(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TORCHTPU_SHAPE_BUCKETS", raising=False)
    monkeypatch.setenv("TORCHTPU_MIN_BUCKET", "8")
    needed_at = _programs_per_length(_update_after_a_cut, range(5, 21))
    # Both graphs compile at the first length (exact) and the second (symbolic), then at the
    # first length of each bucket; a length equal to its bucket (the whole output written)
    # is a prefix of the same structure.
    assert all(needed_at[t] == 0 for t in range(7, 21) if t not in (9, 17)), needed_at


@pytest.mark.parametrize("after,fed_whole", [
    ("read in the prefix", False),   # the flat input is not fed: the value written is read
    ("returned", True),              # the whole written storage is a result
    ("read past the prefix", True),  # buf[:32] written, buf[32:40] read
])
def test_a_write_over_a_padded_output_keeps_only_the_prefix_when_nothing_reads_past_it(
        after: str, fed_whole: bool) -> None:
    flat, value = torch.zeros(64), torch.ones(4, 8)
    write = ("aten::as_strided_scatter", [None, None, [4, 8], [8, 1], 0],
             [(0, -1, -1), (1, -1, -2)], 0, 1, -1)
    view = {"read in the prefix": ("", 0, [4, 8], [8, 1], 0, 1, 1),
            "returned": None,
            "read past the prefix": ("", 0, [8], [1], 32, 1, 1)}[after]
    nodes = [write] + ([view] if view else [])
    dims = [[64]] + ([list(view[2])] if view else [])
    _, fed = build_graph([flat, value], nodes, [1 if view else 0], dims,
                         [torch.float32] * len(dims))
    assert fed == ([(0, None)] if fed_whole else []) + [(1, None)], fed


def _view_key(base_shape: list[int], v: torch.Tensor) -> tuple:
    g = Graph()  # as fused eager records it
    p = g.placeholder("base")
    p.meta["val"] = TensorMeta(tuple(base_shape), torch.float32, torch.device("cpu"))
    g.output(view_read(g, p, base_shape, list(v.shape), list(v.stride()), v.storage_offset()))
    return key_and_ints(g)[0]


@pytest.mark.parametrize("make_view", [
    lambda pos, t: pos[:t],
    lambda pos, t: pos[:t, :t],
    lambda pos, t: pos[:t].view(1, t, 2, 4).transpose(1, 2),
    lambda pos, t: pos[:t].unsqueeze(0),
], ids=["rows", "window", "split_heads", "batch_of_one"])
def test_length_one_view_reads_as_longer_lengths(
        make_view: Callable[[torch.Tensor, int], torch.Tensor]) -> None:
    """A view whose length is 1 reads through the view ops of its longer lengths: a context
    of one token is in the shape class of the longer ones."""
    pos = torch.arange(64.0).view(8, 8)
    assert _view_key([8, 8], make_view(pos, 1)) == _view_key([8, 8], make_view(pos, 3))


def test_overlapping_view_is_refused() -> None:
    g, p = _base_graph()
    with pytest.raises(NotAView, match="repeat"):
        view_read(g, p, [6, 4], [3, 4], [2, 2], 0)  # rows overlapping


def test_guard_evaluator_gives_every_int_exactly() -> None:
    """The guard's compiled evaluator: constants and integer polynomials (what `_fit`
    makes) evaluated on ints, exactly, with big values; anything else substituted."""
    import sympy

    s0, s1 = sympy.symbols("s0 s1", positive=True, integer=True)
    exprs = [3, s0, 2 * s0 + 5, 4 * s0 * s1, sympy.Integer(7), 9 - s0]
    expected = _evaluator(exprs, [s0, s1])
    assert expected(10, 3) == [3, 10, 25, 120, 7, -1]
    assert expected(2**40, 2**20) == [3, 2**40, 2**41 + 5, 2**62, 7, 9 - 2**40]
    assert all(type(v) is int for v in expected(10, 3))
    halves = _evaluator([s0 / 2, s1], [s0, s1])  # not an integer polynomial: substituted
    assert halves(10, 3) == [5, 3]


def test_a_size_of_one_does_not_join_a_class_traced_at_larger_sizes() -> None:
    # The retrace takes symbols for at least 2 (PyTorch specializes 0 and 1), so squeeze()
    # of a (5, 1, 5, 1) graph keeps both 5s; at (1, 1, 1, 1) it drops every dim.
    with eager_mode("fused"):
        for shape in [(5, 1, 5, 1), (1, 1, 1, 1), (7, 1, 3, 1), (1, 1, 4, 1)]:
            x = torch.randn(shape)
            got = torch.squeeze_copy(x.to("tpu")).cpu()
            assert got.shape == torch.squeeze_copy(x).shape
            torch.testing.assert_close(got, torch.squeeze_copy(x))


def test_shape_classes_keep_the_structures_run_most_recently(monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    # Each class holds its first graph and compiled programs: a program that made new graph
    # structures without end kept them all (a segfault at the memory-map limit). Past
    # MAX_KEYS structures the least recently run is dropped, and results stay right.
    from torchtpu.dynamo.buckets import fused_graph
    from torchtpu.dynamo.buckets.shape_class import ShapeClasses

    monkeypatch.setattr(ShapeClasses, "MAX_KEYS", 2)
    monkeypatch.setattr(fused_graph, "_classes", {})
    monkeypatch.setattr(fused_graph, "_symbolic", {})
    monkeypatch.setenv("TORCHTPU_MIN_BUCKET", "8")
    with eager_mode("fused"):
        for i in range(5):  # 5 structures (which ops), each at 2 lengths (a symbolic class)
            for n in (9, 12):
                x = torch.arange(n, dtype=torch.float32)
                got = x.to("tpu")
                for b in range(3):
                    got = got * 1.5 if (i >> b) & 1 else got + 1.0
                    x = x * 1.5 if (i >> b) & 1 else x + 1.0
                torch.testing.assert_close(got.cpu(), x)
        classes = fused_graph._classes[0]
        assert len(classes.classes) <= 2 and classes.evictions >= 3, classes.evictions


class _TinyGPT(torch.nn.Module):
    """nanoGPT's shape: arange positions, causal SDPA, a head over the vocabulary."""

    def __init__(self) -> None:
        super().__init__()
        self.wte, self.wpe = torch.nn.Embedding(17, 8), torch.nn.Embedding(32, 8)
        self.qkv, self.head = torch.nn.Linear(8, 24), torch.nn.Linear(8, 17)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(0, idx.shape[1], dtype=torch.long, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        q, k, v = (z.view(1, -1, 2, 4).transpose(1, 2) for z in self.qkv(x).split(8, dim=2))
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.head(x + y.transpose(1, 2).reshape(x.shape))


def _generate(model: torch.nn.Module, idx: torch.Tensor, tokens: int) -> torch.Tensor:
    """nanoGPT's generate (greedy): no value is read until the end."""
    for _ in range(tokens):
        logits = model(idx[:, -32:])[:, -1, :] / 0.8
        v, _ = torch.topk(logits, 5)
        logits[logits < v[:, [-1]]] = -float("inf")  # one value through a bool mask
        idx = torch.cat((idx, logits.softmax(-1).argmax(-1, keepdim=True)), dim=1)
    return idx


def test_a_loop_that_never_reads_compiles_per_bucket(monkeypatch: pytest.MonkeyPatch) -> None:
    """A generation loop with no host read is cut into a graph per iteration (at the
    repeat of its first factory, the positions' arange), and those graphs join their
    shape class: one graph over every iteration would be cut at the op limit at another
    place each time, a new program per cut; a fresh host tensor, the arange's out= and the
    top-k mask's index_put run in the graph without ending it."""
    monkeypatch.delenv("TORCHTPU_SHAPE_BUCKETS", raising=False)
    monkeypatch.setenv("TORCHTPU_MIN_BUCKET", "8")
    torch.manual_seed(0)
    model = _TinyGPT().eval()
    with torch.no_grad():
        expected = _generate(model, torch.tensor([[0]]), 24)
        model.to("tpu")
        with eager_mode("fused"):
            graphs = torchtpu._C.counters().get("num_fused_graphs_run", 0)
            roundtrips = torchtpu._C.counters().get("num_host_roundtrips", 0)
            before = programs_obtained()
            got = _generate(model, torch.tensor([[0]], device="tpu"), 24).cpu()
            programs = programs_obtained() - before
            ran = torchtpu._C.counters().get("num_fused_graphs_run", 0) - graphs
            assert torchtpu._C.counters().get("num_host_roundtrips", 0) == roundtrips
    assert torch.equal(got, expected)
    assert ran == 24, ran  # one graph per iteration
    # Lengths 1..24, buckets 8, 16 and 32: 13 programs when written (a length of 1, a
    # class's first graphs at exact sizes, each bucket's program, and the graphs that
    # straddle a bucket's end); a program per length would be at least 24.
    assert programs <= 16, programs


def test_loops_inside_an_iteration_do_not_cut_the_graph() -> None:
    """A factory repeated sooner than an iteration's length (a mask made in every layer of
    a small model, Adam's zeros per parameter at its first step) is a loop inside one
    iteration: the graph runs at the host read only."""
    blocks = torch.nn.ModuleList(torch.nn.Linear(8, 8) for _ in range(4)).to("tpu")

    def forward(x: torch.Tensor) -> torch.Tensor:
        for b in blocks:  # the graph's first factory is the first block's mask
            mask = torch.ones(x.shape[0], x.shape[0], dtype=torch.bool, device=x.device).tril()
            x = torch.relu(b(x.masked_fill(~mask[:, :1], 0.0)))
        return x

    x = torch.randn(6, 8)
    with torch.no_grad():
        with eager_mode("fused"):
            xt = x.to("tpu")
            graphs = torchtpu._C.counters().get("num_fused_graphs_run", 0)
            y = forward(xt)
            assert torchtpu._C.counters().get("num_fused_graphs_run", 0) == graphs
            got = y.cpu()
            params = [torch.nn.Parameter(torch.randn(3, 2, device="tpu")) for _ in range(8)]
            for p in params:
                p.grad = torch.ones_like(p)
            opt = torch.optim.Adam(params, lr=0.1)
            graphs = torchtpu._C.counters().get("num_fused_graphs_run", 0)
            opt.step()
            assert torchtpu._C.counters().get("num_fused_graphs_run", 0) == graphs
            params[0].cpu()
        blocks.cpu()
        torch.testing.assert_close(got, forward(x), rtol=1e-5, atol=1e-5)


def test_a_sampling_loop_draws_the_numbers_of_op_by_op_at_every_length(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A graph with a random op joins its shape class when the op's own sizes do not vary
    (multinomial over the vocabulary): its draws read the generator state its call took,
    so the tokens are op-by-op mode's; the same loop compiled per length before."""
    monkeypatch.delenv("TORCHTPU_SHAPE_BUCKETS", raising=False)
    monkeypatch.setenv("TORCHTPU_MIN_BUCKET", "8")
    torch.manual_seed(0)
    model = _TinyGPT().eval().to("tpu")

    def sample(tokens: int) -> list[int]:
        torch.tpu.manual_seed(7)
        idx = torch.tensor([[0]], device="tpu")
        for _ in range(tokens):
            probs = (model(idx[:, -32:])[:, -1, :] / 0.8).softmax(-1)
            idx = torch.cat((idx, torch.multinomial(probs, 1)), dim=1)
        return idx[0].tolist()

    with torch.no_grad():
        with eager_mode("op"):
            expected = sample(20)
        with eager_mode("fused"):
            before = programs_obtained()
            got = sample(20)
            programs = programs_obtained() - before
    assert got == expected
    assert programs <= 14, programs  # 12 when written; per length, at least 20


def test_fused_graph_hook_is_not_traced_by_dynamo() -> None:
    # A graph break in a compiled function (bincount's data-dependent size) runs that part
    # eagerly; a fused graph flushed there calls the shape-class hook, which Dynamo traced:
    # "Dynamo does not know how to trace the builtin ..." warnings and extra frames.
    import warnings

    torch._dynamo.reset()

    def f(m: torch.Tensor) -> torch.Tensor:
        ids = torch.randint(0, 3, (100,), device=m.device)
        return torch.bincount(ids, minlength=3).float() + m

    cf = torch.compile(f, backend="tpu")
    m = torch.tensor([0.0, 1.0, 2.0], device="tpu")
    with eager_mode("fused"), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            assert float(cf(m).sum().cpu()) == 103.0
    assert [str(w.message) for w in caught if "Dynamo" in str(w.message)] == []
    torch._dynamo.reset()
