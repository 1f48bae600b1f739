"""Fine-tunes SmolLM2-135M-Instruct with TorchTitan on tpu and reports held-out perplexity.

The ``smollm2_135m_finetune`` config loads SmolLM2-135M-Instruct's weights (its Hugging Face
folder, converted offline by ``torchtpu.models.smollm2_path()``) into TorchTitan's llama3
through TorchTitan's own state-dict adapter, trains on the first 90% of the shipped corpus
and validates on the last 10% (``TpuValidator``, the same held-out batches every time).

Reported: the held-out perplexity of the pretrained weights computed independently with
Hugging Face transformers on the CPU (the "before"), TorchTitan's validation perplexity
after step 1 (the loaded weights after one warmup step: it checks the weight conversion)
and after the last step.

    python bench/titan_finetune.py [--steps 30] [--val-batches 8] [--seq-len 256] [--batch 2]
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile

import torch

from torchtpu.train import launch
from torchtpu.train.configs import tokenizer_path
from torchtpu.train.data import default_corpus, read_split


def hf_heldout_loss(path: str, seq_len: int, batch: int, batches: int) -> float:
    """Mean next-token cross-entropy of the pretrained model on the validator's batches."""
    from torchtitan.components.tokenizer import HuggingFaceTokenizer
    from transformers import AutoModelForCausalLM

    tokenizer = HuggingFaceTokenizer(tokenizer_path=path)
    tokens = tokenizer.encode(read_split(default_corpus(), "validation", 0.1), add_bos=True,
                              add_eos=True)
    n = min(batches * batch, (len(tokens) - 1) // seq_len)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for i in range(n):
            window = torch.tensor(tokens[i * seq_len:(i + 1) * seq_len + 1])[None]
            logits = model(window[:, :-1]).logits
            total += torch.nn.functional.cross_entropy(logits[0], window[0, 1:],
                                                       reduction="sum").item()
            count += seq_len
    return total / count


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--val-batches", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--batch", type=int, default=2)
    args = ap.parse_args()
    path = tokenizer_path()
    before = hf_heldout_loss(path, args.seq_len, args.batch, args.val_batches)
    print(f"pretrained (transformers, CPU): held-out loss {before:.4f}, "
          f"perplexity {math.exp(before):.2f}", flush=True)
    with tempfile.TemporaryDirectory(prefix="titan_finetune_") as tmp:
        run = launch.run(
            "smollm2_135m_finetune", tmp, "--training.steps", str(args.steps),
            "--training.seq_len", str(args.seq_len), "--training.local_batch_size",
            str(args.batch), "--training.global_batch_size", str(args.batch),
            "--validator.freq", str(args.steps), "--validator.steps", str(args.val_batches),
            "--checkpoint.interval", str(10 * args.steps), "--loss_curve", "",
            "--metrics.no-progress-bar", timeout=4 * 3600)
    val = [(r["step"], r["validation_metrics/loss"]) for r in run.records
           if "validation_metrics/loss" in r]
    for step, loss in val:
        print(f"TorchTitan on tpu after step {step}: held-out loss {loss:.4f}, "
              f"perplexity {math.exp(loss):.2f}")
    train = run.losses
    print(f"training loss: step 1 {train[0]:.4f}, step {len(train)} {train[-1]:.4f}")
    if not val:
        print("no validation records", file=sys.stderr)
        return 1
    lowered = val[-1][1] < before
    print(f"held-out perplexity {math.exp(before):.2f} -> {math.exp(val[-1][1]):.2f} "
          f"({'lowered' if lowered else 'NOT lowered'})")
    return 0 if lowered else 1


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sys.exit(main())
