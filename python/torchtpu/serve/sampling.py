"""Sampling parameters (OpenAI / vLLM names) and the per-request sampler.

Sampling runs on the CPU over one row of f32 logits per request: penalties, then
temperature, top-k and top-p, then a draw from the request's own generator, so a request
with a ``seed`` gives the same tokens whatever else is in the batch. Temperature 0 is
greedy. Log-probabilities are those of the raw model output (vLLM's default).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import torch

MAX_LOGPROBS = 20


@dataclass
class SamplingParams:
    max_tokens: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1  # -1 (or 0) keeps every token
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logprobs: int | None = None  # None: none; 0: the chosen token's; n: plus the top n
    include_stop_str_in_output: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        self.stop = list(self.stop or [])
        self.stop_token_ids = list(self.stop_token_ids or [])
        self.validate()

    def validate(self) -> None:
        """Raises ValueError naming the first invalid field and its allowed range."""
        def bad(name: str, value: object, want: str) -> None:
            raise ValueError(f"{name} must be {want}, got {value!r}")

        if not isinstance(self.max_tokens, int) or self.max_tokens < 1:
            bad("max_tokens", self.max_tokens, "an integer >= 1")
        if not 0.0 <= float(self.temperature) <= 2.0:
            bad("temperature", self.temperature, "in [0, 2]")
        if not 0.0 < float(self.top_p) <= 1.0:
            bad("top_p", self.top_p, "in (0, 1]")
        if not isinstance(self.top_k, int) or self.top_k < -1:
            bad("top_k", self.top_k, "-1 (disabled), 0 (disabled) or a positive integer")
        for name in ("presence_penalty", "frequency_penalty"):
            if not -2.0 <= float(getattr(self, name)) <= 2.0:
                bad(name, getattr(self, name), "in [-2, 2]")
        if self.logprobs is not None and not 0 <= int(self.logprobs) <= MAX_LOGPROBS:
            bad("logprobs", self.logprobs, f"in [0, {MAX_LOGPROBS}]")
        if self.seed is not None and not isinstance(self.seed, int):
            bad("seed", self.seed, "an integer")
        if any(not isinstance(s, str) or not s for s in self.stop):
            bad("stop", self.stop, "a list of non-empty strings")
        if any(not isinstance(t, int) or t < 0 for t in self.stop_token_ids):
            bad("stop_token_ids", self.stop_token_ids, "a list of token ids")


@dataclass
class Sample:
    token: int
    logprob: float | None = None
    top_logprobs: list[tuple[int, float]] | None = None


class RequestSampler:
    """Draws one request's tokens; keeps the counts its penalties need."""

    def __init__(self, params: SamplingParams) -> None:
        self.params = params
        self.generator = torch.Generator()
        seed = params.seed if params.seed is not None else random.getrandbits(63)
        self.generator.manual_seed(seed)
        self.counts: dict[int, int] = {}

    def sample(self, logits: torch.Tensor) -> Sample:
        p = self.params
        x = logits.to(torch.float32)
        if self.counts and (p.presence_penalty or p.frequency_penalty):
            ids = torch.tensor(list(self.counts.keys()))
            n = torch.tensor(list(self.counts.values()), dtype=torch.float32)
            x = x.clone()
            x[ids] -= p.frequency_penalty * n + p.presence_penalty
        if p.temperature == 0.0:
            token = int(torch.argmax(x))
        else:
            x = x / p.temperature
            if 0 < p.top_k < x.numel():
                kth = torch.topk(x, p.top_k).values[-1]
                x = x.masked_fill(x < kth, float("-inf"))
            if p.top_p < 1.0:
                sorted_x, order = torch.sort(x, descending=True)
                cum = torch.softmax(sorted_x, dim=-1).cumsum(-1)
                # Keep the smallest prefix whose mass reaches top_p (at least one token).
                drop = (cum - torch.softmax(sorted_x, dim=-1)) >= p.top_p
                x = x.scatter(0, order, sorted_x.masked_fill(drop, float("-inf")))
            probs = torch.softmax(x, dim=-1)
            token = int(torch.multinomial(probs, 1, generator=self.generator))
        self.counts[token] = self.counts.get(token, 0) + 1
        if p.logprobs is None:
            return Sample(token)
        logp = torch.log_softmax(logits.to(torch.float32), dim=-1)
        top = []
        if p.logprobs > 0:
            values, ids = torch.topk(logp, p.logprobs)
            top = [(int(i), float(v)) for i, v in zip(ids, values)]
        return Sample(token, float(logp[token]), top)
