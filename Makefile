# Two commands: `make run` serves the platform on the embedded servers, `make test` passes every test.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

.PHONY: run test stop services install browser lint typecheck pytest clean bench evaluate

$(VENV)/bin/python:
	@command -v $(PYTHON) >/dev/null || { echo "need $(PYTHON) on PATH"; exit 1; }
	$(PYTHON) -m venv $(VENV)

# torch is pinned and installed first: 2.13.0 is a local CPU build here; anything else pulls CUDA.
$(STAMP): pyproject.toml clients/python/pyproject.toml | $(VENV)/bin/python
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "torch==2.13.0"
	$(PY) -m pip install --quiet -e ".[dev]"
	$(PY) -m pip install --quiet -e "./clients/python[langgraph]"
	touch $(STAMP)

install: $(STAMP)

# The console's browser tests drive Debian's chromium through Playwright (no browser download).
CHROMIUM ?= $(shell command -v chromium || echo /usr/bin/chromium)
browser:
	@test -x "$(CHROMIUM)" || { \
	  echo "chromium is missing: installing Debian's chromium with apt-get (the console's browser tests drive it)"; \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null \
	  || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null; }; }
	@test -x "$(CHROMIUM)" || { echo "no chromium at $(CHROMIUM): install Debian's chromium package"; exit 1; }

var/secret_key:
	@mkdir -p var
	@$(PYTHON) -c "import secrets; print(secrets.token_urlsafe(50))" > var/secret_key
	@chmod 600 var/secret_key

services: install var/secret_key
	SECRET_KEY=$$(cat var/secret_key) $(PY) manage.py services start
	SECRET_KEY=$$(cat var/secret_key) $(PY) manage.py services status

run: services
	SECRET_KEY=$$(cat var/secret_key) bin/run

stop: install var/secret_key
	SECRET_KEY=$$(cat var/secret_key) $(PY) manage.py services stop

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports

typecheck: install
	DEBUG=1 $(VENV)/bin/mypy memory_platform episodes lifecycle rights retrieval console clients/python/memory_platform_client

pytest: install browser
	CHROMIUM="$(CHROMIUM)" $(VENV)/bin/pytest

test: lint typecheck pytest

bench: services
	SECRET_KEY=$$(cat var/secret_key) $(PY) manage.py bench ingest

evaluate: services
	SECRET_KEY=$$(cat var/secret_key) $(PY) manage.py evaluate locomo ../shared/datasets/locomo/locomo-dev.json

clean: stop
	rm -rf $(VENV)
