"""OpenAI request parsing and response bodies (completions and chat completions).

Parsing is explicit rather than schema-driven so every rejection names the field and
what is allowed, and comes back as an OpenAI-style error body with status 400.
"""

from __future__ import annotations

import json
import time
from typing import Any

from torchtpu.serve.sampling import MAX_LOGPROBS, Sample, SamplingParams


class ApiError(Exception):
    def __init__(self, status: int, message: str, type_: str = "BadRequestError",
                 param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.param = status, message, type_, param

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param,
                          "code": self.status}}


def parse_json(raw: bytes) -> dict:
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise ApiError(400, f"the request body is not valid JSON: {e}") from None
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    return body


def field(body: dict, name: str, kind: type | tuple, default: Any = None) -> Any:
    value = body.get(name, default)
    if value is None:
        return default
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        want = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise ApiError(400, f"'{name}' must be of type {want}, got {value!r}", param=name)
    return value


def sampling_params(body: dict, *, chat: bool, default_max_tokens: int) -> SamplingParams:
    """`default_max_tokens` applies when the body names none (chat: the rest of the context,
    as vLLM does; completions: OpenAI's 16, capped by the context)."""
    n = field(body, "n", int, 1)
    if n != 1:
        raise ApiError(400, f"'n' must be 1 (got {n}); send separate requests instead", param="n")
    max_tokens = field(body, "max_completion_tokens", int) if chat else None
    max_tokens = max_tokens or field(body, "max_tokens", int)
    stop = body.get("stop")
    if isinstance(stop, str):
        stop = [stop]
    if stop is not None and (not isinstance(stop, list) or
                             not all(isinstance(s, str) for s in stop)):
        raise ApiError(400, "'stop' must be a string or a list of strings", param="stop")
    if chat:
        want = field(body, "logprobs", bool, False)
        top = field(body, "top_logprobs", int, 0)
        if top and not want:
            raise ApiError(400, "'top_logprobs' needs 'logprobs': true", param="top_logprobs")
        logprobs = top if want else None
    else:
        logprobs = field(body, "logprobs", int)
    if logprobs is not None and not 0 <= logprobs <= MAX_LOGPROBS:
        raise ApiError(400, f"logprobs must be in [0, {MAX_LOGPROBS}], got {logprobs}",
                       param="logprobs")
    try:
        return SamplingParams(
            max_tokens=max_tokens if max_tokens is not None else max(1, default_max_tokens),
            temperature=field(body, "temperature", float, 1.0),
            top_p=field(body, "top_p", float, 1.0),
            top_k=field(body, "top_k", int, -1),
            seed=field(body, "seed", int),
            stop=stop or [],
            stop_token_ids=field(body, "stop_token_ids", list, []),
            ignore_eos=field(body, "ignore_eos", bool, False),
            presence_penalty=field(body, "presence_penalty", float, 0.0),
            frequency_penalty=field(body, "frequency_penalty", float, 0.0),
            logprobs=logprobs,
            include_stop_str_in_output=field(body, "include_stop_str_in_output", bool, False))
    except ValueError as e:
        raise ApiError(400, str(e)) from None


def completion_prompts(body: dict) -> list[str | list[int]]:
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        return [prompt]
    if isinstance(prompt, list) and prompt:
        if all(isinstance(p, str) for p in prompt):
            return list(prompt)
        if all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            return [prompt]
        if all(isinstance(p, list) and p and all(isinstance(t, int) for t in p) for p in prompt):
            return [list(p) for p in prompt]
    raise ApiError(400, "'prompt' must be a string, a list of strings, a list of token ids or "
                        "a list of token-id lists, and not empty", param="prompt")


def chat_messages(body: dict) -> list[dict]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "'messages' must be a non-empty list", param="messages")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise ApiError(400, f"messages[{i}] must be an object with a 'role'", param="messages")
        content = m.get("content", "")
        if isinstance(content, list):  # content parts: only text is understood
            texts = []
            for part in content:
                if not isinstance(part, dict) or part.get("type") != "text":
                    raise ApiError(400, f"messages[{i}]: only text content parts are supported",
                                   param="messages")
                texts.append(str(part.get("text", "")))
            content = "".join(texts)
        if content is not None and not isinstance(content, str):
            raise ApiError(400, f"messages[{i}].content must be a string", param="messages")
        out.append({"role": m["role"], "content": content or ""})
    return out


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
            "top_logprobs": [{tokenizer.decode([t]): lp for t, lp in (s.top_logprobs or [])}
                             for s in samples],
            "text_offset": offsets}


def chat_logprobs(samples: list[Sample], tokenizer) -> dict:
    def entry(token: int, logprob: float) -> dict:
        text = tokenizer.decode([token])
        return {"token": text, "logprob": logprob, "bytes": list(text.encode("utf-8"))}

    return {"content": [dict(entry(s.token, s.logprob),
                             top_logprobs=[entry(t, lp) for t, lp in (s.top_logprobs or [])])
                        for s in samples]}


def now() -> int:
    return int(time.time())
