"""Complex tensors with a math bit (x.conj() stores x; x.conj().imag stores x.imag negated)
through compiled graphs, against the same code eager on the CPU: as inputs, as inputs a
graph writes into, and as the views AOTAutograd saves for a backward (a @ b.mH)."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

import torchtpu  # noqa: F401

TOLS = dict(rtol=1e-4, atol=1e-5)


def _inputs(*shapes, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*s, dtype=torch.complex64, generator=g) for s in shapes]


@pytest.mark.parametrize("view", ["conj", "neg"])
def test_an_input_with_a_math_bit_is_read_as_its_value(view):
    (x,) = _inputs((3, 4))
    make = (lambda t: t.conj()) if view == "conj" else (lambda t: t.conj().imag)
    fn = torch.compile(lambda a: a * 2 + 1, backend="tpu", fullgraph=True)
    t = make(x.to("tpu"))
    assert t.is_conj() or t.is_neg()
    assert_close(fn(t).cpu(), make(x) * 2 + 1, **TOLS)


def test_a_graph_writing_into_a_conj_input_writes_through_its_bit():
    (x,) = _inputs((5,))

    def scale(c):
        c.mul_(1j)
        return c.sum()

    ref = x.clone()
    expected_sum = scale(ref.conj())
    got = x.to("tpu")
    got_sum = torch.compile(scale, backend="tpu", fullgraph=True)(got.conj())
    assert_close(got.cpu(), ref, **TOLS)
    assert_close(got_sum.cpu(), expected_sum, **TOLS)


def test_a_copy_into_a_conj_view_below_the_conjugate_key():
    """AOTAutograd's runtime replays a graph's copy_ into an input with the Conjugate key
    excluded; the tpu copy then sees the bit itself (the CPU's copy does too)."""
    (x,) = _inputs((4,))
    keys = torch._C.DispatchKeySet(torch._C.DispatchKey.Conjugate) | \
        torch._C.DispatchKeySet(torch._C.DispatchKey.Negative)
    for device in ("cpu", "tpu"):
        z = torch.zeros(4, dtype=torch.complex64, device=device)
        w = torch.zeros(4, dtype=torch.complex64, device=device)
        r = torch.zeros(4, device=device)
        with torch._C._ExcludeDispatchKeyGuard(keys):
            z.conj().copy_(x.to(device))  # a destination with the conjugate bit
            w.conj().imag.copy_(x.real.to(device))  # with the negative bit
            r.copy_(x.to(device).conj().imag)  # a source with the negative bit
        assert_close(z.cpu(), x.conj())
        assert_close(w.cpu(), torch.complex(torch.zeros(4), -x.real))
        assert_close(r.cpu(), -x.imag)


@pytest.mark.parametrize("name,fn", [
    ("a @ b.mH", lambda a, b: (a @ b.mH).abs().sum()),
    ("a.mH @ b", lambda a, b: (a.mH @ b).abs().sum()),
    ("a * b.conj()", lambda a, b: (a * b.conj()).real.sum()),
    ("einsum", lambda a, b: torch.einsum("ij,kj->ik", a, b.conj()).abs().sum()),
    ("|a|^2", lambda a, b: (a * a.conj()).real.sum() + (b.conj() * b.conj()).imag.sum()),
])
def test_gradients_through_saved_conj_views_match_the_cpu(name, fn):
    a0, b0 = _inputs((3, 3), (3, 3), seed=1)
    a, b = a0.clone().requires_grad_(), b0.clone().requires_grad_()
    fn(a, b).backward()
    at, bt = a0.to("tpu").requires_grad_(), b0.to("tpu").requires_grad_()
    loss = torch.compile(fn, backend="tpu", fullgraph=True)(at, bt)
    loss.backward()
    assert_close(loss.cpu(), fn(a0, b0), **TOLS)
    assert_close(at.grad.cpu(), a.grad, **TOLS)
    assert_close(bt.grad.cpu(), b.grad, **TOLS)


@pytest.mark.parametrize("name,fn", [
    ("inv", lambda a: torch.linalg.inv(a) * 2),
    ("solve", lambda a: torch.linalg.solve(a, a.sum(-1, keepdim=True)) + 1),
    ("eigvalsh", lambda a: torch.linalg.eigvalsh(a @ a.mH) * 3),
    ("svdvals", lambda a: torch.linalg.svdvals(a + 1)),
])
def test_complex_linalg_in_a_graph_runs_as_eager_mode_runs_it(name, fn):
    """Eager mode runs complex linalg on the CPU; a graph holding it runs that call eagerly
    (the rest compiled) instead of failing to lower it."""
    (a,) = _inputs((4, 4), seed=2)
    a = a + 4 * torch.eye(4)
    got = torch.compile(fn, backend="tpu")(a.to("tpu"))
    assert_close(got.cpu(), fn(a), rtol=1e-4, atol=1e-4)


def test_complex_linalg_inside_cond_runs_eagerly_too():
    (a,) = _inputs((4, 4), seed=3)
    a = a + 4 * torch.eye(4)

    def fn(x):
        return torch.cond(x.real.sum() > -100, lambda t: (torch.linalg.inv(t) * 2).reshape(16),
                          lambda t: (t * 3).reshape(16), (x,))

    assert_close(torch.compile(fn, backend="tpu")(a.to("tpu")).cpu(), fn(a), rtol=1e-4,
                 atol=1e-4)
