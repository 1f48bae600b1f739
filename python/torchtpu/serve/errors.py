"""Errors of the HTTP server, all in OpenAI's shape:
``{"error": {"message", "type", "param", "code"}}`` with ``code`` the HTTP status.

``ApiError`` is raised anywhere a request is refused; ``validation_error`` turns a pydantic
``ValidationError`` (the request models, protocol.py) into a 400 naming the field (and
for a union field, such as a prompt of text or token ids, every form it accepts).
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ValidationError

TYPES = {400: "BadRequestError", 404: "NotFoundError", 405: "MethodNotAllowedError",
         413: "RequestTooLargeError", 422: "UnprocessableEntityError",
         500: "InternalServerError", 503: "ServiceUnavailableError"}


class ApiError(Exception):
    def __init__(self, status: int, message: str, type_: str | None = None,
                 param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param = status, message, param
        self.type = type_ or TYPES.get(status, "BadRequestError" if status < 500 else
                                       "InternalServerError")

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param,
                          "code": self.status}}


def _short(value: object, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def validation_error(e: ValidationError, raw: bytes = b"") -> ApiError:
    """The first error of `e` as a 400 naming its field (JSON syntax errors, nesting past
    the parser's depth limit and lone surrogates included)."""
    err = e.errors(include_url=False)[0]
    if err["type"] == "json_invalid":
        msg = err["msg"].removeprefix("Invalid JSON: ")
        hint = ""
        if "recursion limit" in msg:
            hint = "; the body nests arrays/objects too deeply (the limit is about 200 levels)"
        elif "hex escape" in msg or "surrogate" in msg:
            hint = ("; a \\uD800-\\uDFFF escape must be half of a surrogate pair (lone "
                    "surrogates are not text)")
        return ApiError(400, f"the request body is not valid JSON: {msg}{hint}")
    loc = [str(p) for p in err["loc"]]
    if not loc:
        if err["type"] == "model_type":
            return ApiError(400, "the request body must be a JSON object")
        return ApiError(400, f"the request body is invalid: {err['msg']}")
    union = _union_error(e.errors(include_url=False), err)
    if union is not None:
        return union
    return ApiError(400, f"'{_path(loc)}': {err['msg']} (got {_short(err.get('input'))})",
                    param=loc[0])


# Names of the request models' classes (protocol.py registers them): pydantic names a
# union member that is a model by its class.
MODEL_NAMES: set[str] = set()
_SCALARS = ("str", "int", "float", "bool", "list", "dict", "none")


def _is_member(part: object) -> bool:
    """Whether a location part names a union member (pydantic puts the member's type in
    the location: 'str', 'list[str]', 'NamedToolChoice', ...) rather than a field, a
    dict key or an index."""
    return isinstance(part, str) and (part in _SCALARS or part in MODEL_NAMES
                                      or any(c in part for c in "[]()'"))


def _path(loc: list) -> str:
    """The field path of a location, without union member names."""
    return ".".join(str(p) for p in loc if not _is_member(p))


def _member_name(tag: str) -> str:
    """A union member's type as a client reads it: validators wrapped around a type
    (`function-before[_integral(), int]`) show as the type."""
    return re.sub(r"function-\w+\[[^\[\],]*, ([^\[\]]+)\]", r"\1", tag)


def _union_error(errors: list[dict], first: dict) -> ApiError | None:
    """A value that matched no member of a union field (prompt: text, texts, token ids or
    lists of them; stop; message content; tool_choice) is one error per member; the 400
    lists the forms allowed, and what failed in the members that got furthest."""
    loc = list(first["loc"])
    at = next((i for i, p in enumerate(loc) if _is_member(p)), None)
    if at is None:
        return None
    prefix = loc[:at]
    members = [e for e in errors if list(e["loc"][:at]) == prefix and len(e["loc"]) > at
               and _is_member(e["loc"][at])]
    names = list(dict.fromkeys(_member_name(e["loc"][at]) for e in members))
    if len(names) < 2:
        return None
    whole = min(members, key=lambda e: len(e["loc"]))
    deepest = max(len(e["loc"]) for e in members)
    why = []
    for e in members:
        if len(e["loc"]) == deepest:
            inner = _path(list(e["loc"][at + 1:]))
            where = f" at {inner}" if inner else ""
            why.append(f"as {_member_name(e['loc'][at])}{where}: {e['msg']}")
    path = _path(loc)
    return ApiError(400, f"'{path}' must be one of: {'; '.join(names)} (got "
                         f"{_short(whole.get('input'))}); {'; '.join(why)}",
                    param=str(loc[0]))


class ErrorBody(BaseModel):
    message: str
    type: str
    param: str | None
    code: int


class ErrorResponse(BaseModel):
    """OpenAI's error shape, as /openapi.json documents it for every error status."""
    error: ErrorBody


def documented(*statuses: int) -> dict:
    """FastAPI `responses=` for these error statuses."""
    return {s: {"model": ErrorResponse, "description": TYPES[s]} for s in statuses}
