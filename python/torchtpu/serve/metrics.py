"""Prometheus metrics under vLLM's names, so dashboards, ``vllm bench`` tooling and llm-d
read a torchtpu server unchanged. Each engine has its own registry."""

from __future__ import annotations

import prometheus_client
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

# As vLLM: no `*_created` series beside every counter and histogram.
prometheus_client.disable_created_metrics()

_LATENCY_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
                    2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0)
_REQUEST_LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0,
                            40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
_ITERATION_TOKEN_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)


def _one_two_five(limit: int) -> tuple[int, ...]:
    """1, 2, 5, 10, 20, 50, ... up to `limit` (vLLM's token-count buckets)."""
    out, scale = [], 1
    while True:
        for m in (1, 2, 5):
            if m * scale > limit:
                return tuple(out)
            out.append(m * scale)
        scale *= 10


class ServeMetrics:
    def __init__(self, model_name: str, max_model_len: int = 2048) -> None:
        self.registry = CollectorRegistry()
        label = ["model_name"]

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, label, registry=self.registry).labels(model_name)

        def counter(name: str, doc: str) -> Counter:
            return Counter(name, doc, label, registry=self.registry).labels(model_name)

        def histogram(name: str, doc: str, buckets=_LATENCY_BUCKETS) -> Histogram:
            return Histogram(name, doc, label, buckets=buckets,
                             registry=self.registry).labels(model_name)

        self.num_running = gauge("vllm:num_requests_running", "Requests in the running batch.")
        self.num_waiting = gauge("vllm:num_requests_waiting", "Requests waiting to be scheduled.")
        self.kv_usage = gauge("vllm:kv_cache_usage_perc", "KV-cache usage (1 means 100%).")
        self.prefix_queries = counter("vllm:prefix_cache_queries",
                                      "Prompt tokens looked up in the prefix cache.")
        self.prefix_hits = counter("vllm:prefix_cache_hits",
                                   "Prompt tokens found in the prefix cache.")
        self.num_preemptions = counter("vllm:num_preemptions", "Requests preempted.")
        self.prompt_tokens = counter("vllm:prompt_tokens", "Prompt tokens received.")
        self.generation_tokens = counter("vllm:generation_tokens", "Tokens generated.")
        self._success = Counter("vllm:request_success", "Finished requests.",
                                ["model_name", "finished_reason"], registry=self.registry)
        self._model_name = model_name
        self.ttft = histogram("vllm:time_to_first_token_seconds", "Time to first token.")
        self.itl = histogram("vllm:inter_token_latency_seconds", "Time between output tokens.")
        self.tpot = histogram("vllm:time_per_output_token_seconds",
                              "Mean time per output token of each finished request.")
        self.e2e = histogram("vllm:e2e_request_latency_seconds", "Request latency.")
        self.queue_time = histogram("vllm:request_queue_time_seconds",
                                    "Time from arrival to the first step that schedules it.")
        self.prefill_time = histogram("vllm:request_prefill_time_seconds",
                                      "Time from the first step that schedules it to its "
                                      "first token.")
        self.decode_time = histogram("vllm:request_decode_time_seconds",
                                     "Time from the first token to the last.",
                                     _REQUEST_LATENCY_BUCKETS)
        self.inference_time = histogram("vllm:request_inference_time_seconds",
                                        "Time from the first step that schedules it to its "
                                        "last token.", _REQUEST_LATENCY_BUCKETS)
        tokens = _one_two_five(max_model_len)
        self.request_prompt_tokens = histogram("vllm:request_prompt_tokens",
                                               "Prompt tokens of each finished request.", tokens)
        self.request_generation_tokens = histogram(
            "vllm:request_generation_tokens", "Generated tokens of each finished request.",
            tokens)
        self.request_max_tokens = histogram("vllm:request_params_max_tokens",
                                            "max_tokens of each finished request.", tokens)
        self.iteration_tokens = histogram("vllm:iteration_tokens_total",
                                          "Tokens computed by each engine step.",
                                          _ITERATION_TOKEN_BUCKETS)
        self.grammar_compile = Histogram(
            "torchtpu:grammar_compile_seconds", "Time to compile one structured-output grammar "
            "(once per schema; later requests hit the cache).", label,
            buckets=_LATENCY_BUCKETS, registry=self.registry).labels(model_name)
        self._seen_queries = 0
        self._seen_hits = 0
        # Speculative decoding (vLLM's names): verification steps with drafts, drafted
        # tokens, accepted ones, and accepted ones per draft position.
        self.spec_drafts = counter("vllm:spec_decode_num_drafts",
                                   "Decode steps that verified drafted tokens.")
        self.spec_draft_tokens = counter("vllm:spec_decode_num_draft_tokens",
                                         "Drafted tokens verified.")
        self.spec_accepted_tokens = counter("vllm:spec_decode_num_accepted_tokens",
                                            "Drafted tokens accepted.")
        self._spec_per_pos = Counter("vllm:spec_decode_num_accepted_tokens_per_pos",
                                     "Drafted tokens accepted, by position in the draft.",
                                     ["model_name", "position"], registry=self.registry)
        self.spec_totals = [0, 0, 0]  # drafts, draft tokens, accepted tokens

    def set_cache_config(self, block_size: int, num_gpu_blocks: int,
                         enable_prefix_caching: bool) -> None:
        """vLLM's ``vllm:cache_config_info`` (value 1, the KV cache's shape in labels): llm-d
        reads the block size and the capacity in blocks from it."""
        info = Gauge("vllm:cache_config_info", "Information of the LLMEngine CacheConfig.",
                     ["block_size", "num_gpu_blocks", "num_cpu_blocks", "enable_prefix_caching"],
                     registry=self.registry)
        info.labels(str(block_size), str(num_gpu_blocks), "0", str(enable_prefix_caching)).set(1)

    def on_arrival(self, num_prompt_tokens: int) -> None:
        self.prompt_tokens.inc(num_prompt_tokens)

    def on_drafts(self, num_draft_tokens: int, num_accepted: int) -> None:
        self.spec_drafts.inc()
        self.spec_draft_tokens.inc(num_draft_tokens)
        self.spec_accepted_tokens.inc(num_accepted)
        for pos in range(num_accepted):
            self._spec_per_pos.labels(self._model_name, str(pos)).inc()
        totals = self.spec_totals
        totals[0], totals[1], totals[2] = (totals[0] + 1, totals[1] + num_draft_tokens,
                                           totals[2] + num_accepted)

    def on_token(self, req, now: float) -> None:
        self.generation_tokens.inc()
        if req.first_token_time is None:
            req.first_token_time = now
            self.ttft.observe(now - req.arrival)
            if req.scheduled_time is not None:
                self.queue_time.observe(req.scheduled_time - req.arrival)
                self.prefill_time.observe(now - req.scheduled_time)
        else:
            self.itl.observe(now - req.last_token_time)
        req.last_token_time = now

    def on_step(self, num_tokens: int) -> None:
        self.iteration_tokens.observe(num_tokens)

    def on_finish(self, req, reason: str) -> None:
        self._success.labels(self._model_name, reason).inc()
        n = len(req.output_token_ids)
        self.request_prompt_tokens.observe(len(req.prompt_token_ids))
        self.request_generation_tokens.observe(n)
        self.request_max_tokens.observe(req.params.max_tokens)
        if req.last_token_time is None:
            return
        self.e2e.observe(req.last_token_time - req.arrival)
        self.decode_time.observe(req.last_token_time - req.first_token_time)
        if req.scheduled_time is not None:
            self.inference_time.observe(req.last_token_time - req.scheduled_time)
        if n > 1:
            self.tpot.observe((req.last_token_time - req.first_token_time) / (n - 1))

    def observe_scheduler(self, scheduler) -> None:
        self.num_running.set(scheduler.num_running)
        self.num_waiting.set(scheduler.num_waiting)
        self.kv_usage.set(scheduler.kv_cache_usage)
        # The scheduler's counters are totals; Prometheus counters only move forward.
        q, h = scheduler.prefix_cache_queries, scheduler.prefix_cache_hits
        self.prefix_queries.inc(max(0, q - self._seen_queries))
        self.prefix_hits.inc(max(0, h - self._seen_hits))
        self._seen_queries, self._seen_hits = q, h

    def render(self) -> bytes:
        return generate_latest(self.registry)
