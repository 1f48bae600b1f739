"""OpenAI response bodies: usage, and logprobs of completions and of chat completions."""

from __future__ import annotations

import time

from torchtpu.serve.sampling import Sample


def usage(prompt_tokens: int, completion_tokens: int) -> dict:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def completion_logprobs(samples: list[Sample], tokenizer, offset: int) -> dict:
    tokens = [tokenizer.decode([s.token]) for s in samples]
    offsets, pos = [], offset
    for t in tokens:
        offsets.append(pos)
        pos += len(t)
    return {"tokens": tokens, "token_logprobs": [s.logprob for s in samples],
            "top_logprobs": [_top(s, tokenizer) for s in samples],
            "text_offset": offsets}


def _top(sample: Sample, tokenizer) -> dict:
    """A completion token's top_logprobs: the sampled token first, then the `logprobs`
    most likely (up to logprobs + 1 entries, as OpenAI's legacy API and vLLM give)."""
    top = {tokenizer.decode([sample.token]): sample.logprob}
    for t, lp in sample.top_logprobs or []:
        top.setdefault(tokenizer.decode([t]), lp)
    return top


def chat_logprobs(samples: list[Sample], tokenizer) -> dict:
    def entry(token: int, logprob: float) -> dict:
        text = tokenizer.decode([token])
        return {"token": text, "logprob": logprob, "bytes": list(text.encode("utf-8"))}

    return {"content": [dict(entry(s.token, s.logprob),
                             top_logprobs=[entry(t, lp) for t, lp in (s.top_logprobs or [])])
                        for s in samples]}


def now() -> int:
    return int(time.time())
