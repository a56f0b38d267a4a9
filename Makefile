# SuperBizAgent — `make help` lists the targets.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat requirements.txt requirements-dev.txt | sha1sum | cut -c1-12)

.DEFAULT_GOAL := help
.PHONY: help setup demo test check lint typecheck format bench clean

help: ## list the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

$(STAMP): requirements.txt requirements-dev.txt
	@command -v $(PYTHON) >/dev/null || { echo "$(PYTHON) is required"; exit 1; }
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements-dev.txt
	@rm -f $(VENV)/.installed-* && touch $@

setup: $(STAMP) ## create the virtualenv and install pinned dependencies

demo: $(STAMP) ## diagnose the bundled example incident with the offline analyst, streaming progress
	$(BIN)/python -m harness.examples

test: $(STAMP) ## set up, then run the whole test suite
	$(BIN)/python -m pytest

lint: $(STAMP) ## ruff lint and format check
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP) ## mypy (strict on harness/)
	$(BIN)/mypy harness tests bench

check: lint typecheck ## everything CI checks before the tests

format: $(STAMP) ## apply ruff's formatting and safe fixes
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

bench: $(STAMP) ## benchmark the harness overhead per run and per tool call
	$(BIN)/python -m bench.harness_bench

clean: ## remove the virtualenv and caches
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
