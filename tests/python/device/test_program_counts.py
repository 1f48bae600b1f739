"""What a user pays in programs: view offsets are data, and the executable caches are bounded.

A view's storage offset (``y[i]``, ``x.narrow(0, k, n)``, a row of a printed tensor) is a
runtime operand of the view programs, so a new offset never means a new compile. The
executable caches keep at most ``TORCHTPU_EXECUTABLE_CACHE_SIZE`` executables (default
4096) and count what they evict; the compile cache on disk keeps at most
``TORCHTPU_CACHE_MAX_SIZE`` bytes (default 10 GiB), the least recently used going first.
Programs are counted as compiles plus disk-cache loads: both are what a cold process pays.
"""

from __future__ import annotations

import pytest
import torch
from _compare import programs_obtained
from _subprocess import run_python


def test_100k_distinct_element_reads_compile_a_handful_of_programs() -> None:
    n = 100_000
    values = torch.arange(n, dtype=torch.float32)
    y = values.to("tpu")
    before = programs_obtained()
    total = 0.0
    for i in range(n):
        total += y[i].item()
    assert total == float(values.double().sum())
    assert programs_obtained() - before <= 4


def test_strided_views_at_every_offset_share_programs() -> None:
    x = torch.arange(60.0).reshape(6, 10)
    d = x.to("tpu")
    d[0, :3].cpu(), d[:, 0].cpu()  # the two view shapes below, once
    before = programs_obtained()
    for k in range(6):
        assert torch.equal(d[k, 2:5].cpu(), x[k, 2:5])      # contiguous window
    for j in range(10):
        assert torch.equal(d[:, j].cpu(), x[:, j])          # strided column
    for j in range(10):
        d[:, j] = float(-j)                                 # written through a view
    x[:, :] = -torch.arange(10.0)
    assert torch.equal(d.cpu(), x)
    assert programs_obtained() - before <= 3


def test_printing_a_million_element_tensor_compiles_few_programs() -> None:
    x = torch.randn(10**6)
    d = x.to("tpu")
    before = programs_obtained()
    text = str(d)
    assert text.startswith(str(x)[:-1]) and "tpu:0" in text  # the same summary
    assert programs_obtained() - before <= 40


def test_the_executable_cache_is_bounded_and_counts_evictions() -> None:
    r = run_python(
        """
        import torch, torchtpu
        outs = []
        for n in range(1, 41):                      # 40 signatures, 40+ programs
            outs.append((torch.arange(float(n), device="tpu") * 2).sum().item())
        m = torchtpu.debug.metrics()
        assert m.get("num_compile_cache_evictions", 0) > 0, m
        assert m["num_op_signatures_cached"] <= 16, m["num_op_signatures_cached"]
        # Evicted programs are compiled again when needed, with the same results.
        again = [(torch.arange(float(n), device="tpu") * 2).sum().item() for n in range(1, 41)]
        assert again == outs == [float(n * (n - 1)) for n in range(1, 41)]
        print("ok")
        """,
        timeout=240, TORCHTPU_EXECUTABLE_CACHE_SIZE="16", TORCHTPU_CACHE_DIR="off")
    assert r.returncode == 0, r.stderr
    assert "ok" in r.stdout


@pytest.mark.parametrize("name,value,message", [
    ("TORCHTPU_EXECUTABLE_CACHE_SIZE", "lots", "TORCHTPU_EXECUTABLE_CACHE_SIZE='lots'"),
    ("TORCHTPU_CACHE_MAX_SIZE", "10GB", "TORCHTPU_CACHE_MAX_SIZE='10GB' is not a size"),
])
def test_an_invalid_cache_size_is_a_clear_error(name: str, value: str, message: str) -> None:
    r = run_python(
        """
        import torch, torchtpu
        try:
            torch.ones(2, device="tpu")
        except RuntimeError as e:
            print("error:", e)
        """,
        **{name: value})
    assert r.returncode == 0, r.stderr
    assert message in r.stdout, r.stdout


def test_the_disk_cache_is_bounded_in_bytes(tmp_path) -> None:
    r = run_python(
        """
        import os, torch, torchtpu
        root = os.environ["TORCHTPU_CACHE_DIR"]
        outs = [(torch.arange(float(n), device="tpu") * 3).sum().item() for n in range(1, 41)]
        assert outs == [3.0 * n * (n - 1) / 2 for n in range(1, 41)], outs
        total = sum(os.path.getsize(os.path.join(d, f))
                    for d, _, files in os.walk(root) for f in files if f.endswith(".pjrtexe"))
        m = torchtpu.debug.metrics()
        print("bytes", total, "written", m["num_disk_cache_writes"],
              "evicted", m.get("num_disk_cache_evictions", 0))
        """,
        timeout=240, TORCHTPU_CACHE_DIR=str(tmp_path),
        TORCHTPU_CACHE_MAX_SIZE="256K")
    assert r.returncode == 0, r.stderr
    fields = r.stdout.split()
    total, written, evicted = (int(fields[i]) for i in (1, 3, 5))
    assert written >= 40 and evicted > 0, r.stdout
    assert total <= 256 * 1024, r.stdout
