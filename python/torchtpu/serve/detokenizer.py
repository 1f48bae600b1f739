"""Incremental detokenization with stop strings.

The text of a request is the decode of all its output tokens, so multi-token characters
and tokenizer spacing come out exactly as a one-shot decode would give them. Text that
could still become a stop string, or that ends in an incomplete character, is held back
until it is decided. Stop strings are looked for only once `min_tokens` tokens are out.
"""

from __future__ import annotations


class IncrementalDetokenizer:
    def __init__(self, tokenizer, stop: list[str], include_stop: bool, *,
                 skip_special_tokens: bool = True, min_tokens: int = 0) -> None:
        self.tokenizer = tokenizer
        self.skip_special_tokens = skip_special_tokens
        self.min_tokens = min_tokens
        self.stop = stop
        self.include_stop = include_stop
        self.hold = max((len(s) for s in stop), default=1) - 1
        self.text = ""       # the decided text so far (after a stop, final)
        self.emitted = 0     # characters of `text` handed out
        self.stopped = False

    def update(self, output_ids: list[int], finished: bool) -> str:
        """Feeds the request's output ids; returns the newly decided text. Sets ``stopped``
        when a stop string ends the text."""
        text = self.tokenizer.decode(output_ids, skip_special_tokens=self.skip_special_tokens)
        if self.stop and len(output_ids) >= self.min_tokens:
            start = max(0, self.emitted - self.hold)
            hits = [(i, s) for s in self.stop if (i := text.find(s, start)) >= 0]
            if hits:
                i, s = min(hits)
                text = text[: i + len(s)] if self.include_stop else text[:i]
                self.stopped = finished = True
        if finished:
            decided = len(text)
        else:
            decided = len(text) - self.hold
            if text.endswith("\ufffd"):  # a character whose bytes are not all out yet
                decided = min(decided, len(text) - 1)
        self.text = text
        if decided <= self.emitted:
            return ""
        new = text[self.emitted:decided]
        self.emitted = decided
        return new
