"""Seeded random JSON schemas for structured-output checks: nested objects, arrays,
enums, bounded numbers, strings of bounded length, required fields. The same seed gives
the same schema, so a failure names its schema by its seed."""

from __future__ import annotations

import random


def random_schema(rng: random.Random, depth: int = 0) -> dict:
    kinds = ["boolean", "enum", "integer", "number", "string", "null"]
    if depth < 2:
        kinds += ["object", "array"]
    kind = rng.choice(kinds)
    if kind == "enum":
        return {"enum": rng.sample(["red", "green", "blue", "x y", "\u00e9t\u00e9", "1"],
                                   rng.randint(1, 4))}
    if kind == "integer":
        lo = rng.randint(-50, 50)
        return {"type": "integer", "minimum": lo, "maximum": lo + rng.randint(0, 100)}
    if kind == "number":
        return {"type": "number", "minimum": -10, "maximum": 10}
    if kind == "string":
        return {"type": "string", "maxLength": rng.randint(0, 6)}
    if kind == "array":
        n = rng.randint(0, 2)
        return {"type": "array", "items": random_schema(rng, depth + 1), "minItems": n,
                "maxItems": n + rng.randint(0, 2)}
    if kind == "object":
        props = {f"k{i}": random_schema(rng, depth + 1) for i in range(rng.randint(1, 3))}
        return {"type": "object", "properties": props, "additionalProperties": False,
                "required": rng.sample(sorted(props), rng.randint(0, len(props)))}
    return {"type": kind}


def object_schema(seed: int) -> dict:
    """A top-level object of one to four random properties, all required."""
    rng = random.Random(seed)
    props = {f"f{i}": random_schema(rng) for i in range(rng.randint(1, 4))}
    return {"type": "object", "properties": props, "additionalProperties": False,
            "required": sorted(props)}
