"""Many linear layers in a row, each reading its own transposed weight (a temporary that
is freed after use, so the next one may get the same device address): every result must
match the CPU. This failed at random while the XLA CPU plugin used XNNPACK for dots (its
packed-weight cache is keyed by address); torchtpu turns it off on a CPU plugin when the
device starts (csrc/aten/device_runtime.cc)."""

from __future__ import annotations

import ctypes
import os

import torch
from _compare import assert_close

import torchtpu


def test_xnnpack_is_off_for_the_cpu_plugin() -> None:
    torch.ones(1, device="tpu")  # the device has started
    info = torchtpu.debug.plugin()
    if info["platform"] == "cpu" and info["name"]:
        # The C++ side sets it: read the process environment, not os.environ's copy.
        libc = ctypes.CDLL(None)
        libc.getenv.restype = ctypes.c_char_p
        flags = (libc.getenv(b"XLA_FLAGS") or b"").decode()
        assert "--xla_cpu_use_xnnpack=false" in flags or "xla_cpu_use_xnnpack" in os.environ.get(
            "XLA_FLAGS", "")


def test_distinct_weights_at_reused_addresses_give_cpu_results() -> None:
    torch.manual_seed(0)
    x = torch.randn(42, 1536)
    weights = [torch.randn(576, 1536) for _ in range(8)]
    x_tpu = x.to("tpu")
    on_tpu = [w.to("tpu") for w in weights]
    for _ in range(4):
        for w, w_tpu in zip(weights, on_tpu):
            assert_close(torch.nn.functional.linear(x_tpu, w_tpu), x @ w.t(),
                         dtype_tols={torch.float32: (1e-4, 1e-3)}, what="linear")
