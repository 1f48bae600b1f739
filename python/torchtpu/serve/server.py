"""The OpenAI-compatible HTTP server: /v1/completions, /v1/chat/completions (streaming and
not), /v1/models[/{id}], /tokenize, /detokenize, /version, /health and /metrics
(Prometheus, vLLM's metric names).

A request body is read up to `max_request_bytes` (413 past it) and parsed by its pydantic
model (protocol.py; 400 for bad JSON, too deep nesting, lone surrogates, bad fields).
Tokenization and chat templates run on one worker thread with the server's own tokenizer,
so the event loop never waits on them. Every error body has OpenAI's shape
(errors.py). When the engine loop dies, in-flight and later requests get 503 and
`on_engine_death` is called (``serve()`` then exits with status 1).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import signal
import socket
import threading
import uuid
from collections.abc import Callable
from importlib import metadata

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect

from torchtpu.serve import prompts, protocol, responses
from torchtpu.serve.async_engine import AsyncEngine, EngineDeadError, RequestError
from torchtpu.serve.engine import LLMEngine
from torchtpu.serve.errors import ApiError, documented, validation_error
from torchtpu.serve.generation import Generation, collect, stream_events
from torchtpu.serve.protocol import (
    ChatCompletionRequest,
    CompletionRequest,
    DetokenizeRequest,
    TokenizeRequest,
)

log = logging.getLogger("torchtpu.serve")

DEFAULT_MAX_REQUEST_BYTES = 4 << 20
LARGE_BODY_BYTES = 64 << 10  # bodies above this are tokenized on a thread of their own
DEFAULT_MAX_REQUEST_SEQUENCES = 1024  # prompts x max(n, best_of) in one request
_REQUEST_MODELS = (CompletionRequest, ChatCompletionRequest, TokenizeRequest,
                   DetokenizeRequest)


def _error(e: ApiError) -> JSONResponse:
    return JSONResponse(e.body(), status_code=e.status)


def _body_spec(model: type[BaseModel], stream: bool = False) -> dict:
    spec = {"requestBody": {"required": True, "content": {"application/json": {
        "schema": {"$ref": f"#/components/schemas/{model.__name__}"}}}}}
    if stream:
        spec["responses"] = {"200": {"description": "the response, or with stream: true, "
                                                    "server-sent events", "content": {
            "application/json": {"schema": {"type": "object"}},
            "text/event-stream": {"schema": {"type": "string"}}}}}
    return spec


_GENERATE_ERRORS = documented(400, 404, 413, 500, 503)


class OpenAIServer:
    def __init__(self, engine: LLMEngine, *, max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
                 max_request_sequences: int = DEFAULT_MAX_REQUEST_SEQUENCES,
                 on_engine_death: Callable[[], None] | None = None) -> None:
        from transformers import AutoTokenizer

        self.engine = engine
        self.max_request_bytes = max_request_bytes
        self.max_request_sequences = max_request_sequences
        self.on_engine_death = on_engine_death
        # The request side has its own tokenizer on its own thread: the engine thread's
        # detokenizers never share a Rust tokenizer with it. A request body over
        # LARGE_BODY_BYTES (a long /tokenize, an echoed or truncated prompt: up to seconds
        # of tokenizing) goes to a second thread with a tokenizer of its own, so the others'
        # prompts are not queued behind it.
        self._tokenizer = AutoTokenizer.from_pretrained(engine.model_path)
        self._thread = threading.local()
        self.max_token_bytes = prompts.max_token_bytes(self._tokenizer)
        self._tokenize_pool = concurrent.futures.ThreadPoolExecutor(
            1, thread_name_prefix="torchtpu-tokenize")

        def own_tokenizer() -> None:
            self._thread.tokenizer = AutoTokenizer.from_pretrained(engine.model_path)

        self._large_pool = concurrent.futures.ThreadPoolExecutor(
            1, thread_name_prefix="torchtpu-tokenize-large", initializer=own_tokenizer)
        self.async_engine = AsyncEngine(engine, on_death=self._engine_died)
        self.app = self._build_app()
        # Structured output's per-tokenizer tables (a second for SmolLM2) are built now, on
        # the tokenizer thread, rather than in the first such request's TTFT.
        from torchtpu.serve import structured

        if structured.available():
            self._tokenize_pool.submit(lambda: engine.grammars().control_tokens())

    def _engine_died(self) -> None:
        if self.on_engine_death is not None:
            self.on_engine_death()

    @property
    def tokenizer(self):
        """The calling thread's tokenizer (the large-request thread has its own)."""
        return getattr(self._thread, "tokenizer", self._tokenizer)

    def shutdown(self) -> None:
        self.async_engine.shutdown()
        self._tokenize_pool.shutdown(wait=False, cancel_futures=True)
        self._large_pool.shutdown(wait=False, cancel_futures=True)

    # --- the app ------------------------------------------------------------------------
    def _build_app(self) -> FastAPI:
        app = FastAPI(title="torchtpu serve", version=metadata.version("torchtpu"))

        @app.exception_handler(HTTPException)
        async def _http(_: Request, exc: HTTPException) -> JSONResponse:
            if exc.status_code == 404:
                message = "no such route; see /openapi.json for the routes served"
            elif exc.status_code == 405:
                message = "this route does not take this method; see /openapi.json"
            else:
                message = str(exc.detail)
            response = _error(ApiError(exc.status_code, message))
            # Starlette's own headers (a 405's Allow, which RFC 9110 requires).
            response.headers.update(exc.headers or {})
            return response

        @app.exception_handler(RequestValidationError)
        async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
            return _error(ApiError(400, f"the request is invalid: {exc.errors()[:1]}"))

        @app.exception_handler(Exception)
        async def _internal(_: Request, exc: Exception) -> JSONResponse:
            log.error("serve: unhandled %s", type(exc).__name__, exc_info=exc)
            return _error(ApiError(500, "serve: internal error while handling the request "
                                        f"({type(exc).__name__}); the server log has details"))

        # HEAD too: load balancers and uptime probes often check with it.
        @app.api_route("/health", methods=["GET", "HEAD"], response_class=Response,
                       responses=documented(503))
        async def health() -> Response:
            if self.async_engine.dead:
                return _error(ApiError(503, "the engine stopped after an internal error; the "
                                            "server is exiting to be restarted"))
            return Response(status_code=200)

        @app.get("/version")
        async def version() -> dict:
            return {"version": metadata.version("torchtpu")}

        @app.get("/v1/models")
        async def models() -> dict:
            return {"object": "list", "data": [self._model_card()]}

        @app.get("/v1/models/{model_id:path}", responses=documented(404))
        async def model(model_id: str) -> Response:
            if model_id != self.engine.model_name:
                return _error(self._no_model(model_id))
            return JSONResponse(self._model_card())

        @app.get("/metrics", response_class=PlainTextResponse)
        async def metrics() -> Response:
            return Response(self.engine.metrics.render(),
                            media_type="text/plain; version=0.0.4; charset=utf-8")

        @app.post("/v1/completions", openapi_extra=_body_spec(CompletionRequest, True),
                  responses=_GENERATE_ERRORS)
        async def completions(request: Request) -> Response:
            return await self._generate(request, CompletionRequest)

        @app.post("/v1/chat/completions", openapi_extra=_body_spec(ChatCompletionRequest, True),
                  responses=_GENERATE_ERRORS)
        async def chat_completions(request: Request) -> Response:
            return await self._generate(request, ChatCompletionRequest)

        @app.post("/tokenize", openapi_extra=_body_spec(TokenizeRequest),
                  responses=documented(400, 404, 413))
        async def tokenize(request: Request) -> Response:
            return await self._guard(self._tokenize(request))

        @app.post("/detokenize", openapi_extra=_body_spec(DetokenizeRequest),
                  responses=documented(400, 404, 413))
        async def detokenize(request: Request) -> Response:
            return await self._guard(self._detokenize(request))

        def openapi() -> dict:
            if app.openapi_schema is None:
                schema = get_openapi(title=app.title, version=app.version, routes=app.routes)
                components = schema.setdefault("components", {}).setdefault("schemas", {})
                for m in _REQUEST_MODELS:
                    s = m.model_json_schema(ref_template="#/components/schemas/{model}")
                    components.update(s.pop("$defs", {}))
                    if "model" in s["properties"]:  # the one model served, or none named
                        s["properties"]["model"] = {
                            "anyOf": [{"const": self.engine.model_name}, {"type": "null"}],
                            "title": "Model"}
                    components[m.__name__] = s
                app.openapi_schema = schema
            return app.openapi_schema

        app.openapi = openapi
        return app

    def _model_card(self) -> dict:
        created = responses.now()
        # vLLM's card: OpenAI's fields, the model's root and context, and its permissions.
        permission = {"id": f"modelperm-{uuid.uuid4().hex}", "object": "model_permission",
                      "created": created, "allow_create_engine": False,
                      "allow_sampling": True, "allow_logprobs": True,
                      "allow_search_indices": False, "allow_view": True,
                      "allow_fine_tuning": False, "organization": "*", "group": None,
                      "is_blocking": False}
        return {"id": self.engine.model_name, "object": "model", "created": created,
                "owned_by": "torchtpu", "root": self.engine.model_name, "parent": None,
                "max_model_len": self.engine.max_model_len, "permission": [permission]}

    def _no_model(self, name: str) -> ApiError:
        return ApiError(404, f"The model `{name}` does not exist; this server serves "
                             f"`{self.engine.model_name}`.", param="model")

    # --- request plumbing ---------------------------------------------------------------
    async def _read(self, request: Request, model: type[BaseModel]) -> BaseModel:
        # A body is JSON when it says so or says nothing (FastAPI's rule: its 422 is vLLM's
        # 400): a form or text body is refused, which also keeps a web page's "simple"
        # cross-origin POST (no preflight) from driving a local server.
        kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if kind and kind != "application/json" and not (
                kind.startswith("application/") and kind.endswith("+json")):
            raise ApiError(400, f"the request body must be JSON (Content-Type: "
                                f"application/json), not {kind!r}")
        size = request.headers.get("content-length", "")
        if size.isdigit() and int(size) > self.max_request_bytes:
            raise ApiError(413, f"the request body is {int(size)} bytes; the limit is "
                                f"{self.max_request_bytes} (--max-request-bytes)")
        chunks, total = [], 0
        try:
            async for chunk in request.stream():
                total += len(chunk)
                if total > self.max_request_bytes:
                    raise ApiError(413, f"the request body exceeds the limit of "
                                        f"{self.max_request_bytes} bytes (--max-request-bytes)")
                chunks.append(chunk)
        except ClientDisconnect:
            # The client went away mid-body: its fault and nobody to answer (not a 500).
            log.info("serve: the client disconnected after %d bytes of the body", total)
            raise ApiError(400, "the client disconnected before the request body was "
                                "complete") from None
        request.state.body_bytes = total
        try:
            req = model.model_validate_json(b"".join(chunks))
        except ValidationError as e:
            raise validation_error(e) from None
        if getattr(req, "model", None) not in (None, self.engine.model_name):
            raise self._no_model(req.model)
        return req

    async def _off_loop(self, request: Request, fn, *args):
        """Runs `fn` on a tokenizer thread: the large-request one for a large body."""
        large = getattr(request.state, "body_bytes", 0) > LARGE_BODY_BYTES
        pool = self._large_pool if large else self._tokenize_pool
        return await asyncio.get_running_loop().run_in_executor(pool, fn, *args)

    async def _guard(self, work) -> Response:
        try:
            return await work
        except ApiError as e:
            return _error(e)
        except EngineDeadError as e:
            return _error(ApiError(503, str(e)))
        except RequestError as e:
            return _error(ApiError(e.status, str(e)))

    async def _generate(self, request: Request, model: type[BaseModel]) -> Response:
        if self.async_engine.dead:
            return _error(ApiError(503, "the engine stopped after an internal error; the "
                                        "server is exiting to be restarted"))
        return await self._guard(self._run_generation(request, model))

    async def _run_generation(self, request: Request, model: type[BaseModel]) -> Response:
        req = await self._read(request, model)
        protocol.check_supported(req)
        gen = await self._off_loop(request, Generation.prepare, self, req)
        prefix = "chatcmpl" if gen.chat else "cmpl"
        rid = self.async_engine.new_request_id(prefix)
        # Random, as OpenAI's and vLLM's are: a counter would repeat after a restart and
        # tell one client how many requests others made. The engine's own id stays short.
        public_id = f"{prefix}-{req.request_id or uuid.uuid4().hex}"
        if gen.stream:
            return StreamingResponse(stream_events(self, gen, rid, public_id),
                                     media_type="text/event-stream")
        body = await self._until_disconnect(request, collect(self, gen, rid, public_id))
        if body is None:
            return Response(status_code=499)  # nobody is there to read it
        return JSONResponse(body)

    @staticmethod
    async def _until_disconnect(request: Request, work):
        """Runs `work`; if the client disconnects first, cancels it (which aborts its
        sequences in the engine) and returns None."""
        async def disconnected() -> None:
            while (await request.receive())["type"] != "http.disconnect":
                pass

        task, watch = asyncio.ensure_future(work), asyncio.ensure_future(disconnected())
        try:
            await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
            if task.done():
                return task.result()
            log.info("serve: client went away; aborting its request")
            return None
        finally:
            for t in (task, watch):
                t.cancel()
            await asyncio.gather(task, watch, return_exceptions=True)

    # --- /tokenize, /detokenize ---------------------------------------------------------
    async def _tokenize(self, request: Request) -> Response:
        req = await self._read(request, TokenizeRequest)
        if (req.prompt is None) == (req.messages is None):
            raise ApiError(400, "give exactly one of 'prompt' and 'messages'", param="prompt")
        if req.messages is not None:
            # What the template renders: tools it drops are not refused here (no call is made).
            ids = await self._off_loop(request, self.chat_prompt_ids, protocol.chat_messages(req),
                                       req.add_generation_prompt, req.continue_final_message,
                                       req.chat_template_kwargs, req.add_special_tokens,
                                       protocol.tool_dicts(req), False, False)
        else:
            ids = await self._off_loop(request, lambda: self.engine.encode_prompt(
                req.prompt, req.add_special_tokens, self.tokenizer))
        strs = self.tokenizer.convert_ids_to_tokens(ids) if req.return_token_strs else None
        return JSONResponse({"count": len(ids), "max_model_len": self.engine.max_model_len,
                             "tokens": ids, "token_strs": strs})

    async def _detokenize(self, request: Request) -> Response:
        req = await self._read(request, DetokenizeRequest)
        vocab = self.engine.vocab_size
        bad = [t for t in req.tokens if t >= vocab]
        if bad:
            raise ApiError(400, f"'tokens': ids must be in [0, {vocab}) (got {bad[0]})",
                           param="tokens")
        text = await self._off_loop(request, lambda: self.tokenizer.decode(req.tokens))
        return JSONResponse({"prompt": text})

    def chat_prompt_ids(self, messages: list[dict], add_generation_prompt: bool,
                        continue_final_message: bool, kwargs: dict | None,
                        add_special_tokens: bool | None = None,
                        tools: list[dict] | None = None,
                        check_fits: bool = False, tools_callable: bool = True) -> list[int]:
        """Token ids of a conversation with the server's tokenizer (worker thread); see
        ``prompts.chat_prompt_ids``. With `check_fits`, a conversation too long for the
        context is refused before it is tokenized."""
        fits = (self.max_token_bytes, self.engine.max_model_len) if check_fits else None
        return prompts.chat_prompt_ids(self.tokenizer, messages, add_generation_prompt,
                                       continue_final_message, kwargs, add_special_tokens, tools,
                                       fits, tools_callable)


class _Stopped(Exception):
    """SIGTERM, raised again by uvicorn once it has drained the requests in flight."""


def _raise_stopped(signum: int, frame: object) -> None:
    raise _Stopped()


def serve(engine: LLMEngine, host: str = "127.0.0.1", port: int = 8000, *,
          max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
          max_request_sequences: int = DEFAULT_MAX_REQUEST_SEQUENCES,
          sock: socket.socket | None = None) -> int:
    """Serves until interrupted (returns 0) or until the engine dies (returns 1, after the
    in-flight requests got their 503s), so a supervisor restarts the process."""
    import uvicorn

    config = uvicorn.Config(None, host=host, port=port, log_level="warning")
    server = uvicorn.Server(config)

    def died() -> None:
        server.should_exit = True

    app = OpenAIServer(engine, max_request_bytes=max_request_bytes,
                       max_request_sequences=max_request_sequences, on_engine_death=died)
    config.app = app.app
    log.info("serve: %s on http://%s:%d", engine.model_name, host, port)
    # uvicorn drains the requests in flight on SIGINT or SIGTERM, then raises the signal
    # again for the handler it replaced: Python's SIGINT handler raises KeyboardInterrupt,
    # and SIGTERM's default action (the process dies, its cleanup skipped) is replaced by
    # one that raises, so the shutdown below and the caller's engine.close() run and serving
    # ends with 0. A SIGTERM handler the caller installed is left to run instead.
    replaced = threading.current_thread() is threading.main_thread() and \
        signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    if replaced:
        signal.signal(signal.SIGTERM, _raise_stopped)
    try:
        server.run(sockets=[sock] if sock is not None else None)
    except (KeyboardInterrupt, _Stopped):
        log.info("serve: stopped by a signal after draining the requests in flight")
    finally:
        if replaced:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
        app.shutdown()
    if app.async_engine.dead:
        log.error("serve: exiting with status 1: the engine loop failed (%s)",
                  type(app.async_engine.error).__name__)
        return 1
    return 0

