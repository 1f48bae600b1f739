# torchtpu developer entry points. Every target that runs code first runs scripts/setup.sh,
# which is idempotent and fast when nothing is missing.
#
#   make setup   system packages, .venv, Python deps, first build (skipped when done)
#   make build   setup + incremental rebuild/reinstall of the C++ extension
#   make test    build, then lint (ruff), the C++ (ctest) and Python (pytest) suites, then a
#                bounded second pass of eager tests in fused eager mode (test-fused)
#   make lint    ruff check over python, tests, bench, examples and scripts
#   make demo    build, then examples/train_demo.py
#   make bench   build, then bench/eager_overhead.py
#   make op-coverage  build, then scripts/op_coverage.py: every PyTorch OpInfo checked on tpu
#                against the CPU, written to docs/op_coverage.md (OPCOV_ARGS, e.g. '--jobs 4')
#   make bench-compile  build, then bench/compiled_vs_jax.py (BENCH_ARGS, e.g.
#                BENCH_ARGS='--steps 50')
#   make bench-jax-op  build, then bench/jax_op_inline.py: a compiled model with a JAX op
#                inlined against the same model in PyTorch (BENCH_ARGS)
#   make serve   build, then `torchtpu serve` (SmolLM2-135M-Instruct on tpu, port 8000;
#                SERVE_ARGS, e.g. SERVE_ARGS='--port 9000 --model DIR')
#   make bench-serve  build, then bench/serve_bench.py (BENCH_ARGS, e.g. BENCH_ARGS=--quick)
#   make bench-router  build, then bench/router_bench.py: cache-aware routing against
#                round-robin on the same replicas (BENCH_ARGS, e.g. BENCH_ARGS=--quick)
#   make test-upstream  build, then scripts/upstream_tests.py: PyTorch's own device-generic
#                test files on tpu (UPSTREAM_TESTS=<folder of them>, e.g. a pytorch
#                checkout's test/), summary in docs/upstream_tests.md (UPSTREAM_ARGS)
#   make train   build, then TorchTitan's trainer on tpu (torchtpu.train): RANKS (default 1;
#                RANKS=2: FSDP2 over 2 ranks), TRAIN_CONFIG (default llama3_debug; qwen3_debug,
#                smollm2_135m, smollm2_135m_finetune), TRAIN_ARGS (TorchTitan overrides, e.g.
#                '--training.steps 100'); writes outputs/titan (checkpoints, metrics.jsonl,
#                loss_curve.png)
#   make test-titan  build, then tests/python/train in its long form (20 steps, bf16, Qwen3)
#   make bench-train  build, then bench/titan_train.py (tokens/s and MFU: tpu compiled vs
#                PyTorch CPU eager and Inductor, same TorchTitan model and batch; BENCH_ARGS)
#   make clean   remove what these targets build: build/<wheel tag>, caches (keeps .venv and
#                any other tree under build/); `make distclean` removes build/ and .venv
#
# Variables: VERBOSE=1 (pip -v), JOBS (compile jobs, default: cores), CTEST_JOBS (default 2),
# PYTEST_TIMEOUT (seconds per Python test), PYTEST_WORKERS (Python test processes, each
# taking whole files, default 2; 0 runs them in this process), PYTEST_ARGS, CTEST_ARGS.

SHELL := /bin/bash
.DEFAULT_GOAL := build

PY := .venv/bin/python
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CTEST_JOBS ?= 2
PYTEST_TIMEOUT ?= 300
PYTEST_ARGS ?=
PYTEST_WORKERS ?= 2
CTEST_ARGS ?=
export VERBOSE
export CMAKE_BUILD_PARALLEL_LEVEL := $(JOBS)
# ccache keys on paths relative to the checkout, so a fresh clone (CI) reuses the cache.
export CCACHE_BASEDIR := $(CURDIR)
export CCACHE_NOHASHDIR := 1

# The CMake tree that scikit-build-core keeps at build/{wheel_tag}, for this venv's Python.
BUILD_DIR_CMD = ls -d build/$$($(PY) -c 'import sys; print("cp%d%d" % sys.version_info[:2])')-* \
	2>/dev/null | head -1

.PHONY: setup build test lint test-cpp test-python test-fused demo bench bench-compile bench-jax-op serve \
	bench-serve bench-router op-coverage test-upstream train test-titan bench-train clean distclean

setup:
	bash scripts/setup.sh

build:
	TORCHTPU_REBUILD=1 bash scripts/setup.sh

# Every suite always runs, so every summary is printed; the target fails if any fails.
test: build
	@rc=0; \
	$(MAKE) --no-print-directory lint || rc=1; \
	$(MAKE) --no-print-directory test-cpp || rc=1; \
	$(MAKE) --no-print-directory test-python || rc=1; \
	$(MAKE) --no-print-directory test-fused || rc=1; \
	if [[ $$rc -ne 0 ]]; then echo "make test: FAILED (see the summaries above)"; fi; \
	exit $$rc

lint:
	@echo "== Python lint (ruff check; rules in pyproject.toml)"
	$(PY) -m ruff check python tests bench examples scripts

test-cpp:
	@dir=$$($(BUILD_DIR_CMD)); \
	if [[ -z "$$dir" ]]; then echo "make test: no build/<wheel tag> tree; run make build"; exit 1; fi; \
	echo "== C++ tests (ctest, $$dir)"; \
	cmake --build "$$dir" -j$(JOBS) >/dev/null && \
	ctest --test-dir "$$dir" --output-on-failure -j$(CTEST_JOBS) $(CTEST_ARGS)

test-python:
	@echo "== Python tests (pytest tests/python, $(PYTEST_WORKERS) processes, timeout $(PYTEST_TIMEOUT)s per test)"
	$(PY) -m pytest tests/python -q -n $(PYTEST_WORKERS) --dist loadfile \
		--timeout=$(PYTEST_TIMEOUT) --durations=25 $(PYTEST_ARGS)

# Fused eager mode (TORCHTPU_EAGER=fused) must keep op-by-op semantics: a second pass over a
# bounded subset of the semantics, training and models tests (FUSED_TESTS), about 2 minutes.
FUSED_TESTS ?= tests/python/semantics/test_views_inplace.py \
	tests/python/semantics/test_autograd.py tests/python/training/test_training.py \
	tests/python/models/test_linear_weight_reuse.py
test-fused:
	@echo "== Python tests in fused eager mode (TORCHTPU_EAGER=fused: $(FUSED_TESTS))"
	TORCHTPU_EAGER=fused $(PY) -m pytest $(FUSED_TESTS) -q --timeout=$(PYTEST_TIMEOUT) \
		$(PYTEST_ARGS)

demo: build
	$(PY) examples/train_demo.py

bench: build
	$(PY) bench/eager_overhead.py

OPCOV_ARGS ?=
op-coverage: build
	$(PY) scripts/op_coverage.py $(OPCOV_ARGS)

UPSTREAM_ARGS ?=
test-upstream: build
	$(PY) scripts/upstream_tests.py --out docs/upstream_tests.md $(UPSTREAM_ARGS)

# jax and jaxlib (the reference of compiled mode, and what torchtpu.jax_op exports with) are
# installed by scripts/setup.sh, pinned there.
BENCH_ARGS ?=
bench-compile: build
	$(PY) bench/compiled_vs_jax.py $(BENCH_ARGS)

bench-jax-op: build
	$(PY) bench/jax_op_inline.py $(BENCH_ARGS)

SERVE_ARGS ?=
serve: build
	.venv/bin/torchtpu serve $(SERVE_ARGS)

bench-serve: build
	$(PY) bench/serve_bench.py $(BENCH_ARGS)

bench-router: build
	$(PY) bench/router_bench.py $(BENCH_ARGS)

RANKS ?= 1
TRAIN_CONFIG ?= llama3_debug
TRAIN_ARGS ?=
# Ranks start with launch.rank_env's GLIBC_TUNABLES (glibc's arena limit from process start).
train: build
	GLIBC_TUNABLES="$$($(PY) -c 'import os; from torchtpu.train.launch import rank_env; \
	print(rank_env(dict(os.environ)).get("GLIBC_TUNABLES", ""))')" \
	.venv/bin/torchrun --nproc-per-node $(RANKS) -m torchtpu.train \
		--module torchtpu.train.configs --config $(TRAIN_CONFIG) $(TRAIN_ARGS)

test-titan: build
	TORCHTPU_TITAN_STEPS=20 $(PY) -m pytest tests/python/train -q --timeout=3600 $(PYTEST_ARGS)

bench-train: build
	$(PY) bench/titan_train.py $(BENCH_ARGS)

clean:
	rm -rf build/cp*-* dist .pytest_cache .ruff_cache .venv/.torchtpu-editable
	find . -path ./.venv -prune -o -name __pycache__ -type d -exec rm -rf {} +

distclean: clean
	rm -rf build .venv
