"""Speculative decoding's configuration: n-gram (prompt lookup) drafts, as vLLM's
``speculative_config={"method": "ngram", ...}`` names it.

The scheduler (csrc/serve/ngram_proposer) drafts up to ``num_speculative_tokens`` tokens
per decode from the longest earlier match of the request's last ``prompt_lookup_min`` ..
``prompt_lookup_max`` tokens; the runner computes the last token and the drafts in one
forward step; the request's sampler accepts a prefix of them and adds one token
(``RequestSampler.verify``): greedy output is exactly that of decoding one token at a time,
sampled output has the same distribution. A request opts out with
``SamplingParams(speculative=False)``.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any


@dataclass(frozen=True)
class SpeculativeConfig:
    num_speculative_tokens: int = 4
    # Both unset: 2..4. One unset: the other's value, as vLLM's SpeculativeConfig does.
    prompt_lookup_min: int | None = None
    prompt_lookup_max: int | None = None
    method: str = "ngram"

    def __post_init__(self) -> None:
        def positive_int(name: str) -> int:
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or not 1 <= v < 2**31:
                raise ValueError(f"serve: speculative: {name} must be a positive integer "
                                 f"below 2**31, got {v!r}")
            return v

        lo, hi = self.prompt_lookup_min, self.prompt_lookup_max
        if lo is None and hi is None:
            lo, hi = 2, 4
        object.__setattr__(self, "prompt_lookup_min", hi if lo is None else lo)
        object.__setattr__(self, "prompt_lookup_max", lo if hi is None else hi)

        if self.method != "ngram":
            raise ValueError(f"serve: speculative: method {self.method!r} is not supported; "
                             "supported: 'ngram' (prompt lookup)")
        positive_int("num_speculative_tokens")
        if positive_int("prompt_lookup_min") > positive_int("prompt_lookup_max"):
            raise ValueError(f"serve: speculative: prompt_lookup_min ({self.prompt_lookup_min})"
                             f" must not exceed prompt_lookup_max ({self.prompt_lookup_max})")

    @classmethod
    def parse(cls, value: Any) -> SpeculativeConfig | None:
        """None or False: off; True: the defaults; an int: that many draft tokens; a dict of
        this class's fields (vLLM's speculative_config keys); or a SpeculativeConfig."""
        if value is None or value is False:
            return None
        if value is True:
            return cls()
        if isinstance(value, cls):
            return value
        if isinstance(value, int):
            return cls(num_speculative_tokens=value)
        if isinstance(value, dict):
            known = {f.name for f in fields(cls)}
            unknown = sorted(set(value) - known)
            if unknown:
                raise ValueError(f"serve: speculative: unknown key(s) {', '.join(unknown)}; "
                                 f"known: {', '.join(sorted(known))}")
            return cls(**value)
        raise ValueError(f"serve: speculative must be None, a bool, an int (draft tokens), a "
                         f"dict or a SpeculativeConfig; got {type(value).__name__}")
