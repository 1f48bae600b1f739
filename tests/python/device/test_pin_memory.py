"""``pin_memory()`` with tpu as the accelerator: it does not apply (PJRT stages host copies
itself), so it says so once and returns an ordinary host copy; DataLoader(pin_memory=True)
still works."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import torch

import torchtpu  # noqa: F401

REPO_PYTHON = os.path.join(os.path.dirname(__file__), "..", "..", "..", "python")


def test_pin_memory_warns_once_and_copies() -> None:
    # A fresh process: the warning fires once per process.
    code = textwrap.dedent("""
        import warnings, torch, torchtpu
        x = torch.arange(6.)
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            y = x.pin_memory()
            z = x.pin_memory()
        msgs = [str(m.message) for m in w if "pin_memory" in str(m.message)]
        assert len(msgs) == 1, msgs
        assert "does not apply to the tpu device" in msgs[0]
        assert not y.is_pinned() and y.device.type == "cpu"
        assert torch.equal(y, x) and torch.equal(z, x)
        assert y.data_ptr() != x.data_ptr()
        print("ok")
    """)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.abspath(REPO_PYTHON) + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().endswith("ok")


def test_dataloader_with_pin_memory() -> None:
    data = torch.utils.data.TensorDataset(torch.arange(8.).reshape(4, 2))
    loader = torch.utils.data.DataLoader(data, batch_size=2, pin_memory=True)
    batches = [b[0].to("tpu") for b in loader]
    assert torch.equal(torch.cat(batches).cpu(), torch.arange(8.).reshape(4, 2))


def test_storage_to_cpu_non_blocking() -> None:
    s = torch.arange(4.).to("tpu").untyped_storage()
    back = s.to(device="cpu", non_blocking=True)
    assert bytes(back) == bytes(torch.arange(4.).untyped_storage())
