"""Device memory statistics: ``torch.tpu.memory_*`` and ``torch.accelerator``'s, which read
the same allocator. Allocated bytes are tpu storages' byte counts; reserved bytes are live
PJRT buffers. Every check is a delta around an allocation, so tensors other tests keep
alive do not matter."""

from __future__ import annotations

import gc
import os
import sys

import pytest
import torch

import torchtpu

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from _subprocess import run_python  # noqa: E402

MB = 1 << 20


def allocated() -> int:
    gc.collect()
    return torch.tpu.memory_allocated()


def test_allocated_rises_and_falls_by_the_bytes() -> None:
    base = allocated()
    x = torch.randn(256, 1024, device="tpu")  # 1 MiB
    assert allocated() - base == x.untyped_storage().nbytes() == MB
    y = torch.empty(100, dtype=torch.int64, device="tpu")
    assert allocated() - base == MB + 800
    del x
    assert allocated() - base == 800
    del y
    assert allocated() == base


def test_views_and_inplace_ops_allocate_nothing() -> None:
    x = torch.ones(64, 64, device="tpu")
    base = allocated()
    v = x[1:, ::2].T
    x.mul_(3.0)
    v.add_(1.0)
    assert allocated() == base
    del v


def test_peak_and_reset() -> None:
    torch.tpu.reset_peak_memory_stats()
    base = allocated()
    assert torch.tpu.max_memory_allocated() == base
    x = torch.zeros(4 * MB // 4, device="tpu")
    del x
    assert allocated() == base
    assert torch.tpu.max_memory_allocated() == base + 4 * MB
    torch.tpu.reset_peak_memory_stats()
    assert torch.tpu.max_memory_allocated() == base


def test_nested_stats_and_cuda_deprecated_names() -> None:
    x = torch.zeros(4 * MB // 4, device="tpu")
    nested = torch.tpu.memory_stats_as_nested_dict()
    assert nested["allocated_bytes"]["all"]["current"] == allocated()
    assert nested["num_ooms"] == torch.tpu.memory_stats()["num_ooms"]
    with pytest.warns(FutureWarning, match="memory_reserved"):
        assert torch.tpu.memory_cached() == torch.tpu.memory_reserved()
    with pytest.warns(FutureWarning, match="max_memory_reserved"):
        assert torch.tpu.max_memory_cached() == torch.tpu.max_memory_reserved()
    del x
    with pytest.warns(FutureWarning, match="reset_peak_memory_stats"):
        torch.tpu.reset_max_memory_allocated()
    assert torch.tpu.max_memory_allocated() == allocated()


def test_allocation_counts_and_pools() -> None:
    before = torch.tpu.memory_stats()
    small = torch.ones(10, device="tpu")
    large = torch.ones(MB, dtype=torch.uint8, device="tpu")
    after = torch.tpu.memory_stats()
    assert after["allocation.all.current"] - before["allocation.all.current"] == 2
    assert after["allocated_bytes.small_pool.current"] - \
        before["allocated_bytes.small_pool.current"] == 40
    assert after["allocated_bytes.large_pool.current"] - \
        before["allocated_bytes.large_pool.current"] == MB
    assert after["allocated_bytes.all.allocated"] - before["allocated_bytes.all.allocated"] == \
        MB + 40
    del small, large
    gc.collect()
    freed = torch.tpu.memory_stats()
    assert freed["allocated_bytes.all.freed"] - after["allocated_bytes.all.freed"] == MB + 40
    torch.tpu.reset_accumulated_memory_stats()
    assert torch.tpu.memory_stats()["allocated_bytes.all.allocated"] == 0


def test_resize_counts_the_new_bytes() -> None:
    x = torch.ones(8, device="tpu")
    base = allocated()
    x.resize_(16)
    assert allocated() - base == 32
    x.untyped_storage().resize_(200)
    assert allocated() - base == 200 - 32


def test_reserved_counts_device_buffers() -> None:
    torch.tpu.empty_cache()
    gc.collect()
    base = torch.tpu.memory_reserved()
    x = torch.empty(MB // 4, device="tpu")
    assert torch.tpu.memory_reserved() == base  # not written yet: no buffer
    x.copy_(torch.ones(MB // 4))
    assert torch.tpu.memory_reserved() - base == MB
    x.mul_(2.5)  # the result replaces x's buffer; the scalar's 0-d buffer is cached
    torchtpu.synchronize()
    torch.tpu.empty_cache()
    assert torch.tpu.memory_reserved() - base == MB
    assert torch.tpu.max_memory_reserved() >= base + MB
    del x
    gc.collect()
    assert torch.tpu.memory_reserved() == base


def test_empty_cache_releases_cached_scalars() -> None:
    x = torch.ones(4, device="tpu")
    for v in (1.25, 2.5, 3.75):
        x.add_(v)
    cached = torch.tpu.memory_reserved()
    torch.tpu.empty_cache()
    assert torch.tpu.memory_reserved() < cached
    torch.accelerator.empty_cache()  # the same, through PyTorch's generic API


def test_accelerator_api_reads_the_same_allocator() -> None:
    x = torch.ones(1000, device="tpu")
    assert torch.accelerator.memory_allocated() == torch.tpu.memory_allocated()
    assert torch.accelerator.max_memory_allocated() == torch.tpu.max_memory_allocated()
    assert torch.accelerator.memory_reserved() == torch.tpu.memory_reserved()
    stats = torch.accelerator.memory_stats()
    assert stats["allocated_bytes.all.current"] == torch.tpu.memory_allocated()
    torch.accelerator.reset_peak_memory_stats()
    assert torch.tpu.max_memory_allocated() == torch.tpu.memory_allocated()
    (free, total), (tpu_free, tpu_total) = torch.accelerator.get_memory_info(), \
        torch.tpu.mem_get_info()
    # The same figures; free memory moves between the two reads (other processes).
    assert total == tpu_total and abs(free - tpu_free) < 2**26
    del x


def test_mem_get_info_and_properties() -> None:
    free, total = torch.tpu.mem_get_info()
    assert 0 <= free <= total and total > 0
    info = torchtpu._C.plugin_info()
    props = torch.tpu.get_device_properties(0)
    assert props.name == info["device_kind"] == torch.tpu.get_device_name()
    assert props.platform == info["platform"]
    assert props.total_memory == total
    assert props.pjrt_api_version == info["api_version"]
    if info["platform"] == "cpu":  # device memory is host memory
        assert total == os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def test_bad_device_raises() -> None:
    n = torch.tpu.device_count()
    with pytest.raises(RuntimeError, match="no device"):
        torch.tpu.memory_allocated(n)
    with pytest.raises(RuntimeError, match="no device"):
        torch.tpu.get_device_properties(n)


def test_running_out_of_memory_raises_torchs_out_of_memory_error() -> None:
    # 4 TiB: no machine this runs on has it. The allocation is refused, as CUDA's allocator
    # refuses it (a storage's buffer is made at its first write: empty() was accepted and
    # the first write failed). Code that retries with smaller batches catches this type.
    ooms = torch.tpu.memory_stats()["num_ooms"]
    allocated = torch.tpu.memory_allocated()
    with pytest.raises(torch.OutOfMemoryError, match="a new storage takes .* out of memory"):
        torch.empty(2**40, device="tpu")
    assert torch.tpu.memory_allocated() == allocated
    # Counted as CUDA's allocator counts them, and zeroed with the accumulated statistics.
    assert torch.tpu.memory_stats()["num_ooms"] == ooms + 1
    torch.tpu.reset_accumulated_memory_stats()
    assert torch.tpu.memory_stats()["num_ooms"] == 0
    torch.testing.assert_close((torch.ones(3, device="tpu") * 2).cpu(), torch.full((3,), 2.0))


def test_a_refused_allocation_on_another_device_leaves_the_current_device() -> None:
    # empty() makes its device current for the allocator; a refusal left it current.
    r = run_python("""
        import torch, torchtpu
        try:
            torch.empty(2**40, device="tpu:1")
        except torch.OutOfMemoryError:
            pass
        print(torch.tpu.current_device(), torch.ones(2, device="tpu").device)
    """, TORCHTPU_NUM_DEVICES="2")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["0", "tpu:0"]


@pytest.mark.parametrize("make", [lambda: torch.arange(2**40, device="tpu"),
                                  lambda: torch.randn(2**40, device="tpu"),
                                  lambda: torch.linspace(0, 1, 2**40, device="tpu")],
                         ids=["arange", "randn", "linspace"])
def test_a_result_larger_than_the_device_is_out_of_memory_not_garbage(make) -> None:
    # Programs without inputs: the CPU plugin's run "succeeded" into a buffer of whatever
    # the heap held (pointers read back as values).
    with pytest.raises(torch.OutOfMemoryError, match="out of memory|free memory"):
        make()
        torchtpu.synchronize()  # fused eager runs the program here
    assert torch.arange(4, device="tpu").cpu().tolist() == [0, 1, 2, 3]


@pytest.mark.parametrize("eager", ["op", "fused"])
def test_a_result_larger_than_the_free_memory_is_out_of_memory_not_a_killed_process(
        eager: str) -> None:
    # Within the machine's memory but past what is free: the plugin writes every byte, and
    # the OS's out-of-memory killer ended the process (Hugging Face's generate_batch sized
    # its cache by the machine's memory). Fused eager first made the storage's zeros (its
    # fill reads the storage), a program of its own that was not checked.
    with open("/proc/meminfo") as f:
        swap = next((int(line.split()[1]) for line in f if line.startswith("SwapTotal:")), 0)
    if swap > 0:
        pytest.skip("with swap, a run past the free memory may still fit")
    # In a process of its own, which holds 4 GiB of the host's memory (touched) and asks for
    # 2 GiB more than is free: refused, never run.
    r = run_python("""
        import torch, torchtpu
        ballast = torch.ones(4 << 30, dtype=torch.uint8)
        free, total = torch.tpu.mem_get_info()
        assert total - free >= 4 << 30, (free, total)
        try:
            torch.full((free + (2 << 30),), 1, dtype=torch.uint8, device="tpu")
            torchtpu.synchronize()
            print("ran")
        except torch.OutOfMemoryError as e:
            assert "free memory" in str(e), e
            print("refused")
        assert torch.arange(4, device="tpu").cpu().tolist() == [0, 1, 2, 3]
    """, timeout=120, TORCHTPU_EAGER=eager)
    assert r.returncode == 0 and r.stdout.strip().endswith("refused"), (r.stdout, r.stderr)


def test_executables_are_released_past_the_memory_map_limit() -> None:
    # Each executable keeps its JIT code mapped; a process past the kernel's map limit
    # crashed at the next compile. Past the limit the caches drop their older half.
    for n in range(1, 40):
        torch.arange(n, device="tpu").sum().item()
    before = torchtpu._C.op_cache_size(), torchtpu._C.executable_cache_size()
    released = torchtpu._C.counters().get("num_map_pressure_releases", 0)
    torchtpu._C.release_executables_past(1 << 40)  # under the limit: nothing happens
    assert (torchtpu._C.op_cache_size(), torchtpu._C.executable_cache_size()) == before
    torchtpu._C.release_executables_past(0)
    assert torchtpu._C.counters()["num_map_pressure_releases"] == released + 1
    assert torchtpu._C.executable_cache_size() <= before[1] // 2
    assert torchtpu._C.op_cache_size() <= before[1] // 2
    assert torch.arange(7, device="tpu").sum().item() == 21
