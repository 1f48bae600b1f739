"""The OpenAI-compatible HTTP server: /v1/completions, /v1/chat/completions (streaming and
not), /v1/models, /health and /metrics (Prometheus, vLLM's metric names)."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import AsyncIterator

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse

from torchtpu.serve import protocol
from torchtpu.serve.async_engine import AsyncEngine
from torchtpu.serve.engine import LLMEngine, RequestOutput
from torchtpu.serve.protocol import ApiError

log = logging.getLogger("torchtpu.serve")


def _error(e: ApiError) -> JSONResponse:
    return JSONResponse(e.body(), status_code=e.status)


def _sse(chunk: dict | str) -> str:
    return f"data: {chunk if isinstance(chunk, str) else json.dumps(chunk)}\n\n"


class _Call:
    """One validated request: its prompts as token ids and its sampling parameters."""

    def __init__(self, server: "OpenAIServer", body: dict, chat: bool) -> None:
        engine = server.engine
        model = body.get("model")
        if model is not None and model != engine.model_name:
            raise ApiError(404, f"The model `{model}` does not exist; this server serves "
                                f"`{engine.model_name}`.", "NotFoundError", "model")
        tok = engine.tokenizer
        if chat:
            messages = protocol.chat_messages(body)
            if tok.chat_template is None:
                raise ApiError(400, "this model's tokenizer has no chat template; use "
                                    "/v1/completions")
            text = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
            prompts = [tok.encode(text, add_special_tokens=False)]
        else:
            try:
                prompts = [engine.encode_prompt(p) for p in protocol.completion_prompts(body)]
            except ValueError as e:
                raise ApiError(400, str(e), param="prompt") from None
        longest = max(len(p) for p in prompts)
        rest = engine.max_model_len - longest
        self.params = protocol.sampling_params(
            body, chat=chat, default_max_tokens=rest if chat else min(16, rest))
        for p in prompts:
            try:
                engine.check_length(len(p), self.params.max_tokens)
            except ValueError as e:
                raise ApiError(400, str(e), param="messages" if chat else "prompt") from None
        self.prompts = prompts
        self.chat = chat
        self.stream = protocol.field(body, "stream", bool, False)
        opts = body.get("stream_options") or {}
        self.include_usage = bool(isinstance(opts, dict) and opts.get("include_usage"))


class OpenAIServer:
    def __init__(self, engine: LLMEngine) -> None:
        self.engine = engine
        self.async_engine = AsyncEngine(engine)
        self.app = self._build_app()

    def _build_app(self) -> FastAPI:
        app = FastAPI(title="torchtpu serve")

        @app.exception_handler(RequestValidationError)
        async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
            return _error(ApiError(400, str(exc)))

        @app.get("/health")
        async def health() -> Response:
            if self.async_engine.error is not None:
                return JSONResponse({"error": str(self.async_engine.error)}, status_code=503)
            return Response(status_code=200)

        @app.get("/v1/models")
        async def models() -> dict:
            return {"object": "list", "data": [{
                "id": self.engine.model_name, "object": "model", "created": protocol.now(),
                "owned_by": "torchtpu", "root": self.engine.model_path,
                "max_model_len": self.engine.max_model_len}]}

        @app.get("/metrics")
        async def metrics() -> Response:
            return Response(self.engine.metrics.render(),
                            media_type="text/plain; version=0.0.4; charset=utf-8")

        @app.post("/v1/completions")
        async def completions(request: Request) -> Response:
            return await self._handle(request, chat=False)

        @app.post("/v1/chat/completions")
        async def chat_completions(request: Request) -> Response:
            return await self._handle(request, chat=True)

        return app

    async def _handle(self, request: Request, chat: bool) -> Response:
        try:
            call = _Call(self, protocol.parse_json(await request.body()), chat)
        except ApiError as e:
            return _error(e)
        prefix = "chatcmpl" if chat else "cmpl"
        rid = self.async_engine.new_request_id(prefix)
        streams = [self.async_engine.generate(f"{rid}-{i}", ids, call.params)
                   for i, ids in enumerate(call.prompts)]
        if call.stream:
            return StreamingResponse(self._stream(rid, call, streams),
                                     media_type="text/event-stream")
        try:
            results = await asyncio.gather(*(self._collect(s) for s in streams))
        except ValueError as e:
            return _error(ApiError(400, str(e)))
        return JSONResponse(self._final_body(rid, call, results))

    @staticmethod
    async def _collect(stream: AsyncIterator[RequestOutput]) -> tuple[str, list, RequestOutput]:
        text, samples, last = "", [], None
        async for out in stream:
            text += out.new_text
            samples.extend(out.new_logprobs)
            last = out
        return text, samples, last

    def _final_body(self, rid: str, call: _Call, results: list) -> dict:
        tok = self.engine.tokenizer
        choices, completion_tokens = [], 0
        for i, (text, samples, last) in enumerate(results):
            completion_tokens += len(last.output_token_ids)
            if call.chat:
                choices.append({"index": i, "message": {"role": "assistant", "content": text},
                                "logprobs": protocol.chat_logprobs(samples, tok)
                                if call.params.logprobs is not None else None,
                                "finish_reason": last.finish_reason})
            else:
                choices.append({"index": i, "text": text,
                                "logprobs": protocol.completion_logprobs(samples, tok, 0)
                                if call.params.logprobs is not None else None,
                                "finish_reason": last.finish_reason})
        prompt_tokens = sum(len(p) for p in call.prompts)
        return {"id": rid, "object": "chat.completion" if call.chat else "text_completion",
                "created": protocol.now(), "model": self.engine.model_name, "choices": choices,
                "usage": protocol.usage(prompt_tokens, completion_tokens)}

    async def _stream(self, rid: str, call: _Call, streams: list) -> AsyncIterator[str]:
        kind = "chat.completion.chunk" if call.chat else "text_completion"
        tok = self.engine.tokenizer
        created = protocol.now()

        def chunk(choices: list, usage: dict | None = None) -> str:
            body = {"id": rid, "object": kind, "created": created,
                    "model": self.engine.model_name, "choices": choices}
            if call.include_usage:
                body["usage"] = usage
            return _sse(body)

        merged: asyncio.Queue = asyncio.Queue()

        async def pump(i: int, stream: AsyncIterator[RequestOutput]) -> None:
            try:
                async for out in stream:
                    await merged.put((i, out))
            except Exception as e:  # noqa: BLE001 - reported to the client below
                await merged.put((i, e))
            finally:
                await merged.put((i, None))

        tasks = [asyncio.create_task(pump(i, s)) for i, s in enumerate(streams)]
        completion_tokens, offsets, live = 0, [0] * len(streams), len(streams)
        try:
            if call.chat:
                yield chunk([{"index": i, "delta": {"role": "assistant", "content": ""},
                              "logprobs": None, "finish_reason": None}
                             for i in range(len(streams))])
            while live:
                i, out = await merged.get()
                if out is None:
                    live -= 1
                    continue
                if isinstance(out, Exception):
                    yield _sse(ApiError(400, str(out)).body())
                    continue
                if out.finished:
                    completion_tokens += len(out.output_token_ids)
                if not out.new_text and not out.finished:
                    continue
                reason = out.finish_reason if out.finished else None
                if call.chat:
                    logprobs = (protocol.chat_logprobs(out.new_logprobs, tok)
                                if call.params.logprobs is not None else None)
                    choice = {"index": i, "delta": {"content": out.new_text},
                              "logprobs": logprobs, "finish_reason": reason}
                else:
                    logprobs = (protocol.completion_logprobs(out.new_logprobs, tok, offsets[i])
                                if call.params.logprobs is not None else None)
                    choice = {"index": i, "text": out.new_text, "logprobs": logprobs,
                              "finish_reason": reason}
                offsets[i] += len(out.new_text)
                yield chunk([choice])
            if call.include_usage:
                body = {"id": rid, "object": kind, "created": created,
                        "model": self.engine.model_name, "choices": [],
                        "usage": protocol.usage(sum(len(p) for p in call.prompts),
                                                completion_tokens)}
                yield _sse(body)
            yield _sse("[DONE]")
        finally:
            # A client that went away: cancelling a pump runs its stream's cleanup, which
            # aborts the request in the engine and so frees its pages.
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


def serve(engine: LLMEngine, host: str = "127.0.0.1", port: int = 8000) -> None:
    import uvicorn

    server = OpenAIServer(engine)
    log.info("serve: %s on http://%s:%d", engine.model_name, host, port)
    try:
        uvicorn.run(server.app, host=host, port=port, log_level="warning")
    finally:
        server.async_engine.shutdown()
