"""Type stubs for ``torchtpu._router``, the router service (C++, no torch). See
``torchtpu.serve.router`` for the command-line side and docs/architecture.md for what it
does. Errors: ``ValueError`` for a bad configuration, ``RuntimeError`` otherwise."""

from collections.abc import Callable

class Router:
    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 8000,
        replicas: list[dict],  # {"url": "http://h:p", "events": zmq endpoint, "replay": ...}
        mode: str = "cache-aware",  # or "round-robin"
        weights: list[float] = [3, 1, 1],  # prefix affinity, queue depth, KV usage
        block_size: int = 0,  # 0: from the replicas' vllm:cache_config_info
        routed_ttl_s: float = 30.0,
        routed_capacity_blocks: int = 1 << 20,
        health_interval_s: float = 0.5,
        health_timeout_s: float = 2.0,
        max_attempts: int = 3,
        max_request_bytes: int = 4 << 20,
        # (target, body) -> the prompt's token ids, or None: route by load
        tokenizer: Callable[[str, bytes], list[int] | None] | None = None,
    ) -> None: ...
    def bind(self) -> int: ...  # listens; returns the port
    def run(self, handle_signals: bool = True) -> None: ...  # until stop() / SIGINT / SIGTERM
    def stop(self) -> None: ...
    @property
    def port(self) -> int: ...
    def metrics_text(self) -> str: ...
