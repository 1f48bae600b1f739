#!/usr/bin/env bash
# torchtpu on an NVIDIA GPU through JAX's CUDA PJRT plugin: install it, run a bounded GPU
# subset of the tests and the compiled-mode benchmark, print a short report.
#
#   bash scripts/gpu_check.sh            (from the repository root or anywhere)
#
# Steps, each with its own time limit (the whole script stays under 10 minutes):
#   1. scripts/setup.sh (the .venv and the build; quick when they are present), or, with
#      GPU_CHECK_PYTHON, a build into that interpreter's environment (below)
#   2. pip install the CUDA plugin for PJRT (jax-cuda12-pjrt) and JAX's side of it
#      (jax-cuda12-plugin with its CUDA libraries from PyPI), pinned to the jax/jaxlib
#      version setup.sh installs, so JAX's `jax.jit` on the GPU is the same XLA as ours
#   3. the GPU subset with TORCHTPU_PJRT_PLUGIN=<the CUDA plugin>: eager and autograd
#      semantics, the device and plugin registry tests, compiled mode, a bounded sample of
#      the OpInfo suite, the serving engine
#   4. bench/compiled_vs_jax.py: ours against `jax.jit` on the same GPU, a ~0.94B-parameter
#      model in bfloat16 (step time and MFU: `bench`), and the small model in float32
#      (`bench-small`)
#   5. bench/titan_train.py (TorchTitan, bf16): tokens/s and MFU on the GPU, when
#      TorchTitan is installed
#
# Not run here: a multi-process client (torchtpu.distributed.initialize_multiprocess_client,
# the CUDA plugin given a key-value store and node_id/num_nodes) needs >= 2 GPUs, one per
# process; on one GPU only its CPU-side pieces run (tests/cpp/kv_store_test.cc,
# tests/python/distributed/test_multiprocess_client.py).
#
# Environment: GPU_CHECK_WHEELS=<dir> installs from a folder of wheels instead of PyPI (a
# machine without network); GPU_CHECK_OPINFO_EVERY=N runs one OpInfo test in N (default 12);
# GPU_CHECK_SKIP_INSTALL=1 uses the plugins already installed; GPU_CHECK_STEPS (default
# "tests bench bench-small titan") chooses steps 3-5 and their order; GPU_CHECK_BUDGET_S
# (default 570) is the whole script's time limit; GPU_CHECK_LOG_DIR keeps the step logs
# (default: a new temporary folder).
# GPU_CHECK_PYTHON=<python>: a prepared machine without network whose Python already has
# torch, jax and a CUDA PJRT plugin (jax-cuda12-pjrt or jax-cuda13-pjrt): no .venv and no
# installs from a registry; torchtpu is built against that torch (the C++ tests, and the
# router when Boost/ZeroMQ headers are missing, are left out) and installed editable into
# that environment, with the wheels of GPU_CHECK_WHEELS (e.g. expecttest) installed
# --no-deps first. GPU_CHECK_PJRT_INCLUDE=<dir> holds pjrt_c_api.h when xla-cpu-pjrt (which
# ships it) is not installed there. The versions are the image's, not setup.sh's pins.
# GPU_CHECK_SKIP_BUILD=1 (with GPU_CHECK_PYTHON) uses the torchtpu built there before;
# GPU_CHECK_CC/GPU_CHECK_CXX choose the compilers of that build (default /usr/bin/gcc, g++:
# the system's, whatever CC/CXX the image sets).
# `gpu_check.sh --prepare DIR` fetches, here, what such an image lacks into DIR/wheels and
# DIR/include, for GPU_CHECK_WHEELS and GPU_CHECK_PJRT_INCLUDE there.
# Exit status: 0 when every step passed, 1 otherwise; the report says which failed and why.
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

# `gpu_check.sh --prepare DIR`, on a machine with this checkout's .venv and a registry: puts
# into DIR what a prepared image lacks, for GPU_CHECK_WHEELS=DIR/wheels and
# GPU_CHECK_PJRT_INCLUDE=DIR/include there (the expecttest wheel, pjrt_c_api.h).
if [[ "${1:-}" == "--prepare" ]]; then
  dir=${2:?usage: gpu_check.sh --prepare DIR}
  mkdir -p "$dir/wheels" "$dir/include" || exit 1
  header=$(.venv/bin/python -c 'import os, xla_plugins.xla_cpu_pjrt as m
print(os.path.join(os.path.dirname(m.__file__), "include", "pjrt_c_api.h"))') || {
    echo "gpu_check: no xla-cpu-pjrt in .venv (run scripts/setup.sh)"; exit 1; }
  cp "$header" "$dir/include/" || exit 1
  .venv/bin/python -m pip download -q --disable-pip-version-check --no-deps \
    --only-binary=:all: -d "$dir/wheels" "expecttest==$(.venv/bin/python -c \
    'from importlib.metadata import version; print(version("expecttest"))')" || exit 1
  ls -l "$dir/wheels" "$dir/include"
  exit 0
fi
PY=${GPU_CHECK_PYTHON:-.venv/bin/python}
JAX_PIN=0.10.2  # scripts/setup.sh's jax/jaxlib pin; the CUDA plugin must match it
CUDA_PKGS=("jax-cuda12-pjrt==$JAX_PIN" "jax-cuda12-plugin[with-cuda]==$JAX_PIN")
CUDA_PLUGIN=jax-cuda12-pjrt
OPINFO_EVERY=${GPU_CHECK_OPINFO_EVERY:-12}
LOG_DIR=${GPU_CHECK_LOG_DIR:-$(mktemp -d -t torchtpu-gpu-check-XXXXXX)}
mkdir -p "$LOG_DIR"
START=$SECONDS
REPORT=()
FAILED=0

BUDGET_S=${GPU_CHECK_BUDGET_S:-570}  # the whole script; each step gets its own limit or what is left, if less

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
  # One xdist worker: a test that aborts the process is reported as failed and the worker
  # replaced, so the step still ends with its counts; --capture=sys leaves file descriptor 2
  # to the log, where the C++ message of such an abort lands.
  timeout --kill-after=10 "$limit" "$PY" -m pytest -q -rfE -p no:cacheprovider --timeout=120 \
    -n 1 --capture=sys "$@" >"$log" 2>&1
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
# Builds torchtpu into GPU_CHECK_PYTHON's environment (a prepared image without network).
build_into_image() {
  local defs=(-Ccmake.define.TORCHTPU_BUILD_TESTS=OFF)
  if [[ -n "${GPU_CHECK_WHEELS:-}" ]] && compgen -G "$GPU_CHECK_WHEELS/*.whl" >/dev/null; then
    "$PY" -m pip install -q --disable-pip-version-check --no-index --no-deps \
      "$GPU_CHECK_WHEELS"/*.whl || return 1
  fi
  if ! "$PY" -c 'import xla_plugins.xla_cpu_pjrt' 2>/dev/null; then
    [[ -f "${GPU_CHECK_PJRT_INCLUDE:-}/pjrt_c_api.h" ]] || {
      echo "no pjrt_c_api.h: install xla-cpu-pjrt or set GPU_CHECK_PJRT_INCLUDE"; return 1; }
    defs+=("-Ccmake.define.TORCHTPU_PJRT_INCLUDE_DIR=$(cd "$GPU_CHECK_PJRT_INCLUDE" && pwd)"
           "-Ccmake.define.TORCHTPU_SITE_PACKAGES=$("$PY" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')")
  fi
  if [[ ! -f /usr/include/boost/version.hpp || ! -f /usr/include/zmq.hpp ]]; then
    defs+=(-Ccmake.define.TORCHTPU_BUILD_ROUTER=OFF)
  fi
  echo "python: $("$PY" -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__)')"
  CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) "$PY" -m pip install -q --disable-pip-version-check \
    --no-build-isolation --no-deps "${defs[@]}" -e . || return 1
  # One C++ runtime in the process: a module that defines the C++ library's own stream code
  # carries a second copy beside torch's, whose locale state is never set up (its first
  # ostream crashes the process).
  local so
  so=$(ls build/"$("$PY" -c 'import sys; print("cp%d%d" % sys.version_info[:2])')"-*/csrc/bindings/_C.*.so \
    | head -1)
  if nm -D --defined-only "$so" | grep -q '_ZNSo9_M_insertIlEERSoT_'; then
    echo "$so carries its own copy of the C++ runtime (compiler: $CXX); set GPU_CHECK_CXX" \
      "to the compiler of the system's libstdc++"
    return 1
  fi
}

if [[ -n "${GPU_CHECK_PYTHON:-}" ]]; then
  # The system's compiler, whose C++ runtime is the one torch and the process load: an
  # image's own toolchain (the GPU image sets CXX=/opt/gcc/bin/g++) links a private copy of
  # its runtime into our modules, and the first ostream in them crashes.
  export CC=${GPU_CHECK_CC:-/usr/bin/gcc} CXX=${GPU_CHECK_CXX:-/usr/bin/g++}
fi
if [[ -n "${GPU_CHECK_PYTHON:-}" && "${GPU_CHECK_SKIP_BUILD:-0}" == "1" ]]; then
  record "setup" "skipped" "GPU_CHECK_SKIP_BUILD=1: torchtpu as installed in $PY's environment"
elif [[ -n "${GPU_CHECK_PYTHON:-}" ]]; then
  say "build into $PY's environment (no network: GPU_CHECK_PYTHON)"
  if ! timeout "$(limit 360)" bash -c "$(declare -f build_into_image); PY='$PY'; build_into_image" \
      >"$LOG_DIR/setup.log" 2>&1; then
    record "setup" "FAILED" "the build into $PY's environment failed ($LOG_DIR/setup.log)"
    grep -E 'error|Error' "$LOG_DIR/setup.log" | head -20
    tail -5 "$LOG_DIR/setup.log"
    exit 1
  fi
  record "setup" "ok" "$(grep -m1 '^python:' "$LOG_DIR/setup.log"), torchtpu built"
else
  say "setup (scripts/setup.sh)"
  if ! timeout "$(limit 300)" bash scripts/setup.sh >"$LOG_DIR/setup.log" 2>&1; then
    record "setup" "FAILED" "scripts/setup.sh failed or ran over its time limit ($LOG_DIR/setup.log)"
    tail -5 "$LOG_DIR/setup.log"
    exit 1
  fi
  record "setup" "ok" ".venv and build ready"
fi

# --- 2. the CUDA plugin --------------------------------------------------------------------
# A prepared image's own CUDA plugin, whichever of the two it has.
if [[ -n "${GPU_CHECK_PYTHON:-}" ]]; then
  for name in 13 12; do
    if "$PY" -c "import jax_plugins.xla_cuda$name" 2>/dev/null; then
      CUDA_PLUGIN=jax-cuda$name-pjrt
      break
    fi
  done
fi
if [[ "${GPU_CHECK_SKIP_INSTALL:-0}" == "1" || -n "${GPU_CHECK_PYTHON:-}" ]]; then
  record "install" "skipped" "the plugin installed: $CUDA_PLUGIN"
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

export TORCHTPU_PJRT_PLUGIN=$CUDA_PLUGIN
# Every client on the GPU allocates on demand (ours, the tests' subprocesses, JAX's
# reference): the plugins' default preallocation of 75% of the GPU's memory per client
# would leave the next one too little.
export TORCHTPU_GPU_PREALLOCATE=0 XLA_PYTHON_CLIENT_PREALLOCATE=false

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
step_tests() {
  run_tests "eager" 120 tests/python/semantics/test_autograd.py \
    tests/python/semantics/test_views_inplace.py tests/python/device/test_device.py \
    tests/python/device/test_plugin_registry.py
  run_tests "compiled" 150 tests/python/compile/test_compile.py
  if (($(limit 90) < 20)); then
    record "opinfo" "SKIPPED" "the script's ${BUDGET_S}s budget is spent"
    run_tests "serving engine" 120 tests/python/serve/test_engine.py
    return
  fi
  mapfile -t opinfo_ids < <(timeout "$(limit 90)" "$PY" -m pytest -q --collect-only -p no:cacheprovider \
    tests/python/opinfo/test_opinfo_eager.py 2>/dev/null | grep '::' | awk "NR % $OPINFO_EVERY == 1")
  if ((${#opinfo_ids[@]})); then
    run_tests "opinfo (1 in $OPINFO_EVERY)" 150 "${opinfo_ids[@]}"
  else
    record "opinfo" "FAILED" "could not collect tests/python/opinfo/test_opinfo_eager.py"
  fi
  run_tests "serving engine" 120 tests/python/serve/test_engine.py
}

# --- 4. compiled mode against jax.jit on the same GPU --------------------------------------
# JAX's GPU backend is the same CUDA plugin build, so "jax.jit on gpu" is the same-plugin
# reference and the extra plugin registration is skipped.
bench() {  # bench <step> <limit s> <log> <args...>
  local step=$1 lim log=$LOG_DIR/$3
  lim=$(limit "$2")
  shift 3
  say "$step: bench/compiled_vs_jax.py $* (limit ${lim}s)"
  timeout --kill-after=10 "$lim" "$PY" bench/compiled_vs_jax.py --skip-jax-on-plugin \
    --skip-cold-start "$@" >"$log" 2>&1
  local rc=$?
  if ((rc == 0)); then
    record "$step" "ok" "$(grep -m1 'goal ours/jax train step' "$log" || echo 'see below')"
  else
    record "$step" "FAILED" "exit $rc ($log)"
    grep -E 'Error|error' "$log" | tail -3 | sed 's/^/    /'
  fi
  grep -E '^(tpu plugin|model|MFU|numerics|goal|ours|jax)' "$log" | sed 's/^/    /'
}
step_bench() {
  bench "bench 0.94B bf16" 180 bench_1b.log --model 1b --dtype bfloat16 --steps 6 --rounds 2 \
    --warmup 2 --skip-cpu
}
step_bench_small() {
  bench "bench small f32" 120 bench_small.log --steps 10 --rounds 2 --skip-inductor
}

# --- 5. TorchTitan train step in bf16 on the GPU: tokens/s and MFU ------------------------
step_titan() {
  if "$PY" -c 'import torchtitan' 2>/dev/null; then
    say "bench/titan_train.py (limit $(limit 120)s)"
    if timeout --kill-after=10 "$(limit 120)" "$PY" bench/titan_train.py --steps 6 --skip 2 \
        --no-inductor >"$LOG_DIR/titan.log" 2>&1; then
      record "bench titan_train (bf16)" "ok" "see the rows below"
    else
      record "bench titan_train (bf16)" "FAILED" "exit $? ($LOG_DIR/titan.log)"
    fi
    grep -Ei 'mfu|tokens/s|goal' "$LOG_DIR/titan.log" | head -8 | sed 's/^/    /'
  else
    record "bench titan_train (bf16)" "skipped" "TorchTitan is not installed in $PY's environment"
  fi
}

# --- the steps, in GPU_CHECK_STEPS's order (default: tests bench bench-small titan) -----------
for step in ${GPU_CHECK_STEPS:-tests bench bench-small titan}; do
  case $step in
    tests|bench|bench-small|titan) "step_${step//-/_}" ;;
    *) record "$step" "FAILED" \
         "unknown step (GPU_CHECK_STEPS takes tests, bench, bench-small, titan)" ;;
  esac
done
exit "$FAILED"
