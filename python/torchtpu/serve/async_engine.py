"""Runs an ``LLMEngine`` on its own thread and streams each request's outputs to asyncio.

HTTP handlers validate and tokenize off the engine thread, then hand one sequence at a time
to it; outputs come back through a per-sequence ``asyncio.Queue``. A consumer that stops
early (a client that disconnected) aborts its sequence, which frees its KV pages.

Failures: a sequence the engine refuses (``ValueError``) or that fails alone (its sampling,
its detokenization) raises ``RequestError`` in its consumer and nothing else changes. An
exception out of ``LLMEngine.step()`` is the engine's death: every waiting consumer and
every later ``generate`` gets ``EngineDeadError``, and `on_death` is called once (from the
engine thread) so the server can exit for a supervisor to restart it.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import queue
import threading
from collections.abc import AsyncIterator, Callable

from torchtpu.serve.engine import LLMEngine, RequestOutput
from torchtpu.serve.sampling import SamplingParams

log = logging.getLogger("torchtpu.serve")


class RequestError(Exception):
    """One sequence failed; `status` is the HTTP status it maps to (400: refused)."""

    def __init__(self, message: str, status: int = 500) -> None:
        super().__init__(message)
        self.status = status


class EngineDeadError(Exception):
    """The engine loop stopped after an error; nothing more can run until a restart."""


class AsyncEngine:
    def __init__(self, engine: LLMEngine, on_death: Callable[[], None] | None = None) -> None:
        self.engine = engine
        self.on_death = on_death
        self._commands: queue.Queue = queue.Queue()
        self._streams: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Queue]] = {}
        self._ids = itertools.count()
        self._stop = threading.Event()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="torchtpu-engine", daemon=True)
        self._thread.start()

    def new_request_id(self, prefix: str) -> str:
        return f"{prefix}-{next(self._ids)}"

    @property
    def dead(self) -> bool:
        return self.error is not None

    async def generate(self, request_id: str, prompt_ids: list[int],
                       params: SamplingParams) -> AsyncIterator[RequestOutput]:
        loop = asyncio.get_running_loop()
        outputs: asyncio.Queue = asyncio.Queue()
        # Registered before the check: the death handler sets `error` first, then tells
        # every registered stream, so no stream is left waiting.
        self._streams[request_id] = (loop, outputs)
        finished = False
        try:
            if self.error is not None:
                raise EngineDeadError("serve: the engine stopped after an internal error")
            self._commands.put(("add", request_id, prompt_ids, params))
            while not finished:
                out = await outputs.get()
                if isinstance(out, BaseException):
                    finished = True
                    raise out
                if out.error is not None:
                    finished = True
                    raise RequestError(out.error, out.error_status)
                finished = out.finished
                yield out
        finally:
            self._streams.pop(request_id, None)
            if not finished and self.error is None:
                self._commands.put(("abort", request_id))

    def shutdown(self) -> None:
        self._stop.set()
        self._commands.put(("stop",))
        self._thread.join(timeout=30)

    # --- the engine thread --------------------------------------------------------------
    def _deliver(self, request_id: str, item) -> None:
        stream = self._streams.get(request_id)
        if stream is None:
            return
        loop, outputs = stream
        try:
            loop.call_soon_threadsafe(outputs.put_nowait, item)
        except RuntimeError:  # its event loop is closed: nobody is listening any more
            pass

    def _apply(self, command: tuple) -> None:
        if command[0] == "add":
            _, rid, ids, params = command
            if rid not in self._streams:  # the client left before the engine saw it
                return
            try:
                self.engine.add_request(rid, ids, params)
            except ValueError as e:
                self._deliver(rid, RequestError(str(e), 400))
            except Exception as e:  # noqa: BLE001 - add_request is atomic: only rid failed
                log.exception("serve: add_request %s failed", rid)
                self._deliver(rid, RequestError(f"serve: could not queue the request: "
                                                f"{type(e).__name__}: {e}"))
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
            log.exception("serve: the engine loop failed; in-flight requests get 503")
            self.error = e
            for rid in list(self._streams):
                self._deliver(rid, EngineDeadError(
                    "serve: the engine stopped after an internal error; this request was "
                    "lost; retry once the server has restarted"))
            if self.on_death is not None:
                try:
                    self.on_death()
                except Exception:  # noqa: BLE001
                    log.exception("serve: on_death failed")
