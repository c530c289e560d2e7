# fleetgate: `make run` starts the embedded default, `make test` runs the whole suite.
# The install step puts the runtime (.) and its tooling (training/: classifier training, safety
# evaluation, `fleetgate safety eval`) into the venv, both editable.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# the console's front-end packages (htmx; axe-core for the tests) from the npm registry
CONSOLE := src/fleetgate/console
NODE_STAMP := $(CONSOLE)/node_modules/.installed
# the files the pages load, copied beside the console's static files (the wheel ships them)
VENDOR_JS := $(CONSOLE)/static/vendor/htmx.min.js

.PHONY: run test check lint format typecheck bench clean image image-digests

$(STAMP): pyproject.toml training/pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11) and "fleetgate needs Python 3.11 or newer; run: make $(MAKECMDGOALS) PYTHON=python3.11")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev,ml,audio,bench,mcp,kv-events,epp]' -e training
	touch $(STAMP)

$(NODE_STAMP): $(CONSOLE)/package.json $(CONSOLE)/package-lock.json
	cd $(CONSOLE) && npm ci --no-audit --no-fund --loglevel=error
	touch $(NODE_STAMP)

$(VENDOR_JS): $(NODE_STAMP)
	mkdir -p $(CONSOLE)/static/vendor
	cp $(CONSOLE)/node_modules/htmx.org/dist/htmx.min.js $(VENDOR_JS)

run: $(STAMP) $(NODE_STAMP) $(VENDOR_JS)
	$(BIN)/fleetgate up

# Two workers, each taking whole test files (module fixtures and per-file resources stay on one
# worker): most tests wait on servers, subprocesses and timers, so two run in about half the time.
# The real-vLLM tests (marker `vllm`, skipped without /opt/fleetgate-vllm) run afterwards on
# their own: starting vLLM engines takes every core for a minute or two. Only the files that
# carry the marker are collected for that step (collecting the whole suite costs ~30 s of CPU).
# One process: a vLLM starting beside another that serves traffic was seen to stall for over
# 900 s on two cores (their `xdist_group` marks keep the engine-sharing files together for a
# later `-n 2 --dist loadgroup` try on a machine with more cores).
# --no-loadscope-reorder: the workers take files in the order tests/ordering.py gives (slowest
# first, from tests/durations.json), not xdist's (most tests first), which left the slow
# few-test files to the end and one worker running them alone for minutes.
PYTEST_PARALLEL := -n 2 --dist loadfile --no-loadscope-reorder -m "not vllm"
VLLM_TEST_FILES = $(shell grep -rlE --include='test_*.py' 'mark\.vllm' tests)
test: $(STAMP) $(NODE_STAMP) $(VENDOR_JS)
	$(BIN)/python -m pytest $(PYTEST_PARALLEL)
	$(BIN)/python -m pytest -m vllm $(VLLM_TEST_FILES)

lint: $(STAMP)
	$(BIN)/ruff check src training tests bench

format: $(STAMP)
	$(BIN)/ruff format src training tests bench

typecheck: $(STAMP)
	$(BIN)/mypy

check: $(STAMP) $(NODE_STAMP) $(VENDOR_JS)
	$(BIN)/ruff format --check src training tests bench
	$(BIN)/ruff check src training tests bench
	$(BIN)/mypy
	$(BIN)/python -m pytest $(PYTEST_PARALLEL)
	$(BIN)/python -m pytest -m vllm $(VLLM_TEST_FILES)

bench: $(STAMP)
	$(BIN)/python bench/overhead/run.py --write-docs

# The release image: every base image by the digest deploy/images.lock pins (IMAGE:TAG@DIGEST);
# refused while a digest is missing. `make image-digests` fills the lock (needs the registry).
IMAGE  ?= fleetgate:dev
EXTRAS ?=
IMAGES_LOCK ?= deploy/images.lock
image:
	@args="$$($(PYTHON) deploy/images.py args $(IMAGES_LOCK))" \
	  && echo docker build -f deploy/Dockerfile $$args --build-arg EXTRAS=$(EXTRAS) -t $(IMAGE) . \
	  && docker build -f deploy/Dockerfile $$args --build-arg EXTRAS=$(EXTRAS) -t $(IMAGE) .

image-digests:
	$(PYTHON) deploy/images.py fill $(IMAGES_LOCK)

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache $(CONSOLE)/node_modules
