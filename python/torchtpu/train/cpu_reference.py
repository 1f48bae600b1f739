"""The same TorchTitan run on PyTorch's CPU: the reference for tests and the benchmark.

``torchrun ... -m torchtpu.train.cpu_reference --module torchtpu.train.configs --config NAME``

TorchTitan 0.3.0 has no CPU device path: ``torchtitan.tools.utils`` takes the first
available accelerator and falls back to ``"cuda"`` (``get_device_info``), and its memory
monitor calls CUDA's memory API on the device module. This launcher -- a test instrument,
not how tpu runs -- sets TorchTitan's device to ``cpu`` before TorchTitan's other modules
read it, with a device module that answers those calls for the host (``memory_stats`` is
empty: TorchTitan then logs -1 for the peaks). Everything else is TorchTitan unchanged,
Gloo as the process-group backend (``init_process_group``). Compile with ``--compile.backend inductor`` (or
``--compile.enable False`` for eager).
"""

from __future__ import annotations

import os
import types

import torch


def _total_memory() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _device_module() -> types.SimpleNamespace:
    props = types.SimpleNamespace(name="cpu", total_memory=_total_memory())
    return types.SimpleNamespace(
        set_device=lambda device: None,
        current_device=lambda: 0,
        device_count=lambda: 1,
        get_device_name=lambda device=None: "cpu",
        get_device_properties=lambda device=None: props,
        reset_peak_memory_stats=lambda device=None: None,
        empty_cache=lambda: None,
        memory_stats=lambda device=None: {},
        synchronize=lambda device=None: None,
        is_available=lambda: True,
    )


def install() -> None:
    """Makes TorchTitan run on ``cpu``; call before importing ``torchtitan.trainer``."""
    import torchtitan.tools.utils as tt_utils

    tt_utils.device_type = "cpu"
    tt_utils.device_module = _device_module()


def cpu_peak_flops(dtype: torch.dtype, size: int = 2048, runs: int = 4) -> float:
    """FLOP/s of the best of ``runs`` ``size`` x ``size`` matmuls in ``dtype`` on the CPU,
    timed by CPU time as the plugin's peak is (``torchtpu.flops.best_flops``)."""
    from torchtpu.flops import best_flops

    gen = torch.Generator().manual_seed(0)
    a = torch.randn(size, size, generator=gen).to(dtype)
    b = torch.randn(size, size, generator=gen).to(dtype)
    torch.mm(a, b)
    return best_flops(lambda: torch.mm(a, b), 2.0 * size**3, runs, by_cpu_time=True)


def init_process_group() -> None:
    """Gloo for every CPU tensor. torchtpu is imported in this process (the configs use it),
    which makes tpu PyTorch's accelerator, and TorchTitan's ``barrier(device_ids=[0])``
    then addresses the accelerator's backend; the tpu entry serves those barriers only.
    TorchTitan keeps a process group that exists when it starts."""
    from datetime import timedelta

    import torch.distributed as dist

    import torchtpu  # noqa: F401  (registers the tpu backend)

    dist.init_process_group("cpu:gloo,tpu:tpu", timeout=timedelta(seconds=300))


if __name__ == "__main__":
    install()
    init_process_group()
    from torchtpu.train import compat

    compat.install()
    from torchtitan.train import main

    main()
