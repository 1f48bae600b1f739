"""torch.compile(backend="tpu") against jax.jit on the same XLA CPU, measured side by side.

One small GPT-style decoder (token embedding + learned positions, pre-LayerNorm blocks with
causal attention as explicit matmuls + masked softmax, exact-GELU MLP, final LayerNorm,
untied LM head, cross-entropy) is written once in PyTorch and once in pure jax.numpy, with
the same sizes, dtype (float32) and initial weights (the PyTorch weights are copied into
JAX arrays). For each way of running it the script reports the median wall time of

- a forward pass (logits, no autograd), and
- a training step (loss + grads + plain SGD update, the same optimizer in both),

over ``--steps`` steps after warm-up. Every timed step waits for its results (the loss and
the updated weights), so the figures are dispatch + execute. The rows are:

- ours: ``torch.compile(backend="tpu")`` on ``tpu`` (the model + loss, and ``opt.step``,
  each compiled; backward runs the AOTAutograd backward graph);
- jax: ``jax.jit`` of the forward and of the whole step (``value_and_grad`` + update,
  weights donated) on JAX's CPU device;
- jax on our plugin: the same ``jax.jit`` programs run by the PJRT plugin that runs ours
  (registered with JAX as an extra platform). It separates the two causes of a gap: the
  plugin's XLA build against jaxlib's (same program, other compiler), and our lowering and
  per-call overhead against JAX's (same compiler, other program);
- for reference: PyTorch eager on the CPU, and ``torch.compile`` (inductor) on the CPU
  (an inductor failure is reported in its row, not raised).

Besides wall time each row shows the process CPU time per step (all threads): on a shared
machine whose other load steals cores, wall medians swing by tens of percent between runs
while CPU time stays close to the work done. Both sides run with the same XLA_FLAGS:
the tpu device's start turns XNNPACK off in XLA_FLAGS on a CPU plugin, and this benchmark
starts it before jaxlib's backends, so both read that one process-wide variable (printed in
the header).

It also measures the first (cold) training step of ours in a fresh process with an empty
``TORCHTPU_CACHE_DIR`` and again in a second process that reuses that directory (the disk
cache should make the second compile nothing), and checks once that our compiled loss
equals JAX's for the same weights and inputs over a few SGD steps; it exits 1 if not.

The MFU column counts TorchTitan's FLOPs per token (6N + 12LdT) against the plugin's
measured float32 matmul peak, the same for every row. ``--model 135m`` runs the model at
the dimensions of TorchTitan's 135M-class config, where jaxlib's row says what XLA on this
CPU reaches on that model size.

    python bench/compiled_vs_jax.py [--steps N] [--model small|135m]   (make bench-compile)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

import torchtpu
from torchtpu.flops import peak_flops

# The goal for ours/JAX (forward and training step) and the numerics tolerance.
GOAL_RATIO = 1.10
LOSS_RTOL = {"float32": 1e-4, "bfloat16": 2e-2}
LOSS_ATOL = {"float32": 1e-5, "bfloat16": 1e-2}
NUM_CHECK_STEPS = 3
OURS = "ours: compile(tpu) on tpu"
# JAX's reference runs on jaxlib's client of the plugin's kind of device: its CPU for a CPU
# plugin, its GPU for the CUDA plugin (where JAX's GPU backend is that same plugin build).
JAX_PLATFORM = "gpu" if torchtpu._C.plugin_info()["platform"] in ("cuda", "rocm", "gpu") else "cpu"
JAX = f"jax.jit on {JAX_PLATFORM}"
JAX_ON_PLUGIN = "jax.jit on our plugin"
PLUGIN_PLATFORM = "torchtpu_plugin"


@dataclass(frozen=True)
class Config:
    vocab_size: int = 256
    d_model: int = 128
    num_layers: int = 2
    num_heads: int = 4
    seq_len: int = 64
    batch_size: int = 8
    lr: float = 0.1
    seed: int = 0
    dtype: str = "float32"  # weights and activations, on both sides (--dtype)

    @property
    def torch_dtype(self) -> torch.dtype:
        return getattr(torch, self.dtype)


# --model: the default is small enough to time many steps; "135m" has the dimensions of
# TorchTitan's 135M-class config (SmolLM2-135M's width, depth, heads and vocabulary) at the
# titan benchmark's batch, so its MFU column says what a compiler reaches on this model size.
MODELS = {
    "small": Config(),
    "135m": Config(vocab_size=49152, d_model=576, num_layers=30, num_heads=9, seq_len=256,
                   batch_size=2, lr=1e-3),
    # ~0.94B parameters: an accelerator's model size (scripts/gpu_check.sh runs it in bf16).
    "1b": Config(vocab_size=32000, d_model=2048, num_layers=16, num_heads=16, seq_len=1024,
                 batch_size=4, lr=1e-3),
}


def train_flops_per_step(cfg: Config, model: torch.nn.Module) -> float:
    """TorchTitan's count: 6 FLOPs per non-embedding parameter per token, plus 12·L·d·T for
    attention, times the tokens of a step."""
    embedding = sum(p.numel() for n, p in model.named_parameters()
                    if n in ("tok_emb.weight", "pos_emb"))
    n = sum(p.numel() for p in model.parameters()) - embedding
    per_token = 6 * n + 12 * cfg.num_layers * cfg.d_model * cfg.seq_len
    return float(per_token * cfg.batch_size * cfg.seq_len)


# ----------------------------------------------------------------------------- PyTorch model


class Block(torch.nn.Module):
    def __init__(self, cfg: Config) -> None:
        super().__init__()
        d = cfg.d_model
        self.num_heads = cfg.num_heads
        self.ln1 = torch.nn.LayerNorm(d)
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.proj = torch.nn.Linear(d, d)
        self.ln2 = torch.nn.LayerNorm(d)
        self.fc = torch.nn.Linear(d, 4 * d)
        self.fc_out = torch.nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        h = self.num_heads
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q = q.view(b, t, h, d // h).transpose(1, 2)
        k = k.view(b, t, h, d // h).transpose(1, 2)
        v = v.view(b, t, h, d // h).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d // h))
        att = att.masked_fill(~mask[:t, :t], float("-inf"))
        att = torch.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.fc_out(F.gelu(self.fc(self.ln2(x))))


class GPT(torch.nn.Module):
    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.tok_emb = torch.nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos_emb = torch.nn.Parameter(torch.randn(cfg.seq_len, cfg.d_model) * 0.02)
        self.blocks = torch.nn.ModuleList(Block(cfg) for _ in range(cfg.num_layers))
        self.ln_f = torch.nn.LayerNorm(cfg.d_model)
        self.head = torch.nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        mask = torch.tril(torch.ones(cfg.seq_len, cfg.seq_len, dtype=torch.bool))
        self.register_buffer("mask", mask, persistent=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        t = tokens.shape[1]
        x = self.tok_emb(tokens) + self.pos_emb[:t]
        for block in self.blocks:
            x = block(x, self.mask)
        return self.head(self.ln_f(x))


def torch_loss(model: torch.nn.Module, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    logits = model(tokens)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


# ----------------------------------------------------------------------------- JAX model
# Weights are a dict keyed by the PyTorch parameter names, in PyTorch's layouts (Linear
# weights are (out, in)), so copying is by name.


def _jax_model(cfg: Config) -> tuple[Callable, Callable, Callable]:
    import jax
    import jax.numpy as jnp

    def layer_norm(x, w, b):
        mean = jnp.mean(x, axis=-1, keepdims=True)
        var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
        return (x - mean) * jax.lax.rsqrt(var + 1e-5) * w + b

    def linear(x, p, name, bias=True):
        y = x @ p[f"{name}.weight"].T
        return y + p[f"{name}.bias"] if bias else y

    mask = jnp.tril(jnp.ones((cfg.seq_len, cfg.seq_len), dtype=bool))

    def forward(p, tokens):
        b, t = tokens.shape
        d, h = cfg.d_model, cfg.num_heads
        x = p["tok_emb.weight"][tokens] + p["pos_emb"][:t]
        for i in range(cfg.num_layers):
            pre = f"blocks.{i}"
            qkv = linear(layer_norm(x, p[f"{pre}.ln1.weight"], p[f"{pre}.ln1.bias"]), p,
                         f"{pre}.qkv")
            q, k, v = jnp.split(qkv, 3, axis=2)
            q, k, v = (z.reshape(b, t, h, d // h).transpose(0, 2, 1, 3) for z in (q, k, v))
            att = (q @ k.transpose(0, 1, 3, 2)) * (1.0 / math.sqrt(d // h))
            att = jnp.where(mask[:t, :t], att, -jnp.inf)
            att = jax.nn.softmax(att, axis=-1)
            y = (att @ v).transpose(0, 2, 1, 3).reshape(b, t, d)
            x = x + linear(y, p, f"{pre}.proj")
            hid = jax.nn.gelu(
                linear(layer_norm(x, p[f"{pre}.ln2.weight"], p[f"{pre}.ln2.bias"]), p,
                       f"{pre}.fc"),
                approximate=False,
            )
            x = x + linear(hid, p, f"{pre}.fc_out")
        x = layer_norm(x, p["ln_f.weight"], p["ln_f.bias"])
        return linear(x, p, "head", bias=False)

    def loss_fn(p, tokens, targets):
        logits = forward(p, tokens)
        logp = jax.nn.log_softmax(logits, axis=-1)
        return -jnp.mean(jnp.take_along_axis(logp, targets[..., None], axis=-1))

    def train_step(p, tokens, targets):
        loss, grads = jax.value_and_grad(loss_fn)(p, tokens, targets)
        return jax.tree_util.tree_map(lambda w, g: w - cfg.lr * g, p, grads), loss

    fwd = jax.jit(forward)
    step = jax.jit(train_step, donate_argnums=0)
    return fwd, step, jax.jit(loss_fn)


def _jax_params(model: torch.nn.Module) -> dict[str, Any]:
    import jax.numpy as jnp

    # Through float32 (NumPy has no bfloat16); the values are the model's own, in its dtype.
    return {n: jnp.asarray(p.detach().float().cpu().numpy(), dtype=getattr(jnp, str(p.dtype)[6:]))
            for n, p in model.named_parameters()}


# ----------------------------------------------------------------------------- harness


def _timed_ms(fn: Callable[[], Any], steps: int) -> tuple[list[float], list[float]]:
    """Wall and process CPU milliseconds of each of `steps` calls."""
    wall, cpu = [], []
    for _ in range(steps):
        start, start_cpu = time.perf_counter(), time.process_time()
        fn()
        wall.append((time.perf_counter() - start) * 1e3)
        cpu.append((time.process_time() - start_cpu) * 1e3)
    return wall, cpu


def _make_model(cfg: Config) -> GPT:
    torch.manual_seed(cfg.seed)
    return GPT(cfg).to(cfg.torch_dtype)


def _make_batch(cfg: Config) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(cfg.seed + 1)
    data = torch.randint(0, cfg.vocab_size, (cfg.batch_size, cfg.seq_len + 1), generator=g)
    return data[:, :-1].contiguous(), data[:, 1:].contiguous()


class TorchRunner:
    """A model, its SGD optimizer and the forward / training-step callables for one way of
    running it (eager or compiled, on ``cpu`` or ``tpu``). ``sync`` waits for a result."""

    def __init__(self, cfg: Config, device: str, backend: str | None) -> None:
        self.model = _make_model(cfg).to(device)
        # foreach=False: the CPU default; on tpu the default (foreach) would need
        # aten::_foreach_add.List in the graph. Compiled, both become one fused program.
        self.opt = torch.optim.SGD(self.model.parameters(), lr=cfg.lr, foreach=False)
        tokens, targets = _make_batch(cfg)
        self.tokens, self.targets = tokens.to(device), targets.to(device)
        self.device = device
        model, opt = self.model, self.opt

        def loss_fn(tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
            return torch_loss(model, tokens, targets)

        def opt_step() -> None:
            opt.step()

        if backend is None:
            self._forward, self._loss, self._opt_step = model, loss_fn, opt_step
        else:
            self._forward = torch.compile(model, backend=backend)
            self._loss = torch.compile(loss_fn, backend=backend)
            self._opt_step = torch.compile(opt_step, backend=backend)

    def sync(self, t: torch.Tensor) -> None:
        if self.device == "tpu":
            torchtpu.block_until_ready(t)

    def forward(self) -> torch.Tensor:
        with torch.no_grad():
            logits = self._forward(self.tokens)
        self.sync(logits)
        return logits

    def train_step(self) -> float | torch.Tensor:
        loss = self._loss(self.tokens, self.targets)
        loss.backward()
        self._opt_step()
        self.opt.zero_grad(set_to_none=True)
        self.sync(loss)
        # The update is the last program enqueued; waiting on one weight waits for it.
        self.sync(self.model.head.weight)
        return loss


class JaxRunner:
    """JAX's model on `platform`'s first device (jaxlib's CPU, or our plugin)."""

    def __init__(self, cfg: Config, model: torch.nn.Module, platform: str = JAX_PLATFORM) -> None:
        import jax

        self.jax = jax
        device = jax.devices(platform)[0]
        self.fwd, self.step, self.loss_fn = _jax_model(cfg)
        self.params = jax.device_put(_jax_params(model), device)
        tokens, targets = _make_batch(cfg)
        self.tokens = jax.device_put(tokens.numpy().astype(np.int32), device)
        self.targets = jax.device_put(targets.numpy().astype(np.int32), device)

    def forward(self) -> Any:
        return self.fwd(self.params, self.tokens).block_until_ready()

    def train_step(self) -> Any:
        self.params, loss = self.step(self.params, self.tokens, self.targets)
        self.jax.block_until_ready((self.params, loss))
        return loss


def _summary(e: BaseException) -> str:
    """The informative lines of an exception (Dynamo wraps the backend's error in prose)."""
    skip = ("Set TORCHDYNAMO_VERBOSE", "For even more developer context", "backend=")
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip() and not ln.startswith(skip)]
    return f"{type(e).__name__}: {' '.join(lines)[:400]}"


def measure(makers: dict[str, Callable[[], Any]], steps: int, warmup: int,
            rounds: int) -> list[dict[str, Any]]:
    """Median forward and training-step times for each runner. The runners are built and
    warmed up first (compiles happen there), then timed in interleaved rounds, so a burst of
    load on a shared machine lands on every row alike rather than on one."""
    rows: dict[str, dict[str, Any]] = {}
    runners: dict[str, Any] = {}
    for name, make in makers.items():
        rows[name] = {"name": name, "forward_ms": None, "train_ms": None, "forward_cpu_ms": None,
                      "train_cpu_ms": None, "error": None}
        try:
            runner = make()
            for _ in range(warmup):
                runner.forward()
                runner.train_step()
            runners[name] = runner
        except Exception as e:  # a row that cannot run reports why instead
            rows[name]["error"] = _summary(e)
            if os.environ.get("BENCH_TRACEBACK"):
                traceback.print_exc()
    per_round = max(1, math.ceil(steps / rounds))
    for kind, key in (("forward", "forward_ms"), ("train_step", "train_ms")):
        wall: dict[str, list[float]] = {name: [] for name in runners}
        cpu: dict[str, list[float]] = {name: [] for name in runners}
        for _ in range(rounds):
            for name, runner in runners.items():
                # One untimed step first: the previous runner's worker threads (XLA's and
                # OpenMP's spin before sleeping) would otherwise steal this one's cores.
                getattr(runner, kind)()
                w, c = _timed_ms(getattr(runner, kind), per_round)
                wall[name] += w
                cpu[name] += c
        for name in runners:
            rows[name][key] = statistics.median(wall[name])
            rows[name][key.replace("_ms", "_cpu_ms")] = statistics.median(cpu[name])
    return list(rows.values())


def check_numerics(cfg: Config) -> tuple[bool, list[tuple[float, float]]]:
    """Our compiled training loss vs JAX's over NUM_CHECK_STEPS SGD steps from the same
    weights and batch; the first step compares the initial loss, the rest the updates."""
    ours = TorchRunner(cfg, "tpu", "tpu")
    theirs = JaxRunner(cfg, _make_model(cfg))
    pairs = []
    for _ in range(NUM_CHECK_STEPS):
        pairs.append((float(ours.train_step().item()), float(theirs.train_step())))
    rtol, atol = LOSS_RTOL[cfg.dtype], LOSS_ATOL[cfg.dtype]
    ok = all(math.isclose(a, b, rel_tol=rtol, abs_tol=atol) for a, b in pairs)
    return ok, pairs


def cold_start_probe(cfg: Config) -> None:
    """Run in a child process: times the first compiled training step (Dynamo trace,
    lowering, PJRT compile or disk-cache load, run), then a steady-state step."""
    torchtpu.debug.reset_metrics()
    start = time.perf_counter()
    runner = TorchRunner(cfg, "tpu", "tpu")
    setup_s = time.perf_counter() - start
    start = time.perf_counter()
    try:
        loss = float(runner.train_step().item())
    except Exception as e:
        print(json.dumps({"error": _summary(e)}))
        return
    first_s = time.perf_counter() - start
    start = time.perf_counter()
    runner.train_step()
    second_s = time.perf_counter() - start
    m = torchtpu.debug.metrics()
    print(json.dumps({
        "setup_s": setup_s, "first_step_s": first_s, "second_step_s": second_s, "loss": loss,
        "num_compiles": m.get("num_compiles", 0),
        "num_compile_cache_hits_disk": m.get("num_compile_cache_hits_disk", 0),
        "num_graphs_compiled": m.get("num_graphs_compiled", 0),
        "compile_time_s": m.get("compile_time_s", 0.0),
    }))


def _run_probe(cache_dir: str, model: str, dtype: str) -> dict[str, Any]:
    env = dict(os.environ, TORCHTPU_CACHE_DIR=cache_dir)
    start = time.perf_counter()
    argv = [sys.executable, os.path.abspath(__file__), "--cold-start-probe", "--model", model,
            "--dtype", dtype]
    r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    wall_s = time.perf_counter() - start
    if r.returncode != 0:
        tail = [ln for ln in r.stderr.strip().splitlines() if ln.strip()][-3:]
        return {"error": f"probe exited {r.returncode}: " + " | ".join(tail)[:400]}
    out = json.loads(r.stdout.strip().splitlines()[-1])
    if "error" not in out:
        out["process_wall_s"] = wall_s
    return out


def _register_plugin_with_jax() -> str | None:
    """Makes our PJRT plugin a JAX platform (before JAX starts its backends); returns why
    not, if it cannot be."""
    try:
        from jax._src import xla_bridge

        xla_bridge.register_plugin(PLUGIN_PLATFORM, library_path=torchtpu._C.plugin_info()["path"])
        return None
    except Exception as e:
        return _summary(e)


def _jax_on_plugin(cfg: Config, plugin_error: str | None) -> JaxRunner:
    if plugin_error:
        raise RuntimeError(plugin_error)
    return JaxRunner(cfg, _make_model(cfg), platform=PLUGIN_PLATFORM)


def per_step_counts(cfg: Config) -> dict[str, int]:
    """Our device counters for one warm training step (enqueue only, then one wait)."""
    runner = TorchRunner(cfg, "tpu", "tpu")
    for _ in range(2):
        runner.train_step()
    torchtpu.debug.reset_metrics()
    loss = runner._loss(runner.tokens, runner.targets)
    loss.backward()
    runner._opt_step()
    runner.opt.zero_grad(set_to_none=True)
    m = torchtpu.debug.metrics()
    keys = ("num_graph_executions", "num_eager_ops", "num_transfers_to_host",
            "num_transfers_to_device", "num_data_checks_deferred", "num_donated_inputs")
    counts = {k: int(m.get(k, 0)) for k in keys}
    runner.sync(loss)
    counts["num_data_checks_read_at_the_wait"] = int(
        torchtpu.debug.metrics().get("num_data_checks", 0))
    return counts


def _process_xla_flags() -> str:
    """XLA_FLAGS as the plugin and jaxlib read it: the process environment, which the tpu
    device's start may have changed after Python copied it into os.environ."""
    import ctypes

    libc = ctypes.CDLL(None)
    libc.getenv.restype = ctypes.c_char_p
    return (libc.getenv(b"XLA_FLAGS") or b"").decode()


def _fmt(v: float | None, spec: str = ".2f") -> str:
    return "-" if v is None else format(v, spec)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30, help="timed steps per figure")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps before timing")
    parser.add_argument("--rounds", type=int, default=5,
                        help="interleaved timing rounds the steps are split into")
    parser.add_argument("--skip-inductor", action="store_true")
    parser.add_argument("--skip-cold-start", action="store_true")
    parser.add_argument("--skip-jax-on-plugin", action="store_true")
    parser.add_argument("--model", choices=sorted(MODELS), default="small",
                        help="model size (135m: TorchTitan's 135M-class dimensions; 1b: "
                        "~0.94B parameters, for an accelerator)")
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32",
                        help="weights and activations on every row")
    parser.add_argument("--skip-cpu", action="store_true",
                        help="no PyTorch CPU rows (eager, inductor): for models too large "
                        "for the host")
    parser.add_argument("--cold-start-probe", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    cfg = dataclasses.replace(MODELS[args.model], dtype=args.dtype)
    if args.cold_start_probe:
        cold_start_probe(cfg)
        return 0

    import jax
    import jaxlib

    plugin_error = "skipped (--skip-jax-on-plugin)"
    if not args.skip_jax_on_plugin:
        plugin_error = _register_plugin_with_jax()
        # A registered plugin may outrank jaxlib's own client as JAX's default; keep jaxlib's.
        jax.config.update("jax_default_device", jax.devices(JAX_PLATFORM)[0])
    torch._dynamo.config.cache_size_limit = 64
    info = torchtpu._C.plugin_info()
    attrs = info.get("attributes", {})
    print(f"machine: {platform.machine()} cores={os.cpu_count()} torch={torch.__version__} "
          f"threads={torch.get_num_threads()} load1={os.getloadavg()[0]:.1f} jax={jax.__version__} "
          f"jaxlib={jaxlib.__version__} jax_devices={jax.devices(JAX_PLATFORM)}")
    print(f"tpu plugin: {info['name'] or os.path.basename(info['path'])} "
          f"platform={info['platform']} "
          f"api={info['api_version']} kind={info['device_kind']} "
          f"xla_version={attrs.get('xla_version', '?')} "
          f"stablehlo={attrs.get('stablehlo_current_version', '?')}")
    print(f"XLA_FLAGS={_process_xla_flags()!r} (one process-wide value, read by "
          "jaxlib and by the plugin alike)")
    model = _make_model(cfg)
    n_params = sum(p.numel() for p in model.parameters())
    step_flops = train_flops_per_step(cfg, model)
    del model
    peak = peak_flops(cfg.torch_dtype)
    cores = len(os.sched_getaffinity(0))
    source = ("measured " + cfg.dtype if info["platform"] == "cpu"
              else f"data-sheet bf16 for {info['device_kind']}")
    print(f"MFU: {step_flops / 1e9:.1f} GFLOP per training step (6N + 12LdT per token), "
          f"against the plugin's {source} matmul peak {peak / 1e9:.1f} GFLOP/s "
          f"(torchtpu.flops) for every row; by cpu: against {peak / cores / 1e9:.1f} GFLOP/s "
          f"per core ({cores} cores) and the step's process CPU time")
    print(f"model: {json.dumps(asdict(cfg))} params={n_params:,} {cfg.dtype}, optimizer=SGD; "
          f"median of {args.steps} steps after {args.warmup} warm-up, in {args.rounds} "
          "interleaved rounds")

    rc = 0
    start = time.perf_counter()
    try:
        ok, pairs = check_numerics(cfg)
    except Exception as e:
        ok, pairs = False, []
        print(f"numerics: FAILED to run ours: {_summary(e)}")
        if os.environ.get("BENCH_TRACEBACK"):
            traceback.print_exc()
    if pairs:
        shown = ", ".join(f"{a:.6f} vs {b:.6f}" for a, b in pairs)
        print(f"numerics: ours vs jax loss over {len(pairs)} SGD steps: {shown} "
              f"(rtol={LOSS_RTOL[cfg.dtype]}, atol={LOSS_ATOL[cfg.dtype]}): "
              f"{'ok' if ok else 'MISMATCH'} "
              f"[{time.perf_counter() - start:.1f}s incl. compiles]")
    if not ok:
        rc = 1

    makers: dict[str, Callable[[], Any]] = {
        OURS: lambda: TorchRunner(cfg, "tpu", "tpu"),
        JAX: lambda: JaxRunner(cfg, _make_model(cfg)),
        JAX_ON_PLUGIN: lambda: _jax_on_plugin(cfg, plugin_error),
    }
    if not args.skip_cpu:
        makers["torch eager on cpu"] = lambda: TorchRunner(cfg, "cpu", None)
    if not args.skip_inductor and not args.skip_cpu:
        makers["compile(inductor) on cpu"] = lambda: TorchRunner(cfg, "cpu", "inductor")
    rows = measure(makers, args.steps, args.warmup, args.rounds)
    for name in ("torch eager on cpu", "compile(inductor) on cpu"):
        if name not in makers:
            flag = "--skip-cpu" if args.skip_cpu else "--skip-inductor"
            rows.append({"name": name, "forward_ms": None, "train_ms": None,
                         "forward_cpu_ms": None, "train_cpu_ms": None,
                         "error": f"skipped ({flag})"})

    jax_row = rows[1]
    assert jax_row["name"] == JAX
    print()
    print(f"{'':<28} {'forward ms':>11} {'/jax':>6} {'cpu ms':>7} {'/jax':>6} "
          f"{'train step ms':>14} {'/jax':>6} {'cpu ms':>7} {'/jax':>6} {'MFU':>6} "
          f"{'by cpu':>6}")
    for r in rows:
        cells = []
        for key in ("forward_ms", "forward_cpu_ms", "train_ms", "train_cpu_ms"):
            ok_vals = r[key] is not None and jax_row[key]
            ratio = r[key] / jax_row[key] if ok_vals else None
            width = 14 if key == "train_ms" else 11 if key == "forward_ms" else 7
            cells.append(f"{_fmt(r[key], '.3f'):>{width}} {_fmt(ratio):>6}")
        mfu = 100 * step_flops / (r["train_ms"] / 1e3) / peak if r["train_ms"] else None
        # By CPU time: the FLOPs per second of CPU the step used, against one core's share
        # of the peak; another process's load on the cores skews it far less than wall time.
        mfu_cpu = (100 * step_flops / (r["train_cpu_ms"] / 1e3) / (peak / cores)
                   if r["train_cpu_ms"] else None)
        cells.append(f"{_fmt(mfu, '.1f'):>5}% {_fmt(mfu_cpu, '.1f'):>5}%")
        print(f"{r['name']:<28} " + " ".join(cells)
              + (f"   error: {r['error']}" if r["error"] else ""))
    ours = rows[0]
    plugin_row = next(r for r in rows if r["name"] == JAX_ON_PLUGIN)

    def verdict(ratio: float) -> str:
        return f"{ratio:.2f} <= {GOAL_RATIO} {'met' if ratio <= GOAL_RATIO else 'missed'}"

    # The goal, against each JAX: jaxlib's own CPU client (its XLA build) and the very
    # plugin ours runs on (the same compiler). The plugin/jaxlib line says how far apart
    # the two builds are on one and the same program.
    for wall, cpu, label in (("forward_ms", "forward_cpu_ms", "forward"),
                             ("train_ms", "train_cpu_ms", "train step")):
        if ours[wall] is not None and jax_row[wall]:
            print(f"goal ours/jax {label}: {verdict(ours[wall] / jax_row[wall])} "
                  f"(jaxlib's client)")
        else:
            print(f"goal ours/jax {label}: not measured")
        if ours[wall] is not None and plugin_row[wall]:
            print(f"goal ours/jax {label} on the same plugin: "
                  f"{verdict(ours[wall] / plugin_row[wall])} by wall time, "
                  f"{verdict(ours[cpu] / plugin_row[cpu])} by cpu time")
        if plugin_row[cpu] and jax_row[cpu]:
            print(f"{label} cpu ms: plugin/jaxlib (same program) "
                  f"{plugin_row[cpu] / jax_row[cpu]:.2f}")
    print(f"load1 after timing: {os.getloadavg()[0]:.1f} (a shared machine's load skews all rows)")
    print(f"ours per step: {json.dumps(per_step_counts(cfg))}")

    if not args.skip_cold_start:
        print()
        with tempfile.TemporaryDirectory(prefix="torchtpu-bench-cache-") as cache_dir:
            cold = _run_probe(cache_dir, args.model, args.dtype)
            warm = _run_probe(cache_dir, args.model, args.dtype)
        print(f"{'first training step (ours)':<28} {'first s':>8} {'2nd s':>8} {'process s':>10} "
              f"{'compiles':>9} {'disk hits':>10}")
        for name, p in (("cold (empty cache dir)", cold), ("warm (same cache dir)", warm)):
            if "error" in p:
                print(f"{name:<28} error: {p['error']}")
                continue
            print(f"{name:<28} {p['first_step_s']:>8.2f} {p['second_step_s']:>8.3f} "
                  f"{p['process_wall_s']:>10.2f} {p['num_compiles']:>9} "
                  f"{p['num_compile_cache_hits_disk']:>10}")
        if "error" not in cold and "error" not in warm:
            print(f"cold/warm first step: {cold['first_step_s'] / warm['first_step_s']:.1f}x; "
                  f"warm process compiled {warm['num_compiles']} programs")
    return rc


if __name__ == "__main__":
    sys.exit(main())
