"""The ``torchtpu`` command: ``torchtpu serve [--model DIR_OR_NAME] [--port N] ...``."""

from __future__ import annotations

import argparse
import logging
import sys


def _json_arg(text: str):
    import json

    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"not valid JSON ({e})") from None


def _serve_parser(sub) -> None:
    p = sub.add_parser("serve", help="run the OpenAI-compatible server on tpu")
    p.add_argument("--model", default=None,
                   help="a local Hugging Face folder (Llama/Mistral/Qwen2/Qwen3), or "
                        "SmolLM2-135M-Instruct (the default, converted offline once)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--served-model-name", default=None)
    p.add_argument("--max-model-len", type=int, default=None)
    p.add_argument("--max-num-seqs", type=int, default=16)
    p.add_argument("--max-num-batched-tokens", type=int, default=512)
    p.add_argument("--page-size", type=int, default=16)
    p.add_argument("--num-pages", type=int, default=None,
                   help="KV pages in the pool (default: enough for max-num-seqs full contexts)")
    p.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction,
                   default=True)
    p.add_argument("--device", default="tpu")
    p.add_argument("--max-request-bytes", type=int, default=4 << 20,
                   help="largest request body accepted (a larger one is a 413)")
    p.add_argument("--log-request-timelines", action="store_true",
                   help="log one 'serve: timeline {json}' line per finished request: "
                        "queue time, each prompt chunk's step and time, first token")
    p.add_argument("--speculative-config", type=_json_arg, default=None,
                   help="n-gram speculative decoding, as vLLM's JSON: e.g. "
                        "'{\"method\": \"ngram\", \"num_speculative_tokens\": 4, "
                        "\"prompt_lookup_min\": 2, \"prompt_lookup_max\": 4}' "
                        "(a request opts out with \"speculative\": false)")
    p.add_argument("--quantization", choices=["int8"], default=None,
                   help="int8: weight-only int8 linear layers, embedding and head (per "
                        "output channel scales); activations and the KV cache stay f32")
    p.add_argument("--layers-per-call", type=int, default=None,
                   help="decoder layers per compiled call (default: up to 10, evenly split); "
                        "fewer calls cost less per step, larger ones longer to warm up")
    p.add_argument("--torch-threads", type=int, default=1,
                   help="PyTorch intra-op threads for the host-side work (sampling one "
                        "logits row per request); the model runs on XLA's own threads")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="torchtpu")
    sub = parser.add_subparsers(dest="command", required=True)
    _serve_parser(sub)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    if args.command == "serve":
        import torch

        from torchtpu.serve.engine import LLMEngine
        from torchtpu.serve.server import serve

        # Sampling ops over one vocabulary row gain nothing from a parallel region, and on
        # a busy machine each region waits for a descheduled thread: with 2 threads a decode
        # step of 16 requests swung from 85 to 560 ms, with 1 it held at 72-75 ms. Set before
        # warm-up: Dynamo's guards include the thread count.
        torch.set_num_threads(max(1, args.torch_threads))

        try:
            engine = LLMEngine(
                args.model, page_size=args.page_size, num_pages=args.num_pages,
                max_num_seqs=args.max_num_seqs, max_num_batched_tokens=args.max_num_batched_tokens,
                max_model_len=args.max_model_len, enable_prefix_cache=args.enable_prefix_caching,
                device=args.device, served_model_name=args.served_model_name,
                log_request_timelines=args.log_request_timelines,
                speculative=args.speculative_config, quantization=args.quantization,
                layers_per_call=args.layers_per_call)
        except ValueError as e:
            print(f"torchtpu serve: {e}", file=sys.stderr)
            return 2
        print(f"torchtpu serve: {engine.model_name} ({engine.weight_bytes / 2**20:.1f} MiB of "
              f"{engine.decoder.quantization or 'f32'} weights) warmed up in "
              f"{engine.warmup_seconds:.1f} s; listening on http://{args.host}:{args.port}",
              file=sys.stderr, flush=True)
        # 1 when the engine loop died: a supervisor restarts the server.
        return serve(engine, args.host, args.port, max_request_bytes=args.max_request_bytes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
