"""Structured output with a real model: SmolLM2-135M-Instruct on tpu answers 100 seeded
random JSON schemas (nested objects, arrays, enums, bounded numbers, required fields), and
every answer is checked with the `jsonschema` package.

    .venv/bin/python examples/structured_output.py [--schemas 100] [--model DIR]

Prints one line per schema that failed (none expected) and a closing count. The grammar
(xgrammar) decides which tokens may come next; the model picks among them, sampled at
temperature 1 with a per-schema seed, so a failure is reproducible by its seed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import jsonschema

from torchtpu.serve import LLM, SamplingParams
from torchtpu.serve.structured import GuidedDecoding
from torchtpu.testing.json_schemas import object_schema


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--schemas", type=int, default=100)
    ap.add_argument("--model", default=None, help="a Hugging Face folder (default SmolLM2)")
    ap.add_argument("--max-tokens", type=int, default=256)
    args = ap.parse_args()

    t0 = time.perf_counter()
    llm = LLM(args.model)
    print(f"model loaded and compiled in {time.perf_counter() - t0:.1f} s", flush=True)
    schemas = [object_schema(seed) for seed in range(args.schemas)]
    tok = llm.tokenizer
    prompts = [tok.apply_chat_template(
        [{"role": "user", "content": "Reply with one JSON object matching this schema: "
          + json.dumps(s)}], tokenize=False, add_generation_prompt=True) for s in schemas]
    params = [SamplingParams(max_tokens=args.max_tokens, temperature=1.0, seed=seed,
                             guided=GuidedDecoding("json", json.dumps(s)))
              for seed, s in enumerate(schemas)]
    t0 = time.perf_counter()
    results = llm.generate(prompts, params)
    took = time.perf_counter() - t0
    valid = 0
    for seed, (schema, result) in enumerate(zip(schemas, results)):
        out = result.outputs[0]
        try:
            jsonschema.validate(json.loads(out.text), schema)
        except (ValueError, jsonschema.ValidationError) as e:
            print(f"schema {seed}: {type(e).__name__}: {str(e).splitlines()[0][:160]} "
                  f"(finish_reason={out.finish_reason}, text={out.text[:120]!r})")
            continue
        valid += 1
    tokens = sum(len(r.outputs[0].token_ids) for r in results)
    print(f"structured output: {valid}/{len(schemas)} answers validate against their schema "
          f"({tokens} tokens in {took:.1f} s)")
    return 0 if valid == len(schemas) else 1


if __name__ == "__main__":
    sys.exit(main())
