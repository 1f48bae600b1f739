"""The offline API: ``LLM(model).generate(prompts, params)``, shaped like vLLM's."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Sequence

from torchtpu.serve.engine import LLMEngine
from torchtpu.serve.sampling import Sample, SamplingParams


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: list[int]
    finish_reason: str | None
    logprobs: list[Sample] = field(default_factory=list)


@dataclass
class RequestResult:
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]


class LLM:
    """Runs every prompt to completion through one engine (continuous batching)."""

    def __init__(self, model: str | None = None, **engine_args) -> None:
        self.engine = LLMEngine(model, **engine_args)
        self._ids = itertools.count()

    @property
    def tokenizer(self):
        return self.engine.tokenizer

    def generate(self, prompts: str | list[int] | Sequence[str | list[int]],
                 params: SamplingParams | Sequence[SamplingParams] | None = None
                 ) -> list[RequestResult]:
        if isinstance(prompts, str) or (prompts and isinstance(prompts[0], int)):
            prompts = [prompts]
        if params is None:
            params = SamplingParams()
        if isinstance(params, SamplingParams):
            params = [params] * len(prompts)
        if len(params) != len(prompts):
            raise ValueError(f"{len(prompts)} prompts but {len(params)} sampling params")
        # Everything is checked before anything is queued: a bad prompt loses nothing.
        encoded = []
        for prompt, p in zip(prompts, params):
            p.validate()
            ids = self.engine.encode_prompt(prompt)
            self.engine.check_length(len(ids), p.max_tokens)
            encoded.append(ids)
        order, results = [], {}
        for prompt, ids, p in zip(prompts, encoded, params):
            rid = f"offline-{next(self._ids)}"
            self.engine.add_request(rid, ids, p)
            order.append(rid)
            results[rid] = RequestResult(rid, prompt if isinstance(prompt, str) else None, ids,
                                         [CompletionOutput(0, "", [], None)])
        while self.engine.has_unfinished():
            for out in self.engine.step():
                res = results[out.request_id].outputs[0]
                res.text += out.new_text
                res.token_ids = out.output_token_ids
                res.logprobs.extend(out.new_logprobs)
                res.finish_reason = out.finish_reason
        return [results[rid] for rid in order]

    def chat(self, messages: list[dict] | Sequence[list[dict]],
             params: SamplingParams | None = None) -> list[RequestResult]:
        """Applies the tokenizer's chat template, then generates."""
        convs = [messages] if messages and isinstance(messages[0], dict) else list(messages)
        prompts = [self.tokenizer.apply_chat_template(c, add_generation_prompt=True,
                                                      tokenize=False) for c in convs]
        ids = [self.tokenizer.encode(p, add_special_tokens=False) for p in prompts]
        return self.generate(ids, params)
