"""What torchtpu brings to rest before the interpreter finalizes, in one place.

Once Python's finalization has begun, a thread that asks for the GIL is ended by an unwind
(``pthread_exit``); when that unwind meets a C++ frame that may not throw (a destructor) the
process calls ``std::terminate`` and aborts after its work is done. So every thread outside
Python that may still ask for the GIL must be idle before finalization starts. One atexit
handler, registered when torchtpu is imported (after torch, so it runs before torch's own),
runs the waits that make them so, in registration order:

- autograd's worker threads of the ``tpu`` devices (registered here): the thread that ran the
  last node of a backward drops its reference to the backward's task just after waking the
  caller, and that task holds Python objects (the context ``backward()`` stashes), so the
  decref can land during finalization;
- the threads of destroyed host-staged collective groups (``torchtpu.distributed``).

Each wait is bounded: a thread still busy after its limit is left to the finalization.
"""

from __future__ import annotations

import atexit
import sys
import threading
from collections.abc import Callable

import torch

from torchtpu import _C

_waits: list[Callable[[], None]] = []


def register(wait: Callable[[], None]) -> None:
    """Runs `wait` at exit, before finalization, after the waits registered before it."""
    _waits.append(wait)


@atexit.register
def _wait_for_threads() -> None:
    for wait in _waits:
        try:
            wait()
        except Exception as e:  # noqa: BLE001  (at exit there is no caller left to raise to)
            print(f"torchtpu: at exit, {getattr(wait, '__name__', wait)}: {e}", file=sys.stderr)


def _drain_autograd_device_threads(limit_s: float = 10.0) -> None:
    """Passes one empty task through the autograd queue of every tpu device. A device's
    worker takes tasks in order and drops what it held for the previous one before taking
    the next, so once this returns none holds a finished backward of the program's.

    The drain's own task must need no GIL when its worker drops it, maybe during
    finalization: it is started from a new thread, whose thread-local state holds no Python
    object (no stashed context, no modes), through the engine directly (torch.autograd.grad
    would stash one), and it returns nothing (captured gradients would stay in the task,
    each holding its Python object). It runs no program: the root is a view of the leaf, so
    the gradient reaching the leaf is a C++ alias that its accumulation takes over."""
    n = _C.device_count()
    if n == 0:
        return

    def drain() -> None:
        leaves = [torch.empty((), device=f"tpu:{i}", requires_grad=True) for i in range(n)]
        roots = tuple(x.view(()) for x in leaves)
        grads = tuple(torch.empty((), device=f"tpu:{i}") for i in range(n))
        torch.autograd.Variable._execution_engine.run_backward(
            roots, grads, False, False, (), False, True
        )

    t = threading.Thread(target=drain, name="torchtpu-exit-drain", daemon=True)
    t.start()
    t.join(limit_s)


register(_drain_autograd_device_threads)
