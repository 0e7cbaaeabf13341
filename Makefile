# Every target sets up its own virtual environment, so a fresh clone needs nothing else.
# Each installs only what it needs (see the extras in pyproject.toml): `make demo` the
# runtime alone, `make test` the test tools, `make setup` everything.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
CHECKSUM := $(shell cat pyproject.toml | cksum | cut -d' ' -f1)
PYTEST_WORKERS ?= 2

# The stamp saying that $(VENV) holds kforge with the named extras for this pyproject.toml.
installed = $(VENV)/.installed-$(1)-$(CHECKSUM)

.PHONY: setup demo test test-all lint bench fuzz clean
.PRECIOUS: $(VENV)/.installed-%

$(VENV)/.installed-%-$(CHECKSUM): pyproject.toml
	@test -x $(BIN)/python || { echo "== creating $(VENV) with $(PYTHON)"; $(PYTHON) -m venv $(VENV); }
	@echo "== installing kforge$(if $(filter runtime,$*),,[$*]) into $(VENV) (again only when pyproject.toml changes)"
	$(BIN)/python -m pip install --disable-pip-version-check --progress-bar on \
		-e '.$(if $(filter runtime,$*),,[$*])'
	@rm -f $(VENV)/.installed-$*-*
	@touch $@
	@echo "== $(VENV) is ready: $$(du -sh $(VENV) | cut -f1)"

setup: $(call installed,dev)

demo: $(call installed,runtime)
	@$(BIN)/python -m kforge.demo

test: $(call installed,test)
	$(BIN)/python -m pytest -q -n $(PYTEST_WORKERS) -m "not slow"

test-all: $(call installed,test) $(call installed,browser)
	$(BIN)/python -m pytest -q -n $(PYTEST_WORKERS)

lint: $(call installed,lint)
	$(BIN)/ruff check src tests benchmarks examples fuzz
	$(BIN)/ruff format --check src tests benchmarks examples fuzz
	$(BIN)/mypy src
	MYPYPATH=src:tests $(BIN)/mypy benchmarks --follow-imports=silent --allow-untyped-calls

bench: $(call installed,bench)
	$(BIN)/python benchmarks/run_all.py

# Coverage-guided fuzzing (fuzz/run.py, atheris), FUZZ_RUNS inputs per target, one worker.
FUZZ_RUNS ?= 20000
fuzz: $(call installed,fuzz)
	@mkdir -p .fuzz/logs
	@for target in $$($(BIN)/python fuzz/run.py --list); do \
		echo "fuzzing $$target: $(FUZZ_RUNS) inputs (log: .fuzz/logs/$$target.log)"; \
		$(BIN)/python fuzz/run.py $$target --runs $(FUZZ_RUNS) > .fuzz/logs/$$target.log 2>&1 \
			|| { tail -n 40 .fuzz/logs/$$target.log; exit 1; }; \
		grep -E '^Done' .fuzz/logs/$$target.log; \
	done

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis .fuzz build dist
