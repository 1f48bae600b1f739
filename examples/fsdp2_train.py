"""Fully sharded data-parallel training on tpu with FSDP2 (``fully_shard``).

Trains a small GPT-style transformer on tinyshakespeare characters with its parameters,
gradients and optimizer state sharded over the ranks (each block its own FSDP unit), then
optionally saves a distributed checkpoint. Run with torchrun:

    torchrun --nproc-per-node 2 examples/fsdp2_train.py [--steps N] [--compile] \
        [--checkpoint DIR]

``--compile`` runs the model under ``torch.compile(backend="tpu")`` (FSDP's hooks stay
eager). A checkpoint written by N ranks loads on any number of ranks (DCP reshards).
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys
import time

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn.functional as F
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

import torchtpu

DATA = pathlib.Path(__file__).parent / "data" / "tinyshakespeare.txt"


class Block(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.fc1, self.fc2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).chunk(3, dim=-1)
        q, k, v = (t.reshape(b, s, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, s, d))
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class GPT(nn.Module):
    def __init__(self, vocab: int, dim: int = 64, heads: int = 4, layers: int = 2,
                 context: int = 32) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(context, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.norm(x))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--batch", type=int, default=8, help="sequences per rank and step")
    ap.add_argument("--context", type=int, default=32)
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--checkpoint", type=pathlib.Path, help="save a DCP checkpoint here")
    ap.add_argument("--data", type=pathlib.Path, default=DATA)
    args = ap.parse_args()

    if "RANK" not in os.environ:
        sys.exit("fsdp2_train.py: run me with torchrun --nproc-per-node N")
    dist.init_process_group("cpu:gloo,tpu:tpu")  # DCP's metadata travels as CPU tensors
    rank, world = dist.get_rank(), dist.get_world_size()
    torchtpu.set_device(int(os.environ.get("LOCAL_RANK", 0)) % torchtpu.device_count())
    mesh = init_device_mesh("tpu", (world,))

    text = args.data.read_text()
    chars = sorted(set(text))
    data = torch.tensor([chars.index(c) for c in text], dtype=torch.long)
    torch.manual_seed(0)
    model = GPT(len(chars), context=args.context).to("tpu")
    for blk in model.blocks:
        fully_shard(blk, mesh=mesh)
    fully_shard(model, mesh=mesh)
    fwd = torch.compile(model, backend="tpu") if args.compile else model
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    gen = torch.Generator().manual_seed(1000 + rank)

    start = time.perf_counter()
    for step in range(1, args.steps + 1):
        pos = torch.randint(0, len(data) - args.context - 1, (args.batch,), generator=gen)
        x = torch.stack([data[p:p + args.context] for p in pos.tolist()]).to("tpu")
        y = torch.stack([data[p + 1:p + 1 + args.context] for p in pos.tolist()]).to("tpu")
        loss = F.cross_entropy(fwd(x).flatten(0, 1), y.flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 10 == 0 or step == args.steps:
            avg = loss.detach().clone()
            dist.all_reduce(avg, op=dist.ReduceOp.AVG)
            if rank == 0:
                print(f"step {step:4d}  loss {avg.item():.4f}", flush=True)
    elapsed = time.perf_counter() - start
    if args.checkpoint:
        dcp.save({"model": model.state_dict(), "optim": opt.state_dict()},
                 checkpoint_id=str(args.checkpoint))
        if rank == 0:
            print(f"checkpoint written to {args.checkpoint}")
    if rank == 0:
        m = torchtpu.debug.metrics()
        print(f"{args.steps} steps on {world} ranks in {elapsed:.1f} s; transport "
              f"{torchtpu.distributed.transport()}: {m.get('num_host_staged_collectives', 0)} "
              f"collectives, {m.get('host_staged_bytes', 0) / 2**20:.1f} MiB staged")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
