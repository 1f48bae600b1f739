"""Structured output through xgrammar: a grammar (JSON schema, any JSON object, regex,
choice, EBNF) constrains each step's tokens.

``GrammarCache`` compiles grammars for one tokenizer and keeps them per (kind, spec), the
least recently used dropped past a byte budget (each distinct schema a client sends would
otherwise stay for the server's life): compiling is paid once per schema while it is in
use, and it is done on the server's tokenizer thread before the engine sees the request.
``GrammarState`` is one request's matcher: ``allowed()`` is the bool mask of tokens the
grammar accepts next (applied by the request's sampler on the host logits row, so no
xgrammar kernel runs), ``accept()`` advances it, ``done`` says the grammar reached its end
(the engine then finishes the request as "stop"). JSON is compiled
without free whitespace between tokens, so a bounded schema always terminates; and as
xgrammar's JSON-schema grammar lets raw control characters into strings (which json.loads
and RFC 8259 refuse), tokens that decode to one are masked for the JSON kinds: compact
JSON has none anywhere.

xgrammar's GrammarCompiler is thread-safe; a GrammarState belongs to one request.
"""

from __future__ import annotations

import json
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch

KINDS = ("json", "json_object", "regex", "choice", "grammar")

# A spec's size bound: xgrammar's compile time grows with the square of it (a 60 KB regex
# compiled in 1.2 s, 500 KB in 48 s, on one core and in the way of the requests behind it).
MAX_SPEC_BYTES = 64 * 1024

# What the compiled grammars kept for reuse may take (xgrammar's own measure of each; a
# 900-choice grammar over a 512-token vocabulary is ~0.5 MB). vLLM's default is the same.
CACHE_BYTES = 512 << 20

# JSON-schema keywords xgrammar accepts and does not enforce (checked against its matcher:
# output violating them was accepted, or valid output refused), so a schema using them would
# not constrain what it says; refused, as OpenAI's strict json_schema refuses what it does
# not support.
UNENFORCED_KEYWORDS = ("if", "then", "else", "not", "uniqueItems", "dependentRequired",
                       "dependentSchemas", "contains", "minContains", "maxContains")
# Keywords whose value is a map from names to subschemas, or a list of subschemas, or a
# subschema; the rest hold data (enum, const, default) or numbers.
_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions")
_SCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems")
_SCHEMA_VALUES = ("items", "additionalProperties", "additionalItems", "propertyNames",
                  "unevaluatedProperties", "unevaluatedItems")


def _json_types(schema: object) -> set[str] | None:
    """The JSON types a subschema's `type` allows ("integer" counted as a "number" too), or
    None when it does not say."""
    t = schema.get("type") if isinstance(schema, dict) else None
    names = [t] if isinstance(t, str) else t if isinstance(t, list) else None
    if not names or not all(isinstance(n, str) for n in names):
        return None
    return set(names) | ({"number"} if "integer" in names else set())


def _resolved(schema: object, root: object) -> object:
    """`schema` with a local `$ref` ("#/$defs/Cat") followed, a few levels at most."""
    for _ in range(8):
        ref = schema.get("$ref") if isinstance(schema, dict) else None
        if not isinstance(ref, str) or not ref.startswith("#/"):
            return schema
        target = root
        for part in ref[2:].split("/"):
            target = target.get(part) if isinstance(target, dict) else None
        schema = target
    return schema


def _tag(schema: object, name: str) -> tuple[bool, object]:
    """(True, value) when `schema` requires property `name` to be one constant value."""
    if not isinstance(schema, dict) or name not in (schema.get("required") or []):
        return False, None
    prop = (schema.get("properties") or {}).get(name)
    if isinstance(prop, dict) and "const" in prop:
        return True, prop["const"]
    if isinstance(prop, dict) and isinstance(prop.get("enum"), list) and len(prop["enum"]) == 1:
        return True, prop["enum"][0]
    return False, None


def _provably_exclusive(branches: list, root: object) -> bool:
    """Whether no value can match two of `branches`: their declared types are disjoint, or
    each requires one property to be a constant of its own (a discriminated union, as
    Pydantic writes them)."""
    branches = [_resolved(b, root) for b in branches]
    types = [_json_types(b) for b in branches]
    if all(t is not None for t in types) and all(
            not (types[i] & types[j]) for i in range(len(types))
            for j in range(i + 1, len(types))):
        return True
    first = branches[0] if isinstance(branches[0], dict) else {}
    for name in first.get("required") or []:
        tags = [_tag(b, name) for b in branches]
        values = [json.dumps(v, sort_keys=True) for ok, v in tags if ok]
        if len(values) == len(branches) and len(set(values)) == len(values):
            return True
    return False


def unenforced_keywords(schema: object, path: str = "#",
                        root: object = None) -> list[tuple[str, str]]:
    """Where a JSON schema uses what xgrammar would ignore: (keyword, "not at
    #/properties/a") pairs. `root`: the whole schema, for local `$ref`s (`schema` itself
    at the top)."""
    if not isinstance(schema, dict):
        return []
    root = schema if root is None else root
    found = [(k, f"{k} at {path}") for k in UNENFORCED_KEYWORDS if k in schema]
    if isinstance(schema.get("allOf"), list) and len(schema["allOf"]) > 1:
        found.append(("allOf", f"allOf with {len(schema['allOf'])} subschemas at {path}"))
    # xgrammar enforces oneOf as anyOf (a value matching two branches passes), which is
    # exact only when no value can match two; and multipleOf on integers only.
    one_of = schema.get("oneOf")
    if isinstance(one_of, list) and len(one_of) > 1 and not _provably_exclusive(one_of, root):
        found.append(("oneOf", f"oneOf at {path} with {len(one_of)} subschemas not exclusive "
                               "by type or a constant property (enforced as anyOf: a value "
                               "may match several)"))
    t = schema.get("type")
    declared = [t] if isinstance(t, str) else t if isinstance(t, list) else None
    if "multipleOf" in schema and (not declared or "number" in declared):
        found.append(("multipleOf", f"multipleOf on a non-integer at {path}"))
    for key in _SCHEMA_MAPS:
        if isinstance(schema.get(key), dict):
            for name, sub in schema[key].items():
                found += unenforced_keywords(sub, f"{path}/{key}/{name}", root)
    for key in _SCHEMA_LISTS:
        if isinstance(schema.get(key), list):
            for i, sub in enumerate(schema[key]):
                found += unenforced_keywords(sub, f"{path}/{key}/{i}", root)
    for key in _SCHEMA_VALUES:
        found += unenforced_keywords(schema.get(key), f"{path}/{key}", root)
    return found


@dataclass(frozen=True)
class GuidedDecoding:
    """What the output must match. `spec`: a JSON schema as JSON text (json), nothing
    (json_object), a regex, a JSON list of strings (choice), or an EBNF grammar."""
    kind: Literal["json", "json_object", "regex", "choice", "grammar"]
    spec: str = ""


def available() -> bool:
    try:
        import xgrammar  # noqa: F401
    except ImportError:
        return False
    return True


class GrammarCache:
    def __init__(self, tokenizer, vocab_size: int, stop_token_ids: set[int],
                 on_compile=None, cache_bytes: int = CACHE_BYTES) -> None:
        import xgrammar as xgr

        self._xgr = xgr
        self.vocab_size = vocab_size
        info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size,
                                                  stop_token_ids=sorted(stop_token_ids))
        # This class is the cache (bounded): xgrammar's own would keep every grammar too.
        self._compiler = xgr.GrammarCompiler(info, max_threads=1, cache_enabled=False)
        self._tokenizer = tokenizer
        self._control: torch.Tensor | None = None  # tokens with a control character
        # Least recently used first, with each one's size.
        self._compiled: OrderedDict[GuidedDecoding, tuple[object, int]] = OrderedDict()
        self.cache_bytes = cache_bytes
        self.cached_bytes = 0
        self._lock = threading.Lock()
        self.num_compiles = 0
        self.compile_seconds = 0.0
        self._on_compile = on_compile  # called with each compile's seconds

    def compile(self, guided: GuidedDecoding):
        """The compiled grammar; ValueError naming what is wrong with the spec."""
        with self._lock:
            hit = self._compiled.get(guided)
            if hit is not None:
                self._compiled.move_to_end(guided)
                return hit[0]
        import time

        size = len(guided.spec.encode())
        if size > MAX_SPEC_BYTES:
            raise ValueError(f"serve: the {guided.kind} grammar is {size} bytes; the limit is "
                             f"{MAX_SPEC_BYTES} (compiling takes time growing with the square "
                             "of its size)")
        if guided.kind == "json":
            try:
                unenforced = unenforced_keywords(json.loads(guided.spec))
            except ValueError:
                unenforced = []  # xgrammar reports the malformed schema below
            if unenforced:
                raise ValueError(
                    f"serve: the JSON schema uses {', '.join(w for _, w in unenforced[:5])}, "
                    "which the grammar engine (xgrammar) does not enforce, so the output "
                    "would not be guaranteed to match it; express it without "
                    f"{', '.join(sorted({k for k, _ in unenforced}))}")
        t0 = time.perf_counter()
        try:
            compiled = self._compile(guided)
        except (RuntimeError, ValueError, TypeError) as e:
            # xgrammar's messages start with "[time] file.cc:line: "; keep what follows.
            why = re.sub(r"^\[[\d:]+\] \S+:\d+: ", "", str(e).strip())
            raise ValueError(f"serve: the {guided.kind} grammar does not compile: {why}") from None
        seconds = time.perf_counter() - t0
        size = compiled.memory_size_bytes
        with self._lock:
            self.num_compiles += 1
            self.compile_seconds += seconds
            if guided not in self._compiled:  # (another thread may have compiled it too)
                self._compiled[guided] = (compiled, size)
                self.cached_bytes += size
            while self.cached_bytes > self.cache_bytes and len(self._compiled) > 1:
                self.cached_bytes -= self._compiled.popitem(last=False)[1][1]
        if self._on_compile is not None:
            self._on_compile(seconds)
        return compiled

    def _compile(self, g: GuidedDecoding):
        c = self._compiler
        if g.kind == "json":
            return c.compile_json_schema(g.spec, any_whitespace=False, strict_mode=True)
        if g.kind == "json_object":
            return c.compile_grammar(_JSON_OBJECT)
        if g.kind == "regex":
            return c.compile_regex(g.spec)
        if g.kind == "choice":
            # Each choice an EBNF string literal: JSON's escapes, but characters past ASCII
            # as they are (the grammar's parser reads a \uXXXX pair of a character past
            # U+FFFF as two characters, which are not UTF-8).
            choices = json.loads(g.spec)
            return c.compile_grammar(
                "root ::= " + " | ".join(json.dumps(s, ensure_ascii=False) for s in choices))
        if g.kind == "grammar":
            return c.compile_grammar(g.spec)
        raise ValueError(f"unknown kind {g.kind!r} (expected one of {', '.join(KINDS)})")

    def control_tokens(self) -> torch.Tensor:
        """[vocab] bool: tokens whose text has a character below U+0020."""
        with self._lock:
            if self._control is None:
                banned = torch.zeros(self.vocab_size, dtype=torch.bool)
                for i in range(min(self.vocab_size, len(self._tokenizer))):
                    text = self._tokenizer.decode([i])
                    banned[i] = any(ord(c) < 0x20 for c in text)
                self._control = banned
            return self._control

    def state(self, guided: GuidedDecoding) -> GrammarState:
        banned = self.control_tokens() if guided.kind in ("json", "json_object") else None
        return GrammarState(self._xgr, self.compile(guided), self.vocab_size, banned)


class GrammarState:
    def __init__(self, xgr, compiled, vocab_size: int,
                 banned: torch.Tensor | None = None) -> None:
        self._matcher = xgr.GrammarMatcher(compiled)
        self._keep = None if banned is None else ~banned
        self._bitmask = xgr.allocate_token_bitmask(1, vocab_size)
        self.vocab_size = vocab_size

    def allowed(self, vocab: int) -> torch.Tensor:
        """[vocab] bool: the tokens the grammar accepts next."""
        self._matcher.fill_next_token_bitmask(self._bitmask)
        # Bit j of int32 word i is token 32 i + j: little-endian bytes, little bit order.
        words = self._bitmask.numpy().astype("<i4", copy=False)
        bits = np.unpackbits(words.view(np.uint8), bitorder="little")
        mask = torch.from_numpy(bits[: self.vocab_size]).bool()
        if self._keep is not None:
            mask &= self._keep
        if vocab > self.vocab_size:
            mask = torch.cat([mask, torch.zeros(vocab - self.vocab_size, dtype=torch.bool)])
        return mask[:vocab]

    def accept(self, token: int) -> bool:
        return bool(self._matcher.accept_token(token))

    @property
    def done(self) -> bool:
        return bool(self._matcher.is_terminated())


# Any JSON object, compact (no free whitespace), so it ends once its braces close.
_JSON_OBJECT = r'''
root ::= object
value ::= object | array | string | number | "true" | "false" | "null"
object ::= "{" ( string ":" value ( "," string ":" value )* )? "}"
array ::= "[" ( value ( "," value )* )? "]"
string ::= "\"" char* "\""
char ::= [^"\\\x00-\x1f] | "\\" ( ["\\/bfnrt] | "u" hex hex hex hex )
hex ::= [0-9a-fA-F]
number ::= "-"? ( "0" | [1-9] [0-9]* ) ( "." [0-9]+ )? ( [eE] [-+]? [0-9]+ )?
'''
