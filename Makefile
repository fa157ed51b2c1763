# Two commands for a fresh machine: `make run` (server on SQLite, in-process workers) and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: run test check lint bench install clean

$(BIN)/.installed: requirements.txt requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -r requirements-dev.txt
	touch $@

install: $(BIN)/.installed

run: install
	$(BIN)/flask --app app serve

test: install
	$(BIN)/python -m pytest

# The fast loop (about a minute): every unit test, and one pass over the main paths on SQLite.
check: install
	$(BIN)/python -m pytest -q tests/unit
	$(BIN)/python -m pytest -q tests/integration/test_smoke.py -k sqlite

lint: install
	$(BIN)/pip install --quiet --disable-pip-version-check ruff
	$(BIN)/ruff check .

bench: install
	$(BIN)/python bench/throughput.py

clean:
	rm -rf $(VENV) instance .pytest_cache
