"""Where the true elements of a padded dimension sit.

A graph padded to shape buckets computes on static tensors whose every dimension is its
size expression evaluated at the bucket sizes (``s0 * 2`` at bucket 16 is 32). The true
elements of a dimension are not always its first ones: a reshape of ``[b, n, k]`` to
``[b * n, k]`` merges two padded dims, and row ``i * N + j`` (N the bucket of n) holds the
true row ``i * n + j`` when ``i < b`` and ``j < n``. A dimension's layout records that as its
components, outermost first: the true sizes of the dims merged into it. Position ``p``
(written in the mixed radix of the components' padded sizes) is a true element when
every digit is below its component's true size.

- ``()``: a static dimension (every position is true).
- ``(n,)``: a prefix: positions below n are true, the rest is padding.
- ``(b, n)``: b runs of N positions, the first n of each true (from a merging view).

Static factors are folded into the dynamic component before them (``(n, 8)`` is the
prefix ``(8 n,)``: ``i * 8 + j < 8 n`` exactly when ``i < n``); a leading static factor
stays a component of its own (``(4, n)``).
"""

from __future__ import annotations

from collections.abc import Sequence

import sympy
import torch
import torch.fx

Layout = tuple  # tuple[sympy.Expr, ...]: one dimension's components
STATIC: Layout = ()


def expr(s: object) -> sympy.Expr:
    """A size (int, SymInt, an FX node computing one, or a sympy expression) as a sympy
    expression."""
    if isinstance(s, torch.fx.Node):
        s = s.meta["val"]
    if isinstance(s, torch.SymInt):
        return s.node.expr
    if isinstance(s, sympy.Expr):
        return s
    return sympy.Integer(int(s))  # type: ignore[call-overload]


def is_static(e: sympy.Expr) -> bool:
    return not e.free_symbols


def equal(a: sympy.Expr, b: sympy.Expr) -> bool:
    return a == b or sympy.expand(a - b) == 0


def canonical(parts: Sequence[sympy.Expr]) -> Layout:
    """Components with static factors folded into the dynamic component before them and
    size-1 components dropped; ``()`` when nothing is dynamic."""
    out: list[sympy.Expr] = []
    for p in map(expr, parts):
        if p == 1:
            continue
        if is_static(p) and out and not is_static(out[-1]):
            out[-1] = sympy.expand(out[-1] * p)
        elif is_static(p) and out and is_static(out[-1]):
            out[-1] = out[-1] * p
        else:
            out.append(p)
    if all(is_static(p) for p in out):
        return STATIC
    return tuple(out)


def prefix(size: object) -> Layout:
    """The layout of a dimension whose true elements come first (a factory's, an input's)."""
    return canonical([expr(size)])


def is_prefix(layout: Layout) -> bool:
    return len(layout) == 1


def components(layout: Layout, size: sympy.Expr) -> list[sympy.Expr]:
    """The components of a dimension of size `size`, a static one as one component."""
    return list(layout) if layout else [size]


def reshape(layouts: Sequence[Layout], sizes: Sequence[sympy.Expr],
            out_sizes: Sequence[sympy.Expr]) -> list[Layout] | None:
    """The layouts after viewing dims of `sizes` (laid out as `layouts`) as `out_sizes`, or
    None when an output dim cuts a component where its true elements do not line up: a
    component splits only into a part and a static inner factor (``8 n`` into ``n, 8``).
    A view with a dim of size 0 (``x[1:, 2:]`` of a 2-column x) has no elements to line
    up: None too, so the graph keeps exact sizes."""
    if any(is_static(expr(n)) and expr(n) == 0 for n in [*sizes, *out_sizes]):
        return None
    stream: list[sympy.Expr] = []
    for layout, size in zip(layouts, sizes):
        stream += [expr(c) for c in components(layout, expr(size))]
    out: list[Layout] = []
    for target in map(expr, out_sizes):
        taken: list[sympy.Expr] = []
        have: sympy.Expr = sympy.Integer(1)
        while not equal(have, target):
            if not stream:
                return None
            c = stream.pop(0)
            ratio = sympy.simplify(have * c / target)
            if is_static(ratio) and ratio > 1:
                if not ratio.is_integer:
                    return None
                # The output dim ends inside c: its outer part here, its static inner
                # factor carried into the next output dim.
                c = sympy.simplify(c / ratio)
                stream.insert(0, ratio)
            elif not is_static(ratio) and sympy.fraction(sympy.together(1 / ratio))[1] != 1:
                return None  # c does not divide what is left of the output dim
            taken.append(c)
            have = sympy.expand(have * c)
        out.append(canonical(taken))
    if any(c != 1 for c in stream):
        return None
    return out


def padded_size(size: sympy.Expr, buckets: dict) -> int:
    """`size` at the bucket sizes: the static size of the padded dimension."""
    return int(sympy.sympify(size).xreplace(buckets))
