"""TorchTitan on the ``tpu`` device.

TorchTitan (``pip install torchtitan==0.3.0``) runs unchanged; this package supplies what it
reaches through its own extension points, never a patch of its files:

- ``python -m torchtpu.train`` (under ``torchrun``) imports torchtpu, so TorchTitan finds the
  ``tpu`` device (``torch._utils._get_available_device_type()``) and its process-group backend
  (``Backend.default_device_backend_map["tpu"]``), then runs TorchTitan's own entry point.
- ``configs``: a config registry (``--module torchtpu.train.configs --config NAME``) with
  TorchTitan's llama3 debug model, a small Qwen3 and a SmolLM2-135M-shaped Llama, built from
  TorchTitan's own model registries with the swaps below.
- ``attention.DenseAttention``: an inner attention for TorchTitan's decoders whose masks are
  dense tensors (TorchTitan's FlexAttention and varlen backends compile only with Inductor
  and CUDA kernels).
- ``data.TextFileDataLoader``: a local text file (the corpus shipped in examples/data) as a
  stateful, rank-aware dataloader with a held-out split.
- ``trainer.TpuTrainer`` / ``metrics.TpuMetricsProcessor``: document masks for
  DenseAttention, MFU against torchtpu's peak FLOP/s (``torchtpu.flops``), a per-step
  metrics file, a progress bar and a loss-curve PNG.
- ``compat``: the one thing torch 2.13 lacks that TorchTitan 0.3.0 calls (see its docstring).
- ``cpu_reference``: the same TorchTitan run on PyTorch's CPU, the reference for tests and
  the benchmark.
"""
