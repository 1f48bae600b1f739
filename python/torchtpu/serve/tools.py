"""Tool calling: which calls a chat completion made, in OpenAI's shape.

Tools reach the prompt through the model's own chat template (``tools=``); a template that
renders nothing for them cannot call tools, and the request is refused. How the calls come
back depends on ``tool_choice``:

- ``"auto"``: the model writes its native format and a parser chosen from the template
  reads it: Hermes ``<tool_call>{"name", "arguments"}</tool_call>`` (Qwen2, Qwen3, SmolLM2
  and other ChatML templates), Llama 3 JSON ``{"name", "parameters"}``, Mistral
  ``[TOOL_CALLS] [...]``. Text that does not parse stays content.
- ``"required"`` and a named function: the output is constrained by a JSON-schema grammar
  (structured.py), so the arguments always parse and match the function's parameters:
  an array of ``{"name", "parameters"}`` for required, the arguments object for a named one.
- ``"none"``: tools are shown to the model but no call is read back.

``parallel_tool_calls: false`` keeps at most one call.
"""

from __future__ import annotations

import json
import re
import uuid

PARSERS = ("hermes", "llama3", "mistral")


def parser_for(chat_template: str) -> str | None:
    """The output parser of a chat template's tool-call format, or None if unknown."""
    if "<tool_call>" in chat_template:
        return "hermes"
    if "[TOOL_CALLS]" in chat_template:
        return "mistral"
    if "<|start_header_id|>" in chat_template or "<|python_tag|>" in chat_template:
        return "llama3"
    return None


def make_call(name: str, arguments: object) -> dict:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
            "function": {"name": name, "arguments": text}}


def _call_from(obj: object, names: set[str], args_key: str) -> dict | None:
    if not isinstance(obj, dict) or obj.get("name") not in names:
        return None
    args = obj.get(args_key, obj.get("arguments", {}))
    return make_call(obj["name"], args if args is not None else {})


def parse(parser: str, text: str, names: set[str]) -> tuple[str | None, list[dict]]:
    """(content, calls) of an "auto" output. Calls name a known tool; what is left of the
    text around them, trimmed, is the content (None when nothing is). Text without a call
    is the content as generated, whitespace included, as without tools."""
    calls: list[dict] = []
    content = text
    if parser == "hermes":
        def take(m: re.Match) -> str:
            try:
                call = _call_from(json.loads(m.group(1)), names, "arguments")
            except ValueError:
                return m.group(0)
            if call is None:
                return m.group(0)
            calls.append(call)
            return ""
        content = re.sub(r"<tool_call>\s*(.*?)\s*</tool_call>", take, text, flags=re.S)
    elif parser == "mistral" and "[TOOL_CALLS]" in text:
        head, _, tail = text.partition("[TOOL_CALLS]")
        try:
            items = json.loads(tail.strip())
        except ValueError:
            items = None
        items = items if isinstance(items, list) else [items]
        parsed = [_call_from(i, names, "arguments") for i in items]
        if items and all(parsed):
            calls, content = parsed, head
    elif parser == "llama3":
        body = text.strip().removeprefix("<|python_tag|>").strip()
        try:
            obj = json.loads(body)
        except ValueError:
            obj = None
        items = obj if isinstance(obj, list) else [obj]
        parsed = [_call_from(i, names, "parameters") for i in items]
        if obj is not None and all(parsed):
            calls, content = parsed, ""
    if not calls:
        return text, []
    content = content.strip()
    return (content or None), calls


def required_schema(tools: list[dict], parallel: bool) -> dict:
    """JSON schema of tool_choice "required": one or more calls of the given tools."""
    options = [{"type": "object", "additionalProperties": False, "required": ["name", "parameters"],
                "properties": {"name": {"const": t["function"]["name"]},
                               "parameters": t["function"].get("parameters") or {"type": "object"}}}
               for t in tools]
    schema = {"type": "array", "minItems": 1, "items": {"anyOf": options}}
    if not parallel:
        schema["maxItems"] = 1
    return schema


def named_schema(tools: list[dict], name: str) -> dict | None:
    for t in tools:
        if t["function"]["name"] == name:
            return t["function"].get("parameters") or {"type": "object"}
    return None


def guided_calls(choice: str | dict, text: str) -> list[dict]:
    """The calls of a grammar-constrained output ("required", or a named function's
    arguments); [] if the output was cut short (max_tokens) and does not parse."""
    try:
        value = json.loads(text)
    except ValueError:
        return []
    if choice == "required":
        return [make_call(c["name"], c["parameters"]) for c in value]
    return [make_call(choice["function"]["name"], value)]
