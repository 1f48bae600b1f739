#!/usr/bin/env bash
# torchtpu on an NVIDIA GPU through JAX's CUDA PJRT plugin: install it, run a bounded GPU
# subset of the tests and the compiled-mode benchmark, print a short report.
#
#   bash scripts/gpu_check.sh            (from the repository root or anywhere)
#
# Steps, each with its own time limit (the whole script stays under 10 minutes):
#   1. scripts/setup.sh (the .venv and the build; quick when they are present)
#   2. pip install the CUDA plugin for PJRT (jax-cuda12-pjrt) and JAX's side of it
#      (jax-cuda12-plugin with its CUDA libraries from PyPI), pinned to the jax/jaxlib
#      version setup.sh installs, so JAX's `jax.jit` on the GPU is the same XLA as ours
#   3. the GPU subset with TORCHTPU_PJRT_PLUGIN=jax-cuda12-pjrt: eager and autograd
#      semantics, the device and plugin registry tests, compiled mode, a bounded sample of
#      the OpInfo suite, the serving engine
#   4. bench/compiled_vs_jax.py: ours against `jax.jit` on the same GPU plugin
#   5. bench/titan_train.py (TorchTitan, bf16): tokens/s and MFU on the GPU
#
# Not run here: a multi-process client (torchtpu.distributed.initialize_multiprocess_client,
# the CUDA plugin given a key-value store and node_id/num_nodes) needs >= 2 GPUs, one per
# process; on one GPU only its CPU-side pieces run (tests/cpp/kv_store_test.cc,
# tests/python/distributed/test_multiprocess_client.py).
#
# Environment: GPU_CHECK_WHEELS=<dir> installs from a folder of wheels instead of PyPI (a
# machine without network); GPU_CHECK_OPINFO_EVERY=N runs one OpInfo test in N (default 12);
# GPU_CHECK_SKIP_INSTALL=1 uses the plugins already installed.
# Exit status: 0 when every step passed, 1 otherwise; the report says which failed and why.
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY=.venv/bin/python
JAX_PIN=0.10.2  # scripts/setup.sh's jax/jaxlib pin; the CUDA plugin must match it
CUDA_PKGS=("jax-cuda12-pjrt==$JAX_PIN" "jax-cuda12-plugin[with-cuda]==$JAX_PIN")
OPINFO_EVERY=${GPU_CHECK_OPINFO_EVERY:-12}
LOG_DIR=$(mktemp -d -t torchtpu-gpu-check-XXXXXX)
START=$SECONDS
REPORT=()
FAILED=0

BUDGET_S=570  # the whole script; each step gets its own limit or what is left, if less

say() { echo "gpu_check: $*"; }
# Prints min(<wanted seconds>, seconds left in the budget).
limit() {
  local left=$((BUDGET_S - (SECONDS - START)))
  ((left >= 1)) || left=1  # `timeout 0` would mean no limit
  if ((left < $1)); then echo "$left"; else echo "$1"; fi
}
record() {  # record <step> <status> <detail>
  REPORT+=("$(printf '%-26s %-7s %s' "$1" "$2" "$3")")
  [[ "$2" == "ok" || "$2" == "skipped" ]] || FAILED=1
}
report() {
  echo
  echo "== torchtpu GPU check ($((SECONDS - START)) s; logs in $LOG_DIR)"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null \
    | sed 's/^/gpu: /'
  printf '%s\n' "${REPORT[@]}"
  if ((FAILED)); then echo "gpu_check: FAILED (see the step logs above)"; else echo "gpu_check: ok"; fi
}
trap report EXIT

# Runs pytest on the given arguments within `limit` seconds; records passed/failed counts.
run_tests() {  # run_tests <step> <limit s> <pytest args...>
  local step=$1 limit
  limit=$(limit "$2")
  shift 2
  if ((limit < 20)); then
    record "$step" "SKIPPED" "the script's ${BUDGET_S}s budget is spent"
    return
  fi
  local log="$LOG_DIR/${step%% *}.log"
  say "$step: pytest $* (limit ${limit}s)"
  timeout --kill-after=10 "$limit" "$PY" -m pytest -q -rfE -p no:cacheprovider --timeout=120 \
    "$@" >"$log" 2>&1
  local rc=$?
  local summary
  summary=$(grep -E '^(=+ )?[0-9]+ (passed|failed|error)|(passed|failed|error).* in [0-9.]+s' \
    "$log" | tail -1 | sed 's/=//g; s/^ *//')
  if ((rc == 124 || rc == 137)); then
    record "$step" "TIMEOUT" "over ${limit}s; ${summary:-no summary} ($log)"
  elif ((rc != 0)); then
    record "$step" "FAILED" "${summary:-pytest exited $rc} ($log)"
    grep -E '^(FAILED|ERROR) ' "$log" | head -8 | sed 's/^/    /'
  else
    record "$step" "ok" "$summary"
  fi
}

# --- 0. a GPU ---------------------------------------------------------------------------
if ! nvidia-smi -L >/dev/null 2>&1; then
  record "gpu" "FAILED" "nvidia-smi finds no NVIDIA GPU (driver missing or no device)"
  exit 1
fi

# --- 1. setup ------------------------------------------------------------------------------
say "setup (scripts/setup.sh)"
if ! timeout "$(limit 300)" bash scripts/setup.sh >"$LOG_DIR/setup.log" 2>&1; then
  record "setup" "FAILED" "scripts/setup.sh failed or ran over its time limit ($LOG_DIR/setup.log)"
  tail -5 "$LOG_DIR/setup.log"
  exit 1
fi
record "setup" "ok" ".venv and build ready"

# --- 2. the CUDA plugin --------------------------------------------------------------------
if [[ "${GPU_CHECK_SKIP_INSTALL:-0}" == "1" ]]; then
  record "install" "skipped" "GPU_CHECK_SKIP_INSTALL=1"
else
  src=()
  if [[ -n "${GPU_CHECK_WHEELS:-}" ]]; then src=(--no-index --find-links "$GPU_CHECK_WHEELS"); fi
  say "pip install ${CUDA_PKGS[*]} ${src[*]}"
  # The torch and jax pins ride along so that nothing can move them (a resolved torch
  # would be a multi-GB CUDA build).
  if ! timeout "$(limit 300)" "$PY" -m pip install -q --disable-pip-version-check "${src[@]}" \
      "torch==2.13.0" "jax==$JAX_PIN" "jaxlib==$JAX_PIN" "${CUDA_PKGS[@]}" \
      >"$LOG_DIR/install.log" 2>&1; then
    record "install" "FAILED" "pip install ${CUDA_PKGS[*]} failed; no network? set \
GPU_CHECK_WHEELS to a folder of those wheels ($LOG_DIR/install.log)"
    tail -5 "$LOG_DIR/install.log"
    exit 1
  fi
  record "install" "ok" "${CUDA_PKGS[*]}"
fi

export TORCHTPU_PJRT_PLUGIN=jax-cuda12-pjrt
# JAX's own GPU clients (the reference and JAX on our plugin) allocate on demand: our
# client's default preallocation would otherwise leave them too little memory.
export XLA_PYTHON_CLIENT_PREALLOCATE=false

# The plugin loads and reports what it is; nothing else runs if it does not.
if ! timeout 120 "$PY" - >"$LOG_DIR/plugin.log" 2>&1 <<'EOF'
import torch, torchtpu
x = torch.arange(6.0, device="tpu").reshape(2, 3)
assert (x * 2).sum().item() == 30.0
info = torchtpu.debug.plugin()
assert info["platform"] in ("cuda", "gpu"), info["platform"]
print(f"{info['name']} api={info['api_version']} platform={info['platform']} "
      f"{info['platform_version']} kind={info['device_kind']} "
      f"stablehlo={info['attributes'].get('stablehlo_current_version', '?')}")
EOF
then
  record "plugin" "FAILED" "$(tail -1 "$LOG_DIR/plugin.log") ($LOG_DIR/plugin.log)"
  exit 1
fi
record "plugin" "ok" "$(tail -1 "$LOG_DIR/plugin.log")"

# --- 3. the GPU subset ---------------------------------------------------------------------
run_tests "eager" 120 tests/python/semantics/test_autograd.py \
  tests/python/semantics/test_views_inplace.py tests/python/device/test_device.py \
  tests/python/device/test_plugin_registry.py
run_tests "compiled" 150 tests/python/compile/test_compile.py
mapfile -t opinfo_ids < <(timeout "$(limit 90)" "$PY" -m pytest -q --collect-only -p no:cacheprovider \
  tests/python/opinfo/test_opinfo_eager.py 2>/dev/null | grep '::' | awk "NR % $OPINFO_EVERY == 1")
if ((${#opinfo_ids[@]})); then
  run_tests "opinfo (1 in $OPINFO_EVERY)" 150 "${opinfo_ids[@]}"
else
  record "opinfo" "FAILED" "could not collect tests/python/opinfo/test_opinfo_eager.py"
fi
run_tests "serving engine" 120 tests/python/serve/test_engine.py

# --- 4. compiled mode against jax.jit on the same GPU plugin ------------------------------
say "bench/compiled_vs_jax.py (limit $(limit 150)s)"
if timeout --kill-after=10 "$(limit 150)" "$PY" bench/compiled_vs_jax.py --steps 10 --rounds 2 \
    --skip-inductor --skip-cold-start >"$LOG_DIR/bench.log" 2>&1; then
  record "bench compiled_vs_jax" "ok" "$(grep -m1 'train step on the same plugin' \
    "$LOG_DIR/bench.log" || echo 'see the rows below')"
else
  record "bench compiled_vs_jax" "FAILED" "exit $? ($LOG_DIR/bench.log)"
fi
grep -E '^(tpu plugin|goal|ours|jax)' "$LOG_DIR/bench.log" | sed 's/^/    /'

# --- 5. TorchTitan train step in bf16 on the GPU: tokens/s and MFU ------------------------
say "bench/titan_train.py (limit $(limit 120)s)"
if timeout --kill-after=10 "$(limit 120)" "$PY" bench/titan_train.py --steps 6 --skip 2 --no-inductor \
    >"$LOG_DIR/titan.log" 2>&1; then
  record "bench titan_train (bf16)" "ok" "see the rows below"
else
  record "bench titan_train (bf16)" "FAILED" "exit $? ($LOG_DIR/titan.log)"
fi
grep -Ei 'mfu|tokens/s|goal' "$LOG_DIR/titan.log" | head -8 | sed 's/^/    /'
exit "$FAILED"
