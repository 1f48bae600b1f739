"""Incremental detokenization with stop strings.

Each step decodes only a short window of the newest output ids: the ids of the last decided
piece (context, so a byte-level or SentencePiece token's spacing comes out as in a one-shot
decode) and the ids after them; the new text is what the window adds to its context. The
first window's context is the prompt's last ids, so the first output token keeps the
leading space a SentencePiece decode drops at the start of a text (vLLM does the same). A
window that ends in an incomplete character (U+FFFD) is kept open for more ids, its text up
to that character already usable. So a step costs the same at the 10th token and the
10,000th, where decoding the whole output each step made a long request's detokenizing
quadratic. This is vLLM's scheme; as there, a tokenizer whose decode rewrites text across
token boundaries (`clean_up_tokenization_spaces`), or a run of byte-fallback pieces that is
not UTF-8 and spans two windows, can differ from a one-shot decode there.

Text that could still become a stop string is held back until it is decided. Stop strings
count only where they end in the text of a token after the first `min_tokens` (vLLM's
rule, as a stop token counts only after them). A step that adds several ids (accepted
speculative drafts) is read one id at a time, so a stop string ends the output at the id
that completes it (`stop_at`), as decoding one token at a time would.
"""

from __future__ import annotations


class IncrementalDetokenizer:
    PROMPT_CONTEXT = 5  # prompt ids before the first output id, as vLLM takes

    def __init__(self, tokenizer, stop: list[str], include_stop: bool, *,
                 skip_special_tokens: bool = True, min_tokens: int = 0,
                 prompt_ids: list[int] = ()) -> None:
        self.tokenizer = tokenizer
        self.skip_special_tokens = skip_special_tokens
        self.min_tokens = min_tokens
        self.stop = stop
        self.include_stop = include_stop
        self.hold = max((len(s) for s in stop), default=1) - 1
        self.text = ""       # the decoded text so far (after a stop, final)
        self.emitted = 0     # characters of `text` handed out
        self.stopped = False
        self.stop_string: str | None = None  # the stop string that ended the text
        self.stop_at = 0     # after a stop: how many output ids the text is made of
        # The text of the first `min_tokens` tokens: a stop string counts only if it ends
        # after it (vLLM looks for them only in text added from then on).
        self._floor = 0
        # The window is ids[_context:] of the prompt's tail followed by the output ids;
        # ids before _read are in `text`.
        self._ids = list(prompt_ids[max(0, len(prompt_ids) - self.PROMPT_CONTEXT):])
        self._prompt = len(self._ids)
        self._context = 0
        self._read = self._prompt

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=self.skip_special_tokens)

    def _decode_new(self, output_ids: list[int], n: int, finished: bool) -> str:
        """The text of the first `n` output ids: `text` and what the ids after `_read`
        add. Those ids join `text` unless they end inside a character and more ids can still
        come; then the text up to that character is returned but the window stays open."""
        ids = self._ids
        ids.extend(output_ids[len(ids) - self._prompt:n])
        if len(ids) <= self._read:
            return self.text
        context = self._decode(ids[self._context:self._read])
        new = self._decode(ids[self._context:])[len(context):]
        if not new:
            return self.text
        if finished or not new.endswith("\ufffd"):
            self.text += new
            self._context, self._read = self._read, len(ids)
            return self.text
        return self.text + new.rstrip("\ufffd")

    def _advance(self, output_ids: list[int], n: int, finished: bool) -> str:
        """The text of the first `n` output ids, cut after the first stop string it
        completes (then `stopped`)."""
        text = self._decode_new(output_ids, n, finished)
        if self.stop and n <= self.min_tokens:
            self._floor = len(text)
        elif self.stop:
            hits = [(i, s) for s in self.stop
                    if (i := text.find(s, max(0, self.emitted - self.hold,
                                              self._floor - len(s) + 1))) >= 0]
            if hits:
                i, s = min(hits)
                text = text[: i + len(s)] if self.include_stop else text[:i]
                self.stopped = True
                self.stop_string, self.text, self.stop_at = s, text, n
        return text

    def update(self, output_ids: list[int], finished: bool) -> str:
        """Feeds the request's output ids (the same list, grown); returns the newly decided
        text. Sets ``stopped`` when a stop string ends the text, and ``stop_at``: the ids
        after that many are not part of the output."""
        if self.stopped:
            return ""
        if self.stop:  # ids added since the last call, but the last, one at a time
            for n in range(len(self._ids) - self._prompt + 1, len(output_ids)):
                text = self._advance(output_ids, n, False)
                if self.stopped:
                    break
        if not self.stopped:
            text = self._advance(output_ids, len(output_ids), finished)
        finished = finished or self.stopped
        decided = len(text) if finished else len(text) - self.hold
        if decided <= self.emitted:
            return ""
        new = text[self.emitted:decided]
        self.emitted = decided
        return new
