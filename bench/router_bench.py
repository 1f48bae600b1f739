"""Cache-aware routing against round-robin, same run, same replicas (llm-d's shared-prefix
benchmark, scaled to one host).

The workload: G groups of users, each group sharing one long system prompt, every request
that prompt plus the user's own question; the system prompts together exceed one replica's
KV capacity (--num-pages), but not all replicas' together. Round-robin sends every group to
every replica, so each replica's cache thrashes and recomputes prompts; cache-aware routing
keeps each group on the replica that holds its prompt.

One set of replicas (``torchtpu serve`` processes pinned to disjoint cores, KV events on)
serves both; two routers (``torchtpu router``, one per mode) sit in front of them. Each
mode gets its own system prompts (same sizes, different text), so neither starts warm.
Reported per mode: output tokens/s, TTFT p50/p90, the replicas' own prefix-cache hit rate
(vllm:prefix_cache_hits / queries over the run); then the ratios, and the router's own
added latency: its routing_latency_seconds (request read -> upstream request written), its
added_latency_seconds (request read -> response written, less the replica's own time) and,
from the client, one-token requests through a router in front of one replica, each paired
with the same request sent straight to that replica. Per mode it also says where the slowest tenth of the requests went (their
group, whether they were its first request, their replica) and how many requests each
replica had in flight over the run (the router's gauge, sampled every 100 ms); --trace
writes all of it. --compare-spill N adds cache-aware routing with the router's load filter
on (--spill-threshold N), same replicas, for comparison.

    .venv/bin/python bench/router_bench.py                 # SmolLM2-135M-Instruct, 2 replicas
    .venv/bin/python bench/router_bench.py --compare-spill 4  # and with the load filter
    .venv/bin/python bench/router_bench.py --quick         # fewer requests
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import time

import httpx

WORDS = ("crown court river castle winter honour sword letter father ghost night sea storm "
         "king queen prince poison garden grave player stage madness duty crowd bell tower "
         "harvest market lantern forest bridge window silver mirror thunder candle").split()


def wait_healthy(url: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise TimeoutError(f"{url} not healthy after {timeout:.0f} s")


def text_of(tokenizer, rng: random.Random, num_tokens: int) -> str:
    """Random words, cut to `num_tokens` tokens."""
    words = " ".join(rng.choice(WORDS) for _ in range(num_tokens))
    ids = tokenizer.encode(words, add_special_tokens=False)[:num_tokens]
    return tokenizer.decode(ids)


def workload(tokenizer, seed: int, args) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    """(group, prompt) per request in arrival order: the warm-up (each group's first
    --warmup-users users) and the measured requests (the others)."""
    rng = random.Random(seed)
    systems = [f"System {seed}-{g}: " + text_of(tokenizer, rng, args.system_tokens)
               for g in range(args.groups)]
    prompts = [(g, f"{systems[g]}\nUser {u}: {text_of(tokenizer, rng, args.question_tokens)}")
               for u in range(args.warmup_users + args.users_per_group)
               for g in range(args.groups)]
    cut = args.warmup_users * args.groups
    warm, measured = prompts[:cut], prompts[cut:]
    # Users arrive in random order (a fixed order would pin each group to one replica under
    # round-robin whenever the group count is a multiple of the replica count).
    rng.shuffle(warm)
    rng.shuffle(measured)
    return warm, measured


def scrape(urls: list[str], names: tuple[str, ...]) -> dict[str, float]:
    total = dict.fromkeys(names, 0.0)
    for url in urls:
        for line in httpx.get(url + "/metrics", timeout=10).text.splitlines():
            for n in names:
                if line.startswith(n + "{") or line.startswith(n + " "):
                    total[n] += float(line.rsplit(" ", 1)[1])
    return total


async def run_mode(url: str, warm: list[tuple[int, str]], prompts: list[tuple[int, str]],
                   args) -> dict:
    """Sends `warm`, then measures `prompts`, each at --concurrency (or --rate)."""
    queue = list(warm)
    counting = False
    ttfts, tokens, trace, depth = [], 0, [], []
    seen_groups: set[int] = set()
    limits = httpx.Limits(max_connections=None)
    async with httpx.AsyncClient(timeout=600, limits=limits) as client:
        async def worker() -> None:
            while queue:
                await one()

        async def sample_depth() -> None:
            """The router's in-flight count per replica every 100 ms (queue depth over time)."""
            while True:
                r = await client.get(url + "/metrics")
                now = time.perf_counter() - t0
                for line in r.text.splitlines():
                    if line.startswith("torchtpu_router:replica_in_flight{"):
                        depth.append((now, line.split('"')[1], float(line.rsplit(" ", 1)[1])))
                await asyncio.sleep(0.1)

        async def one() -> None:
            nonlocal tokens
            group, prompt = queue.pop(0)
            counted = counting
            cold = group not in seen_groups  # the first of its group: nobody holds its prompt
            seen_groups.add(group)
            start = time.perf_counter()
            first = None
            async with client.stream("POST", url + "/v1/completions", json={
                    "prompt": prompt, "max_tokens": args.max_tokens, "temperature": 0,
                    "ignore_eos": True, "stream": True,
                    "stream_options": {"include_usage": True}}) as r:
                r.raise_for_status()
                replica = r.headers.get("x-torchtpu-replica", "?")
                async for line in r.aiter_lines():
                    if not line.startswith("data: ") or line == "data: [DONE]":
                        continue
                    chunk = json.loads(line[6:])
                    if "error" in chunk:
                        raise RuntimeError(chunk["error"]["message"])
                    if first is None and chunk.get("choices"):
                        first = time.perf_counter()
                    if chunk.get("usage") and counted:
                        tokens += chunk["usage"]["completion_tokens"]
            if not counted:
                return
            ttfts.append(first - start)
            trace.append({"group": group, "cold": cold, "replica": replica,
                          "start": start - t0, "ttft": first - start})

        async def phase() -> None:
            if args.rate:
                rng = random.Random(0)
                tasks = []
                for _ in range(len(queue)):
                    tasks.append(asyncio.ensure_future(one()))
                    await asyncio.sleep(rng.expovariate(args.rate))
                await asyncio.gather(*tasks)
            else:
                await asyncio.gather(*(worker() for _ in range(args.concurrency)))

        # Warm-up: each group's first users, so the cold start (every prompt computed once,
        # all at the same time) is not what the tail measures; not counted.
        await phase()
        queue[:] = prompts
        counting = True
        t0 = start = time.perf_counter()
        sampler = asyncio.ensure_future(sample_depth())
        await phase()
        wall = time.perf_counter() - start
        sampler.cancel()
    ttfts.sort()
    return {"wall_s": wall, "output_tokens": tokens, "throughput": tokens / wall,
            "ttft_p50": ttfts[len(ttfts) // 2], "ttft_p90": ttfts[int(0.9 * (len(ttfts) - 1))],
            "trace": trace, "depth": depth}


def describe_tail(res: dict) -> str:
    """Where the slowest tenth of the requests went, and how the load was spread."""
    trace = sorted(res["trace"], key=lambda t: t["ttft"])
    tail = trace[int(0.9 * (len(trace) - 1)):]
    per = {}
    for _, replica, n in res["depth"]:
        per.setdefault(replica, []).append(n)
    served = {}
    for t in trace:
        served[t["replica"]] = served.get(t["replica"], 0) + 1
    groups = {}
    for t in trace:
        groups.setdefault(t["replica"], set()).add(t["group"])
    spread = ", ".join(
        f"{r.rsplit(':', 1)[-1]}: {served.get(r, 0)} requests of groups {sorted(groups.get(r, []))}"
        f", in flight mean {statistics.mean(v):.1f} max {max(v):.0f}"
        for r, v in sorted(per.items()))
    slow = ", ".join(f"{t['ttft']:.2f}s g{t['group']}{'*' if t['cold'] else ''}"
                     f"@{t['replica'].rsplit(':', 1)[-1]}" for t in tail)
    return f"    replicas: {spread}\n    slowest tenth (* = first of its group): {slow}"


def added_latency(router_url: str, replica_url: str, n: int) -> dict:
    """One-token requests in pairs, one through the router and one straight to the replica
    behind it, alternating which goes first. The probe router fronts that one replica: on a
    host whose replicas share its cores, a request is much slower right after another
    replica ran (measured here: about 2x) than right after the same one, so comparing
    requests that went to different replicas measures the cores, not the router."""
    body = {"prompt": "Good night, sweet prince", "max_tokens": 1, "temperature": 0}

    def timed(client: httpx.Client, url: str) -> float:
        start = time.perf_counter()
        client.post(url + "/v1/completions", json=body).raise_for_status()
        return time.perf_counter() - start

    direct, routed = [], []
    with httpx.Client(timeout=60) as client:
        for _ in range(3):
            timed(client, router_url)
            timed(client, replica_url)
        for i in range(n):
            if i % 2:
                direct.append(timed(client, replica_url))
                routed.append(timed(client, router_url))
            else:
                routed.append(timed(client, router_url))
                direct.append(timed(client, replica_url))
    diffs = sorted(r - d for r, d in zip(routed, direct))
    # The median's 95% confidence interval from order statistics: on a loaded host a
    # request's own time varies by far more than the router adds, so say how well it shows.
    half = int(1.96 * len(diffs) ** 0.5 / 2 + 0.5)
    mid = len(diffs) // 2
    return {"direct_p50": statistics.median(direct), "routed_p50": statistics.median(routed),
            "added_p50": statistics.median(diffs),
            "added_ci": (diffs[max(0, mid - half)], diffs[min(len(diffs) - 1, mid + half)])}


def router_quantiles(url: str, name: str) -> dict:
    """torchtpu_router:<name>'s quantiles from a router's /metrics."""
    out = {}
    for line in httpx.get(url + "/metrics", timeout=10).text.splitlines():
        if line.startswith(f"torchtpu_router:{name}{{quantile="):
            out[line.split('"')[1]] = float(line.rsplit(" ", 1)[1])
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=None, help="default: SmolLM2-135M-Instruct")
    p.add_argument("--replicas", type=int, default=2)
    p.add_argument("--groups", type=int, default=6)
    p.add_argument("--users-per-group", type=int, default=12)
    p.add_argument("--system-tokens", type=int, default=512)
    p.add_argument("--question-tokens", type=int, default=16)
    p.add_argument("--warmup-users", type=int, default=1,
                   help="each group's first users, sent first and not measured (0: measure "
                        "from the cold start, when every prompt is computed at once)")
    p.add_argument("--max-tokens", type=int, default=8)
    p.add_argument("--concurrency", type=int, default=8,
                   help="closed loop: this many requests in flight (vllm bench's "
                        "--max-concurrency)")
    p.add_argument("--rate", type=float, default=None,
                   help="open loop instead: Poisson arrivals at this many requests/s")
    p.add_argument("--page-size", type=int, default=16)
    p.add_argument("--num-pages", type=int, default=None,
                   help="KV pages per replica (default: 65%% of all system prompts)")
    p.add_argument("--latency-requests", type=int, default=100)
    p.add_argument("--spill-threshold", type=int, default=None,
                   help="the cache-aware router's --spill-threshold (default: the router's)")
    p.add_argument("--compare-spill", type=int, default=None, metavar="N",
                   help="also run cache-aware routing with --spill-threshold N, same "
                        "replicas, for comparison")
    p.add_argument("--trace", default=None, metavar="PREFIX",
                   help="write each mode's per-request trace and in-flight samples to "
                        "PREFIX.<mode>.json")
    p.add_argument("--quick", action="store_true", help="3 users per group, 40 latency probes")
    args = p.parse_args()
    if args.quick:
        args.users_per_group, args.latency_requests = 3, 40

    from transformers import AutoTokenizer

    from torchtpu._ports import free_port
    from torchtpu.serve.engine import resolve_model
    from torchtpu.serve.router import ReplicaLauncher

    model = resolve_model(args.model)
    tokenizer = AutoTokenizer.from_pretrained(model)
    prefix_tokens = args.groups * args.system_tokens
    num_pages = args.num_pages or max(
        (args.system_tokens + args.question_tokens + args.max_tokens) // args.page_size + 4,
        int(0.65 * prefix_tokens) // args.page_size)
    # Small shape sets keep warm-up short (compiled once, then loaded from the disk cache).
    need = args.system_tokens + args.question_tokens + args.max_tokens + 32
    max_len = min(b << k for k in range(12) for b in (256, 384) if b << k >= need)
    num_pages = max(num_pages, -(-max_len // args.page_size))  # a replica serves max_len
    serve_args = ["--model", model, "--page-size", str(args.page_size), "--num-pages",
                  str(num_pages), "--max-model-len", str(max_len), "--max-num-seqs", "4",
                  "--max-num-batched-tokens", "128"]
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # still stop the replicas
    base = free_port()
    launcher = ReplicaLauncher(args.replicas, base, serve_args)
    # Ports base..base+N-1 must be free too; taken at random above, retried if not.
    routers = []
    try:
        launcher.start()
        for r in launcher.replicas:
            wait_healthy(r["url"], 900)
        # (label, --mode, --spill-threshold); the last router only measures its own latency
        # on an idle replica.
        variants = [("round-robin", "round-robin", None),
                    ("cache-aware", "cache-aware", args.spill_threshold)]
        if args.compare_spill is not None:
            variants.insert(1, (f"spill>{args.compare_spill}", "cache-aware", args.compare_spill))
        variants.append(("probe", "cache-aware", args.spill_threshold))
        for label, mode, spill in variants:
            port = free_port()
            cmd = [sys.executable, "-m", "torchtpu.cli", "router", "--model", model,
                   "--port", str(port), "--mode", mode]
            if spill is not None:
                cmd += ["--spill-threshold", str(spill)]
            # The probe fronts the first replica only (see added_latency).
            for r in launcher.replicas[:1] if label == "probe" else launcher.replicas:
                cmd += ["--replica", r["url"], "--kv-events", r["events"],
                        "--kv-events-replay", r["replay"]]
            routers.append((label, f"http://127.0.0.1:{port}",
                            subprocess.Popen(cmd, stderr=subprocess.DEVNULL)))
        for _, url, _ in routers:
            wait_healthy(url, 120)
        time.sleep(1.0)  # every replica admitted by every router

        print(f"router_bench: {args.replicas} replicas of {os.path.basename(model)}, cores "
              f"{[sorted(c) if c else 'all' for c in launcher.cores]}, {num_pages} KV pages "
              f"x {args.page_size} tokens each ({num_pages * args.page_size} tokens); "
              f"{args.groups} groups x {args.users_per_group} users (after "
              f"{args.warmup_users} warm-up users each, not measured), system prompts "
              f"{args.system_tokens} tokens ({prefix_tokens} in all), questions "
              f"{args.question_tokens}, {args.max_tokens} output tokens, "
              + (f"Poisson arrivals at {args.rate} req/s" if args.rate
                 else f"concurrency {args.concurrency}")
              + f"; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs", flush=True)
        replica_urls = [r["url"] for r in launcher.replicas]
        results = {}
        for seed, (mode, url, _) in enumerate(routers[:-1]):
            warm, prompts = workload(tokenizer, seed + 1, args)
            before = scrape(replica_urls, ("vllm:prefix_cache_hits_total",
                                           "vllm:prefix_cache_queries_total"))
            res = asyncio.run(run_mode(url, warm, prompts, args))
            after = scrape(replica_urls, ("vllm:prefix_cache_hits_total",
                                          "vllm:prefix_cache_queries_total"))
            q = after["vllm:prefix_cache_queries_total"] - before["vllm:prefix_cache_queries_total"]
            h = after["vllm:prefix_cache_hits_total"] - before["vllm:prefix_cache_hits_total"]
            res["hit_rate"] = h / q if q else 0.0
            results[mode] = res
            print(f"  {mode:12s} {res['throughput']:7.1f} output tok/s  TTFT p50 "
                  f"{res['ttft_p50']:6.2f} s  p90 {res['ttft_p90']:6.2f} s  replicas' prefix "
                  f"hit rate {100 * res['hit_rate']:5.1f}%  ({len(prompts)} requests, "
                  f"{res['wall_s']:.1f} s)", flush=True)
            print(describe_tail(res), flush=True)
            if mode != "round-robin":
                c = scrape([url], ("torchtpu_router:load_spills_total",
                                   "torchtpu_router:load_spills_withheld_total"))
                print(f"    load filter: {c['torchtpu_router:load_spills_total']:.0f} spills, "
                      f"{c['torchtpu_router:load_spills_withheld_total']:.0f} withheld for "
                      f"lack of KV room (the unmeasured first users too)", flush=True)
            if args.trace:
                with open(f"{args.trace}.{mode}.json", "w") as f:
                    json.dump({k: res[k] for k in ("trace", "depth")}, f)
        ca, rr = results["cache-aware"], results["round-robin"]
        print(f"  cache-aware / round-robin: output throughput x"
              f"{ca['throughput'] / rr['throughput']:.2f} (goal >= 2), p90 TTFT "
              f"{rr['ttft_p90'] / ca['ttft_p90']:.2f}x lower (goal >= 5)")
        for label, res in results.items():
            if label.startswith("spill>"):
                print(f"  {label} / round-robin (cache-aware with --spill-threshold "
                      f"{args.compare_spill}): output throughput "
                      f"x{res['throughput'] / rr['throughput']:.2f}, p90 TTFT "
                      f"{rr['ttft_p90'] / res['ttft_p90']:.2f}x lower")
        run_url, probe_url = routers[-2][1], routers[-1][1]
        run_q = {n: router_quantiles(run_url, n) for n in ("routing_latency_seconds",
                                                           "added_latency_seconds")}
        lat = added_latency(probe_url, replica_urls[0], args.latency_requests)
        q = {n: router_quantiles(probe_url, n) for n in ("routing_latency_seconds",
                                                         "added_latency_seconds")}

        def ms(quantiles: dict, name: str) -> str:
            return (f"p50 {1e3 * quantiles[name].get('0.5', 0):.2f} ms  p90 "
                    f"{1e3 * quantiles[name].get('0.9', 0):.2f} ms")

        print(f"  router's own latency, its /metrics: request read -> upstream written, idle "
              f"replica {ms(q, 'routing_latency_seconds')} (goal p50 <= 1 ms); end to end "
              f"(request read -> response written, less the replica's time) "
              f"{ms(q, 'added_latency_seconds')}")
        print(f"    during the cache-aware run, with the replicas busy on every core: "
              f"routing {ms(run_q, 'routing_latency_seconds')}; end to end "
              f"{ms(run_q, 'added_latency_seconds')}")
        print(f"  one-token request end to end, through the router vs straight to its replica: "
              f"direct p50 "
              f"{1e3 * lat['direct_p50']:.2f} ms, through the router "
              f"{1e3 * lat['routed_p50']:.2f} ms; paired difference p50 "
              f"{1e3 * lat['added_p50']:+.2f} ms (95% CI {1e3 * lat['added_ci'][0]:+.2f} to "
              f"{1e3 * lat['added_ci'][1]:+.2f} ms, {args.latency_requests} pairs); load "
              f"average {os.getloadavg()[0]:.1f}")
    finally:
        for _, _, proc in routers:
            proc.send_signal(signal.SIGTERM)
        for _, _, proc in routers:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
        launcher.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
