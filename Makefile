# cellblock: the two commands of the quick start, and the steps they are made of.
#
#   make demo   bootstrap whatever is missing, then run the demo end to end
#   make test   bootstrap whatever is missing, then lint, type-check and run every test
#
# Every step is idempotent: a second run only re-checks.

PYTHON   ?= python3
VENV     ?= .venv
PY       := $(VENV)/bin/python
PIP      := $(VENV)/bin/pip
CELLBLOCK:= $(VENV)/bin/cellblock
EXTRAS   ?= server,dev
STAMP    := $(VENV)/.installed-$(shell cat pyproject.toml | sha256sum | cut -c1-16)

.PHONY: demo test bootstrap host venv image lint typecheck unit bench clean help

help:
	@echo "make demo   - run the demo (installs what is missing)"
	@echo "make test   - lint, type-check and run the whole test suite"
	@echo "make bench  - per-call benchmarks (see docs/benchmarks.md)"

## bootstrap: system packages + daemons, the virtualenv, and the sandbox images
bootstrap: host venv image

host:
	bash scripts/setup-host.sh

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -e ".[$(EXTRAS)]"
	rm -f $(VENV)/.installed-* && touch $@

image: venv host
	$(CELLBLOCK) image build --docker --quiet

demo: bootstrap
	$(PY) demo/tutorial_checks.py

lint: venv
	$(VENV)/bin/ruff check src tests demo bench

typecheck: venv
	$(VENV)/bin/mypy

unit: venv
	$(VENV)/bin/pytest -q -m "not integration"

test: bootstrap lint typecheck
	$(VENV)/bin/pytest -q

bench: bootstrap
	$(CELLBLOCK) bench --backend bwrap --n 200
	$(CELLBLOCK) bench --backend docker --n 100
	$(CELLBLOCK) bench --backend gvisor --n 100

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
