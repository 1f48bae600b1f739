"""The ``torchtpu`` command: ``torchtpu serve [--model DIR_OR_NAME] [--port N] ...``,
``torchtpu serve --replicas N ...`` (N engine processes behind the router) and
``torchtpu router --replica URL ...``."""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys


def _json_arg(text: str):
    import json

    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"not valid JSON ({e})") from None


_INT32_MAX = 2**31 - 1


def _int_in(low: int, high: int = _INT32_MAX):
    """An argparse type: an int in [low, high] (by default at most int32's largest, which the
    engine's and router's C++ settings hold)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < low or value > high:
            bound = f"from {low} to {high}"
            raise argparse.ArgumentTypeError(f"{value} is out of range: expected {bound}")
        return value

    return parse


_PORT = _int_in(0, 65535)


def _engine_device(text: str) -> str:
    """An argparse type: a device the engine can run on, ``tpu``, ``tpu:N`` of this
    machine's, or ``cpu`` (a bogus name or index failed after the model loaded, with a
    traceback)."""
    import torch

    try:
        device = torch.device(text)
    except RuntimeError:
        device = None
    if device is None or device.type not in ("tpu", "cpu"):
        raise argparse.ArgumentTypeError(f"{text!r}: expected tpu, tpu:N or cpu")
    if device.type == "tpu" and device.index is not None:
        count = torch.tpu.device_count()
        if device.index >= count:
            raise argparse.ArgumentTypeError(
                f"{text!r}: this machine has {count} tpu device(s), tpu:0 to tpu:{count - 1} "
                "(TORCHTPU_NUM_DEVICES gives the CPU plugin more)")
    return text


def _seconds(text: str) -> float:
    """An argparse type: a finite positive number of seconds."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not (0 < value < float("inf")):
        raise argparse.ArgumentTypeError(f"{text}: expected a finite number of seconds above 0")
    return value


_DAY = 86400.0


def _seconds_to_a_day(text: str) -> float:
    """An argparse type: seconds from a millisecond to a day (the router keeps them as int
    milliseconds)."""
    value = _seconds(text)
    if not 0.001 <= value <= _DAY:
        raise argparse.ArgumentTypeError(f"{text}: expected from 0.001 to {_DAY:.0f} seconds")
    return value


def _serve_parser(sub) -> None:
    p = sub.add_parser("serve", help="run the OpenAI-compatible server on tpu")
    p.add_argument("--model", default=None,
                   help="a local Hugging Face folder (Llama/Mistral/Qwen2/Qwen3), or "
                        "SmolLM2-135M-Instruct (the default, converted offline once)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=_PORT, default=8000)
    p.add_argument("--served-model-name", default=None)
    p.add_argument("--max-model-len", type=_int_in(1), default=None)
    p.add_argument("--max-num-seqs", type=_int_in(1), default=16)
    p.add_argument("--max-num-batched-tokens", type=_int_in(1), default=512)
    p.add_argument("--page-size", type=_int_in(1), default=16)
    p.add_argument("--num-pages", type=_int_in(1), default=None,
                   help="KV pages in the pool (default: enough for max-num-seqs full contexts)")
    p.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction,
                   default=True)
    p.add_argument("--device", type=_engine_device, default="tpu",
                   help="tpu (the current device), tpu:N, or cpu")
    p.add_argument("--max-request-bytes", type=_int_in(1, 2**62), default=4 << 20,
                   help="largest request body accepted (a larger one is a 413)")
    p.add_argument("--max-request-sequences", type=_int_in(1), default=1024,
                   help="most sequences one request may ask for: prompts times "
                        "max(n, best_of) (more is a 400)")
    p.add_argument("--log-request-timelines", action="store_true",
                   help="log one 'serve: timeline {json}' line per finished request: "
                        "queue time, each prompt chunk's step and time, first token")
    p.add_argument("--speculative-config", type=_json_arg, default=None,
                   help="n-gram speculative decoding, as vLLM's JSON: e.g. "
                        "'{\"method\": \"ngram\", \"num_speculative_tokens\": 4, "
                        "\"prompt_lookup_min\": 2, \"prompt_lookup_max\": 4}' "
                        "(lookup defaults 2..4; one bound given, the other takes its value, "
                        "as in vLLM; a request opts out with \"speculative\": false)")
    p.add_argument("--quantization", choices=["int8"], default=None,
                   help="int8: weight-only int8 linear layers, embedding and head (per "
                        "output channel scales); activations and the KV cache stay f32")
    p.add_argument("--layers-per-call", type=_int_in(1), default=None,
                   help="decoder layers per compiled call (default: up to 10, evenly split); "
                        "fewer calls cost less per step, larger ones longer to warm up")
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
    p.add_argument("--replicas", type=_int_in(1), default=None, metavar="N",
                   help="run N engine processes (ports --replica-base-port...), each pinned to "
                        "its own cores and publishing KV events, behind torchtpu router on "
                        "--port; the other options go to every replica")
    p.add_argument("--replica-base-port", type=_PORT, default=None,
                   help="with --replicas: the first replica's port (default --port + 1)")
    p.add_argument("--routing-mode", default="cache-aware", choices=["cache-aware", "round-robin"],
                   help="with --replicas: how the router picks a replica")
    p.add_argument("--torch-threads", type=_int_in(1), default=1,
                   help="PyTorch intra-op threads for the host-side work (sampling one "
                        "logits row per request); the model runs on XLA's own threads")


def _router_parser(sub) -> None:
    p = sub.add_parser("router", help="route OpenAI requests across engine replicas by the KV "
                                      "cache they hold (and their load)")
    p.add_argument("--replica", action="append", required=True, metavar="URL",
                   help="an engine replica, e.g. http://127.0.0.1:8001 (repeat for each)")
    p.add_argument("--kv-events", action="append", default=None, metavar="ZMQ_ENDPOINT",
                   help="the matching replica's KV event endpoint (its --kv-events-endpoint, "
                        "e.g. tcp://127.0.0.1:5557), one per --replica in order; without "
                        "them the index is the router's own routing history (approximate)")
    p.add_argument("--kv-events-replay", action="append", default=None, metavar="ZMQ_ENDPOINT",
                   help="the matching replica's replay endpoint, one per --replica")
    p.add_argument("--model", default=None,
                   help="the replicas' model (folder or name), for its tokenizer: the router "
                        "hashes prompts into the engine's KV blocks")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=_PORT, default=8000)
    p.add_argument("--mode", default="cache-aware", choices=["cache-aware", "round-robin"])
    p.add_argument("--weights", default="3,1,1", metavar="PREFIX,QUEUE,KV",
                   help="scorer weights: prefix affinity, queue depth, KV usage")
    p.add_argument("--spill-threshold", type=_int_in(-1, _INT32_MAX), default=None,
                   metavar="REQUESTS",
                   help="a replica whose queue exceeds the least-loaded replica's by more than "
                        "this is passed over whatever prefix it holds, for one within the bound "
                        "with free KV blocks for the prompt, so a hot prefix spreads without "
                        "evicting other prefixes (default -1: off; e.g. a replica's "
                        "--max-num-seqs when one prefix is hotter than one replica can serve)")
    p.add_argument("--block-size", type=_int_in(0, _INT32_MAX), default=0,
                   help="the replicas' KV page size (default: read from their "
                        "vllm:cache_config_info)")
    p.add_argument("--routed-ttl", type=_seconds_to_a_day, default=30.0, metavar="SECONDS",
                   help="how long a routed prompt counts as held by its replica before the "
                        "replica's own KV events confirm it")
    p.add_argument("--health-interval", type=_seconds_to_a_day, default=0.5, metavar="SECONDS")
    p.add_argument("--max-request-bytes", type=_int_in(1, 2**62), default=4 << 20,
                   help="the largest request body the router takes (413 above it); match the "
                        "replicas' own --max-request-bytes (default 4 MiB)")
    p.add_argument("--request-timeout", type=_seconds_to_a_day, default=60.0, metavar="SECONDS",
                   help="how long a client may take to send a whole request (header and body) "
                        "from its first byte before it gets 408 (default 60)")
    p.add_argument("--max-connections", type=_int_in(1, 65536), default=1024,
                   help="client connections served at once, a thread each (default 1024); at "
                        "the limit a new client takes the place of the one idle the longest "
                        "(1 s at least), and is refused only when none is")


def _router_main(args) -> int:
    from torchtpu.serve.engine import resolve_model
    from torchtpu.serve.router import run_router

    def per_replica(values, flag):
        if values is None:
            return [None] * len(args.replica)
        if len(values) != len(args.replica):
            raise ValueError(f"{flag} is given {len(values)} times for {len(args.replica)} "
                             "--replica; give one per replica, in the same order")
        return [None if v in ("", "none") else v for v in values]

    try:
        weights = tuple(float(w) for w in args.weights.split(","))
        if len(weights) != 3 or any(not (0 <= w < float("inf")) for w in weights):
            raise ValueError
    except ValueError:
        print(f"torchtpu router: --weights {args.weights!r}: expected three finite non-negative "
              "numbers PREFIX,QUEUE,KV", file=sys.stderr)
        return 2
    try:
        events = per_replica(args.kv_events, "--kv-events")
        replays = per_replica(args.kv_events_replay, "--kv-events-replay")
        model = resolve_model(args.model) if args.mode == "cache-aware" else None
        replicas = [{"url": u, "events": e, "replay": r}
                    for u, e, r in zip(args.replica, events, replays)]
        return run_router(replicas, model_path=model, host=args.host, port=args.port,
                          mode=args.mode, weights=weights,
                          spill_threshold=args.spill_threshold, block_size=args.block_size,
                          routed_ttl_s=args.routed_ttl, health_interval_s=args.health_interval,
                          max_request_bytes=args.max_request_bytes,
                          request_timeout_s=args.request_timeout,
                          max_connections=args.max_connections)
    except (ValueError, RuntimeError) as e:
        print(f"torchtpu router: {e}", file=sys.stderr)
        return 2


_LAUNCHER_OPTIONS = {"--replicas", "--replica-base-port", "--routing-mode", "--host", "--port",
                     "--kv-events-endpoint", "--kv-events-replay-endpoint", "--kv-events-topic",
                     "--kv-events-config"}


def _replica_args(argv: list[str]) -> list[str]:
    """`torchtpu serve` options for each replica: argv without the launcher's own."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        name = a.split("=", 1)[0]
        if name in _LAUNCHER_OPTIONS:
            skip = "=" not in a
            continue
        out.append(a)
    return out


def _serve_replicas(args, argv: list[str]) -> int:
    from torchtpu.serve.engine import resolve_model
    from torchtpu.serve.router import ReplicaLauncher, run_router

    if args.kv_events_endpoint or args.kv_events_config:
        print("torchtpu serve: --replicas sets each replica's KV event endpoints itself",
              file=sys.stderr)
        return 2
    try:
        model = resolve_model(args.model)
    except ValueError as e:
        print(f"torchtpu serve: {e}", file=sys.stderr)
        return 2
    serve_args = _replica_args(argv[argv.index("serve") + 1:] if "serve" in argv else argv)
    if args.model is None:
        serve_args += ["--model", model]
    base = args.replica_base_port or args.port + 1
    launcher = ReplicaLauncher(args.replicas, base, serve_args, host=args.host)
    # Until the router takes SIGTERM over, it must still reach the `finally` that stops the
    # replicas (they run in their own sessions, so nothing else stops them).
    import signal

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    launcher.start()
    try:
        replicas = [{k: r[k] for k in ("url", "events", "replay")} for r in launcher.replicas]
        return run_router(replicas, model_path=model, host=args.host, port=args.port,
                          mode=args.routing_mode, max_request_bytes=args.max_request_bytes)
    finally:
        launcher.stop()


def _listening_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to (host, port), as uvicorn would bind it (SO_REUSEADDR); the
    server listens on it once the engine is ready. OSError when the port is taken."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def _cannot_listen(args, e: OSError) -> int:
    print(f"torchtpu serve: cannot listen on {args.host}:{args.port}: "
          f"{e.strerror or e}; pick another --port", file=sys.stderr)
    return 2


def _huge_pages_fact(h) -> str:
    """Where the weights' host memory stands with huge pages, for the start-up line."""
    from torchtpu.memory import huge_pages_enabled

    if not huge_pages_enabled():
        return "huge pages off (TORCHTPU_HUGE_PAGES=0)"
    if h.buffers == 0:
        return "not host memory"
    fact = f"{h.huge_bytes / 2**20:.0f} MiB on huge pages in {h.seconds:.1f} s"
    if h.refused_bytes:
        fact += f", {h.refused_bytes / 2**20:.0f} MiB refused ({h.first_refusal})"
    return fact


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
    _router_parser(sub)
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    if args.command == "router":
        return _router_main(args)
    if args.command == "serve" and args.replicas is not None:
        return _serve_replicas(args, argv)
    if args.command == "serve":
        import torch

        from torchtpu.serve.engine import LLMEngine
        from torchtpu.serve.server import serve

        # Sampling ops over one vocabulary row gain nothing from a parallel region, and on
        # a busy machine each region waits for a descheduled thread: with 2 threads a decode
        # step of 16 requests swung from 85 to 560 ms, with 1 it held at 72-75 ms. Set before
        # warm-up: Dynamo's guards include the thread count.
        torch.set_num_threads(max(1, args.torch_threads))

        # The port first: taken, it fails now, not after loading and warming up the model.
        try:
            sock = _listening_socket(args.host, args.port)
        except OSError as e:
            return _cannot_listen(args, e)
        args.port = sock.getsockname()[1]  # the one the OS chose for --port 0
        try:
            kv_events = _kv_events_config(args)
            engine = LLMEngine(
                args.model, page_size=args.page_size, num_pages=args.num_pages,
                max_num_seqs=args.max_num_seqs, max_num_batched_tokens=args.max_num_batched_tokens,
                max_model_len=args.max_model_len, enable_prefix_cache=args.enable_prefix_caching,
                device=args.device, served_model_name=args.served_model_name,
                log_request_timelines=args.log_request_timelines,
                speculative=args.speculative_config, quantization=args.quantization,
                layers_per_call=args.layers_per_call, kv_events=kv_events)
        except ValueError as e:
            sock.close()
            print(f"torchtpu serve: {e}", file=sys.stderr)
            return 2
        except Exception as e:  # noqa: BLE001 - a model folder or setting it cannot start from
            # (a corrupt config or weights file, sizes past what the engine holds): a clear
            # line and exit 2, which a supervisor does not restart, instead of a traceback.
            # Runtime failures (the device, its memory) may pass: they stay exit 1.
            if isinstance(e, (RuntimeError, MemoryError)):
                raise
            sock.close()
            print(f"torchtpu serve: cannot start the engine for {args.model}: "
                  f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}",
                  file=sys.stderr)
            return 2
        # Listening starts now, with the engine ready: a second server bound to the same
        # port during its warm-up (SO_REUSEADDR lets bound, unlistened sockets share one)
        # is refused here, not by uvicorn's traceback.
        try:
            sock.listen(2048)
        except OSError as e:
            sock.close()
            engine.close()
            return _cannot_listen(args, e)
        print(f"torchtpu serve: {engine.model_name} ({engine.weight_bytes / 2**20:.1f} MiB of "
              f"{engine.decoder.quantization or 'f32'} weights, "
              f"{_huge_pages_fact(engine.decoder.huge_pages)}) warmed up in "
              f"{engine.warmup_seconds:.1f} s; listening on http://{args.host}:{args.port}",
              file=sys.stderr, flush=True)
        if kv_events is not None:
            print(f"torchtpu serve: KV events on {kv_events.endpoint} (topic "
                  f"{kv_events.topic!r})", file=sys.stderr, flush=True)
        # 1 when the engine loop died: a supervisor restarts the server.
        try:
            status = serve(engine, args.host, args.port,
                           max_request_bytes=args.max_request_bytes,
                           max_request_sequences=args.max_request_sequences, sock=sock)
        finally:
            engine.close()
        if status == 0:
            print("torchtpu serve: stopped (requests in flight answered, engine closed)",
                  file=sys.stderr, flush=True)
        return status
    return 0


if __name__ == "__main__":
    sys.exit(main())
