"""Huge pages for the engine's weights: on a CPU plugin, after the engine loads a model its
weight buffers lie on transparent huge pages where the kernel grants them (the mappings
holding them report at least as many AnonHugePages in /proc/self/smaps), and the greedy
tokens are the same with TORCHTPU_HUGE_PAGES=0 (4 KiB pages, nothing asked)."""

import pytest
import torch
from conftest import ENGINE_ARGS

from torchtpu import _C
from torchtpu.memory import use_huge_pages
from torchtpu.serve import LLM, SamplingParams


def _smaps_anon_huge_kib() -> dict[tuple[int, int], int]:
    """AnonHugePages (KiB) of each mapping of this process, by [start, end)."""
    out, span = {}, None
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split(None, 1)[0]
            if "-" in head and not head.endswith(":"):
                lo, hi = head.split("-")
                span = (int(lo, 16), int(hi, 16))
            elif head == "AnonHugePages:" and span is not None:
                out[span] = int(line.split()[1])
    return out


def _cpu_plugin() -> bool:
    return torch.tpu.get_device_properties().platform == "cpu"


@pytest.mark.parametrize("quantization", [None, "int8"])
def test_weights_on_huge_pages_and_outputs_unchanged(tiny_llama_dir, monkeypatch, quantization):
    if not _cpu_plugin():
        pytest.skip("weights are host memory only on a CPU plugin")
    prompts = [[5, 9, 13, 200, 31, 7], list(range(40, 80))]
    params = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True)
    monkeypatch.setenv("TORCHTPU_HUGE_PAGES", "0")
    off = LLM(tiny_llama_dir, quantization=quantization, **ENGINE_ARGS)
    h = off.engine.decoder.huge_pages
    assert h.buffers == 0 and h.huge_bytes == 0 and h.skipped_bytes > 0
    want = [r.outputs[0].token_ids for r in off.generate(prompts, params)]
    del off

    monkeypatch.setenv("TORCHTPU_HUGE_PAGES", "1")
    llm = LLM(tiny_llama_dir, quantization=quantization, **ENGINE_ARGS)
    decoder = llm.engine.decoder
    h = decoder.huge_pages
    weights = decoder.weight_tensors()
    assert h.buffers == len(weights)
    assert h.buffer_bytes == sum(t.untyped_storage().nbytes() for t in weights)
    if h.huge_bytes == 0:
        pytest.skip(f"the kernel refused MADV_COLLAPSE ({h.first_refusal}): the weights "
                    "stay on 4 KiB pages")
    # The tiny model's weights share a few huge pages; every page asked for is counted.
    assert h.huge_bytes + h.refused_bytes >= h.buffer_bytes
    assert h.huge_bytes % _C.huge_page_size() == 0
    maps = _smaps_anon_huge_kib()
    holding = set()
    for t in weights:
        addr = _C.buffer_host_address(t)
        assert addr is not None
        span = next(s for s in maps if s[0] <= addr < s[1])
        holding.add(span)
    assert sum(maps[s] for s in holding) * 1024 >= h.huge_bytes
    assert [r.outputs[0].token_ids for r in llm.generate(prompts, params)] == want


def test_use_huge_pages_counts_and_switch(monkeypatch):
    if not _cpu_plugin():
        pytest.skip("weights are host memory only on a CPU plugin")
    size = _C.huge_page_size()
    x = torch.arange(3 * size // 4, dtype=torch.float32).to("tpu")  # 3 huge pages of bytes
    monkeypatch.setenv("TORCHTPU_HUGE_PAGES", "0")
    r = use_huge_pages([x, x, None])
    assert (r.buffers, r.huge_bytes, r.skipped_bytes) == (0, 0, 3 * size)
    monkeypatch.setenv("TORCHTPU_HUGE_PAGES", "1")
    r = use_huge_pages([x, x.view(3, -1)])  # one buffer, however many tensors show it
    assert (r.buffers, r.buffer_bytes, r.skipped_bytes) == (1, 3 * size, 0)
    # The pages the buffer touches (3, or 4 when it does not start on a page boundary).
    addr = _C.buffer_host_address(x)
    touched = (-(-(addr + 3 * size) // size) - addr // size) * size
    assert r.huge_bytes + r.refused_bytes == touched
    torch.testing.assert_close(x.cpu(), torch.arange(3 * size // 4, dtype=torch.float32))
    cpu = torch.ones(1000)  # not on tpu: skipped
    r = use_huge_pages([cpu, cpu])
    assert (r.buffers, r.huge_bytes, r.skipped_bytes) == (0, 0, 4000)
    monkeypatch.setenv("TORCHTPU_HUGE_PAGES", "yes")
    with pytest.raises(ValueError, match="TORCHTPU_HUGE_PAGES='yes'"):
        use_huge_pages([x])
