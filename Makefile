# Two commands for a fresh machine: `make run` (server on SQLite, in-process workers) and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: run test bench install clean

$(BIN)/.installed: requirements.txt requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -r requirements-dev.txt
	touch $@

install: $(BIN)/.installed

run: install
	$(BIN)/flask --app app serve

test: install
	$(BIN)/python -m pytest

bench: install
	$(BIN)/python bench/throughput.py

clean:
	rm -rf $(VENV) instance .pytest_cache
