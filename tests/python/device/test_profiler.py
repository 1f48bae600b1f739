"""``torch.profiler`` on ``tpu``: device activity (programs and host transfers) through
PyTorch's PrivateUse1 profiler path (a Kineto child profiler), attributed to the host ops
that enqueued it, exportable as a Chrome trace."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

import torchtpu

DEVICE = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]


def _trace(prof: profile, tmp_path: Path) -> list[dict]:
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    return json.loads(path.read_text())["traceEvents"]


def _device_events(events: list[dict], cat: str) -> list[dict]:
    return [e for e in events if e.get("cat") == cat and e.get("ph") == "X"]


@pytest.fixture(scope="module")
def mats() -> tuple[torch.Tensor, torch.Tensor]:
    a = torch.randn(512, 512, device="tpu")
    b = torch.randn(512, 512, device="tpu")
    (a @ b).relu().sum().item()  # compile outside the profiled region
    return a, b


def test_device_activity_is_advertised() -> None:
    # PyTorch renames ProfilerActivity.PrivateUse1 after the backend.
    assert ProfilerActivity.PrivateUse1 in torch._C._autograd._supported_activities()


def test_kernels_named_after_ops_with_bytes(mats, tmp_path: Path) -> None:
    a, b = mats
    with profile(activities=DEVICE) as prof:
        (a @ b).relu().sum().item()
    kernels = _device_events(_trace(prof, tmp_path), "kernel")
    names = [k["name"] for k in kernels]
    assert any(n.startswith("aten::mm") for n in names), names
    assert "aten::relu" in names, names
    mm = next(k for k in kernels if k["name"].startswith("aten::mm"))
    assert mm["args"]["bytes"] == 3 * 512 * 512 * 4  # two arguments and the output
    assert mm["args"]["device"] == 0
    assert all(k["dur"] >= 0 for k in kernels)


def test_device_time_attributed_to_host_ops(mats) -> None:
    a, b = mats
    with profile(activities=DEVICE) as prof:
        (a @ b).sum().item()
    rows = {e.key: e for e in prof.key_averages()}
    assert rows["aten::mm"].device_time_total > 0
    # Each kernel carries its host op's correlation id, which is how PyTorch attributed
    # the device time above to aten::mm.
    assert sum(e.self_device_time_total for e in rows.values()) > 0


def test_host_transfers_are_memcpy_events(tmp_path: Path) -> None:
    host = torch.arange(10_000, dtype=torch.float32)
    with profile(activities=DEVICE) as prof:
        t = host.to("tpu")
        back = t.cpu()
    assert torch.equal(back, host)
    copies = _device_events(_trace(prof, tmp_path), "gpu_memcpy")
    by_name = {c["name"]: c for c in copies}
    assert by_name["Memcpy HtoD (host -> tpu)"]["args"]["bytes"] == 40_000
    assert by_name["Memcpy DtoH (tpu -> host)"]["args"]["bytes"] == 40_000
    assert by_name["Memcpy HtoD (host -> tpu)"]["args"]["op"] == "aten::_copy_from"


def test_kernels_lie_within_the_profiled_window(mats, tmp_path: Path) -> None:
    a, b = mats
    with profile(activities=DEVICE) as prof:
        for _ in range(3):
            c = a @ b
        c.sum().item()
    events = _trace(prof, tmp_path)
    ops = [e for e in events if e.get("cat") == "cpu_op" and e["name"] == "aten::mm"]
    kernels = [k for k in _device_events(events, "kernel") if k["name"].startswith("aten::mm")]
    assert len(kernels) == 3 and len(ops) >= 3  # mm's dispatcher entry nests a second
    first = min(o["ts"] for o in ops)
    last = max(k["ts"] + k["dur"] for k in _device_events(events, "kernel"))
    # Same clock as the host ops: every kernel starts after the first mm was called
    # and ends before the profile ends (a few seconds at most on a loaded machine).
    assert all(k["ts"] >= first for k in kernels)
    assert last - first < 30e6


def test_device_time_of_a_large_matmul_tracks_wall_time() -> None:
    a = torch.randn(2048, 2048, device="tpu")
    (a @ a).sum().item()
    with profile(activities=DEVICE) as prof:
        t0 = time.perf_counter()
        for _ in range(4):
            a @ a
        torchtpu.synchronize()
        wall_us = (time.perf_counter() - t0) * 1e6
    # The device time lands on the op the boxed kernel ran (aten::mm, or aten::mm.out under
    # it, whose total the parent's includes): the larger of the two totals, not their sum.
    device_us = max(
        (e.device_time_total for e in prof.key_averages() if e.key in ("aten::mm", "aten::mm.out")),
        default=0,
    )
    assert 0 < device_us <= wall_us * 1.05, (device_us, wall_us)
    assert device_us >= wall_us / 2, (device_us, wall_us)


def test_compiled_graph_runs_are_named(tmp_path: Path) -> None:
    f = torch.compile(lambda x: (x * 2).sin() + 1, backend="tpu")
    x = torch.randn(64, device="tpu")
    f(x).cpu()
    with profile(activities=DEVICE) as prof:
        f(x).cpu()
    names = [k["name"] for k in _device_events(_trace(prof, tmp_path), "kernel")]
    assert any(n.startswith("tpu graph ") for n in names), names


def test_cpu_only_profile_records_no_device_activity(mats, tmp_path: Path) -> None:
    a, b = mats
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        (a @ b).sum().item()
    events = _trace(prof, tmp_path)
    assert not _device_events(events, "kernel")
    # And nothing was left recording for the next profile.
    with profile(activities=DEVICE) as prof:
        (a @ b).sum().item()
    assert _device_events(_trace(prof, tmp_path), "kernel")


def test_legacy_profiler_with_use_device_tpu_times_device_work(capfd) -> None:
    # torch.autograd.profiler.profile(use_device="tpu"), as CUDA users write it: every op
    # failed PyTorch's default device stubs ("PrivateUse1 used in profiler but not enabled")
    # and the table showed negative CPU totals; now each op's device time is taken from
    # timing events on the device queue.
    x = torch.randn(64, 64, device="tpu")
    (x @ x).cpu()
    with torch.autograd.profiler.profile(use_device="tpu") as prof:
        with torch.autograd.profiler.record_function("block"):
            (x @ x).relu().sum().cpu()
    err = capfd.readouterr().err
    assert "not enabled" not in err, err[-2000:]
    events = {e.key: e for e in prof.key_averages()}
    assert events["block"].cpu_time_total > 0 and events["aten::mm"].cpu_time_total > 0
    assert events["block"].device_time_total >= events["aten::mm"].device_time_total > 0
    assert "Self TPU time total" in prof.key_averages().table(row_limit=5)


def test_profile_memory_records_device_storages(mats, tmp_path: Path) -> None:
    # Each storage made or freed is a memory event of the device (profile_memory=True), as
    # CUDA's allocator reports its blocks: the matmul's and the add's results, then the free.
    a, b = mats
    n = 512 * 512 * 4
    with profile(activities=DEVICE, profile_memory=True) as prof:
        y = a @ b
        z = y + 1
        del y
        torch.tpu.synchronize()
    per_op = {e.key: e.device_memory_usage for e in prof.key_averages()}
    assert per_op["aten::matmul"] == n and per_op["aten::add"] == n
    memory = [e["args"] for e in _trace(prof, tmp_path) if e.get("name") == "[memory]"]
    tpu = [m for m in memory if m["Device Type"] != 0]
    assert tpu and all(m["Device Id"] == 0 for m in tpu)
    assert [m["Bytes"] for m in tpu] == [n, n, -n]
    assert tpu[1]["Total Allocated"] - tpu[0]["Total Allocated"] == n
    assert tpu[2]["Total Allocated"] == tpu[0]["Total Allocated"]
    assert z.device.type == "tpu"
