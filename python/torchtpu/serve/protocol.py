"""The typed OpenAI protocol: request models for /v1/completions, /v1/chat/completions,
/tokenize and /detokenize (OpenAI's fields plus the vLLM extras served here), and their
translation into ``SamplingParams``.

The models are what ``/openapi.json`` documents. Every field is one of three kinds:
honoured (it changes what is generated or returned), accepted without effect by design
(``INFORMATIONAL``: ids and metadata for the caller's bookkeeping), or known but not
supported (``UNSUPPORTED``: any value other than the neutral one is a 400 naming it).
Fields no model names are ignored, as OpenAI does. Numbers are strict (no strings or
booleans for numbers), finite, and bounded, so nothing out of range reaches the engine.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from torchtpu.serve import errors
from torchtpu.serve.errors import ApiError
from torchtpu.serve.sampling import INT64_MAX, INT64_MIN, MAX_LOGPROBS, MAX_N, SamplingParams
from torchtpu.serve.structured import GuidedDecoding


def _integral(value: object) -> object:
    """JSON Schema's integers include 430.0; booleans and strings stay refused."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


Int = Annotated[int, BeforeValidator(_integral)]
Int64 = Annotated[Int, Field(ge=INT64_MIN, le=INT64_MAX)]
TokenId = Annotated[Int, Field(ge=0, le=INT64_MAX)]
UNSUPPORTED_DESCRIPTION = ("Not supported: any value but null (or the neutral value) is a "
                           "400 naming the field.")
# Documented as null: the neutral values the description mentions are accepted too.
Unsupported = Annotated[Any, Field(description=UNSUPPORTED_DESCRIPTION,
                                   json_schema_extra={"type": "null"})]


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True, allow_inf_nan=False)

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        errors.MODEL_NAMES.add(cls.__name__)  # so a 400 names a union's members

    @model_validator(mode="before")
    @classmethod
    def _null_is_the_default(cls, data: Any) -> Any:
        """OpenAI's schema makes its optional fields nullable, and clients that send every
        field send null for the ones they leave unset (vLLM takes it as the default): an
        explicit null of a field that has a default is that default, except where vLLM
        gives null a meaning of its own (`_null_kept`). A required field's null stays an
        error."""
        if not isinstance(data, dict):
            return data
        return {k: v for k, v in data.items()
                if v is not None or k not in cls.model_fields or k in cls._null_kept
                or cls.model_fields[k].is_required()}

    _null_kept: ClassVar[frozenset[str]] = frozenset()


class StreamOptions(_Model):
    include_usage: bool = False
    # vLLM's: with include_usage, every chunk carries its choice's usage so far.
    continuous_usage_stats: bool = False


class JsonSchemaFormat(_Model):
    name: str = "response"
    description: str | None = None
    schema_: dict[str, Any] = Field(default_factory=dict, alias="schema")
    strict: bool | None = None


class ResponseFormat(_Model):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None


class TextPart(_Model):
    type: Literal["text"]
    text: str


class FunctionDefinition(_Model):
    name: Annotated[str, Field(pattern=r"^[a-zA-Z0-9_-]{1,64}$")]
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class Tool(_Model):
    type: Literal["function"]
    function: FunctionDefinition


class FunctionName(_Model):
    name: str


class NamedToolChoice(_Model):
    type: Literal["function"]
    function: FunctionName


class ToolCallFunction(_Model):
    name: str
    arguments: str


class ToolCall(_Model):
    id: str
    type: Literal["function"] = "function"
    function: ToolCallFunction


class Message(_Model):
    role: str
    content: str | list[TextPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None


class _Sampling(_Model):
    """Fields both endpoints share."""
    model: str | None = None
    temperature: Annotated[float, Field(ge=0.0)] | None = None
    top_p: Annotated[float, Field(gt=0.0, le=1.0)] | None = None
    n: Annotated[Int, Field(ge=1, le=MAX_N)] = 1
    best_of: Annotated[Int, Field(ge=1, le=MAX_N)] | None = None
    seed: Int64 | None = None
    stop: str | list[str] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    presence_penalty: Annotated[float, Field(ge=-2.0, le=2.0)] = 0.0
    frequency_penalty: Annotated[float, Field(ge=-2.0, le=2.0)] = 0.0
    logit_bias: dict[str, float] | None = Field(
        None, description="Token id (as a string) -> bias added to its logit, clamped to "
                          "[-100, 100] (as vLLM does).")
    user: str | None = None
    # vLLM's extras
    top_k: Annotated[Int, Field(ge=-1, le=INT64_MAX)] | None = None
    min_p: Annotated[float, Field(ge=0.0, le=1.0)] | None = None
    repetition_penalty: Annotated[float, Field(gt=0.0)] | None = None
    stop_token_ids: list[TokenId] | None = None
    include_stop_str_in_output: bool = False
    ignore_eos: bool = False
    min_tokens: Annotated[Int, Field(ge=0, le=INT64_MAX)] = 0
    skip_special_tokens: bool = True
    allowed_token_ids: list[TokenId] | None = None
    truncate_prompt_tokens: Annotated[Int, Field(ge=-1, le=INT64_MAX)] | None = Field(
        None, description="Keep only the last k prompt tokens (-1: the last max_model_len).")
    add_special_tokens: bool | None = Field(
        None, description="Add the tokenizer's special tokens (BOS) to a text prompt.")
    request_id: str | None = Field(None, description="Used in the response's id.")
    # torchtpu's extra
    speculative: bool = Field(
        True, description="Speculative decoding for this request when the server has it "
        "(--speculative-config); it changes speed only, never greedy tokens or the sampled "
        "distribution.")
    use_beam_search: Unsupported = None
    length_penalty: Unsupported = None
    spaces_between_special_tokens: Unsupported = None
    prompt_logprobs: Annotated[Int, Field(ge=-1, le=MAX_LOGPROBS)] | None = Field(
        None, description="vLLM's: each prompt token's logprob and the top k at its position "
        "(in the choice on completions, in the response on chat; null for the first token). "
        "Not with stream; -1 (the whole vocabulary) is over the limit.")
    bad_words: Unsupported = None
    response_format: ResponseFormat | None = None
    guided_json: dict[str, Any] | str | None = Field(
        None, description="A JSON schema (object or JSON text) the output must match.")
    guided_regex: str | None = None
    guided_choice: Annotated[list[str], Field(min_length=1)] | None = None
    guided_grammar: str | None = Field(None, description="An EBNF grammar (xgrammar's).")
    guided_decoding_backend: Literal["xgrammar", "auto"] | None = None
    guided_whitespace_pattern: Unsupported = None
    structural_tag: Unsupported = None
    priority: Unsupported = None
    logits_processors: Unsupported = None
    return_tokens_as_token_ids: Unsupported = None
    cache_salt: Unsupported = None
    kv_transfer_params: Unsupported = None
    vllm_xargs: Unsupported = None


class CompletionRequest(_Sampling):
    _null_kept: ClassVar[frozenset[str]] = frozenset({"max_tokens"})  # null: the rest

    prompt: str | list[str] | list[Int] | list[list[Int]]
    max_tokens: Annotated[Int, Field(ge=0, le=INT64_MAX)] | None = Field(
        None, description="Default 16 (capped by the context); null: the rest of the "
        "context (as vLLM); 0 only with echo.")
    echo: bool = False
    logprobs: Annotated[Int, Field(ge=0, le=MAX_LOGPROBS)] | None = None
    suffix: Unsupported = None


class ChatCompletionRequest(_Sampling):
    messages: Annotated[list[Message], Field(min_length=1)]
    max_completion_tokens: Annotated[Int, Field(ge=1, le=INT64_MAX)] | None = Field(
        None, description="Default: the rest of the context (as vLLM).")
    max_tokens: Annotated[Int, Field(ge=1, le=INT64_MAX)] | None = Field(
        None, description="Deprecated by OpenAI for max_completion_tokens, which wins.")
    logprobs: bool = False
    top_logprobs: Annotated[Int, Field(ge=0, le=MAX_LOGPROBS)] | None = None
    metadata: dict[str, str] | None = None
    store: bool | None = None
    service_tier: str | None = None
    prompt_cache_key: str | None = None
    safety_identifier: str | None = None
    modalities: list[str] | None = None
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    chat_template_kwargs: dict[str, Any] | None = None
    tools: list[Tool] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = Field(
        None, description="Default: auto when tools are given.")
    parallel_tool_calls: bool | None = None
    functions: Unsupported = None
    function_call: Unsupported = None
    audio: Unsupported = None
    prediction: Unsupported = None
    reasoning_effort: Unsupported = None
    verbosity: Unsupported = None
    web_search_options: Unsupported = None
    chat_template: Unsupported = None
    documents: Unsupported = None
    mm_processor_kwargs: Unsupported = None
    echo: Unsupported = None


class TokenizeRequest(_Model):
    model: str | None = None
    prompt: str | None = None
    messages: list[Message] | None = None
    add_special_tokens: bool | None = None
    # As on /v1/chat/completions, so a count here is the prompt_tokens of that request.
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    chat_template_kwargs: dict[str, Any] | None = None
    tools: list[Tool] | None = None
    return_token_strs: bool = False  # vLLM's: each id's token string in "token_strs"


class DetokenizeRequest(_Model):
    model: str | None = None
    tokens: list[TokenId]


# Accepted and without effect on the output, by design (the caller's bookkeeping).
INFORMATIONAL = {"user", "metadata", "prompt_cache_key", "safety_identifier"}


def _neutral(*values: object) -> Callable[[object], bool]:
    return lambda v: v in values


# Known fields this server does not implement: name -> (accepted values, what to do).
UNSUPPORTED: dict[str, tuple[Callable[[object], bool], str]] = {
    "use_beam_search": (_neutral(False), "beam search is not implemented"),
    "length_penalty": (_neutral(1, 1.0), "it applies to beam search only"),
    "spaces_between_special_tokens": (_neutral(True), "decoding follows the tokenizer"),
    "bad_words": (_neutral([]), "use logit_bias to ban single tokens"),
    "guided_whitespace_pattern": (_neutral(), "JSON is generated without free whitespace"),
    "structural_tag": (_neutral(), "structural tags are not implemented"),
    "priority": (_neutral(0), "requests are scheduled in arrival order"),
    "logits_processors": (_neutral([]), "custom logits processors are not loaded"),
    "return_tokens_as_token_ids": (_neutral(False), "logprobs name tokens by their text"),
    "cache_salt": (_neutral(), "the prefix cache is shared by all requests"),
    "kv_transfer_params": (_neutral(), "KV transfer is not implemented"),
    "vllm_xargs": (_neutral(), "no extension arguments are read"),
    "suffix": (_neutral(""), "insertion (suffix) is not supported"),
    "functions": (_neutral([]), "function calling is not implemented"),
    "function_call": (_neutral("none"), "function calling is not implemented"),
    "audio": (_neutral(), "this model outputs text only"),
    "prediction": (_neutral(), "predicted outputs are not implemented"),
    "reasoning_effort": (_neutral(), "this server runs no reasoning models"),
    "verbosity": (_neutral(), "output length is set by max_completion_tokens"),
    "web_search_options": (_neutral(), "there is no web search"),
    "chat_template": (_neutral(), "the model's own chat template is used"),
    "documents": (_neutral(), "documents are not passed to the chat template"),
    "mm_processor_kwargs": (_neutral(), "this model takes text only"),
    "echo": (_neutral(False), "echo is supported on /v1/completions only"),
}


def unsupported_fields(model: type[BaseModel]) -> list[str]:
    return [name for name, f in model.model_fields.items()
            if f.description == UNSUPPORTED_DESCRIPTION]


def check_supported(req: BaseModel) -> None:
    """400 naming the first known-but-unsupported field set to a non-neutral value, and for
    values that only some settings accept."""
    for name in unsupported_fields(type(req)):
        if getattr(req, name) is not None:
            neutral, why = UNSUPPORTED[name]
            if not neutral(getattr(req, name)):
                raise ApiError(400, f"'{name}' is not supported by this server: {why}; "
                                    "remove the field", param=name)
    if isinstance(req, ChatCompletionRequest):
        tools = req.tools or []
        names = [t.function.name for t in tools]
        if len(set(names)) != len(names):
            raise ApiError(400, "'tools': function names must be unique", param="tools")
        if not tools and req.tool_choice not in (None, "none", "auto"):
            raise ApiError(400, f"'tool_choice' {describe_tool_choice(req.tool_choice)} needs "
                                "'tools'", param="tool_choice")
        if isinstance(req.tool_choice, NamedToolChoice) and \
                req.tool_choice.function.name not in names:
            raise ApiError(400, f"'tool_choice' names function "
                                f"{req.tool_choice.function.name!r}, which is not in 'tools' "
                                f"({', '.join(names)})", param="tool_choice")
        if req.parallel_tool_calls is not None and not tools:
            raise ApiError(400, "'parallel_tool_calls' is only allowed when 'tools' are given",
                           param="parallel_tool_calls")
        if req.store:
            raise ApiError(400, "'store': true is not supported: completions are not stored",
                           param="store")
        if req.service_tier not in (None, "auto", "default"):
            raise ApiError(400, f"'service_tier' {req.service_tier!r} is not offered (only "
                                "'auto' and 'default')", param="service_tier")
        if req.modalities not in (None, ["text"]):
            raise ApiError(400, f"'modalities' must be [\"text\"] (got {req.modalities!r}): "
                                "this model outputs text only", param="modalities")
    if req.stream_options is not None and not req.stream:
        raise ApiError(400, "'stream_options' is only allowed with 'stream': true; remove it "
                            "or set 'stream': true", param="stream_options")
    if req.truncate_prompt_tokens == 0:
        raise ApiError(400, "'truncate_prompt_tokens' must be -1 or >= 1 (got 0)",
                       param="truncate_prompt_tokens")


def describe_tool_choice(choice: object) -> str:
    return repr(choice) if isinstance(choice, str) else f"function {choice.function.name!r}"


def _template_arguments(arguments: str) -> object:
    """Chat templates render a call's arguments as an object (`| tojson`)."""
    try:
        return json.loads(arguments)
    except ValueError:
        return arguments


def tool_dicts(req: ChatCompletionRequest | TokenizeRequest) -> list[dict]:
    """The request's tools as the chat template takes them."""
    return [t.model_dump(exclude_none=True) for t in (req.tools or [])]


def chat_messages(req: ChatCompletionRequest | TokenizeRequest) -> list[dict]:
    out = []
    for m in req.messages:
        content = m.content
        if isinstance(content, list):
            content = "\n".join(part.text for part in content)  # vLLM's join of text parts
        entry = {"role": m.role, "content": content or ""}
        if m.name is not None:
            entry["name"] = m.name
        if m.tool_calls:
            entry["tool_calls"] = [{"id": c.id, "type": "function", "function": {
                "name": c.function.name, "arguments": _template_arguments(c.function.arguments)}}
                for c in m.tool_calls]
        if m.tool_call_id is not None:
            entry["tool_call_id"] = m.tool_call_id
        out.append(entry)
    return out


def guided_decoding(req: CompletionRequest | ChatCompletionRequest
                    ) -> tuple[GuidedDecoding | None, str | None]:
    """The structured-output constraint of `req` and the field that set it (400 when more
    than one is set, or a json_schema format has no schema)."""
    found = []
    fmt = req.response_format
    if fmt is not None and fmt.type == "json_object":
        found.append(("response_format", GuidedDecoding("json_object")))
    elif fmt is not None and fmt.type == "json_schema":
        if fmt.json_schema is None:
            raise ApiError(400, "'response_format': type json_schema needs a 'json_schema' "
                                "object with a 'schema'", param="response_format")
        found.append(("response_format",
                      GuidedDecoding("json", json.dumps(fmt.json_schema.schema_))))
    if req.guided_json is not None:
        spec = req.guided_json if isinstance(req.guided_json, str) else json.dumps(
            req.guided_json)
        found.append(("guided_json", GuidedDecoding("json", spec)))
    if req.guided_regex is not None:
        found.append(("guided_regex", GuidedDecoding("regex", req.guided_regex)))
    if req.guided_choice is not None:
        if any(not c for c in req.guided_choice):
            raise ApiError(400, "'guided_choice' choices must be non-empty strings",
                           param="guided_choice")
        found.append(("guided_choice", GuidedDecoding("choice", json.dumps(req.guided_choice))))
    if req.guided_grammar is not None:
        found.append(("guided_grammar", GuidedDecoding("grammar", req.guided_grammar)))
    if len(found) > 1:
        raise ApiError(400, "give at most one of response_format (json_object / json_schema), "
                            f"guided_json, guided_regex, guided_choice, guided_grammar (got "
                            f"{', '.join(name for name, _ in found)})", param=found[1][0])
    return (found[0][1], found[0][0]) if found else (None, None)


def _logit_bias(raw: dict[str, float] | None) -> dict[int, float]:
    out = {}
    for key, bias in (raw or {}).items():
        # ASCII digits only: int() also reads " 5", "5_0" and other scripts' digits.
        if not (key.isascii() and key.isdigit()):
            raise ApiError(400, f"'logit_bias' keys must be token ids written as decimal "
                                f"digits, such as \"50256\" (got {key[:40]!r})",
                           param="logit_bias")
        # Ids are checked against the vocabulary with the other fields; past 2**31 (and
        # before int() refuses thousands of digits) none is a token id.
        digits = key.lstrip("0") or "0"
        if len(digits) > 10 or int(digits) >= 2**31:
            raise ApiError(400, f"'logit_bias' key {key[:40]!r} is larger than any token id",
                           param="logit_bias")
        out[int(digits)] = bias  # clamped to +-MAX_LOGIT_BIAS where applied (RequestSampler)
    return out


def requested_max_tokens(req: CompletionRequest | ChatCompletionRequest) -> int | None:
    """The completion length the request asks for (a chat's max_completion_tokens wins over
    its max_tokens), or None."""
    if isinstance(req, ChatCompletionRequest) and req.max_completion_tokens is not None:
        return req.max_completion_tokens
    return req.max_tokens


def sampling_params(req: CompletionRequest | ChatCompletionRequest, *,
                    default_max_tokens: int) -> SamplingParams:
    """The engine's parameters for `req` (already validated by its model). ValueError
    carries what SamplingParams rejects (cross-field rules: min_tokens <= max_tokens,
    best_of >= n)."""
    chat = isinstance(req, ChatCompletionRequest)
    max_tokens = requested_max_tokens(req)
    if chat:
        if req.top_logprobs is not None and req.top_logprobs > 0 and not req.logprobs:
            raise ApiError(400, "'top_logprobs' needs 'logprobs': true", param="top_logprobs")
        logprobs = (req.top_logprobs or 0) if req.logprobs else None
    else:
        logprobs = req.logprobs
    prompt_logprobs = req.prompt_logprobs
    if prompt_logprobs is not None:
        if prompt_logprobs == -1:
            raise ApiError(400, f"'prompt_logprobs' -1 (the whole vocabulary) is more than this "
                                f"server's max logprobs ({MAX_LOGPROBS}); ask for at most "
                                f"{MAX_LOGPROBS}", param="prompt_logprobs")
        if req.stream:  # as vLLM: a stream has nowhere to put them
            raise ApiError(400, "'prompt_logprobs' are not available with 'stream': true",
                           param="prompt_logprobs")
    elif not chat and req.echo and logprobs is not None:
        prompt_logprobs = logprobs  # the echoed prompt's tokens get logprobs too (vLLM's)
    if max_tokens is None:
        max_tokens = max(1, default_max_tokens)
    stop = [req.stop] if isinstance(req.stop, str) else list(req.stop or [])
    if req.stream and req.best_of is not None and req.best_of > req.n:
        raise ApiError(400, "'best_of' > 'n' cannot be streamed (the best sequences are "
                            "known only at the end)", param="best_of")
    return SamplingParams(
        max_tokens=max(1, max_tokens),
        temperature=1.0 if req.temperature is None else req.temperature,
        top_p=1.0 if req.top_p is None else req.top_p,
        top_k=-1 if req.top_k is None else req.top_k,
        min_p=0.0 if req.min_p is None else req.min_p,
        seed=req.seed, stop=stop, stop_token_ids=list(req.stop_token_ids or []),
        ignore_eos=req.ignore_eos, min_tokens=req.min_tokens, speculative=req.speculative,
        presence_penalty=req.presence_penalty, frequency_penalty=req.frequency_penalty,
        repetition_penalty=1.0 if req.repetition_penalty is None else req.repetition_penalty,
        logit_bias=_logit_bias(req.logit_bias), allowed_token_ids=req.allowed_token_ids,
        logprobs=logprobs, prompt_logprobs=prompt_logprobs,
        include_stop_str_in_output=req.include_stop_str_in_output,
        skip_special_tokens=req.skip_special_tokens, n=req.n, best_of=req.best_of,
        guided=guided_decoding(req)[0])


def completion_prompts(req: CompletionRequest) -> list[str | list[int]]:
    p = req.prompt
    if isinstance(p, str):
        return [p]
    if not p:
        raise ApiError(400, "'prompt' must not be empty", param="prompt")
    if isinstance(p[0], int):
        return [list(p)]
    if isinstance(p[0], list) and any(not ids for ids in p):
        raise ApiError(400, "'prompt': a token-id list must not be empty", param="prompt")
    return list(p)
