"""Data-parallel training on tpu with DistributedDataParallel.

Trains a character-level MLP on tinyshakespeare (``examples/data/tinyshakespeare.txt``)
with one process per rank; each rank reads its own batches and DDP averages the gradients
through the ``tpu`` backend of torch.distributed. Run with torchrun:

    torchrun --nproc-per-node 2 examples/ddp_train.py [--steps N] [--batch B]

Rank 0 prints the loss averaged over the ranks and, at the end, how the gradients
travelled (``host_staged`` across processes on the XLA CPU plugin).
"""

from __future__ import annotations

import argparse
import os
import pathlib
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import torchtpu

CONTEXT = 8
DATA = pathlib.Path(__file__).parent / "data" / "tinyshakespeare.txt"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--batch", type=int, default=64, help="sequences per rank and step")
    ap.add_argument("--data", type=pathlib.Path, default=DATA)
    args = ap.parse_args()

    dist.init_process_group("tpu")
    rank, world = dist.get_rank(), dist.get_world_size()
    torchtpu.set_device(int(os.environ.get("LOCAL_RANK", 0)) % torchtpu.device_count())

    text = args.data.read_text()
    chars = sorted(set(text))
    data = torch.tensor([chars.index(c) for c in text], dtype=torch.long)
    torch.manual_seed(0)  # the same initial weights everywhere (DDP broadcasts rank 0's)
    model = torch.nn.Sequential(
        torch.nn.Embedding(len(chars), 32), torch.nn.Flatten(),
        torch.nn.Linear(CONTEXT * 32, 256), torch.nn.GELU(), torch.nn.Linear(256, len(chars)),
    ).to("tpu")
    model = DDP(model)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    gen = torch.Generator().manual_seed(1000 + rank)  # each rank its own batches

    start = time.perf_counter()
    for step in range(1, args.steps + 1):
        pos = torch.randint(0, len(data) - CONTEXT - 1, (args.batch,), generator=gen)
        x = torch.stack([data[p:p + CONTEXT] for p in pos.tolist()]).to("tpu")
        y = data[pos + CONTEXT].to("tpu")
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 20 == 0 or step == args.steps:
            avg = loss.detach().clone()
            dist.all_reduce(avg, op=dist.ReduceOp.AVG)
            if rank == 0:
                print(f"step {step:4d}  loss {avg.item():.4f}", flush=True)
    elapsed = time.perf_counter() - start
    if rank == 0:
        m = torchtpu.debug.metrics()
        print(f"{args.steps} steps on {world} ranks in {elapsed:.1f} s "
              f"({args.steps * args.batch * world / elapsed:.0f} sequences/s); transport "
              f"{torchtpu.distributed.transport()}: {m.get('num_host_staged_collectives', 0)} "
              f"collectives, {m.get('host_staged_bytes', 0) / 2**20:.1f} MiB staged")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
