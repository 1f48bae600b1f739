"""Shared setup for the Python suite: registers the ``tpu`` device and seeds every test.

The XLA CPU plugin is the real device here (no mocks). ``_compare`` (next to this file) holds
the differential helpers; pytest puts this directory on ``sys.path`` because it has no
``__init__.py``.
"""

from __future__ import annotations

import pytest
import torch

import torchtpu  # noqa: F401  (registers the device)


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)
    torchtpu.manual_seed(0)
