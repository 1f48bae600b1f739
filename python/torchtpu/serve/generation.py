"""One completion or chat request from validated model to response: its prompts as token
ids, its sequences (n or best_of per prompt, forked from one SamplingParams so the prefix
cache shares the prompt's pages), and the response body or SSE events built from them.

``Generation.prepare`` runs on the server's tokenizer thread; ``collect`` and
``stream_events`` on the event loop. Choice i*n + j is prompt i's j-th returned sequence.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from torchtpu.serve import protocol, responses, tools
from torchtpu.serve.async_engine import EngineDeadError, RequestError
from torchtpu.serve.errors import ApiError
from torchtpu.serve.prompts import check_text_fits, must_fit_context
from torchtpu.serve.sampling import SamplingParams, best_of
from torchtpu.serve.structured import GuidedDecoding

if TYPE_CHECKING:
    from torchtpu.serve.server import OpenAIServer


def _sse(chunk: dict | str) -> str:
    return f"data: {chunk if isinstance(chunk, str) else json.dumps(chunk)}\n\n"


@dataclass
class Generation:
    chat: bool
    prompts: list[list[int]]
    echo_texts: list[str] | None  # per prompt, when echo is on
    params: SamplingParams
    echo_only: bool  # max_tokens=0 with echo: the prompt is the whole answer
    stream: bool
    include_usage: bool
    continuous_usage: bool  # usage in every chunk (vLLM's continuous_usage_stats)
    tool_choice: str | dict | None = None  # "auto" | "required" | a named choice (dict)
    tool_parser: str | None = None  # for "auto"
    tool_names: frozenset = frozenset()
    parallel_tool_calls: bool | None = None

    def tool_calls(self, text: str) -> tuple[str | None, list[dict]]:
        """(content, calls) of one finished chat choice's text."""
        if self.tool_choice is None:
            return text, []
        if self.tool_choice == "auto":
            content, calls = tools.parse(self.tool_parser, text, set(self.tool_names))
        else:
            content, calls = None, tools.guided_calls(self.tool_choice, text)
            if not calls:  # cut short before the JSON closed: the text is all there is
                content = text
        if self.parallel_tool_calls is False:
            calls = calls[:1]
        return content, calls

    def finish_reason(self, reason: str, calls: list[dict]) -> str:
        """A chat choice's finish reason: "tool_calls" where a stop ended calls the model
        chose to make (tool_choice auto or required); a named function's call keeps "stop",
        as OpenAI's and vLLM's."""
        if calls and reason == "stop" and not isinstance(self.tool_choice, dict):
            return "tool_calls"
        return reason

    @property
    def echo_logprobs(self) -> bool:
        """Echo with logprobs: the echoed prompt's tokens carry logprobs too."""
        return bool(self.echo_texts) and self.params.logprobs is not None

    @property
    def children(self) -> list[SamplingParams]:
        children = self.params.fork()
        if self.echo_only:
            # The prompt's logprobs need a prefill, so one sequence per prompt runs; its one
            # token is not part of the answer.
            return [replace(children[0], logprobs=None, guided=None)]
        if self.stream and self.echo_logprobs:
            # Each streamed choice's echo chunk carries the prompt's logprobs.
            children = [replace(c, prompt_logprobs=self.params.prompt_logprobs)
                        for c in children]
        return children

    @classmethod
    def prepare(cls, server: OpenAIServer, req) -> Generation:
        engine, chat = server.engine, isinstance(req, protocol.ChatCompletionRequest)
        tool_dicts = protocol.tool_dicts(req) if chat else []
        # A prompt that must fit the context whole (not truncated, not only echoed) and
        # cannot is refused from its size, before the tokenizer spends seconds on it.
        must_fit = must_fit_context(req, chat)
        sources: list = [None] if chat else protocol.completion_prompts(req)
        each = max(req.n, req.best_of or 0)
        if len(sources) * each > server.max_request_sequences:
            raise ApiError(400, f"the request asks for {len(sources) * each} sequences "
                                f"({len(sources)} prompts x {each}); the limit is "
                                f"{server.max_request_sequences} (--max-request-sequences): "
                                "split it into several requests",
                           param="prompt" if len(sources) > 1 else "n")
        if chat:
            prompts = [server.chat_prompt_ids(
                protocol.chat_messages(req), req.add_generation_prompt,
                req.continue_final_message, req.chat_template_kwargs, req.add_special_tokens,
                tool_dicts, check_fits=must_fit, tools_callable=req.tool_choice != "none")]
        else:
            if must_fit:
                for p in sources:
                    if isinstance(p, str):
                        check_text_fits(p, server.max_token_bytes, engine.max_model_len,
                                        "prompt")
            try:
                prompts = [engine.encode_prompt(p, req.add_special_tokens, server.tokenizer)
                           for p in sources]
            except ValueError as e:
                raise ApiError(400, str(e), param="prompt") from None
        if req.truncate_prompt_tokens is not None:
            keep = engine.max_model_len if req.truncate_prompt_tokens == -1 \
                else req.truncate_prompt_tokens
            truncated = [ids[-keep:] for ids in prompts]
            sources = [s if t == ids else None for s, t, ids in zip(sources, truncated, prompts)]
            prompts = truncated
        echo_texts = None
        if not chat and req.echo:
            echo_texts = [s if isinstance(s, str) else server.tokenizer.decode(ids)
                          for s, ids in zip(sources, prompts)]
        echo_only = False
        if not chat and req.max_tokens == 0:
            if not req.echo:
                raise ApiError(400, "'max_tokens' must be at least 1 (0 is accepted only with "
                                    "'echo': true, to return the prompt)", param="max_tokens")
            echo_only = True
        rest = engine.max_model_len - max(len(p) for p in prompts)
        # A completion's max_tokens is 16 when absent, and the rest of the context when
        # null (vLLM's); a chat's is the rest of the context either way. The rest is each
        # prompt's own (the engine's for max_tokens None); validated against the least.
        whole_rest = chat or "max_tokens" in req.model_fields_set
        try:
            params = protocol.sampling_params(
                req, default_max_tokens=rest if whole_rest else min(16, rest))
            params.validate(engine.vocab_size)
            if whole_rest and protocol.requested_max_tokens(req) is None:
                params = replace(params, max_tokens=None)
        except ValueError as e:
            field = str(e).split(" ", 1)[0]
            raise ApiError(400, str(e), param=field) from None
        guided, guided_field = protocol.guided_decoding(req)
        choice, parser = None, None
        if tool_dicts and req.tool_choice != "none":
            choice = req.tool_choice or "auto"
            if not isinstance(choice, str):
                choice = choice.model_dump()
            if choice == "auto":
                parser = tools.parser_for(server.tokenizer.chat_template or "")
                if parser is None:
                    raise ApiError(400, "'tool_choice' auto: no tool-call parser knows this "
                                        "model's template (known: <tool_call> Hermes, Llama 3, "
                                        "[TOOL_CALLS] Mistral); use 'required' or a named "
                                        "function", param="tool_choice")
            else:
                if guided is not None:
                    what = protocol.describe_tool_choice(req.tool_choice)
                    raise ApiError(400, f"'tool_choice' {what} constrains the output, as does "
                                        f"'{guided_field}'; give one of them",
                                   param="tool_choice")
                schema = tools.required_schema(tool_dicts, req.parallel_tool_calls is not False) \
                    if choice == "required" else tools.named_schema(tool_dicts,
                                                                     choice["function"]["name"])
                guided, guided_field = GuidedDecoding("json", json.dumps(schema)), "tool_choice"
                params.guided = guided
        if guided is not None:  # compiled here, off the loop; the engine finds it cached
            try:
                engine.grammars().compile(guided)
            except ValueError as e:
                raise ApiError(400, f"'{guided_field}': {e}", param=guided_field) from None
        if not echo_only or params.prompt_logprobs is not None:
            for p in prompts:
                try:
                    engine.check_length(len(p), engine.with_max_tokens(params, len(p)).max_tokens)
                except ValueError as e:
                    raise ApiError(400, str(e), param="messages" if chat else "prompt") from None
        opts = req.stream_options
        include_usage = bool(opts and opts.include_usage)
        gen = cls(chat, prompts, echo_texts, params, echo_only, req.stream, include_usage,
                  include_usage and opts.continuous_usage_stats, choice, parser,
                  frozenset(t["function"]["name"] for t in tool_dicts),
                  req.parallel_tool_calls if chat else None)
        return gen


def _streams(server: OpenAIServer, gen: Generation, rid: str) -> list[list]:
    """Per prompt, the engine streams of its sequences (for echo_only none, or one that
    computes the prompt's logprobs)."""
    if gen.echo_only and gen.params.prompt_logprobs is None:
        return [[] for _ in gen.prompts]
    children = gen.children
    return [[server.async_engine.generate(f"{rid}-{i}-{j}", ids, child)
             for j, child in enumerate(children)] for i, ids in enumerate(gen.prompts)]


async def _drain(stream) -> tuple[str, list, object, list | None]:
    text, samples, last, prompt_lp = "", [], None, None
    async for out in stream:
        text += out.new_text
        samples.extend(out.new_logprobs)
        if out.prompt_logprobs is not None:
            prompt_lp = out.prompt_logprobs
        last = out
    return text, samples, last, prompt_lp


async def collect(server: OpenAIServer, gen: Generation, rid: str, public_id: str) -> dict:
    """The whole response body; a failed sequence fails the request (and cancels, so
    aborts, its other sequences)."""
    tok, n = server.tokenizer, gen.params.n
    per_prompt = _streams(server, gen, rid)
    tasks = [[asyncio.ensure_future(_drain(s)) for s in seqs] for seqs in per_prompt]
    flat = [t for ts in tasks for t in ts]
    try:
        if flat:
            await asyncio.gather(*flat)
    finally:
        for t in flat:
            t.cancel()
        await asyncio.gather(*flat, return_exceptions=True)
    choices, completion_tokens, prompt_lps = [], 0, []
    for i, ts in enumerate(tasks):
        results = [t.result() for t in ts]
        prompt_lp = results[0][3] if results else None  # the first sequence computes them
        prompt_lps.append(prompt_lp)
        if gen.echo_only:
            results = [("", [], None, None)] * n
        else:
            completion_tokens += sum(len(last.output_token_ids) for _, _, last, _ in results)
        if gen.params.best_of is not None and not gen.echo_only:
            keep = best_of([last.cumulative_logprob for _, _, last, _ in results],
                           [len(last.output_token_ids) for _, _, last, _ in results], n)
            results = [results[k] for k in keep]
        for j, (text, samples, last, _) in enumerate(results):
            reason = last.finish_reason if last is not None else "length"
            stop_reason = last.stop_reason if last is not None else None
            want_lp = gen.params.logprobs is not None
            if gen.chat:
                content, calls = gen.tool_calls(text)
                message = {"role": "assistant", "content": content}
                if calls:
                    message["tool_calls"] = calls
                reason = gen.finish_reason(reason, calls)
                choices.append({"index": i * n + j, "message": message,
                                "logprobs": responses.chat_logprobs(samples, tok)
                                if want_lp else None, "finish_reason": reason,
                                "stop_reason": stop_reason})
            else:
                echo = gen.echo_texts[i] if gen.echo_texts else ""
                if gen.echo_logprobs:  # the prompt's entries first, offsets from 0
                    lp = responses.completion_logprobs(samples, tok, 0,
                                                       (gen.prompts[i], prompt_lp))
                else:
                    lp = responses.completion_logprobs(samples, tok, len(echo)) \
                        if want_lp else None
                choice = {"index": i * n + j, "text": echo + text, "logprobs": lp,
                          "finish_reason": reason, "stop_reason": stop_reason}
                if gen.params.prompt_logprobs is not None:  # vLLM's, in each choice
                    choice["prompt_logprobs"] = responses.prompt_logprobs(gen.prompts[i],
                                                                          prompt_lp, tok)
                choices.append(choice)
    body = {"id": public_id, "object": "chat.completion" if gen.chat else "text_completion",
            "created": responses.now(), "model": server.engine.model_name, "choices": choices,
            "system_fingerprint": None,
            "usage": responses.usage(sum(len(p) for p in gen.prompts), completion_tokens)}
    if gen.chat and gen.params.prompt_logprobs is not None:  # vLLM's, in the response
        body["prompt_logprobs"] = responses.prompt_logprobs(gen.prompts[0], prompt_lps[0], tok)
    return body


async def stream_events(server: OpenAIServer, gen: Generation, rid: str,
                        public_id: str) -> AsyncIterator[str]:
    kind = "chat.completion.chunk" if gen.chat else "text_completion"
    tok, n, model = server.tokenizer, gen.params.n, server.engine.model_name
    created = responses.now()

    def chunk(choices: list, usage: dict | None = None) -> str:
        body = {"id": public_id, "object": kind, "created": created, "model": model,
                "choices": choices}
        if gen.include_usage:
            body["usage"] = usage
        return _sse(body)

    merged: asyncio.Queue = asyncio.Queue()

    async def pump(index: int, stream) -> None:
        try:
            async for out in stream:
                await merged.put((index, out))
        except Exception as e:  # noqa: BLE001 - reported to the client below
            await merged.put((index, e))
        finally:
            await merged.put((index, None))

    streams = [(i * n + j, s) for i, seqs in enumerate(_streams(server, gen, rid))
               for j, s in enumerate(seqs)]
    tasks = [asyncio.create_task(pump(index, s)) for index, s in streams]
    indices = range(len(gen.prompts) * n)
    completion_tokens, live = 0, len(streams)
    offsets = {index: 0 for index in indices}
    echoed: set[int] = set()  # choices whose echo chunk went out (echo with logprobs)
    held: dict[int, tuple[str, list]] = {}
    try:
        # Continuous usage from the first chunk on, as vLLM sends it (0 completion tokens).
        def no_tokens_yet(k: int) -> dict | None:
            return responses.usage(len(gen.prompts[k // n]), 0) if gen.continuous_usage else None

        if gen.chat:
            yield chunk([{"index": k, "delta": {"role": "assistant", "content": ""},
                          "logprobs": None, "finish_reason": None} for k in indices],
                        no_tokens_yet(0))
        elif gen.echo_texts and not gen.echo_logprobs:
            for k in indices:
                echo = gen.echo_texts[k // n]
                offsets[k] = len(echo)
                yield chunk([{"index": k, "text": echo, "logprobs": None,
                              "finish_reason": "length" if gen.echo_only else None,
                              "stop_reason": None}], no_tokens_yet(k))
        while live:
            k, out = await merged.get()
            if out is None:
                live -= 1
                continue
            if isinstance(out, Exception):
                # One error event ends the stream, as vLLM ends it: the request's other
                # sequences (which fail alike: the same prompt or parameters) are aborted
                # below instead of each sending the same error.
                status = 503 if isinstance(out, EngineDeadError) else \
                    out.status if isinstance(out, RequestError) else 500
                yield _sse(ApiError(status, str(out)).body())
                yield _sse("[DONE]")
                return
            if gen.echo_logprobs and k not in echoed:
                # The echo chunk waits for the prompt's logprobs, which come with the
                # sequence's first output; echo only: for every choice of its prompt.
                i = k // n
                lp = responses.completion_logprobs([], tok, 0, (gen.prompts[i],
                                                                out.prompt_logprobs))
                for e in (range(i * n, i * n + n) if gen.echo_only else [k]):
                    echoed.add(e)
                    offsets[e] = sum(len(t) for t in lp["tokens"])
                    yield chunk([{"index": e, "text": gen.echo_texts[i], "logprobs": lp,
                                  "finish_reason": "length" if gen.echo_only else None,
                                  "stop_reason": None}], no_tokens_yet(e))
            if gen.echo_only:
                continue  # its one token is not part of the answer
            if out.finished:
                completion_tokens += len(out.output_token_ids)
            want_lp = gen.params.logprobs is not None
            # A token whose text is held back (a possible stop string, an incomplete
            # character) still sends its logprobs, with empty text, as vLLM does.
            if not out.new_text and not out.finished and not (want_lp and out.new_logprobs):
                continue
            reason = out.finish_reason if out.finished else None
            stop_reason = out.stop_reason if out.finished else None
            usage = responses.usage(len(gen.prompts[k // n]), len(out.output_token_ids)) \
                if gen.continuous_usage else None
            if gen.chat and gen.tool_choice is not None:
                # Whether the text is a tool call is known only at its end: it is held
                # until then, and tool calls go out as OpenAI streams them.
                text, samples = held.get(k, ("", []))
                held[k] = (text + out.new_text, samples + out.new_logprobs)
                if out.finished:
                    text, samples = held.pop(k)
                    lp = responses.chat_logprobs(samples, tok) if want_lp else None
                    for c in _tool_chunks(gen, k, text, reason, stop_reason, lp):
                        yield chunk([c], usage)
                continue
            if gen.chat:
                choice = {"index": k, "delta": {"content": out.new_text},
                          "logprobs": responses.chat_logprobs(out.new_logprobs, tok)
                          if want_lp else None, "finish_reason": reason,
                          "stop_reason": stop_reason}
            else:
                lp = responses.completion_logprobs(out.new_logprobs, tok, offsets[k]) \
                    if want_lp else None
                choice = {"index": k, "text": out.new_text, "logprobs": lp,
                          "finish_reason": reason, "stop_reason": stop_reason}
                # Offsets count the tokens' own text, as the whole response's do: text
                # held back (a possible stop string) would make them lag.
                offsets[k] += sum(len(t) for t in lp["tokens"]) if lp else 0
            yield chunk([choice], usage)
        if gen.include_usage:
            yield _sse({"id": public_id, "object": kind, "created": created, "model": model,
                        "choices": [], "usage": responses.usage(
                            sum(len(p) for p in gen.prompts), completion_tokens)})
        yield _sse("[DONE]")
    finally:
        # A client that went away: cancelling a pump runs its stream's cleanup, which
        # aborts the sequence in the engine and so frees its pages.
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _tool_chunks(gen: Generation, index: int, text: str, reason: str,
                 stop_reason: int | str | None, logprobs: dict | None) -> list[dict]:
    """The stream choices of one finished chat choice when tools may be called: content
    (if any), then per call its id and name with empty arguments, then the arguments in
    fragments, then the finish reason. The logprobs of all its tokens go in the first."""
    content, calls = gen.tool_calls(text)
    out = []
    if content:
        out.append({"index": index, "delta": {"content": content}, "logprobs": None,
                    "finish_reason": None})
    for j, call in enumerate(calls):
        fn = call["function"]
        out.append({"index": index, "logprobs": None, "finish_reason": None, "delta": {
            "tool_calls": [{"index": j, "id": call["id"], "type": "function",
                            "function": {"name": fn["name"], "arguments": ""}}]}})
        args = fn["arguments"]
        for start in range(0, len(args), 16):
            out.append({"index": index, "logprobs": None, "finish_reason": None, "delta": {
                "tool_calls": [{"index": j, "function": {"arguments": args[start:start + 16]}}]}})
    reason = gen.finish_reason(reason, calls)
    out.append({"index": index, "delta": {}, "logprobs": None, "finish_reason": reason,
                "stop_reason": stop_reason})
    out[0]["logprobs"] = logprobs
    return out
