"""Prompts for bench/serve_bench.py whose answers quote them: the shape of summarization
and code-editing requests, where n-gram speculative decoding's drafts (taken from the
prompt) are often right.

Passages come from the shipped corpus (examples/data/tinyshakespeare.txt), code from this
project's own Python sources; both are read from the checkout, nothing is downloaded."""

from __future__ import annotations

import os
import random
import re

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
CORPUS = os.path.join(ROOT, "examples", "data", "tinyshakespeare.txt")
SOURCES = os.path.join(ROOT, "python", "torchtpu", "serve")


def _passage(rng: random.Random, chars: int) -> str:
    with open(CORPUS) as f:
        text = f.read()
    start = text.index("\n\n", rng.randrange(0, len(text) - 4 * chars)) + 2
    return text[start:start + chars].rsplit("\n", 1)[0]


def _code(rng: random.Random, chars: int) -> tuple[str, str, str]:
    """A stretch of source with an identifier it uses, and a new name for it."""
    files = sorted(f for f in os.listdir(SOURCES) if f.endswith(".py"))
    while True:
        with open(os.path.join(SOURCES, rng.choice(files))) as f:
            src = f.read()
        defs = [m.start() for m in re.finditer(r"^(def|class) ", src, re.M)]
        if not defs:
            continue
        start = rng.choice(defs)
        body = src[start:start + chars].rsplit("\n", 1)[0]
        names = sorted(set(re.findall(r"\b([a-z]+_[a-z_]+)\b", body)))
        if names:
            old = rng.choice(names)
            return body, old, "new_" + old


def repetitive_prompts(n: int, rng: random.Random, chars: int = 1200) -> list[str]:
    """n completion prompts, alternating: a passage to repeat word for word, and a piece of
    code to write again with one identifier renamed."""
    prompts = []
    for i in range(n):
        if i % 2 == 0:
            prompts.append(f"Passage:\n{_passage(rng, chars)}\n\nThe passage again, word for "
                           "word:\n")
        else:
            body, old, new = _code(rng, chars)
            prompts.append(f"# original.py\n{body}\n\n# edited.py: the same code with `{old}` "
                           f"renamed to `{new}`\n")
    return prompts
