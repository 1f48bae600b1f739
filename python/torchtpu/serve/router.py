"""``torchtpu router`` and ``torchtpu serve --replicas N``: cache-aware routing across engine
replicas on one host.

The router itself is C++ (``torchtpu._router``, csrc/router): HTTP in and out, SSE streamed
through, each replica's KV events indexed, health checks, retries. This module gives it the
one thing it needs from Python, the prompt's token ids (``PromptTokenizer``: the server's own
code and the model's own tokenizer, so the router's block hashes are the engine's), and
launches replicas as processes pinned to disjoint cores (``ReplicaLauncher``).

Why tokenize in the router's process rather than ask a replica's /tokenize: a replica under
load answers /tokenize behind its engine thread (tens of ms), the router would pay a second
HTTP round trip per request, and a dead replica could not tokenize; and no C++ library from
Debian or PyPI reads Hugging Face tokenizer.json files and Jinja chat templates as
``transformers`` does. The callback runs on the router's connection threads under the GIL;
the C++ side holds no Python state otherwise.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

log = logging.getLogger("torchtpu.router")


class PromptTokenizer:
    """``(target, body) -> token ids | None`` for a /v1/completions or /v1/chat/completions
    body, exactly as ``torchtpu serve`` computes the first prompt's ids (validation,
    chat template, truncation). None for anything it cannot read: the router then routes by
    load and the replica answers the error. A text too long for the model's context, known
    from its size as the server knows it (``prompts.check_text_fits``), is not tokenized:
    the replica refuses it in microseconds, and tokenizing megabytes here took seconds and
    gigabytes per request."""

    def __init__(self, model_path: str, max_model_len: int | None = None) -> None:
        from transformers import AutoConfig, AutoTokenizer

        from torchtpu.serve import prompts

        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        self.token_bytes = prompts.max_token_bytes(self.tokenizer)
        # The replicas' --max-model-len is at most the model's positions (no bound, only
        # no early refusal, when the folder has no readable config).
        if max_model_len is None:
            try:
                max_model_len = prompts.model_positions(AutoConfig.from_pretrained(model_path))
            except (OSError, ValueError):
                max_model_len = None
        self.max_model_len = max_model_len
        # The first call pays for lazy imports and compiled templates: not a request's job.
        self("/v1/completions", b'{"prompt": "warm up"}')
        self("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "warm up"}]}')

    def __call__(self, target: str, body: bytes) -> list[int] | None:
        from torchtpu.serve import prompts, protocol

        try:
            chat = target == "/v1/chat/completions"
            req = (protocol.ChatCompletionRequest if chat else
                   protocol.CompletionRequest).model_validate_json(body)
            # As the server: a prompt that must fit the context whole (generation.py).
            must_fit = self.max_model_len is not None and prompts.must_fit_context(req, chat)
            if chat:
                tools = protocol.tool_dicts(req)
                ids = prompts.chat_prompt_ids(
                    self.tokenizer, protocol.chat_messages(req), req.add_generation_prompt,
                    req.continue_final_message, req.chat_template_kwargs,
                    req.add_special_tokens, tools,
                    fits=(self.token_bytes, self.max_model_len) if must_fit else None,
                    tools_callable=req.tool_choice != "none")
            else:
                first = protocol.completion_prompts(req)[0]
                if isinstance(first, str) and must_fit:
                    prompts.check_text_fits(first, self.token_bytes, self.max_model_len, "prompt")
                ids = (prompts.text_prompt_ids(self.tokenizer, first, req.add_special_tokens)
                       if isinstance(first, str) else list(first))
            keep = req.truncate_prompt_tokens
            return ids[-keep:] if keep is not None and keep > 0 else ids
        except Exception:  # noqa: BLE001 - the replica will say what is wrong with it
            return None


def run_router(replicas: list[dict], *, model_path: str | None, host: str = "127.0.0.1",
               port: int = 8000, mode: str = "cache-aware",
               weights: tuple[float, float, float] = (3.0, 1.0, 1.0),
               spill_threshold: int | None = None, block_size: int = 0,
               routed_ttl_s: float = 30.0, health_interval_s: float = 0.5,
               max_request_bytes: int = 4 << 20, request_timeout_s: float = 60.0,
               max_connections: int = 1024, on_listening=None) -> int:
    """Serves until SIGINT/SIGTERM. `replicas`: dicts with "url" and optionally "events"
    and "replay" (ZMQ endpoints of its KV events). Returns 0."""
    try:
        from torchtpu import _router
    except ImportError as e:
        raise RuntimeError(
            "torchtpu router: this build has no router (torchtpu._router did not import: "
            f"{e}); it is built when Boost, ZeroMQ and msgpack-cxx headers are installed "
            "(scripts/setup.sh) and TORCHTPU_BUILD_ROUTER is ON") from e

    tokenizer = PromptTokenizer(model_path) if model_path and mode == "cache-aware" else None
    events = any(r.get("events") for r in replicas)
    router = _router.Router(
        host=host, port=port, replicas=replicas, mode=mode, weights=list(weights),
        **({} if spill_threshold is None else {"spill_threshold": spill_threshold}),
        block_size=block_size, routed_ttl_s=routed_ttl_s if events else 1e9,
        health_interval_s=health_interval_s, max_request_bytes=max_request_bytes,
        request_timeout_s=request_timeout_s, max_connections=max_connections,
        tokenizer=tokenizer)
    bound = router.bind()
    how = ("KV events" if events else "its routing history (no KV events)") \
        if mode == "cache-aware" else "round-robin"
    print(f"torchtpu router: http://{host}:{bound} -> {len(replicas)} replicas "
          f"({', '.join(r['url'] for r in replicas)}); prefix index from {how}",
          file=sys.stderr, flush=True)
    if on_listening is not None:
        on_listening(bound)
    router.run(handle_signals=True)
    return 0


def core_groups(num_replicas: int) -> list[set[int] | None]:
    """Disjoint sets of this process's CPUs, one per replica, as equal as possible; None for
    each (no pinning) when there are more replicas than CPUs."""
    cpus = sorted(os.sched_getaffinity(0))
    if num_replicas > len(cpus):
        return [None] * num_replicas
    per, extra = divmod(len(cpus), num_replicas)
    groups, start = [], 0
    for i in range(num_replicas):
        n = per + (1 if i < extra else 0)
        groups.append(set(cpus[start:start + n]))
        start += n
    return groups


class ReplicaLauncher:
    """N ``torchtpu serve`` processes on ports base_port..base_port+N-1, each publishing KV
    events on its own ipc:// endpoints (bound by the replica, local to this host), pinned to
    its own cores, in its own session (a Ctrl-C reaches the launcher, which stops them). A
    replica that exits is started again after a pause, until ``stop()``, unless it exited
    with status 2 (its arguments or its port: starting it again would fail the same way).
    ``stop()`` removes the endpoints' folder."""

    def __init__(self, num_replicas: int, base_port: int, serve_args: list[str],
                 host: str = "127.0.0.1") -> None:
        if num_replicas < 1:
            raise ValueError("--replicas must be at least 1")
        self.dir = tempfile.mkdtemp(prefix="torchtpu-replicas-")
        self.host = host
        self.serve_args = serve_args
        self.cores = core_groups(num_replicas)
        if self.cores[0] is None:
            log.warning("router: %d replicas on %d CPUs: not pinned", num_replicas,
                        len(os.sched_getaffinity(0)))
        self.replicas = [{"url": f"http://{host}:{base_port + i}",
                          "port": base_port + i,
                          "events": f"ipc://{self.dir}/replica{i}.events",
                          "replay": f"ipc://{self.dir}/replica{i}.replay"}
                         for i in range(num_replicas)]
        self.procs: list[subprocess.Popen | None] = [None] * num_replicas
        self._stop = threading.Event()
        self._watch = threading.Thread(target=self._supervise, daemon=True)

    def command(self, i: int) -> list[str]:
        r = self.replicas[i]
        return [sys.executable, "-m", "torchtpu.cli", "serve", "--host", self.host,
                "--port", str(r["port"]), "--kv-events-endpoint", r["events"],
                "--kv-events-replay-endpoint", r["replay"], *self.serve_args]

    def _spawn(self, i: int) -> None:
        cores = self.cores[i]

        def pin() -> None:
            if cores:
                os.sched_setaffinity(0, cores)

        env = dict(os.environ)
        if cores:
            # XLA's CPU thread pool and PyTorch size themselves from the CPU count.
            env.setdefault("OMP_NUM_THREADS", str(len(cores)))
        self.procs[i] = subprocess.Popen(self.command(i), preexec_fn=pin, env=env,
                                         start_new_session=True)
        log.info("router: replica %d (pid %d) on %s, cores %s", i, self.procs[i].pid,
                 self.replicas[i]["url"], sorted(cores) if cores else "all")

    def start(self) -> None:
        for i in range(len(self.replicas)):
            self._spawn(i)
        self._watch.start()

    def _supervise(self) -> None:
        pause = [1.0] * len(self.procs)
        while not self._stop.wait(0.5):
            for i, p in enumerate(self.procs):
                if p is not None and p.poll() is not None and not self._stop.is_set():
                    if p.returncode == 2:
                        log.error("router: replica %d (%s) cannot start (status 2: its "
                                  "arguments, or its port is taken; its error is above); not "
                                  "starting it again", i, self.replicas[i]["url"])
                        self.procs[i] = None
                        continue
                    log.warning("router: replica %d exited with %s; starting it again in %.0f s",
                                i, p.returncode, pause[i])
                    if self._stop.wait(pause[i]):
                        return
                    pause[i] = min(30.0, pause[i] * 2)
                    self._spawn(i)

    def stop(self) -> None:
        self._stop.set()
        for p in self.procs:
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 15
        for p in self.procs:
            if p is None:
                continue
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        shutil.rmtree(self.dir, ignore_errors=True)
