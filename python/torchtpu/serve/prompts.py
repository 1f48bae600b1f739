"""A request's prompt as token ids, the one way the server and ``torchtpu router`` compute
them: the router hashes the same ids into the same KV block hashes as the engine, so its
prefix index and the engine's radix cache name the same prefixes.

Both functions take the tokenizer (a Hugging Face tokenizer loaded from the model folder)
and raise ``ApiError`` (400) for input a client got wrong.
"""

from __future__ import annotations

from torchtpu.serve.errors import ApiError

RESERVED_TEMPLATE_KWARGS = {"conversation", "messages", "tokenize", "add_generation_prompt",
                            "continue_final_message", "chat_template", "tools", "documents",
                            "return_dict", "return_assistant_tokens_mask", "tokenizer_kwargs"}


def text_prompt_ids(tokenizer, prompt: str, add_special_tokens: bool | None = None) -> list[int]:
    """A text prompt's ids, with the tokenizer's special tokens (a Llama or Mistral
    tokenizer's BOS) unless `add_special_tokens` is False: vLLM's default for completions
    and offline prompts, and Hugging Face's `tokenizer(prompt)`. Chat prompts are not text
    prompts: their template writes the special tokens (prompts.chat_prompt_ids)."""
    return tokenizer.encode(prompt, add_special_tokens=add_special_tokens is not False)


def model_positions(config) -> int | None:
    """The longest context `config`'s model takes, as vLLM derives it: its position count,
    times a RoPE scaling factor that extends it (not llama3/longrope, whose scaling is
    already in the count); None when the config has none."""
    positions = getattr(config, "max_position_embeddings", None)
    rope = getattr(config, "rope_scaling", None)
    if positions is not None and isinstance(rope, dict):
        kind = rope.get("rope_type", rope.get("type"))
        factor = rope.get("factor")
        if kind not in ("llama3", "longrope", "su", "default", None) and factor:
            positions = int(positions * factor)
    return positions


def max_token_bytes(tokenizer) -> int | None:
    """The most UTF-8 bytes of text one token of `tokenizer` stands for, or None when the
    tokenizer normalizes text before splitting it (then a text's length bounds nothing)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None or backend.normalizer is not None:
        return None
    return max((len(tokenizer.convert_tokens_to_string([t]).encode("utf-8", "surrogatepass"))
                for t in tokenizer.get_vocab()), default=None)


def must_fit_context(req, chat: bool) -> bool:
    """Whether the prompt of `req` (a chat or a completion request) must fit the context
    whole, so that one too long for it is refused from its size (``check_text_fits``): not
    when it is truncated (truncate_prompt_tokens) or only echoed (echo with max_tokens 0)."""
    return req.truncate_prompt_tokens is None and (chat or not (
        req.echo and req.max_tokens == 0))


def check_text_fits(text: str, token_bytes: int | None, max_model_len: int,
                    param: str) -> None:
    """400 for a text that cannot fit the context, known from its size alone: it has at
    least len(bytes) / `token_bytes` tokens. Tokenizing megabytes takes seconds of the
    one tokenizer thread every request waits on; this check takes microseconds."""
    if token_bytes is None:
        return
    size = len(text.encode("utf-8", "surrogatepass"))
    at_least = -(-size // token_bytes)
    if at_least > max_model_len:
        raise ApiError(400, f"This model's maximum context length is {max_model_len} tokens, "
                            f"and this prompt has at least {at_least} ({size} bytes of text, "
                            f"at most {token_bytes} per token). Please shorten the prompt, or "
                            "set 'truncate_prompt_tokens' to keep its end.", param=param)


def chat_prompt_ids(tokenizer, messages: list[dict], add_generation_prompt: bool,
                    continue_final_message: bool, kwargs: dict | None,
                    add_special_tokens: bool | None = None,
                    tools: list[dict] | None = None,
                    fits: tuple[int | None, int] | None = None,
                    tools_callable: bool = True, chat_template: str | None = None) -> list[int]:
    """Token ids of a conversation through the model's chat template. Tools the model may
    call (`tools_callable`: not with tool_choice "none", nor for /tokenize, which shows what
    the template renders), and tool calls in the messages, must change what the template
    renders: a template that drops them would hide them from the model, so that is a 400.
    With `fits` (max_token_bytes,
    max_model_len), a rendered text too long for the context is refused before it is
    tokenized (``check_text_fits``). `chat_template` replaces the model's own template (the
    offline API's; the server takes none from clients)."""
    tok = tokenizer
    if chat_template is None and tok.chat_template is None:
        raise ApiError(400, "this model's tokenizer has no chat template; use "
                            "/v1/completions")
    template = {} if chat_template is None else {"chat_template": chat_template}
    kwargs = dict(kwargs or {})
    reserved = sorted(RESERVED_TEMPLATE_KWARGS & kwargs.keys())
    if reserved:
        raise ApiError(400, f"'chat_template_kwargs' may not set {reserved}",
                       param="chat_template_kwargs")

    def render(msgs: list[dict], tools: list[dict] | None) -> str:
        try:
            return tok.apply_chat_template(
                msgs, tools=tools, add_generation_prompt=add_generation_prompt,
                continue_final_message=continue_final_message, tokenize=False,
                **template, **kwargs)
        except Exception as e:  # noqa: BLE001 - a template error is about these messages
            raise ApiError(400, f"the chat template failed on these messages: "
                                f"{type(e).__name__}: {e}", param="messages") from None

    text = render(messages, tools or None)
    if tools and tools_callable and render(messages, None) == text:
        raise ApiError(400, "'tools': this model's chat template does not render tools, "
                            "so the model would never see them; tool calling needs a model "
                            "whose template does (Qwen2/Qwen3, Llama 3, Mistral, Hermes)",
                       param="tools")
    if any("tool_calls" in m for m in messages):
        bare = [{k: v for k, v in m.items() if k != "tool_calls"} for m in messages]
        if render(bare, tools or None) == text:
            raise ApiError(400, "'messages': this model's chat template does not render "
                                "assistant tool_calls, so the model would not see them",
                           param="messages")
    if fits is not None:
        check_text_fits(text, fits[0], fits[1], "messages")
    # The template writes the special tokens itself (vLLM's default for chat).
    return tok.encode(text, add_special_tokens=bool(add_special_tokens))
