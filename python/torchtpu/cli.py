"""The ``torchtpu`` command: ``torchtpu serve [--model DIR_OR_NAME] [--port N] ...``."""

from __future__ import annotations

import argparse
import logging
import os
import sys


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
    p.add_argument("--kv-events-endpoint", default=None, metavar="ZMQ_ENDPOINT",
                   help="publish the prefix cache's KV events (vLLM's wire format, for llm-d "
                        "or torchtpu router) on this ZMQ PUB endpoint, e.g. tcp://*:5557")
    p.add_argument("--kv-events-replay-endpoint", default=None, metavar="ZMQ_ENDPOINT",
                   help="also answer replay requests for missed event batches on this ZMQ "
                        "ROUTER endpoint, e.g. tcp://*:5558")
    p.add_argument("--kv-events-topic", default=None,
                   help="topic of the event messages (default kv@<host>:<port>@<model>)")
    p.add_argument("--kv-events-config", default=None, metavar="JSON",
                   help="vLLM's form of the above: '{\"enable_kv_cache_events\": true, "
                        "\"endpoint\": \"tcp://*:5557\", \"topic\": ...}'")
    p.add_argument("--torch-threads", type=int, default=1,
                   help="PyTorch intra-op threads for the host-side work (sampling one "
                        "logits row per request); the model runs on XLA's own threads")


def _kv_events_config(args):
    """The KV events config from --kv-events-* (or vLLM's --kv-events-config), or None."""
    from torchtpu.serve.engine import DEFAULT_MODEL
    from torchtpu.serve.kv_events import KvEventsConfig, default_topic

    if args.kv_events_config is not None:
        if args.kv_events_endpoint or args.kv_events_replay_endpoint:
            raise ValueError("give --kv-events-config or --kv-events-endpoint, not both")
        config = KvEventsConfig.from_json(args.kv_events_config)
    elif args.kv_events_endpoint:
        config = KvEventsConfig(endpoint=args.kv_events_endpoint,
                                replay_endpoint=args.kv_events_replay_endpoint)
    else:
        if args.kv_events_replay_endpoint:
            raise ValueError("--kv-events-replay-endpoint needs --kv-events-endpoint")
        return None
    if config is not None and args.kv_events_topic is not None:
        config.topic = args.kv_events_topic
    elif config is not None and not config.topic:
        name = args.served_model_name or (os.path.basename(args.model.rstrip("/"))
                                          if args.model else DEFAULT_MODEL)
        config.topic = default_topic(args.host, args.port, name)
    return config


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
            kv_events = _kv_events_config(args)
            engine = LLMEngine(
                args.model, page_size=args.page_size, num_pages=args.num_pages,
                max_num_seqs=args.max_num_seqs, max_num_batched_tokens=args.max_num_batched_tokens,
                max_model_len=args.max_model_len, enable_prefix_cache=args.enable_prefix_caching,
                device=args.device, served_model_name=args.served_model_name,
                log_request_timelines=args.log_request_timelines, kv_events=kv_events)
        except ValueError as e:
            print(f"torchtpu serve: {e}", file=sys.stderr)
            return 2
        print(f"torchtpu serve: {engine.model_name} warmed up in {engine.warmup_seconds:.1f} s; "
              f"listening on http://{args.host}:{args.port}", file=sys.stderr, flush=True)
        if kv_events is not None:
            print(f"torchtpu serve: KV events on {kv_events.endpoint} (topic "
                  f"{kv_events.topic!r})", file=sys.stderr, flush=True)
        # 1 when the engine loop died: a supervisor restarts the server.
        try:
            return serve(engine, args.host, args.port, max_request_bytes=args.max_request_bytes)
        finally:
            engine.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
