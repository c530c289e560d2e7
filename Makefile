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

.PHONY: run test check lint format typecheck bench clean

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
# their own: starting vLLM engines takes every core for a minute or two.
PYTEST_PARALLEL := -n 2 --dist loadfile -m "not vllm"
test: $(STAMP) $(NODE_STAMP) $(VENDOR_JS)
	$(BIN)/python -m pytest $(PYTEST_PARALLEL)
	$(BIN)/python -m pytest -m vllm

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
	$(BIN)/python -m pytest -m vllm

bench: $(STAMP)
	$(BIN)/python bench/overhead/run.py --write-docs

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache $(CONSOLE)/node_modules
