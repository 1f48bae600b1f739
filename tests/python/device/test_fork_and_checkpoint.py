"""What a user meets around the device's process state: a fork after the device started
(a DataLoader's fork workers) raises instead of hanging, and activation checkpointing
replays the device's random numbers (torch.utils.checkpoint asks `torch.tpu._initialized`
before it saves the RNG state), so dropout in a checkpointed block gets its gradients
right. Compared with PyTorch on the CPU."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch
from torch.utils.checkpoint import checkpoint

import torchtpu  # noqa: F401

TPU = "tpu"


def _run(code: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=timeout, env=dict(os.environ))


@pytest.mark.parametrize("reentrant", [False, True])
def test_checkpointed_dropout_replays_its_mask(reentrant: bool) -> None:
    def block(a: torch.Tensor, masks: list) -> torch.Tensor:
        y = torch.nn.functional.dropout(a * 1.0, 0.5)
        masks.append((y != 0).cpu())
        return y * y

    for device in ("cpu", TPU):
        masks: list = []
        torch.manual_seed(2)
        x = torch.ones(64, device=device, requires_grad=True)
        checkpoint(block, x, masks, use_reentrant=reentrant).sum().backward()
        assert len(masks) == 2, device
        assert torch.equal(masks[0], masks[1]), f"{device}: the recompute drew another mask"
        assert torch.equal((x.grad != 0).cpu(), masks[0]), device


def test_device_module_reports_initialized() -> None:
    assert torch.tpu._initialized is True
    assert torch.tpu._is_in_bad_fork() is False


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_forked_child_raises_instead_of_hanging() -> None:
    proc = _run("""
        import os, signal, torch, torchtpu
        torch.ones(1, device="tpu").sum().item()
        x = torch.arange(4.0, device="tpu")
        # New work, and reads of the parent's tensors (a Dataset's tpu labels read with
        # .tolist() in a fork worker waited forever).
        uses = [lambda: (torch.full((2,), 3.0, device="tpu") + 1).sum().item(),
                lambda: x.cpu(), lambda: x.tolist(), lambda: repr(x),
                lambda: torch.empty(4).copy_(x), lambda: x.to("cpu", torch.float64)]
        for use in uses:
            pid = os.fork()
            if pid == 0:
                signal.alarm(20)
                code = 3
                try:
                    assert torch.tpu._is_in_bad_fork()
                    use()
                except RuntimeError as e:
                    code = 0 if "forked subprocess" in str(e) and "spawn" in str(e) else 4
                os._exit(code)
            _, status = os.waitpid(pid, 0)
            print("child", os.waitstatus_to_exitcode(status))
        print("parent", (torch.ones(2, device="tpu") * 2).sum().item())
    """)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.count("child 0") == 6 and "parent 4.0" in proc.stdout, proc.stdout


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_forked_child_that_never_uses_the_device_exits_normally() -> None:
    proc = _run("""
        import os, sys, torch, torchtpu
        torch.ones(1, device="tpu").sum().item()
        pid = os.fork()
        if pid == 0:
            sys.exit(int(torch.ones(3).sum().item()) - 3)  # a normal exit: atexit runs
        _, status = os.waitpid(pid, 0)
        print("child", os.waitstatus_to_exitcode(status))
    """, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "child 0" in proc.stdout


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_dataloader_fork_worker_making_tpu_tensors_reports_the_error() -> None:
    proc = _run("""
        import torch, torchtpu
        from torch.utils.data import DataLoader, Dataset
        class Make(Dataset):
            def __len__(self): return 4
            def __getitem__(self, i): return torch.full((2,), float(i), device="tpu")
        torch.ones(1, device="tpu").sum().item()
        loader = DataLoader(Make(), batch_size=2, num_workers=1,
                            multiprocessing_context="fork")
        try:
            next(iter(loader))
            print("no error")
        except RuntimeError as e:
            print("raised", "forked subprocess" in str(e))
    """, timeout=90)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "raised True" in proc.stdout, proc.stdout + proc.stderr[-2000:]


_SPAWNED = """
import torch, torchtpu
import torch.multiprocessing as mp
from torch.utils.data import DataLoader, Dataset


def child(inbox, outbox):
    import torchtpu  # noqa: F401
    x = inbox.get()
    outbox.put((x.device.type, x.cpu()))
    w = torch.nn.Parameter(torch.full((2,), 5.0, device="tpu"))
    outbox.put((torch.arange(6.0, device="tpu").reshape(2, 3).t(), w,
                torch.tensor([7, 8], dtype=torch.int16, device="tpu").untyped_storage()))


class Rows(Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        return torch.full((3,), float(i), device="tpu")


if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    inbox, outbox = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=child, args=(inbox, outbox))
    p.start()
    inbox.put(torch.arange(4.0, device="tpu") * 2)
    print("child got", *outbox.get(timeout=60))
    t, w, s = outbox.get(timeout=60)
    print("parent got", t.device, t.shape, t.cpu().tolist(), type(w).__name__, w.requires_grad,
          w.device, s.device, s.nbytes())
    p.join(30)
    loader = DataLoader(Rows(), batch_size=2, num_workers=1, multiprocessing_context="spawn")
    print("batches", [b.device.type + str(b[:, 0].cpu().tolist()) for b in loader])
"""


def test_tpu_tensors_travel_through_spawned_processes(tmp_path) -> None:
    # torch's CPU reducer refused tpu storages in the queue's feeder thread, and the
    # receiver (a spawn DataLoader, q.get()) waited forever; they travel as copies.
    script = tmp_path / "spawned.py"
    script.write_text(_SPAWNED)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=180, env=dict(os.environ))
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "child got tpu tensor([0., 2., 4., 6.])" in out, out
    assert ("parent got tpu:0 torch.Size([3, 2]) [[0.0, 3.0], [1.0, 4.0], [2.0, 5.0]] "
            "Parameter True tpu:0 tpu:0 4") in out, out
    assert "batches ['tpu[0.0, 1.0]', 'tpu[2.0, 3.0]']" in out, out
