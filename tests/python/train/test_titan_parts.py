"""The pieces torchtpu.train gives TorchTitan, each against a reference: DenseAttention and
its document masks (tpu against the CPU and against per-document attention), the text-file
dataloader (splits, ranks, resumable state), the peak-FLOP/s table and override."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from _compare import assert_close, fallbacks, new_fallbacks

from torchtpu import flops
from torchtpu.train import launch
from torchtpu.train.attention import DenseAttention, document_causal_mask
from torchtpu.train.data import TextFileDataset, read_split


def test_document_mask_is_block_causal() -> None:
    positions = torch.tensor([[0, 1, 2, 0, 1], [0, 1, 2, 3, 4]])
    mask = document_causal_mask(positions)
    assert mask.shape == (2, 1, 5, 5)
    expected0 = torch.tensor([[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [1, 1, 1, 0, 0],
                              [0, 0, 0, 1, 0], [0, 0, 0, 1, 1]], dtype=torch.bool)
    assert torch.equal(mask[0, 0], expected0)
    assert torch.equal(mask[1, 0], torch.ones(5, 5, dtype=torch.bool).tril())
    assert torch.equal(document_causal_mask(positions.to("tpu")).cpu(), mask)


def test_dense_attention_matches_per_document_attention() -> None:
    torch.manual_seed(0)
    b, length, heads, kv_heads, dim = 2, 6, 4, 2, 8
    q = torch.randn(b, length, heads, dim)
    k, v = torch.randn(b, length, kv_heads, dim), torch.randn(b, length, kv_heads, dim)
    positions = torch.tensor([[0, 1, 2, 3, 0, 1], [0, 1, 2, 3, 4, 5]])
    attn = DenseAttention()
    expected = attn(q, k, v, attention_masks=document_causal_mask(positions), enable_gqa=True)
    # Row 0 is two documents: each attends causally to itself only.
    kk, vv = k.repeat_interleave(2, dim=2), v.repeat_interleave(2, dim=2)
    for lo, hi in ((0, 4), (4, 6)):
        ref = F.scaled_dot_product_attention(
            q[:1, lo:hi].transpose(1, 2), kk[:1, lo:hi].transpose(1, 2),
            vv[:1, lo:hi].transpose(1, 2), is_causal=True).transpose(1, 2)
        torch.testing.assert_close(expected[:1, lo:hi], ref, rtol=1e-5, atol=1e-6)
    # No masks: plain causal attention (what one document per row needs).
    torch.testing.assert_close(attn(q[1:], k[1:], v[1:], enable_gqa=True), expected[1:],
                               rtol=1e-5, atol=1e-6)
    before = fallbacks()
    actual = attn(q.to("tpu"), k.to("tpu"), v.to("tpu"),
                  attention_masks=document_causal_mask(positions.to("tpu")), enable_gqa=True)
    assert not new_fallbacks(before), new_fallbacks(before)
    assert_close(actual, expected, dtype_tols={torch.float32: (1e-5, 1e-5)})
    with pytest.raises(TypeError, match="bool tensor"):
        attn(q, k, v, attention_masks=positions.float(), enable_gqa=True)


class _Tokenizer:
    """Characters as tokens (enough to check the dataset's slicing exactly)."""

    def encode(self, text: str, add_bos: bool = True, add_eos: bool = True) -> list[int]:
        return [1] * add_bos + [ord(c) for c in text] + [2] * add_eos


def _dataset(path: str, **kw) -> TextFileDataset:
    args = {"path": path, "split": "train", "validation_fraction": 0.25,
            "tokenizer": _Tokenizer(), "seq_len": 4, "dp_rank": 0, "dp_world_size": 1,
            "infinite": False}
    args.update(kw)
    return TextFileDataset(**args)


def test_text_file_splits_ranks_and_resumes(tmp_path) -> None:
    path = tmp_path / "corpus.txt"
    path.write_text("abcdefgh\nijklmnop\nqrstuvwx\nyz012345\n")
    train, val = read_split(str(path), "train", 0.25), read_split(str(path), "validation", 0.25)
    assert train + val == path.read_text() and val == "yz012345\n"
    samples = list(_dataset(str(path)))
    tokens = [1] + [ord(c) for c in train] + [2]
    assert len(samples) == (len(tokens) - 1) // 4
    for i, (inputs, labels) in enumerate(samples):
        assert inputs["input"].tolist() == tokens[4 * i:4 * i + 4]
        assert labels.tolist() == tokens[4 * i + 1:4 * i + 5]
        assert inputs["positions"].tolist() == [0, 1, 2, 3]
    ranks = [list(_dataset(str(path), dp_rank=r, dp_world_size=2)) for r in (0, 1)]
    assert [s[1].tolist() for s in ranks[1]] == [s[1].tolist() for s in samples[1::2]]
    # The state after two samples resumes at the third, across an epoch boundary too.
    ds = _dataset(str(path), infinite=True)
    it = iter(ds)
    seen = [next(it)[1].tolist() for _ in range(len(samples) + 2)]
    again = _dataset(str(path), infinite=True)
    again.load_state_dict(ds.state_dict())
    assert next(iter(again))[1].tolist() == next(it)[1].tolist()
    assert seen[:len(samples)] == [s[1].tolist() for s in samples]


def test_text_file_errors(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match="dataset_path"):
        read_split(str(tmp_path / "missing.txt"), "train", 0.1)
    with pytest.raises(ValueError, match="validation_fraction"):
        read_split(str(tmp_path / "missing.txt"), "train", 1.5)
    short = tmp_path / "short.txt"
    short.write_text("abcd\nef\n")  # train split "abcd\n": one sample of 4 tokens
    assert len(_dataset(str(short), validation_fraction=0.3)) == 1
    with pytest.raises(ValueError, match="none for data-parallel rank 1 of 2"):
        _dataset(str(short), validation_fraction=0.3, dp_rank=1, dp_world_size=2)
    with pytest.raises(ValueError, match="split of .* is empty"):
        read_split(str(short), "train", 0.9)
    for bad in (0, -1):  # a ZeroDivisionError / an empty dataset before
        with pytest.raises(ValueError, match="seq_len must be a positive number"):
            _dataset(str(short), seq_len=bad)


@pytest.mark.parametrize("name, value", [("steps", 0), ("steps", -1), ("local_batch_size", 0),
                                         ("seq_len", 0)])
def test_trainer_refuses_counts_below_one(name: str, value: int) -> None:
    # TorchTitan takes them unchecked: 0 steps wrote an empty loss curve and exited 0,
    # -1 failed an assertion in its LR schedule, a batch of 0 divided by zero.
    from torchtpu.train.trainer import TpuTrainer

    config = TpuTrainer.Config()
    setattr(config.training, name, value)
    with pytest.raises(ValueError, match=f"--training.{name} must be a positive integer"):
        TpuTrainer(config)


def test_peak_flops_table_and_override(monkeypatch) -> None:
    assert flops.table_peak_flops("TPU v5 lite") == 197e12
    assert flops.table_peak_flops("TPU v6 lite") == 918e12
    assert flops.table_peak_flops("NVIDIA H100 80GB HBM3") == 989e12
    assert flops.table_peak_flops("NVIDIA H100 PCIe") == 756e12
    assert flops.table_peak_flops("cpu") is None
    monkeypatch.setenv("TORCHTPU_PEAK_FLOPS", "1.5e12")
    assert flops.peak_flops(torch.float32) == 1.5e12
    for bad in ("fast", "nan", "inf", "0"):
        monkeypatch.setenv("TORCHTPU_PEAK_FLOPS", bad)
        with pytest.raises(ValueError, match="TORCHTPU_PEAK_FLOPS"):
            flops.peak_flops()


def test_peak_flops_is_measured_once_and_cached(monkeypatch, tmp_path) -> None:
    monkeypatch.delenv("TORCHTPU_PEAK_FLOPS", raising=False)
    monkeypatch.setenv("TORCHTPU_CACHE_DIR", str(tmp_path))
    calls = []
    real = flops.measure_matmul_flops

    def counted(dtype, device=0, size=256, runs=2, by_cpu_time=False):
        calls.append((dtype, by_cpu_time))
        return real(dtype, device, size=256, runs=2, by_cpu_time=by_cpu_time)

    monkeypatch.setattr(flops, "measure_matmul_flops", counted)
    first = flops.peak_flops(torch.float32)
    # The CPU plugin's device is this process's cores: timed by CPU time, not wall time.
    assert first > 0 and calls == [(torch.float32, True)]
    assert flops.peak_flops(torch.float32) == first and calls == [(torch.float32, True)]
    assert (tmp_path / "peak_flops.json").exists()


def test_step_records_carry_process_and_device_counters(tmp_path) -> None:
    import json
    from types import SimpleNamespace

    from torchtpu.train.metrics import JsonlLogger, _Recorder

    path = tmp_path / "metrics.jsonl"
    recorder = _Recorder(SimpleNamespace(_last={}), JsonlLogger(str(path)), device_counters=True)
    recorder.log({"loss_metrics/global_avg_loss": 2.0}, step=1)
    x = torch.ones(256, 1024, device="tpu")
    for _ in range(3):  # fresh 1 MiB outputs: programs run, host pages touched
        x = x * 1.5 + 1
    assert x.cpu()[0, 0].item() == pytest.approx(((1 * 1.5 + 1) * 1.5 + 1) * 1.5 + 1)
    recorder.log({"loss_metrics/global_avg_loss": 1.0}, step=3)
    recorder.close()
    first, second = (json.loads(line) for line in path.read_text().splitlines())
    # The first record is the baseline: no deltas yet.
    assert not any(k.startswith(("process_", "tpu/")) for k in first)
    # Deltas are per step: 2 steps between the records.
    assert second["process_cpu_s_per_step"] > 0
    assert 0 <= second["process_sys_s_per_step"] <= second["process_cpu_s_per_step"] + 0.02
    assert second["process_minor_faults_per_step"] >= 0
    assert second["tpu/num_executions"] >= 6 / 2
    assert second["tpu/num_transfers_to_host"] >= 1 / 2
    assert second["tpu/num_compiles"] >= 0


def test_rank_env_sets_the_arena_limit_without_clobbering() -> None:
    assert launch.rank_env({})["GLIBC_TUNABLES"] == "glibc.malloc.arena_max=1"
    # A user's tunables stay, first; the limit is appended.
    env = launch.rank_env({"GLIBC_TUNABLES": "glibc.malloc.tcache_count=0", "A": "1"})
    assert env == {"GLIBC_TUNABLES": "glibc.malloc.tcache_count=0:glibc.malloc.arena_max=1",
                   "A": "1"}
    # An arena limit of the user's, or glibc's own settings asked for, are left alone.
    mine = {"GLIBC_TUNABLES": "glibc.malloc.arena_max=4"}
    assert launch.rank_env(mine) == mine
    system = {"TORCHTPU_HOST_MALLOC": "system"}
    assert launch.rank_env(system) == system


def test_launch_ports_are_never_handed_out_twice() -> None:
    # The launcher's, the benchmarks' and the tests' one helper: ports picked before any is
    # bound (two routers, a torchrun master and a server) must differ.
    from torchtpu._ports import free_port

    ports = [free_port() for _ in range(64)]
    assert len(set(ports)) == len(ports)
    assert launch.free_port is free_port
