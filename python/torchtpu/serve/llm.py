"""The offline API: ``LLM(model).generate(prompts, sampling_params)``, shaped like vLLM's."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from torchtpu.serve.engine import LLMEngine
from torchtpu.serve.errors import ApiError
from torchtpu.serve.prompts import chat_prompt_ids
from torchtpu.serve.sampling import Sample, SamplingParams, best_of


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: list[int]
    finish_reason: str | None
    logprobs: list[Sample] = field(default_factory=list)
    cumulative_logprob: float = 0.0
    stop_reason: int | str | None = None  # the stop string or token id, as vLLM's


@dataclass
class RequestResult:
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    # With SamplingParams.prompt_logprobs (vLLM's RequestOutput.prompt_logprobs): one entry
    # per prompt token, None for the first; each a Sample of that token (logprob, rank) with
    # the prompt_logprobs most likely tokens at its position in top_logprobs.
    prompt_logprobs: list[Sample | None] | None = None

    @property
    def finished(self) -> bool:
        """Every sequence has ended (vLLM's RequestOutput.finished)."""
        return all(o.finish_reason is not None for o in self.outputs)


# A prompt as vLLM's offline API takes it: text, token ids, or a dict with one of them
# (its TextPrompt / TokensPrompt).
Prompt = str | list[int] | dict


def _prompt(prompt: Prompt) -> str | list[int]:
    """The text or token ids of one prompt; ValueError for a dict this API cannot take."""
    if not isinstance(prompt, dict):
        return prompt
    keys = set(prompt)
    if keys == {"prompt"} and isinstance(prompt["prompt"], str):
        return prompt["prompt"]
    if keys == {"prompt_token_ids"} and isinstance(prompt["prompt_token_ids"], list):
        return prompt["prompt_token_ids"]
    raise ValueError(f"a prompt dict takes 'prompt' (text) or 'prompt_token_ids' (a list of "
                     f"ints), one of them alone; got keys {sorted(map(str, keys))} "
                     "(multimodal data is not supported)")


def _progress(use_tqdm, total: int):
    """vLLM's progress bar over finished prompts: tqdm (or the callable `use_tqdm` names);
    None when off or when tqdm is not installed."""
    if not use_tqdm or total == 0:
        return None
    if callable(use_tqdm):
        return use_tqdm(total=total, desc="Processed prompts")
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, desc="Processed prompts", dynamic_ncols=True)


class LLM:
    """Runs every prompt to completion through one engine (continuous batching).

    Calls from several threads run one after another (each call steps the engine until its
    own requests finish). A call interrupted (Ctrl-C, an exception from a callback) aborts
    its requests and leaves the engine ready for the next call."""

    def __init__(self, model: str | None = None, **engine_args) -> None:
        self.engine = LLMEngine(model, **engine_args)
        self._ids = itertools.count()
        self._lock = threading.Lock()

    @property
    def tokenizer(self):
        return self.engine.tokenizer

    def get_tokenizer(self):
        """The engine's tokenizer (vLLM's name for it)."""
        return self.engine.tokenizer

    def generate(self, prompts: Prompt | Sequence[Prompt],
                 sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
                 use_tqdm: bool = True) -> list[RequestResult]:
        """Generates for each prompt (text, token ids, or vLLM's {"prompt": ...} /
        {"prompt_token_ids": ...}) with its parameters (one for all, or one each), showing a
        progress bar over finished prompts unless `use_tqdm` is False. As vLLM's, a request
        whose max_tokens the context cannot hold generates up to the context ("length")."""
        with self._lock:
            return self._generate(prompts, sampling_params, use_tqdm)

    def _generate(self, prompts, params, use_tqdm) -> list[RequestResult]:
        if isinstance(prompts, (str, dict)) or (prompts and isinstance(prompts[0], int)):
            prompts = [prompts]
        prompts = [_prompt(p) for p in prompts]
        if params is None:
            params = SamplingParams()
        if isinstance(params, SamplingParams):
            params = [params] * len(prompts)
        if len(params) != len(prompts):
            raise ValueError(f"{len(prompts)} prompts but {len(params)} sampling params")
        # Everything is checked before anything is queued: a bad prompt loses nothing.
        encoded, resolved = [], []
        for prompt, p in zip(prompts, params):
            p.validate(self.engine.vocab_size)
            ids = self.engine.encode_prompt(prompt)
            p = self.engine.within_context(self.engine.with_max_tokens(p, len(ids)), len(ids))
            self.engine.check_length(len(ids), p.max_tokens)
            encoded.append(ids)
            resolved.append(p)
        params = resolved
        order, results, sequences = [], {}, {}
        try:
            for prompt, ids, p in zip(prompts, encoded, params):
                rid = f"offline-{next(self._ids)}"
                children = p.fork()  # n (or best_of) sequences; the prefix cache shares them
                for i, child in enumerate(children):
                    self.engine.add_request(f"{rid}-{i}", ids, child)
                    sequences[f"{rid}-{i}"] = (rid, i)
                order.append(rid)
                results[rid] = RequestResult(rid, prompt if isinstance(prompt, str) else None,
                                             ids, [CompletionOutput(i, "", [], None)
                                                   for i in range(len(children))])
            bar = _progress(use_tqdm, len(order))
            try:
                self._run(sequences, results, bar)
            finally:
                if bar is not None:
                    bar.close()
        except BaseException:
            # Interrupted (Ctrl-C) or failed: what this call queued must not stay in the
            # engine, where a step left unapplied would stop every later call.
            self.engine.abandon_step()
            for seq in sequences:  # the call fails as a whole; free the rest
                self.engine.abort(seq)
            raise
        for rid, p in zip(order, params):
            outs = results[rid].outputs
            keep = range(p.n) if p.best_of is None else best_of(
                [o.cumulative_logprob for o in outs], [len(o.token_ids) for o in outs], p.n)
            results[rid].outputs = [replace(outs[k], index=j) for j, k in enumerate(keep)]
        return [results[rid] for rid in order]

    def _run(self, sequences: dict[str, tuple[str, int]],
             results: dict[str, RequestResult], bar) -> None:
        """Steps the engine until this call's sequences have finished; `bar` (if any)
        advances by one at each prompt whose sequences have all ended. Requests the caller
        added to the engine directly are stepped along but not collected."""
        running = set(sequences)
        while running and self.engine.has_unfinished():
            for out in self.engine.step():
                if out.request_id not in running:
                    continue
                if out.finish_reason is not None or out.error is not None:
                    running.discard(out.request_id)
                rid, i = sequences[out.request_id]
                res = results[rid].outputs[i]
                if out.error is not None:
                    raise RuntimeError(out.error)
                if out.prompt_logprobs is not None:
                    results[rid].prompt_logprobs = out.prompt_logprobs
                res.text += out.new_text
                res.token_ids = out.output_token_ids
                res.logprobs.extend(out.new_logprobs)
                res.finish_reason = out.finish_reason
                res.stop_reason = out.stop_reason
                res.cumulative_logprob = out.cumulative_logprob
                if bar is not None and out.finish_reason is not None and results[rid].finished:
                    bar.update(1)

    def chat(self, messages: list[dict] | Sequence[list[dict]],
             sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
             use_tqdm: bool = True, *, chat_template: str | None = None,
             add_generation_prompt: bool = True, continue_final_message: bool = False,
             tools: list[dict] | None = None,
             chat_template_kwargs: dict | None = None) -> list[RequestResult]:
        """Applies the chat template (the tokenizer's, or `chat_template`, a Jinja text),
        which writes the special tokens, then generates; vLLM's arguments. ValueError for
        messages the template refuses, tools it does not render, or `chat_template_kwargs`
        that set what these arguments do."""
        convs = [messages] if messages and isinstance(messages[0], dict) else list(messages)
        try:
            ids = [chat_prompt_ids(self.tokenizer, c, add_generation_prompt,
                                   continue_final_message, chat_template_kwargs, tools=tools,
                                   chat_template=chat_template)
                   for c in convs]
        except ApiError as e:
            hint = (" (offline: LLM.generate, or LLM.chat with a chat_template)"
                    if "no chat template" in e.message else "")
            raise ValueError(e.message + hint) from None
        return self.generate(ids, sampling_params, use_tqdm)
