"""Serving benchmark: `torchtpu serve` under load, fields named as `vllm bench serve` names them.

Workloads, each against a freshly started server (so every run begins cold, after warm-up):
  random        random prompts of --input-len tokens, --output-len new tokens, at each
                concurrency in --concurrency
  shared-prefix --groups groups x --prompts-per-group prompts; each group shares a
                --prefix-len-token system prompt followed by a --question-len question;
                run with the prefix cache on and off; each run also reports the
                timelines of its three slowest first tokens (queue, prompt chunks) and
                the mean TTFT of its first --prompts-per-group requests (sent together
                before any prefix is cached) against the rest
  structured    --structured-requests requests at --structured-concurrency, each with its
                own JSON schema (an object holding an array of output-len/2 digits), then as
                many fresh prompts without a grammar for as many tokens: TPOT with grammars
                over TPOT without (the goal is <= 1.10), and the grammar compile time per
                schema
  speculative   --spec-requests prompts whose answers quote them (a passage to repeat, code
                to rewrite with a rename: bench/serve_prompts.py) at concurrency 1, on one
                server with --spec-config, each prompt with speculative decoding off, then
                on (a per-request flag; the prefix cache is off so both compute the same):
                output tok/s on over off, and the drafts' acceptance rate
  int8          the random prompts of the lowest and highest concurrency again, on a server
                with --quantization int8: output tok/s int8 over f32 (the random workload's),
                and output tokens per server CPU second int8 over f32 (on a loaded machine
                the runs' wall times differ with the load, their CPU times much less)
With --compare-huge-pages the random and int8 workloads also run on servers started with
TORCHTPU_HUGE_PAGES=0 (weights on 4 KiB pages; rows named "...-4k-pages"), right after
the default ones: output tok/s and tokens per server CPU second huge over 4 KiB pages.
Baseline: Hugging Face generate() on PyTorch CPU, batch 1, for the random prompts, with one
thread and with all cores (the faster counts: on a busy machine one thread can win).

Prints one JSON object per run (each with its server's start-up time: load and warm-up),
then a summary: mean TTFT prefix-off / prefix-on, output tok/s at the highest / lowest
concurrency, structured-output TPOT over plain TPOT, speculative over plain, int8 over f32,
and c1 output tok/s over Hugging Face's.

    python bench/serve_bench.py                    # all workloads (long on 2 CPU cores)
    python bench/serve_bench.py --quick            # smaller sizes, same structure
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

import httpx


def anon_huge_pages_kib(pid: int | str = "self") -> int | None:
    """A process's anonymous memory on transparent huge pages, in KiB (None off Linux)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("AnonHugePages:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


class Server:
    def __init__(self, args, prefix_cache: bool, max_num_seqs: int,
                 timelines: bool = False, extra_args: list[str] | None = None,
                 env: dict[str, str] | None = None) -> None:
        from torchtpu._ports import free_port

        self.port = free_port()
        cmd = [sys.executable, "-m", "torchtpu.cli", "serve", "--port", str(self.port),
               "--max-model-len", str(args.max_model_len), "--max-num-seqs", str(max_num_seqs),
               "--max-num-batched-tokens", str(args.max_num_batched_tokens),
               "--enable-prefix-caching" if prefix_cache else "--no-enable-prefix-caching"]
        if args.model:
            cmd += ["--model", args.model]
        if args.num_pages:
            cmd += ["--num-pages", str(args.num_pages)]
        if timelines:
            cmd += ["--log-request-timelines"]
        cmd += extra_args or []
        # The server's log goes to a file: an unread pipe would fill and stall the server.
        self.log = tempfile.NamedTemporaryFile("w+", prefix="torchtpu-serve-", suffix=".log",
                                               delete=False)
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT,
                                     env={**os.environ, **(env or {})})
        self.url = f"http://127.0.0.1:{self.port}"
        t0 = time.perf_counter()
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited; its log ({self.log.name}) ends:\n"
                                   f"{self.log_tail()}")
            try:
                if httpx.get(self.url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(1)
        self.startup_s = time.perf_counter() - t0
        self.model = httpx.get(self.url + "/v1/models").json()["data"][0]["id"]

    def cpu_seconds(self) -> float | None:
        """CPU time the server process has used, all its threads (None off Linux): on a
        loaded machine the work a run took, where its wall time also holds the waits for a
        core."""
        try:
            with open(f"/proc/{self.proc.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            return None
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def log_tail(self, n: int = 3000) -> str:
        with open(self.log.name) as f:
            return f.read()[-n:]

    def timelines(self) -> list[dict]:
        """The per-request timelines the server logged (--log-request-timelines)."""
        marker = "serve: timeline "
        return [json.loads(line.split(marker, 1)[1])
                for line in self.log_tail(10**8).splitlines() if marker in line]

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=60)
        bugs = [line for line in self.log_tail(10**7).splitlines() if "BUG" in line]
        if bugs:
            print(f"# server reported: {bugs[:3]}", file=sys.stderr)
        os.unlink(self.log.name)


async def one_request(client: httpx.AsyncClient, server: Server, prompt: list[int] | str,
                      output_len: int, extra: dict | None = None) -> dict:
    body = {"model": server.model, "prompt": prompt, "max_tokens": output_len, "stream": True,
            "temperature": 0.0, "ignore_eos": True, "stream_options": {"include_usage": True},
            **(extra or {})}
    t0 = time.perf_counter()
    ttft, times, usage = None, [], None
    async with client.stream("POST", server.url + "/v1/completions", json=body) as r:
        r.raise_for_status()
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            now = time.perf_counter()
            if chunk.get("usage"):
                usage = chunk["usage"]
            if chunk["choices"] and chunk["choices"][0].get("text"):
                if ttft is None:
                    ttft = now - t0
                times.append(now)
    e2e = time.perf_counter() - t0
    n_out = usage["completion_tokens"]
    return {"ttft": ttft, "e2e": e2e, "itl": [b - a for a, b in zip(times, times[1:])],
            "tpot": (e2e - ttft) / (n_out - 1) if n_out > 1 else 0.0,
            "input": usage["prompt_tokens"], "output": n_out}


async def run_load(server: Server, prompts: list[list[int]] | list[str], output_len: int,
                   concurrency: int, extras: list[dict] | None = None
                   ) -> tuple[list[dict], float]:
    sem = asyncio.Semaphore(concurrency)
    extras = extras or [None] * len(prompts)
    async with httpx.AsyncClient(timeout=None) as client:
        async def limited(p, extra):
            async with sem:
                return await one_request(client, server, p, output_len, extra)

        t0 = time.perf_counter()
        results = await asyncio.gather(*(limited(p, e) for p, e in zip(prompts, extras)))
        return results, time.perf_counter() - t0


def cpu_load(server: Server, prompts: list[list[int]], output_len: int,
             concurrency: int, name: str) -> dict:
    """run_load, summarized, with the server's CPU seconds for the run and output tokens per
    CPU second (what compares two servers' work on a loaded machine)."""
    cpu0 = server.cpu_seconds()
    res, dur = asyncio.run(run_load(server, prompts, output_len, concurrency))
    cpu1 = server.cpu_seconds()
    r = summarize(name, res, dur, concurrency)
    if cpu0 is not None and cpu1 is not None and cpu1 > cpu0:
        r["server_cpu_s"] = cpu1 - cpu0
        r["output_tokens_per_server_cpu_s"] = r["total_output_tokens"] / (cpu1 - cpu0)
    return r


def pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    values = sorted(values)
    k = (len(values) - 1) * q / 100
    lo, hi = int(k), min(int(k) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def summarize(name: str, results: list[dict], duration: float, concurrency: int) -> dict:
    out = {"workload": name, "max_concurrency": concurrency, "completed": len(results),
           "duration": duration,
           "total_input_tokens": sum(r["input"] for r in results),
           "total_output_tokens": sum(r["output"] for r in results)}
    out["request_throughput"] = len(results) / duration
    out["output_throughput"] = out["total_output_tokens"] / duration
    out["total_token_throughput"] = (out["total_input_tokens"] + out["total_output_tokens"]) / duration
    series = {"ttft": [r["ttft"] for r in results], "tpot": [r["tpot"] for r in results],
              "itl": [x for r in results for x in r["itl"]], "e2el": [r["e2e"] for r in results]}
    for key, vals in series.items():
        ms = [v * 1000 for v in vals]
        out[f"mean_{key}_ms"] = statistics.fmean(ms) if ms else 0.0
        out[f"median_{key}_ms"] = pct(ms, 50)
        out[f"std_{key}_ms"] = statistics.pstdev(ms) if ms else 0.0
        out[f"p99_{key}_ms"] = pct(ms, 99)
    return out


def hf_baseline(args, prompts: list[list[int]], output_len: int, threads: int) -> dict:
    """Hugging Face generate() on PyTorch CPU with `threads` intra-op threads (on a busy
    machine one thread can beat all cores: each parallel region waits for every thread)."""
    import torch
    from transformers import AutoModelForCausalLM

    from torchtpu.serve.engine import resolve_model

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(resolve_model(args.model)).eval()
    ttfts, e2es, cpus, n_out = [], [], [], 0
    t_all = time.perf_counter()
    for p in prompts:
        ids = torch.tensor([p])
        mask = torch.ones_like(ids)
        with torch.no_grad():
            t0 = time.perf_counter()
            model.generate(ids, attention_mask=mask, max_new_tokens=1, do_sample=False)
            ttfts.append(time.perf_counter() - t0)
            t0, c0 = time.perf_counter(), time.process_time()
            out = model.generate(ids, attention_mask=mask, max_new_tokens=output_len,
                                 min_new_tokens=output_len, do_sample=False)
            e2es.append(time.perf_counter() - t0)
            cpus.append(time.process_time() - c0)
        n_out += out.shape[1] - ids.shape[1]
    duration = time.perf_counter() - t_all - sum(ttfts)
    return {"workload": "hf-generate-cpu-batch1", "completed": len(prompts),
            "total_output_tokens": n_out, "output_throughput": n_out / sum(e2es),
            "mean_ttft_ms": 1000 * statistics.fmean(ttfts),
            "mean_e2el_ms": 1000 * statistics.fmean(e2es),
            "mean_tpot_ms": 1000 * statistics.fmean(
                [(e - t) / (output_len - 1) for e, t in zip(e2es, ttfts)]),
            "duration": duration, "torch_threads": torch.get_num_threads(),
            "output_tokens_per_cpu_s": n_out / sum(cpus)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=None)
    ap.add_argument("--quick", action="store_true", help="smaller sizes, same structure")
    ap.add_argument("--input-len", type=int, default=256)
    ap.add_argument("--output-len", type=int, default=128)
    ap.add_argument("--concurrency", default="1,4,16")
    ap.add_argument("--prompts-per-level", type=int, default=None,
                    help="requests per concurrency level (default: 2x the concurrency, >= 4)")
    ap.add_argument("--groups", type=int, default=8)
    ap.add_argument("--prompts-per-group", type=int, default=8)
    ap.add_argument("--prefix-len", type=int, default=1024)
    ap.add_argument("--question-len", type=int, default=64)
    ap.add_argument("--prefix-output-len", type=int, default=16)
    ap.add_argument("--max-model-len", type=int, default=1280)
    ap.add_argument("--max-num-batched-tokens", type=int, default=512)
    ap.add_argument("--num-pages", type=int, default=None)
    ap.add_argument("--structured-requests", type=int, default=32)
    ap.add_argument("--structured-concurrency", type=int, default=16)
    ap.add_argument("--spec-requests", type=int, default=8)
    # About the length of the text the prompts ask to be quoted or rewritten.
    ap.add_argument("--spec-output-len", type=int, default=256)
    # 7 drafts: with the token they follow, a step of one request is 8 tokens, a whole
    # token bucket of the runner (a power of two).
    ap.add_argument("--spec-config", default='{"method": "ngram", "num_speculative_tokens": 7, '
                    '"prompt_lookup_min": 2, "prompt_lookup_max": 4}')
    ap.add_argument("--workloads",
                    default="random,int8,speculative,shared-prefix,structured,hf")
    ap.add_argument("--compare-huge-pages", action="store_true",
                    help="also run the random and int8 workloads with TORCHTPU_HUGE_PAGES=0")
    ap.add_argument("--out", default=None, help="also write all results to this JSON file")
    args = ap.parse_args()
    if args.quick:
        args.input_len, args.output_len, args.concurrency = 64, 16, "1,4"
        args.groups, args.prompts_per_group, args.prefix_len, args.question_len = 2, 4, 256, 32
        args.max_model_len = 512
        args.structured_requests, args.structured_concurrency = 8, 4
        args.spec_requests, args.spec_output_len = 2, 32
    levels = [int(c) for c in args.concurrency.split(",")]
    workloads = args.workloads.split(",")
    rng = random.Random(0)
    vocab_hi = 20000  # plain-text region of the default tokenizer's vocabulary
    results = []

    def emit(r: dict, server: Server | None = None) -> None:
        if server is not None:
            r["server_startup_s"] = server.startup_s
            r["server_anon_huge_pages_kib"] = anon_huge_pages_kib(server.proc.pid)
        results.append(r)
        print(json.dumps(r), flush=True)

    random_prompts = {}
    # (suffix, server environment): the default, then 4 KiB pages when compared.
    page_modes = [("", None)] + ([("-4k-pages", {"TORCHTPU_HUGE_PAGES": "0"})]
                                 if args.compare_huge_pages else [])
    if "random" in workloads:
        for suffix, env in page_modes:
            server = Server(args, prefix_cache=False, max_num_seqs=max(levels), env=env)
            print(f"# server up in {server.startup_s:.1f} s (load + warm-up)", file=sys.stderr)
            try:
                for c in levels:
                    n = args.prompts_per_level or max(4, 2 * c)
                    prompts = random_prompts.get(c) or [
                        [rng.randrange(100, vocab_hi) for _ in range(args.input_len)]
                        for _ in range(n)]
                    random_prompts[c] = prompts
                    emit(cpu_load(server, prompts, args.output_len, c,
                                  f"random-{args.input_len}in-{args.output_len}out{suffix}"),
                         server)
            finally:
                server.close()
    if "int8" in workloads:
        for suffix, env in page_modes:
            server = Server(args, prefix_cache=False, max_num_seqs=max(levels),
                            extra_args=["--quantization", "int8"], env=env)
            try:
                for c in sorted({min(levels), max(levels)}):
                    prompts = random_prompts.get(c) or [
                        [rng.randrange(100, vocab_hi) for _ in range(args.input_len)]
                        for _ in range(args.prompts_per_level or max(4, 2 * c))]
                    random_prompts.setdefault(c, prompts)
                    emit(cpu_load(server, prompts, args.output_len, c,
                                  f"int8-random-{args.input_len}in-{args.output_len}out"
                                  f"{suffix}"), server)
            finally:
                server.close()
    if "speculative" in workloads:
        from serve_prompts import repetitive_prompts

        prompts = repetitive_prompts(args.spec_requests, random.Random(1))
        server = Server(args, prefix_cache=False, max_num_seqs=max(levels),
                        extra_args=["--speculative-config", args.spec_config])
        try:
            for on in (False, True):
                before = _spec_counters(server)
                res, dur = asyncio.run(run_load(server, prompts, args.spec_output_len, 1,
                                                [{"speculative": on}] * len(prompts)))
                r = summarize(f"repetitive-speculative-{'on' if on else 'off'}", res, dur, 1)
                after = _spec_counters(server)
                r.update({k: after[k] - before[k] for k in after})
                drafted = r["spec_decode_num_draft_tokens"]
                r["acceptance_rate"] = (r["spec_decode_num_accepted_tokens"] / drafted
                                        if drafted else None)
                emit(r, server)
        finally:
            server.close()
    if "shared-prefix" in workloads:
        prefixes = [[rng.randrange(100, vocab_hi) for _ in range(args.prefix_len)]
                    for _ in range(args.groups)]
        prompts = [prefix + [rng.randrange(100, vocab_hi) for _ in range(args.question_len)]
                   for prefix in prefixes for _ in range(args.prompts_per_group)]
        rng.shuffle(prompts)
        c = args.prompts_per_group
        for on in (True, False):
            server = Server(args, prefix_cache=on, max_num_seqs=c, timelines=True)
            try:
                res, dur = asyncio.run(run_load(server, prompts, args.prefix_output_len, c))
                r = summarize(f"shared-prefix-cache-{'on' if on else 'off'}", res, dur, c)
                r["prefix_cache_hit_rate"] = _hit_rate(server)
                # Where the mean goes: the first c requests, sent together before any prefix
                # is cached (each group's prefix is computed once, one group after another),
                # against the rest.
                first, rest = [x["ttft"] for x in res[:c]], [x["ttft"] for x in res[c:]]
                r["mean_ttft_first_wave_ms"] = 1000 * statistics.fmean(first)
                r["mean_ttft_rest_ms"] = 1000 * statistics.fmean(rest) if rest else 0.0
                r["first_wave_ttft_share"] = sum(first) / sum(first + rest)
                # Where the tail's time went: queue, each prompt chunk (step, tokens,
                # seconds since arrival), first token, for the slowest requests.
                slowest = sorted(server.timelines(), key=lambda t: t["ttft_s"])[-3:]
                r["slowest_ttft_timelines"] = slowest[::-1]
                emit(r, server)
            finally:
                server.close()
    if "structured" in workloads:
        c, n = args.structured_concurrency, args.structured_requests
        prompts = [[rng.randrange(100, vocab_hi) for _ in range(args.input_len)]
                   for _ in range(n)]
        digits = max(1, args.output_len // 2)
        extras = [{"guided_json": {
            "type": "object", "additionalProperties": False, "required": [f"k{i}"],
            "properties": {f"k{i}": {"type": "array", "minItems": digits, "maxItems": digits,
                                     "items": {"type": "integer", "minimum": 0,
                                               "maximum": 9}}}}} for i in range(n)]
        server = Server(args, prefix_cache=True, max_num_seqs=c)
        try:
            # Room for the JSON around the digits; the grammar ends each request.
            res, dur = asyncio.run(run_load(server, prompts, 2 * args.output_len + 32, c,
                                            extras))
            r = summarize("structured-json", res, dur, c)
            r.update(_grammar_compile(server))
            emit(r, server)
            # Fresh prompts of the same length (the first run's are in the prefix cache now,
            # which would make this run's prefills nearly free), without a grammar, for as
            # many tokens as the grammar gave on average: TPOT grows with the context.
            same_len = round(r["total_output_tokens"] / max(1, r["completed"]))
            fresh = [[rng.randrange(100, vocab_hi) for _ in range(args.input_len)]
                     for _ in range(n)]
            res, dur = asyncio.run(run_load(server, fresh, same_len, c))
            emit(summarize("structured-baseline-plain", res, dur, c))
        finally:
            server.close()
    if "hf" in workloads and random_prompts:
        for threads in sorted({1, os.cpu_count() or 1}):
            emit(hf_baseline(args, random_prompts[min(random_prompts)][:2], args.output_len,
                             threads))
    summary = {}
    on = next((r for r in results if r["workload"] == "shared-prefix-cache-on"), None)
    off = next((r for r in results if r["workload"] == "shared-prefix-cache-off"), None)
    if on and off:
        summary["prefix_cache_mean_ttft_speedup"] = off["mean_ttft_ms"] / on["mean_ttft_ms"]
        if on["mean_ttft_rest_ms"]:
            summary["prefix_cache_mean_ttft_speedup_after_first_wave"] = (
                off["mean_ttft_rest_ms"] / on["mean_ttft_rest_ms"])
    rnd = [r for r in results if r["workload"].startswith("random-")
           and not r["workload"].endswith("-4k-pages")]
    for r in results:  # huge pages (the default) over 4 KiB pages, same workload
        if r["workload"].endswith("-4k-pages"):
            huge = next((x for x in results
                         if x["workload"] == r["workload"][:-len("-4k-pages")]
                         and x["max_concurrency"] == r["max_concurrency"]), None)
            if huge:
                name = f"{huge['workload'].split('-')[0]}_c{r['max_concurrency']}"
                summary[f"huge_over_4k_pages_output_throughput_{name}"] = (
                    huge["output_throughput"] / r["output_throughput"])
                if "output_tokens_per_server_cpu_s" in huge and \
                        "output_tokens_per_server_cpu_s" in r:
                    summary[f"huge_over_4k_pages_output_tokens_per_cpu_s_{name}"] = (
                        huge["output_tokens_per_server_cpu_s"] /
                        r["output_tokens_per_server_cpu_s"])
    # Hugging Face at its best thread count.
    hf = max((r for r in results if r["workload"].startswith("hf-")),
             key=lambda r: r["output_throughput"], default=None)
    if len(rnd) > 1:
        lo = min(rnd, key=lambda r: r["max_concurrency"])
        hi = max(rnd, key=lambda r: r["max_concurrency"])
        summary[f"output_throughput_c{hi['max_concurrency']}_over_c{lo['max_concurrency']}"] = (
            hi["output_throughput"] / lo["output_throughput"])
    for r in rnd:
        c = r["max_concurrency"]
        int8 = next((x for x in results if x["workload"].startswith("int8-random-")
                     and not x["workload"].endswith("-4k-pages")
                     and x["max_concurrency"] == c), None)
        if int8:
            summary[f"int8_over_f32_output_throughput_c{c}"] = (
                int8["output_throughput"] / r["output_throughput"])
            if "output_tokens_per_server_cpu_s" in int8 and "output_tokens_per_server_cpu_s" in r:
                summary[f"int8_over_f32_output_tokens_per_cpu_s_c{c}"] = (
                    int8["output_tokens_per_server_cpu_s"] / r["output_tokens_per_server_cpu_s"])
    for name, rows in (("", rnd), ("int8_", [r for r in results
                                            if r["workload"].startswith("int8-random-")
                                            and not r["workload"].endswith("-4k-pages")])):
        lo = min(rows, key=lambda r: r["max_concurrency"], default=None)
        if hf and lo and lo["max_concurrency"] == 1:
            summary[f"{name}c1_output_throughput_over_hf_cpu"] = (
                lo["output_throughput"] / hf["output_throughput"])
            # The same by CPU time (the server process's against generate()'s, at the best
            # HF thread count), which a shared machine's other load skews far less.
            hf_cpu = max(r.get("output_tokens_per_cpu_s", 0) for r in results
                         if r["workload"].startswith("hf-"))
            if "output_tokens_per_server_cpu_s" in lo and hf_cpu:
                summary[f"{name}c1_output_tokens_per_cpu_s_over_hf_cpu"] = (
                    lo["output_tokens_per_server_cpu_s"] / hf_cpu)
    spec_on = next((r for r in results if r["workload"] == "repetitive-speculative-on"), None)
    spec_off = next((r for r in results if r["workload"] == "repetitive-speculative-off"), None)
    if spec_on and spec_off:
        summary["speculative_over_plain_output_throughput_c1"] = (
            spec_on["output_throughput"] / spec_off["output_throughput"])
        summary["speculative_acceptance_rate"] = spec_on["acceptance_rate"]
    summary["server_startup_s"] = {r["workload"]: round(r["server_startup_s"], 1)
                                   for r in results if "server_startup_s" in r}
    summary["load_average"] = os.getloadavg()
    st = next((r for r in results if r["workload"] == "structured-json"), None)
    plain = next((r for r in results if r["workload"] == "structured-baseline-plain"), None)
    if st and plain:
        summary["structured_tpot_over_plain"] = st["mean_tpot_ms"] / plain["mean_tpot_ms"]
        summary["grammar_compile_ms_per_schema"] = st["grammar_compile_ms_per_schema"]
    print(json.dumps({"summary": summary}), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"results": results, "summary": summary}, f, indent=1)


def _grammar_compile(server: Server) -> dict:
    vals = {}
    for line in httpx.get(server.url + "/metrics").text.splitlines():
        for key in ("torchtpu:grammar_compile_seconds_sum",
                    "torchtpu:grammar_compile_seconds_count"):
            if line.startswith(key):
                vals[key] = float(line.rsplit(" ", 1)[1])
    count = vals.get("torchtpu:grammar_compile_seconds_count", 0.0)
    return {"grammar_compiles": count, "grammar_compile_ms_per_schema":
            1000 * vals.get("torchtpu:grammar_compile_seconds_sum", 0.0) / count if count else None}


def _spec_counters(server: Server) -> dict:
    names = ("vllm:spec_decode_num_drafts", "vllm:spec_decode_num_draft_tokens",
             "vllm:spec_decode_num_accepted_tokens")
    vals = {n.split(":", 1)[1]: 0.0 for n in names}
    for line in httpx.get(server.url + "/metrics").text.splitlines():
        for n in names:
            if line.startswith(n + "_total"):
                vals[n.split(":", 1)[1]] = float(line.rsplit(" ", 1)[1])
    return vals


def _hit_rate(server: Server) -> float | None:
    text = httpx.get(server.url + "/metrics").text
    vals = {}
    for line in text.splitlines():
        for key in ("vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total"):
            if line.startswith(key):
                vals[key] = float(line.rsplit(" ", 1)[1])
    q = vals.get("vllm:prefix_cache_queries_total")
    return vals.get("vllm:prefix_cache_hits_total", 0.0) / q if q else None


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    main()
