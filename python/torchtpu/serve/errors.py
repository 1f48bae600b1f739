"""Errors of the HTTP server, all in OpenAI's shape:
``{"error": {"message", "type", "param", "code"}}`` with ``code`` the HTTP status.

``ApiError`` is raised anywhere a request is refused; ``validation_error`` turns a pydantic
``ValidationError`` (the request models, protocol.py) into a 400 naming the field.
"""

from __future__ import annotations

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
    # Union members show up in the location as type names; keep the field path only.
    path = ".".join(p for p in loc if not any(c in p for c in "[]()") and
                    p not in ("str", "int", "float", "bool", "list", "dict", "function-after"))
    if not loc:
        if err["type"] == "model_type":
            return ApiError(400, "the request body must be a JSON object")
        return ApiError(400, f"the request body is invalid: {err['msg']}")
    return ApiError(400, f"'{path}': {err['msg']} (got {_short(err.get('input'))})",
                    param=loc[0])


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
