"""Demo: train a small character-level language model on the ``tpu`` device.

Reads tinyshakespeare (``examples/data/tinyshakespeare.txt``, shipped in the repository, or
``--data PATH``), trains a context-window MLP with AdamW for a few hundred steps on
``tpu``, checks the first steps against the same run on the CPU, samples some text and
prints torchtpu's report (compiles, cache hits, transfers, fallbacks).

    python examples/train_demo.py [--steps N] [--data PATH]
"""

from __future__ import annotations

import argparse
import pathlib
import time

import torch
import torch.nn.functional as F

import torchtpu

CONTEXT = 8


class CharMLP(torch.nn.Module):
    def __init__(self, vocab: int, dim: int = 32, hidden: int = 256) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, dim)
        self.net = torch.nn.Sequential(
            torch.nn.Linear(CONTEXT * dim, hidden),
            torch.nn.LayerNorm(hidden),
            torch.nn.GELU(),
            torch.nn.Linear(hidden, vocab),
        )

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.net(self.embed(idx).flatten(1))


def batches(data: torch.Tensor, steps: int, batch: int, seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(steps):
        starts = torch.randint(0, len(data) - CONTEXT - 1, (batch,), generator=g)
        x = torch.stack([data[s : s + CONTEXT] for s in starts.tolist()])
        y = data[starts + CONTEXT]
        out.append((x, y))
    return out


def train(device: str, vocab: int, data_batches, lr: float) -> tuple[CharMLP, list[float]]:
    torch.manual_seed(0)
    model = CharMLP(vocab).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    losses = []
    for x, y in data_batches:
        logits = model(x.to(device))
        loss = F.cross_entropy(logits, y.to(device))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return model, losses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--data", type=pathlib.Path,
                        default=pathlib.Path(__file__).resolve().parent / "data"
                        / "tinyshakespeare.txt")
    args = parser.parse_args()
    if not args.data.exists():
        raise SystemExit(f"demo: corpus not found at {args.data}; pass --data PATH to a text file")

    text = args.data.read_text()
    chars = sorted(set(text))
    stoi = {c: i for i, c in enumerate(chars)}
    data = torch.tensor([stoi[c] for c in text], dtype=torch.long)
    info = torchtpu._C.plugin_info()
    print(f"tpu: {torch.tpu.device_count()} device(s), platform={info['platform']}, "
          f"PJRT C API {info['api_version']}")
    print(f"corpus: {len(text):,} characters, vocabulary {len(chars)}")

    train_batches = batches(data, args.steps, batch=64, seed=1)
    start = time.perf_counter()
    model, losses = train("tpu", len(chars), train_batches, lr=3e-3)
    seconds = time.perf_counter() - start
    for step in range(0, args.steps, max(1, args.steps // 6)):
        print(f"step {step:4d}  loss {losses[step]:.4f}")
    print(f"step {args.steps - 1:4d}  loss {losses[-1]:.4f}   ({seconds:.1f} s on tpu, compiles included)")

    check = 20
    _, cpu_losses = train("cpu", len(chars), train_batches[:check], lr=3e-3)
    worst = max(abs(a - b) for a, b in zip(losses[:check], cpu_losses))
    print(f"first {check} losses vs the same run on PyTorch CPU: max |diff| = {worst:.2e}")

    model.eval()
    context = data[:CONTEXT].tolist()
    out = []
    with torch.no_grad():
        gen = torch.Generator().manual_seed(0)
        for _ in range(120):
            logits = model(torch.tensor([context[-CONTEXT:]], device="tpu"))
            probs = F.softmax(logits, dim=-1).cpu()
            nxt = int(torch.multinomial(probs[0], 1, generator=gen))
            context.append(nxt)
            out.append(chars[nxt])
    print("sample:", repr("".join(out)))
    print()
    torchtpu.debug.report()


if __name__ == "__main__":
    main()
