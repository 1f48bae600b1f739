"""TorchTitan's metrics, with an MFU that means something on every platform.

``TpuMetricsProcessor`` is TorchTitan's ``MetricsProcessor`` (same console line, same
TensorBoard/W&B metrics) with three additions:

- the MFU denominator is set by the trainer from ``torchtpu.flops.peak_flops`` (TorchTitan's
  own table knows NVIDIA/AMD/TPU names only and assumes an A100 otherwise);
- every logged step is appended as one JSON object to ``<dump_folder>/<metrics_file>``
  (rank 0): loss, grad norm, tokens/s, MFU, peak memory, learning rate, validation loss,
  and ``process_cpu_s_per_step`` (the process's CPU time per step since the previous
  record: on a CPU plugin, what the step cost whatever else the machine runs), with its
  system-time part ``process_sys_s_per_step`` and ``process_minor_faults_per_step`` (host
  pages first touched: fresh buffers of a CPU plugin), and with ``--metrics.device_counters``
  torchtpu's counters per step (``tpu/num_executions``, ``tpu/num_eager_ops``, ...);
- a progress bar (rank 0, stderr) advanced every step, showing the last logged loss.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from dataclasses import dataclass
from typing import Any

import torch
from torchtitan.components.metrics import BaseLogger, MetricsProcessor


class JsonlLogger(BaseLogger):
    """One JSON object per ``log`` call: ``{"step": n, <metric>: value, ...}``."""

    def __init__(self, path: str) -> None:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        self.path = path
        self._file = open(path, "a", encoding="utf-8")

    def log(self, metrics: dict[str, Any], step: int) -> None:
        record = {"step": step}
        record.update({k: float(v) if isinstance(v, (int, float)) else str(v)
                       for k, v in metrics.items()})
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


class _Tee(BaseLogger):
    def __init__(self, *loggers: BaseLogger) -> None:
        self._loggers = loggers

    def log(self, metrics: dict[str, Any], step: int) -> None:
        for logger in self._loggers:
            logger.log(metrics, step)

    def close(self) -> None:
        for logger in self._loggers:
            logger.close()


class TpuMetricsProcessor(MetricsProcessor):
    @dataclass(kw_only=True, slots=True)
    class Config(MetricsProcessor.Config):
        metrics_file: str = "metrics.jsonl"
        """Per-step metrics (JSON lines) under the dump folder, rank 0; empty: none."""

        progress_bar: bool = True

        device_counters: bool = False
        """Adds torchtpu's device counters per step to each record (``tpu/<counter>``: programs
        executed, eager ops, graph executions, compiles, transfers, fallbacks; deltas since
        the previous record divided by the steps between), to see where a step's time goes."""

    def __init__(self, config: Config, **kwargs) -> None:
        super().__init__(config, **kwargs)
        self.metrics_path: str | None = None
        self._last: dict[str, float] = {}
        self._bar = None
        rank0 = not torch.distributed.is_initialized() or torch.distributed.get_rank() == 0
        if rank0 and config.metrics_file:
            self.metrics_path = os.path.join(kwargs.get("dump_folder", "./outputs"),
                                             config.metrics_file)
            if os.path.exists(self.metrics_path):
                os.remove(self.metrics_path)  # one run per file; a resumed run appends anew
            self.logger = _Tee(self.logger, _Recorder(self, JsonlLogger(self.metrics_path),
                                                      config.device_counters))
        self._show_bar = rank0 and config.progress_bar

    def start_progress(self, total_steps: int, step: int) -> None:
        if not self._show_bar:
            return
        from tqdm import tqdm

        self._bar = tqdm(total=total_steps, initial=step, desc="train", unit="step",
                         file=sys.stderr, dynamic_ncols=True, leave=True)

    def advance(self, step: int) -> None:
        if self._bar is None:
            return
        self._bar.update(step - self._bar.n)
        if self._last:
            self._bar.set_postfix(self._last, refresh=False)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        super().close()


class _Recorder(BaseLogger):
    """Writes the records and keeps the last loss/throughput for the progress bar."""

    def __init__(self, owner: TpuMetricsProcessor, sink: JsonlLogger,
                 device_counters: bool = False) -> None:
        self._owner = owner
        self._sink = sink
        self._last_cpu: tuple[int, tuple[float, float, float]] | None = None
        self._device_counters = device_counters
        self._last_counters: dict[str, float] | None = None

    def _counter_deltas(self, steps: int) -> dict[str, float]:
        """Per-step deltas of torchtpu's numeric counters since the previous record."""
        from torchtpu import debug

        now = {k: float(v) for k, v in debug.metrics().items()
               if isinstance(v, (int, float)) and not isinstance(v, bool)}
        last, self._last_counters = self._last_counters, now
        if last is None or steps <= 0:
            return {}
        return {f"tpu/{k}": (v - last.get(k, 0.0)) / steps for k, v in now.items()}

    def log(self, metrics: dict[str, Any], step: int) -> None:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        cpu = (time.process_time(), usage.ru_stime, float(usage.ru_minflt))
        steps = step - self._last_cpu[0] if self._last_cpu is not None else 0
        if steps > 0:
            last = self._last_cpu[1]
            metrics = dict(metrics, process_cpu_s_per_step=(cpu[0] - last[0]) / steps,
                           process_sys_s_per_step=(cpu[1] - last[1]) / steps,
                           process_minor_faults_per_step=(cpu[2] - last[2]) / steps)
        if self._device_counters:
            metrics = dict(metrics, **self._counter_deltas(steps))
        self._last_cpu = (step, cpu)
        self._sink.log(metrics, step)
        shown = {"loss": "loss_metrics/global_avg_loss", "tps": "throughput(tps)",
                 "mfu%": "mfu(%)"}
        self._owner._last = {k: round(float(metrics[v]), 4 if k == "loss" else 2)
                             for k, v in shown.items() if v in metrics}

    def close(self) -> None:
        self._sink.close()
