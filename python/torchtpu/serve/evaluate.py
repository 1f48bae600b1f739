"""Quality checks of a serving engine's model as it runs on the device: perplexity of a
token sequence through the engine's own runner (the compiled layers, its attention and its
weights, int8 included), for comparing quantized weights against f32."""

from __future__ import annotations

import math

import torch

from torchtpu.serve.runner import StepItem


def perplexity(engine, token_ids: list[int], chunk: int | None = None) -> float:
    """exp(mean negative log-likelihood) of each token after the first, given those before
    it, computed in prefill chunks of `chunk` tokens (default: the engine's largest step
    that the runner returns every row of). Uses the runner's KV pool from page 0, so call
    it only while the engine has no request in flight."""
    if engine.has_unfinished():
        raise RuntimeError("serve: perplexity needs an idle engine (it writes the KV pool)")
    runner = engine.runner
    chunk = chunk or min(runner.token_buckets[-1], runner.row_buckets[-1])
    ps = runner.page_size
    n = len(token_ids)
    if n < 2 or -(-n // ps) > runner.num_pages or n > engine.max_model_len:
        raise ValueError(f"serve: perplexity: {n} tokens do not fit (need 2 to "
                         f"{min(engine.max_model_len, runner.num_pages * ps)})")
    pages = list(range(-(-n // ps)))
    nll, count = 0.0, 0
    for start in range(0, n - 1, chunk):
        piece = token_ids[start:min(start + chunk, n - 1)]
        item = StepItem("perplexity", piece, start, pages, num_logits=len(piece))
        logits = runner.execute([item])["perplexity"].double()
        targets = torch.tensor(token_ids[start + 1:start + 1 + len(piece)])
        logp = torch.log_softmax(logits, dim=-1)
        nll -= float(logp.gather(1, targets.view(-1, 1)).sum())
        count += len(piece)
    return math.exp(nll / count)
