"""Runs an ``LLMEngine`` on its own thread and streams each request's outputs to asyncio.

HTTP handlers validate and tokenize on the event loop, then hand the request to the engine
thread; outputs come back through a per-request ``asyncio.Queue``. A consumer that stops
early (a client that disconnected) aborts its request, which frees its KV pages.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import queue
import threading
from typing import AsyncIterator

from torchtpu.serve.engine import LLMEngine, RequestOutput
from torchtpu.serve.sampling import SamplingParams

log = logging.getLogger("torchtpu.serve")


class AsyncEngine:
    def __init__(self, engine: LLMEngine) -> None:
        self.engine = engine
        self._commands: queue.Queue = queue.Queue()
        self._streams: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Queue]] = {}
        self._ids = itertools.count()
        self._stop = threading.Event()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="torchtpu-engine", daemon=True)
        self._thread.start()

    def new_request_id(self, prefix: str) -> str:
        return f"{prefix}-{next(self._ids)}"

    async def generate(self, request_id: str, prompt_ids: list[int],
                       params: SamplingParams) -> AsyncIterator[RequestOutput]:
        if self.error is not None:
            raise RuntimeError(f"the engine stopped after an error: {self.error}")
        loop = asyncio.get_running_loop()
        outputs: asyncio.Queue = asyncio.Queue()
        self._streams[request_id] = (loop, outputs)
        self._commands.put(("add", request_id, prompt_ids, params))
        finished = False
        try:
            while not finished:
                out = await outputs.get()
                if isinstance(out, BaseException):
                    raise out
                finished = out.finished
                yield out
        finally:
            self._streams.pop(request_id, None)
            if not finished:
                self._commands.put(("abort", request_id))

    def shutdown(self) -> None:
        self._stop.set()
        self._commands.put(("stop",))
        self._thread.join(timeout=30)

    # --- the engine thread --------------------------------------------------------------
    def _deliver(self, request_id: str, item) -> None:
        stream = self._streams.get(request_id)
        if stream is not None:
            loop, outputs = stream
            loop.call_soon_threadsafe(outputs.put_nowait, item)

    def _apply(self, command: tuple) -> None:
        if command[0] == "add":
            _, rid, ids, params = command
            if rid not in self._streams:  # the client left before the engine saw it
                return
            try:
                self.engine.add_request(rid, ids, params)
            except ValueError as e:
                self._deliver(rid, e)
        elif command[0] == "abort":
            if self.engine.abort(command[1]):
                log.info("serve: aborted %s (client went away)", command[1])

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                busy = self.engine.has_unfinished()
                try:
                    command = self._commands.get(timeout=None if not busy else 0)
                    while True:
                        if command[0] == "stop":
                            return
                        self._apply(command)
                        command = self._commands.get_nowait()
                except queue.Empty:
                    pass
                if self.engine.has_unfinished():
                    for out in self.engine.step():
                        self._deliver(out.request_id, out)
        except BaseException as e:  # noqa: BLE001 - every waiting client must hear of it
            log.exception("serve: the engine thread failed")
            self.error = e
            for rid in list(self._streams):
                self._deliver(rid, RuntimeError(f"the engine failed: {e}"))
