"""Type stubs for ``torchtpu._serve``, the serving engine core (C++, no torch).

One engine step is ``schedule()`` -> run the model on ``out.items`` -> ``update(sampled)``.
Errors: ``ValueError`` for bad input (a request that can never fit, a bad config, a missing
or unexpected sampled token), ``KeyError`` for an unknown request id, ``RuntimeError`` for
calls out of order (``schedule()`` twice without ``update()``).
"""

class SchedulerConfig:
    num_pages: int
    page_size: int
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int
    enable_prefix_cache: bool
    def __init__(
        self,
        *,
        num_pages: int = 256,
        page_size: int = 16,
        max_num_seqs: int = 16,
        max_num_batched_tokens: int = 512,
        max_model_len: int = 2048,
        enable_prefix_cache: bool = True,
    ) -> None: ...

class ScheduledItem:
    request_id: str
    token_ids: list[int]  # tokens to compute this step (prefill chunk or 1 decode token)
    start_pos: int  # position of token_ids[0] (= tokens already computed)
    page_ids: list[int]  # the request's whole page table after allocation
    sample: bool  # this step reaches the last known token: sample one for this request
    num_output_tokens: int  # output tokens so far

class SchedulerOutput:
    items: list[ScheduledItem]  # batch order
    preempted: list[str]  # ids preempted during this schedule() call
    num_scheduled_tokens: int

class Scheduler:
    config: SchedulerConfig
    num_free_pages: int
    num_total_pages: int
    num_cached_pages: int  # pages the prefix cache holds (some may be in use by requests)
    num_running: int
    num_waiting: int
    kv_cache_usage: float  # pages held by requests / total (evictable cached pages are free)
    prefix_cache_queries: int  # tokens
    prefix_cache_hits: int  # tokens
    num_preemptions: int
    def __init__(self, config: SchedulerConfig) -> None: ...
    def add_request(
        self,
        request_id: str,
        *,
        prompt_token_ids: list[int],
        max_new_tokens: int,
        stop_token_ids: list[int] = ...,
        ignore_eos: bool = False,
    ) -> None: ...
    def abort(self, request_id: str) -> bool: ...
    def finish(self, request_id: str, reason: str = "stop") -> bool: ...
    def schedule(self) -> SchedulerOutput: ...
    def update(self, sampled: dict[str, int]) -> list[tuple[str, str]]: ...
    def has_unfinished(self) -> bool: ...
    def request_output_ids(self, request_id: str) -> list[int]: ...
    def request_status(self, request_id: str) -> str: ...
    def request_num_cached_tokens(self, request_id: str) -> int: ...
    def release_request(self, request_id: str) -> bool: ...
    def reset_prefix_cache(self) -> None: ...
    def enable_kv_events(self) -> None: ...  # records stores/evictions, after AllBlocksCleared
    # Events since the last call: (type, block_hashes, parent_block_hash, token_ids, block_size)
    # with type "BlockStored" | "BlockRemoved" | "AllBlocksCleared" (vLLM's KV event names).
    def take_kv_events(self) -> list[tuple[str, list[int], int | None, list[int], int]]: ...
