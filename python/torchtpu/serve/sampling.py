"""Sampling parameters (OpenAI / vLLM names) and the per-request sampler.

Sampling runs on the CPU over one row of f32 logits per request. The row is first made
safe: NaN logits become -inf (never chosen) and +inf the largest float (a certain token),
so no later step sees inf - inf. Then the logit processors (logit_bias, allowed_token_ids,
a structured-output grammar's mask, min_tokens, repetition / presence / frequency
penalties), then temperature, top-k, top-p
and min-p, then a draw from the request's own generator, so a request with a ``seed``
gives the same tokens whatever else is in the batch. Temperatures below ``GREEDY_BELOW``
(and 0) are greedy: dividing by them overflows f32. Log-probabilities are those of the raw
model output (vLLM's default). A row with no finite logit left is the request's failure
(``SamplingError``), never the engine's. Prompt logprobs (``prompt_logprob_samples``) are
read from the raw rows of the prompt's positions the same way.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field, replace

import torch

from torchtpu.serve.structured import KINDS, GuidedDecoding

MAX_LOGPROBS = 20
MAX_N = 128                      # OpenAI's limit on n (and here on best_of)
# Every step of every sequence looks for each stop string in its new text, on the engine's
# one thread: 200,000 of them slowed every request on the server by seconds. OpenAI takes 4.
MAX_STOP_STRINGS = 256
GREEDY_BELOW = 1e-5              # vLLM's _SAMPLING_EPS
INT64_MIN, INT64_MAX = -2**63, 2**63 - 1
MAX_LOGIT_BIAS = 100.0           # biases are clamped to +-this (OpenAI's range; vLLM's clamp)
_F32_MAX = torch.finfo(torch.float32).max


class SamplingError(Exception):
    """One request's logits could not be sampled; that request ends with this message and
    `status`: 400 when its own constraints left no token, 500 when the model or the
    sampler failed."""

    def __init__(self, message: str, status: int = 500) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class SamplingParams:
    max_tokens: int | None = 16  # None: up to the model's context length (vLLM's)
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1  # -1 (or 0) keeps every token
    min_p: float = 0.0
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False
    min_tokens: int = 0  # stop tokens and stop strings cannot end the output before this
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0  # HF/vLLM: seen tokens' logits / p if > 0, else * p
    logit_bias: dict[int, float] = field(default_factory=dict)
    allowed_token_ids: list[int] | None = None
    logprobs: int | None = None  # None: none; 0: the chosen token's; n: plus the top n
    # Of the prompt's tokens (vLLM's): None: none; k: each prompt token's and the top k at
    # its position (the first token has none: nothing precedes it).
    prompt_logprobs: int | None = None
    include_stop_str_in_output: bool = False
    skip_special_tokens: bool = True
    n: int = 1  # sequences returned (callers fork them with `fork`)
    best_of: int | None = None  # sequences generated, the best n returned (None: n)
    guided: GuidedDecoding | None = None  # structured output: what the text must match
    # Speculative decoding for this request when the engine has it (speculative.py); it
    # changes speed only, never greedy tokens or the sampled distribution.
    speculative: bool = True

    def __post_init__(self) -> None:
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        self.stop = list(self.stop or [])
        self.stop_token_ids = list(self.stop_token_ids or [])
        self.logit_bias = dict(self.logit_bias or {})
        self.validate()

    def validate(self, vocab_size: int | None = None) -> None:
        """Raises ValueError naming the first invalid field and its allowed range. With
        `vocab_size`, token ids are checked against it too."""
        def bad(name: str, value: object, want: str) -> None:
            raise ValueError(f"{name} must be {want}, got {value!r}")

        def is_int(v: object) -> bool:
            return isinstance(v, int) and not isinstance(v, bool)

        def number(name: str, lo: float, hi: float, lo_open: bool = False) -> None:
            v = getattr(self, name)
            ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
            ok = ok and (lo < v if lo_open else lo <= v) and v <= hi
            if not ok:
                bad(name, v, f"a finite number in {'(' if lo_open else '['}{lo:g}, {hi:g}]")

        if self.max_tokens is not None and (not is_int(self.max_tokens) or self.max_tokens < 1):
            bad("max_tokens", self.max_tokens, "None or an integer >= 1")
        # vLLM bounds temperature and repetition_penalty below only (OpenAI's API stops
        # temperature at 2); logit_bias is any finite number (clamped to +-100 where applied).
        number("temperature", 0.0, math.inf)
        number("top_p", 0.0, 1.0, lo_open=True)
        number("min_p", 0.0, 1.0)
        if not is_int(self.top_k) or not -1 <= self.top_k <= INT64_MAX:
            bad("top_k", self.top_k, "-1 (disabled), 0 (disabled) or a positive integer")
        number("presence_penalty", -2.0, 2.0)
        number("frequency_penalty", -2.0, 2.0)
        number("repetition_penalty", 0.0, math.inf, lo_open=True)
        if self.logprobs is not None and (not is_int(self.logprobs)
                                          or not 0 <= self.logprobs <= MAX_LOGPROBS):
            bad("logprobs", self.logprobs, f"an integer in [0, {MAX_LOGPROBS}]")
        if self.prompt_logprobs is not None and (not is_int(self.prompt_logprobs) or
                                                 not 0 <= self.prompt_logprobs <= MAX_LOGPROBS):
            bad("prompt_logprobs", self.prompt_logprobs, f"an integer in [0, {MAX_LOGPROBS}]")
        if self.seed is not None and (not is_int(self.seed)
                                      or not INT64_MIN <= self.seed <= INT64_MAX):
            bad("seed", self.seed, "an integer in [-2**63, 2**63 - 1]")
        most = INT64_MAX if self.max_tokens is None else self.max_tokens
        if not is_int(self.min_tokens) or not 0 <= self.min_tokens <= most:
            bad("min_tokens", self.min_tokens, f"an integer in [0, max_tokens={most}]")
        if not is_int(self.n) or not 1 <= self.n <= MAX_N:
            bad("n", self.n, f"an integer in [1, {MAX_N}]")
        if self.best_of is not None and (not is_int(self.best_of)
                                         or not self.n <= self.best_of <= MAX_N):
            bad("best_of", self.best_of, f"an integer in [n={self.n}, {MAX_N}]")
        if self.guided is not None and (not isinstance(self.guided, GuidedDecoding)
                                        or self.guided.kind not in KINDS):
            bad("guided", self.guided, f"a GuidedDecoding of kind {', '.join(KINDS)}")
        if not isinstance(self.speculative, bool):
            bad("speculative", self.speculative, "a bool")
        if any(not isinstance(s, str) or not s for s in self.stop):
            bad("stop", self.stop, "a list of non-empty strings")
        if len(self.stop) > MAX_STOP_STRINGS:
            bad("stop", f"{len(self.stop)} strings", f"at most {MAX_STOP_STRINGS} strings")
        # Without the model (checked again with its vocabulary when a request comes):
        # only what any id must be.
        hi = vocab_size if vocab_size is not None else 2**31
        want_ids = (f"token ids in [0, {hi})" if vocab_size is not None
                    else "token ids (integers from 0, below the model's vocabulary size)")
        if any(not is_int(t) or not 0 <= t < hi for t in self.stop_token_ids):
            bad("stop_token_ids", self.stop_token_ids, f"a list of {want_ids}")
        if self.allowed_token_ids is not None and (
                not self.allowed_token_ids
                or any(not is_int(t) or not 0 <= t < hi for t in self.allowed_token_ids)):
            bad("allowed_token_ids", self.allowed_token_ids, f"a non-empty list of {want_ids}")
        for t, b in self.logit_bias.items():
            if not is_int(t) or not 0 <= t < hi:
                bad("logit_bias", t, f"keyed by {want_ids}")
            if isinstance(b, bool) or not isinstance(b, (int, float)) or not math.isfinite(b):
                bad("logit_bias", b, "finite biases")

    @property
    def num_sequences(self) -> int:
        """Sequences to generate for one prompt: best_of, or n."""
        return self.best_of if self.best_of is not None else self.n

    def fork(self) -> list[SamplingParams]:
        """One single-sequence copy per sequence to generate. With a seed, copy i draws
        from seed + i (as vLLM does), so the sequences differ but are reproducible. Only
        the first copy keeps prompt_logprobs: the copies share the prompt, whose logprobs
        are computed once."""
        def seed(i: int) -> int | None:
            if self.seed is None:
                return None
            return (self.seed + i - INT64_MIN) % 2**64 + INT64_MIN  # wraps within int64

        return [replace(self, n=1, best_of=None, seed=seed(i),
                        prompt_logprobs=self.prompt_logprobs if i == 0 else None)
                for i in range(self.num_sequences)]


@dataclass
class Sample:
    token: int
    logprob: float | None = None  # always set by RequestSampler (best_of ranks by it)
    top_logprobs: list[tuple[int, float]] | None = None
    rank: int | None = None  # of `token` among the vocabulary (1: the most likely); prompt only


def prompt_logprob_samples(logits: torch.Tensor, targets: list[int], k: int) -> list[Sample]:
    """Prompt logprobs: row i of `logits` [rows, vocab] is the model's output at a prompt
    position, `targets[i]` the prompt token that follows it. Returns per row that token's
    log-probability under the raw model and its rank, with the `k` most likely tokens (an
    empty list for k = 0). Only these leave: the rows themselves are dropped by the caller."""
    raw = torch.nan_to_num(logits.to(torch.float32), nan=float("-inf"), posinf=_F32_MAX,
                           neginf=float("-inf"))
    logp = torch.log_softmax(raw, dim=-1)
    ids = torch.tensor(targets, dtype=torch.long).unsqueeze(1)
    chosen = logp.gather(1, ids)
    ranks = (logp > chosen).sum(dim=1) + 1
    chosen = chosen.squeeze(1).tolist()
    ranks = ranks.tolist()
    if k:
        values, top_ids = torch.topk(logp, k, dim=-1)
        tops = [list(zip(i, v)) for i, v in zip(top_ids.tolist(), values.tolist())]
    else:
        tops = [[] for _ in targets]
    return [Sample(t, lp, top, rank) for t, lp, top, rank in zip(targets, chosen, tops, ranks)]


def generator_seed(seed: int) -> int:
    """The CPU generator's seed for a request's `seed`. The generator (mt19937) keeps only
    a seed's low 32 bits, so seeds differing above them (5 and 5 + 2**32, -1 and 2**63 - 1)
    drew the same tokens: seeds in [0, 2**32) are used as they are, others are mixed
    (splitmix64's finalizer) into 32 bits."""
    if 0 <= seed < 2**32:
        return seed
    z = seed % 2**64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) % 2**64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) % 2**64
    return (z ^ (z >> 31)) >> 32


class RequestSampler:
    """Draws one request's tokens; keeps the counts its penalties need.

    `prompt_token_ids` feed repetition_penalty (which, as in HF and vLLM, covers the prompt
    too); `stop_token_ids` are masked until `min_tokens` tokens are out; `grammar` (a
    structured.GrammarState) masks what it does not accept and advances on each token."""

    def __init__(self, params: SamplingParams, prompt_token_ids: list[int] = (),
                 stop_token_ids: set[int] | list[int] = (), grammar=None) -> None:
        self.params = params
        self.grammar = grammar
        self.generator = torch.Generator()
        seed = params.seed if params.seed is not None else random.getrandbits(63)
        self.generator.manual_seed(generator_seed(seed))
        self.counts: dict[int, int] = {}
        self.num_sampled = 0
        self.prompt_ids = sorted(set(prompt_token_ids)) if params.repetition_penalty != 1.0 \
            else []
        self.stop_ids = sorted(stop_token_ids) if params.min_tokens else []
        self._bias: torch.Tensor | None = None
        self._allowed: torch.Tensor | None = None

    @property
    def done(self) -> bool:
        """The grammar (if any) has reached its end: nothing more may be generated."""
        return self.grammar is not None and self.grammar.done

    def _process(self, x: torch.Tensor) -> torch.Tensor:
        p, vocab = self.params, x.numel()
        if p.logit_bias:
            if self._bias is None:
                self._bias = torch.zeros(vocab)
                for t, b in p.logit_bias.items():
                    if t < vocab:  # +-100 already bans or forces a token
                        self._bias[t] = max(-MAX_LOGIT_BIAS, min(MAX_LOGIT_BIAS, float(b)))
            x = x + self._bias
        if p.allowed_token_ids is not None:
            if self._allowed is None:
                self._allowed = torch.ones(vocab, dtype=torch.bool)
                self._allowed[[t for t in p.allowed_token_ids if t < vocab]] = False
            x = x.masked_fill(self._allowed, float("-inf"))
        if self.grammar is not None:
            x = x.masked_fill(~self.grammar.allowed(vocab), float("-inf"))
        if self.num_sampled < p.min_tokens and self.stop_ids:
            x = x.clone()
            x[[t for t in self.stop_ids if t < vocab]] = float("-inf")
        if p.repetition_penalty != 1.0:
            seen = sorted(set(self.prompt_ids) | set(self.counts))
            seen = torch.tensor([t for t in seen if t < vocab], dtype=torch.long)
            if seen.numel():
                v = x[seen]
                x = x.clone()
                rp = min(p.repetition_penalty, _F32_MAX)  # past it, 0 * inf would ban a 0 logit
                x[seen] = torch.where(v > 0, v / rp, v * rp)
        if self.counts and (p.presence_penalty or p.frequency_penalty):
            ids = torch.tensor(list(self.counts.keys()))
            n = torch.tensor(list(self.counts.values()), dtype=torch.float32)
            x = x.clone()
            x[ids] -= p.frequency_penalty * n + p.presence_penalty
        # Penalties of finite logits stay finite or go to -inf; clamp the top end anyway.
        return torch.nan_to_num(x, nan=float("-inf"), posinf=_F32_MAX,
                               neginf=float("-inf"))

    def _target(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None,
                                                      torch.Tensor]:
        """(raw row made safe, the distribution to draw from or None when greedy, the
        processed row) for this position, given the tokens committed so far."""
        p = self.params
        raw = torch.nan_to_num(logits.to(torch.float32), nan=float("-inf"), posinf=_F32_MAX,
                               neginf=float("-inf"))
        x = self._process(raw)
        if not bool(torch.isfinite(x).any()):
            if not bool(torch.isfinite(raw).any()):
                raise SamplingError("serve: sampling: no token can be drawn: the model's "
                                    "logits are all NaN or -inf")
            raise SamplingError("serve: sampling: no token can be drawn: the request's "
                                "logit_bias / allowed_token_ids / min_tokens / stop tokens / "
                                "grammar masked every token", status=400)
        if p.temperature < GREEDY_BELOW:
            return raw, None, x
        # Subtracting the max first keeps x / temperature <= 0: no overflow to +inf.
        # Past f32's largest a temperature is inf in the row's dtype: -inf / inf is NaN.
        x = (x - x.max()) / min(p.temperature, _F32_MAX)
        # vLLM's order: min_p (after temperature), then top_k, then top_p.
        if p.min_p > 0.0:
            probs = torch.softmax(x, dim=-1)
            x = x.masked_fill(probs < p.min_p * probs.max(), float("-inf"))
        if 0 < p.top_k < x.numel():
            kth = torch.topk(x, p.top_k).values[-1]
            x = x.masked_fill(x < kth, float("-inf"))
        if p.top_p < 1.0:
            sorted_x, order = torch.sort(x, descending=True)
            probs = torch.softmax(sorted_x, dim=-1)
            # Keep the smallest prefix whose mass reaches top_p, and always the top
            # token: a top_p below f32's smallest float compares as 0.
            drop = (probs.cumsum(-1) - probs) >= p.top_p
            drop[0] = False
            x = x.scatter(0, order, sorted_x.masked_fill(drop, float("-inf")))
        probs = torch.softmax(x, dim=-1)
        return raw, probs / probs.sum(), x

    def _commit(self, token: int, raw: torch.Tensor) -> Sample:
        """Records `token` as this request's next token (penalty counts, the grammar)."""
        if self.grammar is not None and not self.grammar.accept(token):
            raise SamplingError(f"serve: sampling: the grammar refused token {token}, which "
                                "its own mask allowed")
        self.counts[token] = self.counts.get(token, 0) + 1
        self.num_sampled += 1
        logp = torch.log_softmax(raw, dim=-1)
        top = None
        if self.params.logprobs:
            values, ids = torch.topk(logp, self.params.logprobs)
            top = [(int(i), float(v)) for i, v in zip(ids, values)]
        elif self.params.logprobs == 0:
            top = []
        return Sample(token, float(logp[token]), top)

    def sample(self, logits: torch.Tensor) -> Sample:
        raw, probs, x = self._target(logits)
        if probs is None:
            token = int(torch.argmax(x))
        else:
            token = int(torch.multinomial(probs, 1, generator=self.generator))
        return self._commit(token, raw)

    def verify(self, logits: torch.Tensor, drafts: list[int]) -> list[Sample]:
        """Speculative decoding: `logits` [len(drafts) + 1, vocab] are the model's rows at
        the last known token and at each draft. Returns the accepted drafts and one more
        token (at the first rejection, or after every draft). Each position's token is
        drawn exactly as sample() draws it, from the request's generator in order, and a
        draft is accepted when the draw equals it. The drafts are a point mass, so that is
        the standard accept / resample rule in its coupled form: draft x is accepted with
        probability p(x), and on rejection the token follows p with x removed. It also keeps
        the draws one per token, as without speculation: a seed gives the same tokens with
        speculation on or off, whatever number of drafts the batch left room for. Each
        position's p comes after the tokens accepted before it (penalties, min_tokens, the
        grammar). Stops early when a grammar has ended."""
        samples = []
        for i, draft in enumerate(drafts):
            samples.append(self.sample(logits[i]))
            if samples[-1].token != draft or self.done:
                return samples
        samples.append(self.sample(logits[len(drafts)]))
        return samples


def best_of(cumulative_logprobs: list[float], lengths: list[int], n: int) -> list[int]:
    """Indices of the `n` sequences with the highest log-probability per token (OpenAI's
    best_of rule), best first; ties keep generation order."""
    mean = [lp / max(1, k) for lp, k in zip(cumulative_logprobs, lengths)]
    return sorted(range(len(mean)), key=lambda i: -mean[i])[:n]
