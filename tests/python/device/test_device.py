"""The device itself: discovery, selection, synchronization, RNG state, transfers, printing."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from _subprocess import run_python

import torchtpu


def test_is_available_and_count() -> None:
    assert torchtpu.is_available()
    assert torch.tpu.is_available()
    assert torchtpu.device_count() >= 1
    assert torch.tpu.device_count() == torchtpu.device_count()


def test_default_device_is_tpu0() -> None:
    t = torch.ones(2, device="tpu")
    assert t.device == torch.device("tpu", 0)
    assert torchtpu.current_device() == 0


def test_two_devices_in_subprocess() -> None:
    r = run_python(
        """
        import torch, torchtpu
        assert torch.tpu.device_count() == 2, torch.tpu.device_count()
        a = torch.arange(6.0, device="tpu:0")
        b = torch.arange(6.0, device="tpu:1")
        assert a.device == torch.device("tpu", 0) and b.device == torch.device("tpu", 1)
        c = b * 2 + 1
        assert c.device == torch.device("tpu", 1), c.device
        assert torch.equal(c.cpu(), torch.arange(6.0) * 2 + 1)
        moved = a.to("tpu:1")
        assert moved.device == torch.device("tpu", 1)
        assert torch.equal(moved.cpu(), a.cpu())
        try:
            a + b
        except RuntimeError as e:
            assert "same device" in str(e), e
        else:
            raise SystemExit("mixing tpu:0 and tpu:1 did not raise")
        torch.tpu.set_device(1)
        assert torch.tpu.current_device() == 1
        d = torch.zeros(3, device="tpu")
        assert d.device == torch.device("tpu", 1), d.device
        with torch.tpu.device(0):
            assert torch.tpu.current_device() == 0
        assert torch.tpu.current_device() == 1
        # A stream's context and set_stream make its device current, as CUDA's do; on exit
        # the device and each device's stream are back.
        torch.tpu.set_device(0)
        s0, s1 = torch.tpu.Stream(device=0), torch.tpu.Stream(device=1)
        with torch.tpu.stream(s0):
            with torch.tpu.stream(s1):
                assert torch.tpu.current_device() == 1
                assert torch.zeros(1, device="tpu").device == torch.device("tpu", 1)
                assert torch.tpu.current_stream() == s1
            assert torch.tpu.current_device() == 0 and torch.tpu.current_stream() == s0
            assert torch.tpu.current_stream(1) == torch.tpu.default_stream(1)
        assert torch.tpu.current_stream(0) == torch.tpu.default_stream(0)
        torch.tpu.set_stream(s1)
        assert torch.tpu.current_device() == 1 and torch.tpu.current_stream() == s1
        torch.tpu.synchronize(1)
        print("OK")
        """,
        TORCHTPU_NUM_DEVICES="2",
    )
    assert r.returncode == 0 and "OK" in r.stdout, r.stderr[-3000:]


def test_import_torch_loads_the_device() -> None:
    # The first command on a fresh interpreter needs no `import torchtpu`: PyTorch's
    # device-backend autoload imports it (the package's torch.backends entry point).
    r = run_python("""
        import sys, torch
        assert "torchtpu" in sys.modules
        print(torch.zeros(2, device="tpu").add(1).cpu().tolist())
    """)
    assert r.returncode == 0 and "[1.0, 1.0]" in r.stdout, r.stderr[-2000:]
    r = run_python("import sys, torch; print('torchtpu' in sys.modules)",
                   TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    assert r.returncode == 0 and r.stdout.strip() == "False", r.stderr[-2000:]
    # torchtpu imported first: its own `import torch` autoloads it half-initialized.
    r = run_python("import torchtpu, torch; print(torch.ones(1, device='tpu').cpu().item())")
    assert r.returncode == 0 and "1.0" in r.stdout, r.stderr[-2000:]


def test_set_device_out_of_range_raises() -> None:
    with pytest.raises(RuntimeError):
        torchtpu.set_device(torchtpu.device_count())
    assert torchtpu.current_device() == 0


def test_synchronize() -> None:
    x = torch.randn(64, 64).to("tpu")
    y = x @ x
    torchtpu.synchronize()
    torch.tpu.synchronize("tpu:0")
    torch.testing.assert_close(y.cpu(), x.cpu() @ x.cpu(), rtol=1e-4, atol=1e-4)


def test_manual_seed_reproducible() -> None:
    torchtpu.manual_seed(1234)
    a = torch.rand(100, device="tpu").cpu()
    b = torch.randn(100, device="tpu").cpu()
    torchtpu.manual_seed(1234)
    a2 = torch.rand(100, device="tpu").cpu()
    b2 = torch.randn(100, device="tpu").cpu()
    assert torch.equal(a, a2) and torch.equal(b, b2)
    assert not torch.equal(a, torch.rand(100, device="tpu").cpu()), "generator did not advance"
    torchtpu.manual_seed(4321)
    assert not torch.equal(a, torch.rand(100, device="tpu").cpu()), "seed had no effect"


def test_torch_manual_seed_seeds_tpu() -> None:
    torch.manual_seed(7)
    a = torch.rand(50, device="tpu").cpu()
    torch.manual_seed(7)
    b = torch.rand(50, device="tpu").cpu()
    assert torch.equal(a, b)


def test_rng_state_roundtrip() -> None:
    torchtpu.manual_seed(99)
    torch.rand(10, device="tpu")
    state = torch.tpu.get_rng_state()
    assert state.dtype == torch.uint8 and state.device.type == "cpu"
    a = torch.rand(20, device="tpu").cpu()
    torch.rand(5, device="tpu")
    torch.tpu.set_rng_state(state)
    b = torch.rand(20, device="tpu").cpu()
    assert torch.equal(a, b)


def test_in_place_ops_on_one_tensor_from_threads_do_not_crash() -> None:
    # Threads swapped and read the storage's buffer pointer unguarded: a double free (a
    # segfault in about one run of six). Concurrent writes to one storage are still not
    # ordered (as PyTorch's tensors, not CUDA's stream): some updates may be lost.
    r = run_python("""
        import threading, torch, torchtpu
        x = torch.zeros(1000, device="tpu")
        def inc():
            for _ in range(300):
                x.add_(1)
                x.sum()
        ts = [threading.Thread(target=inc) for _ in range(6)]
        [t.start() for t in ts]
        [t.join() for t in ts]
        v = x.cpu()
        assert bool((v == v[0]).all()) and 300 <= v[0] <= 1800, v[:4]
        print("ok")
    """, timeout=300)
    assert r.returncode == 0 and "ok" in r.stdout, r.stdout + r.stderr


def test_rng_state_must_be_a_cpu_byte_tensor_like_cuda() -> None:
    state = torch.tpu.get_rng_state()
    a = torch.rand(8, device="tpu").cpu()
    with pytest.raises(TypeError, match="RNG state must be a torch.ByteTensor"):
        torch.tpu.set_rng_state(state.to("tpu"))  # its bytes are not on the host
    with pytest.raises(TypeError, match="RNG state must be a torch.ByteTensor"):
        torch.Generator(device="tpu").set_state(state.float())
    with pytest.raises(RuntimeError, match="RNG state must be contiguous"):
        torch.Generator(device="tpu").set_state(torch.stack([state, state], 1)[:, 0])
    # torch.tpu.set_rng_state takes a strided view, as torch.cuda.set_rng_state does.
    torch.tpu.set_rng_state(torch.stack([state, state], 1)[:, 0])
    assert torch.equal(torch.rand(8, device="tpu").cpu(), a)


@pytest.mark.parametrize("seed", [2**64, -(2**63) - 1, 2**100 + 5])
def test_manual_seed_out_of_range_is_an_error_like_torch(seed: int) -> None:
    with pytest.raises(ValueError, match="Overflow"):
        torch.Generator().manual_seed(seed)
    with pytest.raises(ValueError, match="Overflow"):
        torch.tpu.manual_seed(seed)
    torch.tpu.manual_seed(-1)  # a negative int64 is its uint64 bits, as torch's
    assert torch.tpu.initial_seed() == 2**64 - 1


def test_device_capability_lists_the_dtypes_a_tensor_can_hold() -> None:
    supported = torch.accelerator.get_device_capability("tpu")["supported_dtypes"]
    for dtype in supported:
        assert torch.zeros(2, dtype=dtype, device="tpu").dtype == dtype
    assert {torch.float32, torch.bfloat16, torch.int64, torch.bool, torch.complex64,
            torch.uint16} <= supported
    for dtype in (torch.float8_e4m3fn, torch.complex32, torch.qint8):
        assert dtype not in supported


def test_generator_argument() -> None:
    g1 = torch.Generator(device="tpu")
    g1.manual_seed(5)
    g2 = torch.Generator(device="tpu")
    g2.manual_seed(5)
    a = torch.rand(30, device="tpu", generator=g1).cpu()
    b = torch.rand(30, device="tpu", generator=g2).cpu()
    assert torch.equal(a, b)


@pytest.mark.parametrize("draw", [
    lambda g: torch.empty(50, device="tpu").exponential_(generator=g),
    lambda g: torch.empty(50, device="tpu").cauchy_(generator=g),
    lambda g: torch.empty(50, device="tpu").geometric_(0.3, generator=g),
    lambda g: torch.empty(50, device="tpu").log_normal_(generator=g),
    lambda g: torch.poisson(torch.full((50,), 3.0, device="tpu"), generator=g),
    lambda g: torch._standard_gamma(torch.full((50,), 2.0, device="tpu"), generator=g),
    lambda g: torch.binomial(torch.full((50,), 9.0, device="tpu"),
                             torch.full((50,), 0.3, device="tpu"), generator=g),
    lambda g: torch._sample_dirichlet(torch.ones(10, 3, device="tpu"), generator=g),
], ids=["exponential_", "cauchy_", "geometric_", "log_normal_", "poisson", "standard_gamma",
        "binomial", "dirichlet"])
def test_random_ops_follow_the_tpu_generator(draw) -> None:
    # Each draws from the tpu generator it is given, or the device's default one: seeding
    # either reproduces it, and the CPU's random stream is left alone (the ops without a
    # lowering run on the CPU: they drew from the CPU's default generator, and refused a
    # tpu generator).
    def run(seed):
        torch.tpu.manual_seed(seed)
        g = torch.Generator(device="tpu")
        g.manual_seed(seed)
        return draw(g).cpu()

    torch.manual_seed(0)
    expected = torch.randn(4)
    torch.manual_seed(0)
    a = run(1)
    assert torch.equal(torch.randn(4), expected)
    assert torch.equal(run(1), a)
    assert not torch.equal(run(2), a)
    with pytest.raises(RuntimeError, match="Expected a 'tpu' device type for generator"):
        draw(torch.Generator())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool,
                                   torch.int32, torch.uint8, torch.float16])
def test_roundtrip_cpu_tpu(dtype: torch.dtype) -> None:
    x = (torch.randn(3, 5) * 10).to(dtype)
    t = x.tpu()
    assert t.device.type == "tpu" and t.dtype == dtype and t.shape == x.shape
    assert torch.equal(t.cpu(), x)
    assert torch.equal(x.to("tpu").to("cpu"), x)


def test_noncontiguous_roundtrip() -> None:
    x = torch.arange(24.0).reshape(4, 6)
    for v in (x.t(), x[:, ::2], x[1:3, 2:5]):
        assert torch.equal(v.to("tpu").cpu(), v)


def test_copy_into_tpu_tensor_from_cpu() -> None:
    t = torch.zeros(4, 4, device="tpu")
    src = torch.randn(4, 4)
    t.copy_(src)
    assert torch.equal(t.cpu(), src)
    back = torch.empty(4, 4)
    back.copy_(t)
    assert torch.equal(back, src)


def test_item() -> None:
    assert torch.tensor(3.5).to("tpu").item() == 3.5
    assert torch.tensor(7).to("tpu").item() == 7
    assert torch.tensor(True).to("tpu").item() is True
    x = torch.arange(10.0).to("tpu")
    assert x.sum().item() == 45.0
    assert x[3].item() == 3.0


def test_numpy_via_cpu() -> None:
    x = torch.randn(3, 4)
    n = x.to("tpu").cpu().numpy()
    np.testing.assert_array_equal(n, x.numpy())
    with pytest.raises(TypeError):
        x.to("tpu").numpy()


def test_tolist() -> None:
    x = torch.tensor([[1, 2], [3, 4]])
    assert x.to("tpu").tolist() == [[1, 2], [3, 4]]


def test_printing() -> None:
    x = torch.tensor([[1.5, -2.0], [3.25, 4.0]])
    s = repr(x.to("tpu"))
    assert "device='tpu:0'" in s
    assert "1.5000" in s and "-2.0000" in s and "3.2500" in s
    assert "dtype=torch.int64" not in repr(torch.tensor([1, 2]).to("tpu"))
    assert "tensor([1, 2], device='tpu:0')" == repr(torch.tensor([1, 2]).to("tpu"))
    assert "True" in str(torch.tensor([True, False]).to("tpu"))


def test_module_to_tpu() -> None:
    m = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    x = torch.randn(5, 4)
    expected = m(x)
    m.to("tpu")
    assert all(p.device.type == "tpu" for p in m.parameters())
    out = m(x.to("tpu"))
    assert out.device.type == "tpu"
    torch.testing.assert_close(out.cpu(), expected, rtol=1e-5, atol=1e-5)
    m2 = torch.nn.Linear(3, 3).tpu()
    assert m2.weight.device.type == "tpu"


def test_tensor_is_tpu_and_storage() -> None:
    t = torch.ones(3).tpu()
    assert t.is_tpu
    assert not torch.ones(3).is_tpu
    assert t.untyped_storage().device.type == "tpu"
    assert t.untyped_storage().nbytes() == 12


def test_device_object() -> None:
    d = torch.device("tpu:0")
    assert d.type == "tpu" and d.index == 0
    assert torch.empty(2, device=d).device == d


def test_cuda_style_helpers_of_the_device_module() -> None:
    # Code written against torch.cuda's module calls these through torch.get_device_module.
    mod = torch.get_device_module("tpu")
    assert mod.is_bf16_supported() is True
    x = torch.ones(1 << 16, device="tpu")
    with mod.device_of(x):
        assert mod.current_device() == 0
    with mod.device_of(torch.ones(2)):  # not a tpu tensor: nothing changes
        assert mod.current_device() == 0
    summary = mod.memory_summary()
    allocated = f"{mod.memory_allocated() / 2**20:.2f} MiB"
    assert "Allocated memory" in summary and allocated in summary, summary
    del x


def test_cuda_amp_names_under_torch_tpu_amp() -> None:
    # Code written against torch.cuda.amp, with cuda changed to tpu.
    a = torch.randn(4, 4)
    with torch.tpu.amp.autocast(dtype=torch.bfloat16):
        y = a.to("tpu") @ a.to("tpu")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ref = a @ a
    assert y.dtype == ref.dtype == torch.bfloat16
    torch.testing.assert_close(y.cpu(), ref)
    with torch.tpu.amp.autocast(enabled=False):
        assert (a.to("tpu") @ a.to("tpu")).dtype == torch.float32
    scaler = torch.tpu.amp.GradScaler(init_scale=8.0)
    assert scaler.get_scale() == 8.0
    assert torch.tpu.OutOfMemoryError is torch.cuda.OutOfMemoryError
    torch.tpu.init()


def test_packed_sequence_moves_with_tpu_and_is_tpu() -> None:
    # PackedSequence.cuda() / .is_cuda have tpu counterparts, as tensors and modules do.
    from torch.nn.utils.rnn import pack_padded_sequence

    packed = pack_padded_sequence(torch.randn(3, 2, 4), torch.tensor([3, 2]))
    moved = packed.tpu()
    assert moved.is_tpu and not packed.is_tpu and moved.data.device.type == "tpu"
    lstm = torch.nn.LSTM(4, 5)
    want, _ = lstm(packed)
    got, _ = lstm.tpu()(moved)
    torch.testing.assert_close(got.data.cpu(), want.data, rtol=1e-5, atol=1e-5)


def test_documented_submodules_are_attributes_after_import_torchtpu() -> None:
    # `torchtpu.flops.peak_flops()` as the docs write it, without importing the submodule;
    # `import torchtpu` itself imports none of them.
    r = run_python("""
        import sys, torchtpu
        lazy = ["torchtpu.flops", "torchtpu.serve", "torchtpu.train"]
        print([m for m in lazy if m in sys.modules])
        print(callable(torchtpu.flops.peak_flops), torchtpu.serve.__name__)
        try:
            torchtpu.no_such_thing
        except AttributeError as e:
            print(e)
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["[]", "True torchtpu.serve",
                                     "module 'torchtpu' has no attribute 'no_such_thing'"]
