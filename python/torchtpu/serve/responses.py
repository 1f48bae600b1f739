"""OpenAI response bodies: usage, and logprobs of completions and of chat completions."""

from __future__ import annotations

import functools
import re
import time

from torchtpu.serve.sampling import Sample


def usage(prompt_tokens: int, completion_tokens: int) -> dict:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def completion_logprobs(samples: list[Sample], tokenizer, offset: int,
                        prompt: tuple[list[int], list[Sample | None]] | None = None) -> dict:
    """The legacy `logprobs` object of `samples`, text offsets from `offset`. `prompt`
    (echo): the prompt's ids and prompt logprobs, whose entries come first (null
    token_logprobs and top_logprobs for the first token, as vLLM), each token's offset
    following the one before it."""
    entries = list(zip(*prompt)) if prompt is not None else []
    entries += [(s.token, s) for s in samples]
    tokens = [tokenizer.decode([t]) for t, _ in entries]
    offsets, pos = [], offset
    for t in tokens:
        offsets.append(pos)
        pos += len(t)
    return {"tokens": tokens,
            "token_logprobs": [s.logprob if s is not None else None for _, s in entries],
            "top_logprobs": [_top(s, tokenizer) if s is not None else None for _, s in entries],
            "text_offset": offsets}


def prompt_logprobs(prompt_ids: list[int], samples: list[Sample | None], tokenizer) -> list:
    """vLLM's `prompt_logprobs` body: per prompt token null (the first) or {token id: {logprob,
    rank, decoded_token}} of the token itself and the top k at its position."""
    out: list = []
    for token, s in zip(prompt_ids, samples):
        if s is None:
            out.append(None)
            continue
        entry = {str(token): {"logprob": s.logprob, "rank": s.rank,
                              "decoded_token": tokenizer.decode([token])}}
        for rank, (t, lp) in enumerate(s.top_logprobs or [], start=1):
            entry.setdefault(str(t), {"logprob": lp, "rank": rank,
                                      "decoded_token": tokenizer.decode([t])})
        out.append(entry)
    return out


def _top(sample: Sample, tokenizer) -> dict:
    """A completion token's top_logprobs: the sampled token first, then the `logprobs`
    most likely (up to logprobs + 1 entries, as OpenAI's legacy API and vLLM give)."""
    top = {tokenizer.decode([sample.token]): sample.logprob}
    for t, lp in sample.top_logprobs or []:
        top.setdefault(tokenizer.decode([t]), lp)
    return top


_BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>")


@functools.cache
def _byte_level() -> dict[str, int]:
    """GPT-2's byte-level alphabet (transformers' own table): the byte each character of a
    piece stands for."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    return {ch: b for b, ch in bytes_to_unicode().items()}


@functools.lru_cache(maxsize=8)
def _is_byte_level(tokenizer) -> bool:
    import tokenizers

    backend = getattr(tokenizer, "backend_tokenizer", None)
    decoder = getattr(backend, "decoder", None)
    return isinstance(decoder, tokenizers.decoders.ByteLevel)


def token_bytes(tokenizer, token: int, text: str) -> list[int]:
    """The bytes a token stands for (OpenAI's `bytes`: what a client joins to rebuild a
    character spread over several tokens), not the UTF-8 of its decoded text, which is
    U+FFFD for a piece of a character: a byte-level piece's bytes, a byte-fallback piece's
    byte; otherwise the UTF-8 of `text`, the token's decoded text."""
    piece = tokenizer.convert_ids_to_tokens(token)
    if isinstance(piece, str):
        table = _byte_level()
        if _is_byte_level(tokenizer) and all(ch in table for ch in piece):
            return [table[ch] for ch in piece]
        if m := _BYTE_PIECE.fullmatch(piece):
            return [int(m.group(1), 16)]
    return list(text.encode("utf-8"))


def chat_logprobs(samples: list[Sample], tokenizer) -> dict:
    def entry(token: int, logprob: float) -> dict:
        text = tokenizer.decode([token])
        return {"token": text, "logprob": logprob, "bytes": token_bytes(tokenizer, token, text)}

    return {"content": [dict(entry(s.token, s.logprob),
                             top_logprobs=[entry(t, lp) for t, lp in (s.top_logprobs or [])])
                        for s in samples]}


def now() -> int:
    return int(time.time())
