"""Shared setup for the Python suite: registers the ``tpu`` device and seeds every test.

The XLA CPU plugin is the real device here (no mocks). ``_compare`` (next to this file) holds
the differential helpers; pytest puts this directory on ``sys.path`` because it has no
``__init__.py``.
"""

from __future__ import annotations

import os

# The CPU reference's oneDNN kernels pick their instruction set by the machine, and their
# results at the edges differ by it (GELU of +inf is inf with AVX2, NaN with AVX-512). The
# comparisons are against one reference on every machine: oneDNN's AVX2 kernels. Read by
# oneDNN when it first runs a kernel, so setting it here is early enough.
os.environ.setdefault("ONEDNN_MAX_CPU_ISA", "AVX2")

import pytest  # noqa: E402
import torch  # noqa: E402

import torchtpu  # noqa: E402, F401  (registers the device)


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)
    torchtpu.manual_seed(0)
