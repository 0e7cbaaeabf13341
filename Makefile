# Every target sets up its own virtual environment, so a fresh clone needs nothing else.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)
PYTEST_WORKERS ?= 2

.PHONY: setup demo test test-all lint bench clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,bench]'
	@rm -f $(VENV)/.installed-*
	@touch $@

setup: $(STAMP)

demo: setup
	@$(BIN)/python -m kforge.demo

test: setup
	$(BIN)/python -m pytest -q -n $(PYTEST_WORKERS) -m "not slow"

test-all: setup
	$(BIN)/python -m pytest -q -n $(PYTEST_WORKERS)

lint: setup
	$(BIN)/ruff check src tests benchmarks examples
	$(BIN)/ruff format --check src tests benchmarks examples
	$(BIN)/mypy src

bench: setup
	$(BIN)/python benchmarks/run_all.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis build dist
