"""Checkpoints of ``tpu`` tensors: torch.save / torch.load, pickling and safetensors.

Round trips of tensors, views, state_dicts, optimizer state and whole modules, to and from
tpu and cpu (default location, ``map_location``, ``weights_only`` both ways), compared
bit-exactly with the CPU tensors they came from.
"""

from __future__ import annotations

import copy
import io
import os
import pickle
from typing import Any

import pytest
import torch

import torchtpu

DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.int64,
          torch.int32, torch.int8, torch.uint8, torch.bool]


def round_trip(obj: Any, **load_kwargs: Any) -> Any:
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return torch.load(buf, **load_kwargs)


def make(dtype: torch.dtype, shape: tuple[int, ...] = (3, 5)) -> torch.Tensor:
    return (torch.randn(shape) * 50).to(dtype)


def assert_bit_equal(got: torch.Tensor, want: torch.Tensor, device: str) -> None:
    assert got.device.type == device
    assert got.dtype == want.dtype and got.shape == want.shape
    def raw(t: torch.Tensor) -> torch.Tensor:  # bytes, so -0.0 and NaN payloads count
        t = t.reshape(-1)
        return t if t.dtype == torch.bool else t.view(torch.uint8)

    assert torch.equal(raw(got.cpu()), raw(want))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("weights_only", [True, False])
def test_tensor_round_trip_stays_on_tpu(dtype: torch.dtype, weights_only: bool) -> None:
    x = make(dtype)
    got = round_trip(x.to("tpu"), weights_only=weights_only)
    assert got.device == torch.device("tpu", 0)
    assert_bit_equal(got, x, "tpu")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64], ids=str)
@pytest.mark.parametrize("map_location", ["cpu", torch.device("cpu"), {"tpu:0": "cpu"}])
def test_tpu_file_to_cpu(dtype: torch.dtype, map_location: Any) -> None:
    x = make(dtype)
    got = round_trip(x.to("tpu"), map_location=map_location, weights_only=True)
    assert_bit_equal(got, x, "cpu")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool],
                         ids=str)
@pytest.mark.parametrize("map_location", ["tpu", "tpu:0", torch.device("tpu"),
                                          lambda storage, loc: storage.tpu()],
                         ids=["str", "str0", "device", "callable"])
def test_cpu_file_to_tpu(dtype: torch.dtype, map_location: Any) -> None:
    x = make(dtype)
    got = round_trip(x, map_location=map_location, weights_only=True)
    assert_bit_equal(got, x, "tpu")


def test_load_onto_a_missing_device_raises() -> None:
    with pytest.raises(RuntimeError, match="map_location"):
        round_trip(torch.ones(2), map_location=f"tpu:{torch.tpu.device_count()}")


def test_views_keep_sharing_storage() -> None:
    base = torch.arange(12, dtype=torch.float32)
    dev = base.to("tpu")
    obj = {"base": dev, "window": dev[2:8], "strided": dev.view(3, 4)[:, 1], "t": dev.view(3, 4).T}
    got = round_trip(obj, weights_only=True)
    ptr = got["base"].untyped_storage().data_ptr()
    for k in ("window", "strided", "t"):
        assert got[k].untyped_storage().data_ptr() == ptr, k
        assert got[k].storage_offset() == obj[k].storage_offset()
        assert got[k].stride() == obj[k].stride()
        assert torch.equal(got[k].cpu(), obj[k].cpu())
    got["base"][3] = -1.0  # a write through the base is seen by its views
    assert got["window"].cpu()[1].item() == -1.0


def test_loaded_storage_reads_as_another_dtype() -> None:
    x = torch.randn(4)
    got = round_trip(x.to("tpu"), weights_only=True)
    assert torch.equal(got.view(torch.int32).cpu(), x.view(torch.int32))
    # As on the CPU, one file cannot hold one storage under two dtypes.
    for dev in (x, x.to("tpu")):
        with pytest.raises(RuntimeError, match="different types"):
            round_trip({"f": dev, "i": dev.view(torch.int32)})


class TinyLM(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(11, 6)
        self.norm = torch.nn.LayerNorm(6)
        self.head = torch.nn.Linear(6, 11, bias=False)
        self.head.weight = self.embed.weight  # tied
        self.register_buffer("steps", torch.zeros((), dtype=torch.int64))

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.head(self.norm(self.embed(idx)))


def trained(device: str) -> tuple[TinyLM, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = TinyLM().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    idx = torch.randint(0, 11, (4, 5)).to(device)
    for _ in range(2):
        loss = model(idx).logsumexp(-1).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model, opt


@pytest.mark.parametrize("weights_only", [True, False])
def test_state_dict_round_trip(weights_only: bool) -> None:
    model, _ = trained("tpu")
    sd = model.state_dict()
    got = round_trip(sd, weights_only=weights_only)
    assert list(got) == list(sd)
    for k in sd:
        assert_bit_equal(got[k], sd[k].cpu(), "tpu")
    # Tied weights stay one storage.
    assert got["embed.weight"].untyped_storage().data_ptr() == \
        got["head.weight"].untyped_storage().data_ptr()
    fresh = TinyLM().to("tpu")
    fresh.load_state_dict(got)
    for k, v in fresh.state_dict().items():
        assert torch.equal(v.cpu(), sd[k].cpu())


def test_state_dict_cpu_to_tpu_and_back() -> None:
    cpu_model, _ = trained("cpu")
    got = round_trip(cpu_model.state_dict(), map_location="tpu", weights_only=True)
    dev_model = TinyLM().to("tpu")
    dev_model.load_state_dict(got)
    back = round_trip(dev_model.state_dict(), map_location="cpu", weights_only=True)
    for k, v in cpu_model.state_dict().items():
        assert_bit_equal(back[k], v, "cpu")


@pytest.mark.parametrize("weights_only", [True, False])
def test_optimizer_state_round_trip(weights_only: bool) -> None:
    model, opt = trained("tpu")
    osd = opt.state_dict()
    got = round_trip(osd, weights_only=weights_only)
    assert got["param_groups"] == osd["param_groups"]
    for i, state in osd["state"].items():
        for k, v in state.items():
            if torch.is_tensor(v):
                assert_bit_equal(got["state"][i][k], v.cpu(), v.device.type)
    # The restored optimizer takes the same next step as the original.
    model2 = copy.deepcopy(model)
    opt2 = torch.optim.AdamW(model2.parameters(), lr=1e-2)
    opt2.load_state_dict(got)
    idx = torch.randint(0, 11, (4, 5)).to("tpu")
    for m, o in ((model, opt), (model2, opt2)):
        o.zero_grad()
        m(idx).logsumexp(-1).mean().backward()
        o.step()
    for a, b in zip(model.parameters(), model2.parameters()):
        assert torch.equal(a.cpu(), b.cpu())


def test_whole_module_round_trip() -> None:
    model, _ = trained("tpu")
    got = round_trip(model, weights_only=False)
    assert isinstance(got, TinyLM)
    assert got.head.weight is got.embed.weight  # tied weights kept
    assert got.embed.weight.device.type == "tpu"
    idx = torch.randint(0, 11, (2, 3))
    assert torch.equal(got(idx.to("tpu")).cpu(), model(idx.to("tpu")).cpu())
    on_cpu = round_trip(model, weights_only=False, map_location="cpu")
    assert on_cpu.embed.weight.device.type == "cpu"
    assert on_cpu.head.weight is on_cpu.embed.weight
    assert torch.equal(on_cpu.embed.weight, model.embed.weight.cpu())


def test_save_to_file_and_mmap_load(tmp_path: Any) -> None:
    x = make(torch.float32, (64, 8))
    path = os.path.join(tmp_path, "ckpt.pt")
    torch.save({"x": x.to("tpu")}, path)
    got = torch.load(path, mmap=True, weights_only=True)
    assert_bit_equal(got["x"], x, "tpu")
    got = torch.load(path, mmap=True, map_location="cpu", weights_only=True)
    assert_bit_equal(got["x"], x, "cpu")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool],
                         ids=str)
def test_pickle_and_deepcopy(dtype: torch.dtype) -> None:
    x = make(dtype)
    dev = x.to("tpu")
    for got in (pickle.loads(pickle.dumps(dev)), copy.deepcopy(dev)):
        assert_bit_equal(got, x, "tpu")
    p = torch.nn.Parameter(x.to("tpu"), requires_grad=dtype.is_floating_point)
    q = pickle.loads(pickle.dumps(p))
    assert isinstance(q, torch.nn.Parameter) and q.requires_grad == p.requires_grad
    assert_bit_equal(q.detach(), x, "tpu")


def test_safetensors_round_trip(tmp_path: Any) -> None:
    st = pytest.importorskip("safetensors.torch", reason="safetensors is not installed")
    model = torch.nn.Sequential(torch.nn.Linear(6, 4), torch.nn.GELU(), torch.nn.Linear(4, 3))
    model = model.to(torch.bfloat16).to("tpu")
    sd = model.state_dict()
    path = os.path.join(tmp_path, "model.safetensors")
    st.save_file(sd, path)  # tpu tensors are written from the device
    # safetensors' loader only knows its own device names: load on the CPU, then move.
    loaded = {k: v.to("tpu") for k, v in st.load_file(path).items()}
    for k in sd:
        assert_bit_equal(loaded[k], sd[k].cpu(), "tpu")
    assert {k: st.load(st.save(sd))[k].dtype for k in sd} == {k: v.dtype for k, v in sd.items()}
    # load_model copies into a model that already lives on tpu.
    fresh = torch.nn.Sequential(torch.nn.Linear(6, 4), torch.nn.GELU(), torch.nn.Linear(4, 3))
    fresh = fresh.to(torch.bfloat16).to("tpu")
    st.load_model(fresh, path)
    for k, v in fresh.state_dict().items():
        assert v.device.type == "tpu"
        assert torch.equal(v.cpu(), sd[k].cpu())


def test_safetensors_tied_weights(tmp_path: Any) -> None:
    st = pytest.importorskip("safetensors.torch", reason="safetensors is not installed")
    model = TinyLM().to("tpu")
    path = os.path.join(tmp_path, "tied.safetensors")
    st.save_model(model, path)  # keeps one copy of the tied weight
    fresh = TinyLM().to("tpu")
    _missing, unexpected = st.load_model(fresh, path)
    assert not unexpected
    assert fresh.head.weight is fresh.embed.weight
    assert torch.equal(fresh.embed.weight.cpu(), model.embed.weight.cpu())


def test_no_fallback_in_checkpoints() -> None:
    before = dict(torchtpu.debug.metrics()["fallback_ops"])
    model, opt = trained("tpu")
    round_trip({"model": model.state_dict(), "opt": opt.state_dict()}, weights_only=True)
    round_trip(torch.ones(3), map_location="tpu", weights_only=True)
    assert dict(torchtpu.debug.metrics()["fallback_ops"]) == before


def test_loaded_weights_are_bitcast_once() -> None:
    # torch.load fills byte storages; the first float read bitcasts and keeps the result,
    # so later reads cost what reads of any tensor cost.
    loaded = round_trip(torch.randn(32, 32), map_location="tpu", weights_only=True)
    control = torch.randn(32, 32).to("tpu")
    (loaded + 1).cpu()

    def executions(t: torch.Tensor) -> int:
        before = torchtpu.debug.metrics()["num_executions"]
        torchtpu.block_until_ready(t * 2)
        return torchtpu.debug.metrics()["num_executions"] - before

    executions(control)  # compile the op once
    assert executions(loaded) == executions(control)
