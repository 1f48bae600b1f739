"""The inference engine: the C++ scheduler (``torchtpu._serve``) decides, the model runner
computes on ``tpu``, the samplers and detokenizers turn logits into tokens and text.

``LLMEngine`` is single-threaded: the server drives it from one engine thread.

Failure contract: ``add_request`` is atomic (everything that can fail about a request is
checked and built before the scheduler sees it, and undone if registering it fails), and a
request whose sampling or detokenization fails ends alone, as a finished ``RequestOutput``
with ``finish_reason="error"`` and ``error`` set. Anything else that raises out of
``step()`` (the model runner, the scheduler) leaves the engine unusable: callers treat it
as the engine's death (the server answers 503 and exits), except that a step interrupted
between scheduling and applying it (a KeyboardInterrupt in the offline API) can be given
up with ``abandon_step()``, which aborts that step's requests.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from dataclasses import dataclass, field, replace

import torch

from torchtpu.serve.detokenizer import IncrementalDetokenizer
from torchtpu.serve.kv_events import KvEventPublisher, KvEventsConfig
from torchtpu.serve.metrics import ServeMetrics
from torchtpu.serve.prompts import model_positions, text_prompt_ids
from torchtpu.serve.sampling import (
    RequestSampler,
    Sample,
    SamplingError,
    SamplingParams,
    prompt_logprob_samples,
)

log = logging.getLogger("torchtpu.serve")

DEFAULT_MODEL = "SmolLM2-135M-Instruct"


@dataclass
class RequestOutput:
    """What one engine step produced for one request."""
    request_id: str
    prompt_token_ids: list[int]
    new_token_ids: list[int]
    new_text: str
    new_logprobs: list[Sample]
    output_token_ids: list[int]
    finished: bool
    finish_reason: str | None  # "stop" | "length" | "abort" | "error"
    cumulative_logprob: float = 0.0  # of output_token_ids under the raw model
    error: str | None = None  # set with finish_reason "error": why this request failed
    error_status: int = 500  # the HTTP status of `error`: 400 when the request caused it
    # With finish_reason "stop": the stop string or stop_token_ids entry that ended the
    # output (None for an end-of-sequence token or a finished grammar), as vLLM's.
    stop_reason: int | str | None = None
    # With params.prompt_logprobs, on the request's first output only: one entry per prompt
    # token, None for the first (nothing precedes it), as vLLM's.
    prompt_logprobs: list[Sample | None] | None = None


@dataclass
class _Request:
    request_id: str
    prompt_token_ids: list[int]
    params: SamplingParams
    sampler: RequestSampler
    detokenizer: IncrementalDetokenizer
    stop_ids: set[int]
    arrival: float
    output_token_ids: list[int] = field(default_factory=list)
    cumulative_logprob: float = 0.0
    first_token_time: float | None = None
    last_token_time: float | None = None
    scheduled_time: float | None = None  # the first step that gave it tokens
    prefill_times: list[float] = field(default_factory=list)  # when each prompt chunk ran
    # With params.prompt_logprobs: per prompt position, filled as its chunks run;
    # prompt_lp_next is the first position not yet filled (see _prompt_rows).
    prompt_lp: list[Sample | None] | None = None
    prompt_lp_next: int = 1
    prompt_lp_sent: bool = False


def resolve_model(model: str | None) -> str:
    """A local Hugging Face folder for `model`: None or the default model's name gives the
    converted SmolLM2-135M-Instruct (built once, offline); a folder is used as is."""
    if model is None or model in (DEFAULT_MODEL, f"HuggingFaceTB/{DEFAULT_MODEL}"):
        from torchtpu.models import smollm2_path

        return str(smollm2_path())
    if os.path.isdir(model) and os.path.isfile(os.path.join(model, "config.json")):
        return model
    raise ValueError(f"serve: model {model!r} is not a Hugging Face model folder (config.json "
                     f"not found) and not {DEFAULT_MODEL!r}; pass a local folder (models are "
                     "never downloaded from a hub)")


class LLMEngine:
    def __init__(self, model: str | None = None, *, page_size: int = 16,
                 num_pages: int | None = None, max_num_seqs: int = 16,
                 max_num_batched_tokens: int = 512, max_model_len: int | None = None,
                 enable_prefix_cache: bool = True, device: str = "tpu",
                 warmup: bool = True, progress: bool = True,
                 served_model_name: str | None = None,
                 attention_kernel: bool | None = None,
                 log_request_timelines: bool = False,
                 speculative: object = None, quantization: str | None = None,
                 layers_per_call: int | None = None,
                 kv_events: KvEventsConfig | None = None) -> None:
        """`speculative`: n-gram speculative decoding (SpeculativeConfig.parse: None off,
        True defaults, an int of draft tokens, or vLLM's speculative_config dict);
        `quantization`: None (f32 weights) or "int8" (weight-only, per output channel);
        `layers_per_call`: decoder layers per compiled call (None: runner.layer_groups);
        `kv_events`: publish the prefix cache's KV events (kv_events.py)."""
        from transformers import AutoModelForCausalLM, AutoTokenizer

        import torchtpu  # noqa: F401  (registers the device)
        from torchtpu import _serve
        from torchtpu.serve.model import PagedDecoder
        from torchtpu.serve.runner import ModelRunner
        from torchtpu.serve.speculative import SpeculativeConfig

        self.speculative = SpeculativeConfig.parse(speculative)
        spec_tokens = self.speculative.num_speculative_tokens if self.speculative else 0

        path = resolve_model(model)
        self.model_path = path
        self.model_name = served_model_name or (
            DEFAULT_MODEL if model in (None, DEFAULT_MODEL) else os.path.basename(path.rstrip("/")))
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        hf = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
        positions = model_positions(hf.config)
        if max_model_len is not None and positions is not None and max_model_len > positions:
            # As vLLM refuses: positions past the model's were never trained (a model with
            # learned position embeddings has none to look up).
            raise ValueError(
                f"max_model_len ({max_model_len}) is greater than the model's "
                f"{positions} positions (max_position_embeddings in its config.json); use "
                f"--max-model-len <= {positions}")
        self.max_model_len = max_model_len or min(positions or 2048, 2048)
        self.page_size = page_size
        pages_per_seq = -(-self.max_model_len // page_size)
        self.num_pages = num_pages or max_num_seqs * pages_per_seq
        if self.num_pages < pages_per_seq:
            # As vLLM refuses: a request of the advertised length could never run (and a chat
            # request without max_tokens asks for all of it).
            raise ValueError(
                f"max_model_len ({self.max_model_len}) is larger than the KV cache holds "
                f"({self.num_pages} pages x {page_size} tokens = {self.num_pages * page_size} "
                f"tokens); use --num-pages >= {pages_per_seq} or --max-model-len <= "
                f"{self.num_pages * page_size}")
        self.eos_ids = self._eos_ids(hf)
        self.decoder = PagedDecoder(hf, device, quantization=quantization)
        del hf
        self.weight_bytes = self.decoder.weight_bytes()
        self.scheduler = _serve.Scheduler(_serve.SchedulerConfig(
            num_pages=self.num_pages, page_size=page_size, max_num_seqs=max_num_seqs,
            max_num_batched_tokens=max_num_batched_tokens, max_model_len=self.max_model_len,
            enable_prefix_cache=enable_prefix_cache, num_speculative_tokens=spec_tokens,
            prompt_lookup_min=self.speculative.prompt_lookup_min if self.speculative else 2,
            prompt_lookup_max=self.speculative.prompt_lookup_max if self.speculative else 4))
        self.runner = ModelRunner(
            self.decoder, num_pages=self.num_pages, page_size=page_size,
            max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
            max_model_len=self.max_model_len, attention_kernel=attention_kernel,
            layers_per_call=layers_per_call, max_logits_per_seq=1 + spec_tokens)
        self.metrics = ServeMetrics(self.model_name, self.max_model_len)
        self.metrics.set_cache_config(page_size, self.num_pages, enable_prefix_cache)
        # KV events (kv_events.py): the prefix cache's stores and evictions, published after
        # every step for llm-d / torchtpu router. Opened before warm-up so a bad endpoint
        # fails fast.
        self.kv_event_publisher = None
        if kv_events is not None:
            self.kv_event_publisher = KvEventPublisher(kv_events)
            self.scheduler.enable_kv_events()
        # One "serve: timeline {json}" log line per finished request (see _log_timeline).
        self.log_request_timelines = log_request_timelines
        self.requests: dict[str, _Request] = {}
        self._unapplied: list[str] | None = None  # the requests of a step scheduled, not applied
        self._grammars = None
        self._grammars_lock = threading.Lock()
        self.warmup_seconds = self.runner.warmup(progress) if warmup else None

    def _eos_ids(self, hf) -> set[int]:
        ids = set()
        for src in (getattr(hf, "generation_config", None), hf.config, self.tokenizer):
            eos = getattr(src, "eos_token_id", None)
            if eos is None:
                continue
            ids.update(eos if isinstance(eos, (list, tuple)) else [eos])
        return ids

    # --- requests -----------------------------------------------------------------------
    @property
    def vocab_size(self) -> int:
        return self.decoder.shape.vocab_size

    def encode_prompt(self, prompt: str | list[int], add_special_tokens: bool | None = None,
                      tokenizer=None) -> list[int]:
        """Token ids of a prompt; ValueError for ids outside the vocabulary. A text prompt
        is encoded with the tokenizer's special tokens unless `add_special_tokens` is False
        (prompts.text_prompt_ids). `tokenizer` defaults to the engine's."""
        if isinstance(prompt, str):
            return text_prompt_ids(tokenizer or self.tokenizer, prompt, add_special_tokens)
        vocab = self.vocab_size
        if not prompt or any(isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < vocab
                             for t in prompt):
            raise ValueError(f"prompt token ids must be a non-empty list of ints in [0, {vocab})")
        return list(prompt)

    def grammars(self):
        """The structured-output grammar cache (built on first use). ValueError when the
        xgrammar package is missing."""
        with self._grammars_lock:  # the server's tokenizer thread compiles too
            if self._grammars is None:
                from torchtpu.serve import structured

                if not structured.available():
                    raise ValueError("serve: structured output needs the xgrammar package "
                                     "(scripts/setup.sh installs it); it is not installed")
                self._grammars = structured.GrammarCache(
                    self.tokenizer, self.vocab_size, self.eos_ids,
                    on_compile=self.metrics.grammar_compile.observe)
            return self._grammars

    def with_max_tokens(self, params: SamplingParams, num_prompt_tokens: int) -> SamplingParams:
        """`params`, max_tokens None (vLLM's: up to the context length) made the tokens the
        context has left after the prompt. ValueError when min_tokens is more than that."""
        if params.max_tokens is not None:
            return params
        return replace(params, max_tokens=max(1, self.max_model_len - num_prompt_tokens))

    def within_context(self, params: SamplingParams, num_prompt_tokens: int) -> SamplingParams:
        """`params` with max_tokens (and min_tokens) no more than the tokens the context has
        left after the prompt: vLLM's offline API generates up to the context and finishes
        with "length" (its server refuses instead, as ``check_length`` does). A prompt that
        fills the context is left to ``check_length``."""
        room = self.max_model_len - num_prompt_tokens
        if params.max_tokens is None or room < 1 or params.max_tokens <= room:
            return params
        return replace(params, max_tokens=room, min_tokens=min(params.min_tokens, room))

    def check_length(self, num_prompt_tokens: int, max_tokens: int) -> None:
        if num_prompt_tokens == 0:
            raise ValueError("the prompt is empty")
        if num_prompt_tokens + max_tokens > self.max_model_len:
            raise ValueError(
                f"This model's maximum context length is {self.max_model_len} tokens. However, "
                f"you requested {num_prompt_tokens + max_tokens} tokens ({num_prompt_tokens} in "
                f"the prompt, {max_tokens} for the completion). Please reduce the length of the "
                "prompt or of max_tokens.")
        pages = -(-(num_prompt_tokens + max_tokens) // self.page_size)
        if pages > self.num_pages:
            raise ValueError(
                f"this request needs {pages} KV pages ({num_prompt_tokens} prompt + {max_tokens} "
                f"new tokens, {self.page_size} per page) but the pool has {self.num_pages}; "
                "reduce max_tokens or start the server with more --num-pages")

    def add_request(self, request_id: str, prompt: str | list[int],
                    params: SamplingParams) -> list[int]:
        """Queues one sequence; returns its prompt token ids. ValueError on bad input; on any
        error the engine is unchanged. `params.n` / `best_of` are the caller's (see
        ``SamplingParams.fork``): one call is one sequence."""
        if request_id in self.requests:
            raise ValueError(f"request id {request_id!r} is already in use")
        params.validate(self.vocab_size)
        ids = self.encode_prompt(prompt)
        params = self.with_max_tokens(params, len(ids))
        self.check_length(len(ids), params.max_tokens)
        stop_ids = set(params.stop_token_ids) | (set() if params.ignore_eos else self.eos_ids)
        grammar = None if params.guided is None else self.grammars().state(params.guided)
        req = _Request(
            request_id, ids, params, RequestSampler(params, ids, stop_ids, grammar),
            IncrementalDetokenizer(self.tokenizer, params.stop,
                                   params.include_stop_str_in_output,
                                   skip_special_tokens=params.skip_special_tokens,
                                   min_tokens=params.min_tokens, prompt_ids=ids),
            stop_ids, time.perf_counter())
        if params.prompt_logprobs is not None:
            req.prompt_lp = [None] * len(ids)
        self.scheduler.add_request(request_id, prompt_token_ids=ids,
                                   max_new_tokens=params.max_tokens,
                                   stop_token_ids=sorted(stop_ids), ignore_eos=False,
                                   speculative=params.speculative)
        try:
            self.requests[request_id] = req
            self.metrics.on_arrival(len(ids))
        except BaseException:
            self.requests.pop(request_id, None)
            self.scheduler.abort(request_id)
            self.scheduler.release_request(request_id)
            raise
        return ids

    def abort(self, request_id: str) -> bool:
        req = self.requests.pop(request_id, None)
        if req is None:
            return False
        self.scheduler.abort(request_id)
        self.scheduler.release_request(request_id)
        self.metrics.on_finish(req, "abort")
        # The gauges follow the scheduler now: when the last request is aborted no step
        # comes to refresh them, and /metrics would show its pages as used.
        self.metrics.observe_scheduler(self.scheduler)
        self._publish_kv_events()
        return True

    def abandon_step(self) -> list[str]:
        """After ``step()`` raised between scheduling a step and applying it (a
        KeyboardInterrupt while the model ran): aborts the step's requests, whose KV for it
        is unknown, and clears the step, so that the engine steps again. Returns the aborted
        request ids (none when no step was left unapplied)."""
        if self._unapplied is None:
            return []
        aborted = [rid for rid in self._unapplied if self.abort(rid)]
        self.scheduler.update({})  # every item of the step is aborted: nothing to apply
        self._unapplied = None
        return aborted

    def _publish_kv_events(self) -> None:
        if self.kv_event_publisher is not None:
            self.kv_event_publisher.publish(self.scheduler.take_kv_events())

    def close(self) -> None:
        """Flushes and closes the KV event publisher, if any (the engine stays usable for
        offline work, without events)."""
        if self.kv_event_publisher is not None:
            self.kv_event_publisher.close()
            self.kv_event_publisher = None

    def has_unfinished(self) -> bool:
        return bool(self.requests)

    # --- one step -----------------------------------------------------------------------
    def step(self) -> list[RequestOutput]:
        from torchtpu.serve.runner import StepItem

        sched = self.scheduler.schedule()
        self._unapplied = [it.request_id for it in sched.items]
        scheduled = time.perf_counter()
        self.metrics.num_preemptions.inc(len(sched.preempted))
        for it in sched.items:
            req = self.requests.get(it.request_id)
            if req is None:
                continue
            if req.scheduled_time is None:
                req.scheduled_time = scheduled
            if req.first_token_time is None:
                req.prefill_times.append(scheduled)
        if not sched.items:
            self.scheduler.update({})
            self._unapplied = None
            self.metrics.observe_scheduler(self.scheduler)
            self._publish_kv_events()
            return []
        self.metrics.on_step(sum(len(it.token_ids) for it in sched.items))
        items = [StepItem(it.request_id, list(it.token_ids), it.start_pos, list(it.page_ids),
                          1 + it.num_draft_tokens if it.sample else 0) for it in sched.items]
        drafts = {it.request_id: list(it.token_ids[len(it.token_ids) - it.num_draft_tokens:])
                  for it in sched.items if it.num_draft_tokens}
        recompute = self._prompt_rows(items)
        logits = self.runner.execute(items, self._on_prompt_rows)
        for item in recompute:  # cached prefixes' logits: read-only passes after the step
            self.runner.execute([item], self._on_prompt_rows)
        now = time.perf_counter()
        samples: dict[str, list[Sample]] = {}
        outputs = []
        for rid, rows in logits.items():
            sampler = self.requests[rid].sampler
            try:
                samples[rid] = (sampler.verify(rows, drafts[rid]) if rid in drafts
                                else [sampler.sample(rows[0])])
            except Exception as e:  # noqa: BLE001 - this request's failure, not the engine's
                outputs.append(self._fail(rid, e, "sampling"))
        for rid, proposed in drafts.items():
            if rid in samples:
                self.metrics.on_drafts(len(proposed), len(samples[rid]) - 1)
        finished = dict(self.scheduler.update({rid: [x.token for x in ss]
                                               for rid, ss in samples.items()}))
        self._unapplied = None
        for rid, ss in samples.items():
            req = self.requests[rid]
            if len(ss) > 1:  # the scheduler drops what follows a stop token
                ss = ss[:self.scheduler.request_num_output_tokens(rid) -
                        len(req.output_token_ids)]
            reason = finished.get(rid)
            ids = req.output_token_ids + [x.token for x in ss]
            if reason == "stop" and ids[-1] in req.stop_ids and \
                    not req.params.include_stop_str_in_output:
                ids = ids[:-1]  # a stop token ends the text but is not part of it
            # A grammar that has ended finishes the request here (with ignore_eos its stop
            # token does not), so its text is flushed now.
            grammar_done = reason is None and req.sampler.done
            try:
                text = req.detokenizer.update(ids, finished=reason is not None or grammar_done)
            except Exception as e:  # noqa: BLE001 - as above
                outputs.append(self._fail(rid, e, "detokenizing"))
                continue
            if req.detokenizer.stopped:  # tokens of the step after a stop string are not out
                ss = ss[:req.detokenizer.stop_at - len(req.output_token_ids)]
            for x in ss:
                req.output_token_ids.append(x.token)
                req.cumulative_logprob += x.logprob
                self.metrics.on_token(req, now)
            if reason is None and (req.detokenizer.stopped or grammar_done):
                self.scheduler.finish(rid, "stop")
                reason = "stop"
            elif req.detokenizer.stopped:  # a stop string in the last token's text wins
                reason = "stop"             # over the length limit, as in vLLM
            prompt_lp = None
            if req.prompt_lp is not None and not req.prompt_lp_sent:
                prompt_lp, req.prompt_lp_sent = list(req.prompt_lp), True
            outputs.append(RequestOutput(
                rid, req.prompt_token_ids, [x.token for x in ss], text,
                list(ss) if req.params.logprobs is not None else [], list(req.output_token_ids),
                reason is not None, reason, req.cumulative_logprob,
                stop_reason=self._stop_reason(req, reason), prompt_logprobs=prompt_lp))
            if reason is not None:
                del self.requests[rid]
                if self.log_request_timelines:
                    self._log_timeline(req)
                self.scheduler.release_request(rid)
                self.metrics.on_finish(req, reason)
        self.metrics.observe_scheduler(self.scheduler)
        self._publish_kv_events()
        return outputs

    def _prompt_rows(self, items: list) -> list:
        """Prompt logprobs: sets the row_span of the step's items whose prompt positions
        still lack them (the logits at position p give prompt token p + 1's logprob), and
        returns the read-only items that recompute what a prefix cache hit skipped: the
        cached positions have keys and values in the request's pages but no logits, so a
        forward pass over them that writes no page (write_kv=False) gives their logits
        without touching pages other requests share. Positions already filled (a request
        preempted and recomputed) are not computed again."""
        from torchtpu.serve.runner import StepItem

        recompute = []
        for it in items:
            req = self.requests.get(it.request_id)
            if req is None or req.prompt_lp is None:
                continue
            last_row = len(req.prompt_token_ids) - 2  # the last position with a prompt target
            lo = req.prompt_lp_next - 1  # the first row still wanted
            if lo > last_row:
                continue
            end = it.start_pos + len(it.token_ids)
            hi = min(end - 1, last_row)
            if it.start_pos > lo:  # a cache hit: [lo, start_pos) were never computed here
                budget = self.runner.token_buckets[-1]
                for a in range(lo, it.start_pos, budget):
                    b = min(a + budget, it.start_pos)
                    recompute.append(StepItem(it.request_id, req.prompt_token_ids[a:b], a,
                                              list(it.page_ids), row_span=(0, b - a),
                                              write_kv=False))
                lo = it.start_pos
            if hi >= lo:
                it.row_span = (lo - it.start_pos, hi - it.start_pos + 1)
        return recompute

    def _on_prompt_rows(self, item, first: int, logits: torch.Tensor) -> None:
        """Logits of prompt positions (see _prompt_rows) -> the request's prompt logprobs:
        only the prompt tokens' logprobs, ranks and top k are kept."""
        req = self.requests[item.request_id]
        pos = item.start_pos + first  # the first row's position: it predicts pos + 1
        n = logits.shape[0]
        targets = req.prompt_token_ids[pos + 1:pos + 1 + n]
        req.prompt_lp[pos + 1:pos + 1 + n] = prompt_logprob_samples(
            logits, targets, req.params.prompt_logprobs)
        while req.prompt_lp_next < len(req.prompt_lp) and \
                req.prompt_lp[req.prompt_lp_next] is not None:
            req.prompt_lp_next += 1

    def _stop_reason(self, req: _Request, reason: str | None) -> int | str | None:
        if reason != "stop":
            return None
        if req.detokenizer.stopped:
            return req.detokenizer.stop_string
        last = req.output_token_ids[-1] if req.output_token_ids else None
        if last in self.eos_ids and not req.params.ignore_eos:
            return None
        return last if last in req.params.stop_token_ids else None

    def _log_timeline(self, req: _Request) -> None:
        """Where a finished request's time to first token went: seconds from arrival to
        each step that computed part of its prompt and to its first token, with the
        scheduler's step numbers and tokens for the same events."""
        t = self.scheduler.request_timeline(req.request_id)
        since = [round(x - req.arrival, 4) for x in req.prefill_times]
        chunks = [[step, n, s] for (step, n), s in zip(t["prefill_chunks"], since)]
        log.info("serve: timeline %s", json.dumps({
            "id": req.request_id, "prompt_tokens": len(req.prompt_token_ids),
            "cached_tokens": t["num_cached_tokens"], "preemptions": t["num_preemptions"],
            "queued_step": t["queued_step"],
            "queue_s": round((req.scheduled_time or req.arrival) - req.arrival, 4),
            "prefill_chunks": chunks,  # [step, tokens, seconds since arrival]
            "first_token_step": t["first_token_step"],
            "ttft_s": round((req.first_token_time or req.arrival) - req.arrival, 4)}))

    def _fail(self, request_id: str, error: Exception, stage: str) -> RequestOutput:
        """Ends one request whose `stage` raised; the rest of the batch goes on."""
        req = self.requests.pop(request_id)
        self.scheduler.abort(request_id)
        self.scheduler.release_request(request_id)
        self.metrics.on_finish(req, "error")
        message = str(error) if isinstance(error, SamplingError) else (
            f"serve: request {request_id} failed while {stage}: {type(error).__name__}: {error}")
        client_caused = isinstance(error, SamplingError) and error.status < 500
        (log.info if client_caused else log.error)("%s", message)
        return RequestOutput(request_id, req.prompt_token_ids, [], "", [],
                             list(req.output_token_ids), True, "error",
                             req.cumulative_logprob, message,
                             error.status if client_caused else 500)

    def stats(self) -> dict:
        s = self.scheduler
        return dict(num_running=s.num_running, num_waiting=s.num_waiting,
                    num_free_pages=s.num_free_pages, num_total_pages=s.num_total_pages,
                    kv_cache_usage=s.kv_cache_usage, prefix_cache_queries=s.prefix_cache_queries,
                    prefix_cache_hits=s.prefix_cache_hits, num_preemptions=s.num_preemptions,
                    num_recompiles_after_warmup=self.runner.num_recompiles_after_warmup,
                    warmup_seconds=self.warmup_seconds, weight_bytes=self.weight_bytes,
                    weight_huge_page_bytes=self.decoder.huge_pages.huge_bytes,
                    weight_huge_page_refused_bytes=self.decoder.huge_pages.refused_bytes,
                    quantization=self.decoder.quantization,
                    spec_decode_num_drafts=self.metrics.spec_totals[0],
                    spec_decode_num_draft_tokens=self.metrics.spec_totals[1],
                    spec_decode_num_accepted_tokens=self.metrics.spec_totals[2])
