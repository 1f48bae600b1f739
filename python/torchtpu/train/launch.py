"""Runs a TorchTitan job under ``torchrun`` and returns its per-step metrics.

Used by the tests, the benchmark and ``make train``: ``run(...)`` starts ``torchrun
--nproc-per-node N -m torchtpu.train`` (or ``torchtpu.train.cpu_reference`` for PyTorch's
CPU) with a config of ``torchtpu.train.configs`` and command-line overrides, waits with a
timeout (killing the whole process group past it), and reads the metrics file rank 0 wrote.
A failed run raises with the tail of its log.

tpu ranks start with glibc's arena limit at 1 (``rank_env``): the host allocator policy
torchtpu sets when the device starts (docs/architecture.md, "Host memory on CPU plugins")
can no longer bind threads that already have arenas of their own, and only the environment
of a process before it starts can.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass

from torchtpu._ports import free_port
from torchtpu.train.plot import read_metrics

LOSS = "loss_metrics/global_avg_loss"


@dataclass
class RunResult:
    records: list[dict]
    log_path: str
    dump_folder: str

    @property
    def losses(self) -> list[float]:
        return [r[LOSS] for r in self.records if LOSS in r]

    def metric(self, name: str) -> list[float]:
        return [r[name] for r in self.records if name in r]


ARENA_MAX_1 = "glibc.malloc.arena_max=1"


def rank_env(env: dict[str, str]) -> dict[str, str]:
    """``env`` for a tpu rank process: ``GLIBC_TUNABLES`` with the arena limit of the host
    allocator policy appended to what it holds (a setting of the user's comes first, and an
    ``arena_max`` they set is theirs), unless ``TORCHTPU_HOST_MALLOC=system`` asks for glibc's
    own settings."""
    tunables = env.get("GLIBC_TUNABLES", "")
    if env.get("TORCHTPU_HOST_MALLOC") == "system" or "glibc.malloc.arena_max=" in tunables:
        return env
    return dict(env, GLIBC_TUNABLES=f"{tunables}:{ARENA_MAX_1}" if tunables else ARENA_MAX_1)


def run(config: str, dump_folder: str, *overrides: str, ranks: int = 1, device: str = "tpu",
        metrics_file: str = "metrics.jsonl", timeout: float = 1200,
        env: dict[str, str] | None = None) -> RunResult:
    """Runs ``config`` on ``ranks`` processes of ``device`` ("tpu" or "cpu")."""
    if device not in ("tpu", "cpu"):
        raise ValueError(f"launch.run: device must be 'tpu' or 'cpu', got {device!r}")
    module = "torchtpu.train" if device == "tpu" else "torchtpu.train.cpu_reference"
    os.makedirs(dump_folder, exist_ok=True)
    log_path = os.path.join(dump_folder, metrics_file.replace(".jsonl", "") + ".log")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(ranks),
           "--master-addr", "127.0.0.1", "--master-port", str(free_port()), "-m", module,
           "--module", "torchtpu.train.configs", "--config", config,
           "--dump_folder", dump_folder, "--metrics.metrics_file", metrics_file, *overrides]
    full_env = dict(os.environ)
    full_env.update(env or {})
    if device == "tpu":
        full_env = rank_env(full_env)
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=full_env,
                                start_new_session=True)
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            rc = None
    if rc != 0:
        with open(log_path, errors="replace") as f:
            tail = f.read()[-6000:]
        what = f"timed out after {timeout:.0f} s" if rc is None else f"exited with status {rc}"
        raise RuntimeError(f"launch.run: {config} on {ranks} {device} rank(s) {what}; "
                           f"log {log_path}, tail:\n{tail}")
    return RunResult(read_metrics(os.path.join(dump_folder, metrics_file)), log_path,
                     dump_folder)
