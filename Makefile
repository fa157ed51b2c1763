# Two commands for a fresh machine: `make run` (server on SQLite, in-process workers) and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: run test check lint bench fuzz install lock browser clean vendor vendor-update

# Exactly the versions and files of requirements.lock (every extra: ai, gunicorn, dev), checked
# against its hashes; nothing else is resolved here.
$(BIN)/.installed: requirements.lock
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check --require-hashes -r requirements.lock
	touch $@

install: $(BIN)/.installed

# requirements.lock from pyproject.toml's ranges: the versions it already pins are kept unless a
# range excludes them (`UPGRADE=1 make lock` takes the newest each range allows).
UV_VERSION := 0.13.9
lock: install
	$(BIN)/pip install --quiet --disable-pip-version-check uv==$(UV_VERSION)
	$(BIN)/uv pip compile --quiet pyproject.toml --all-extras --generate-hashes --python-version 3.11 \
	  $(if $(UPGRADE),--upgrade) -o requirements.lock

run: install
	$(BIN)/flask --app app serve

test: install browser
	$(BIN)/python -m pytest

# The console's browser tests drive Debian's Chromium (Playwright never downloads a browser):
# installed here when it is missing and this user may (root); otherwise they skip, saying why
# (and fail under CI=true).
browser:
	@command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] \
	  && apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } \
	  || echo "Chromium is missing and cannot be installed here: the browser tests will skip." >&2

# The fast loop: every unit test and one pass over the main paths through a real server, on SQLite
# only, without the tests marked slow (those and PostgreSQL are `make test`'s). Measured 45 s on the
# 2-core machine while other work ran on it (2026-11-28); one app for the whole run.
check: install
	$(BIN)/python -m pytest -q tests/unit tests/integration/test_smoke.py -k "not postgresql" -m "not slow"

lint: install
	$(BIN)/pip install --quiet --disable-pip-version-check ruff
	$(BIN)/ruff check .

bench: install
	$(BIN)/python bench/throughput.py

# The long fuzz run (bench/fuzz.py): 100,000 hostile requests per database unless FUZZ_REQUESTS says.
FUZZ_REQUESTS ?= 100000
fuzz: install
	$(BIN)/python bench/fuzz.py --requests $(FUZZ_REQUESTS)

clean:
	rm -rf $(VENV) instance .pytest_cache

# The console's bpmn-js viewer (console/static/vendor/README.md): fetched with npm, checked against
# the recorded SHA-256 sums before anything is replaced.
BPMN_JS_VERSION := 18.31.1
VENDOR := console/static/vendor
VENDOR_FILES := bpmn-navigated-viewer.production.min.js diagram-js.css bpmn-js.css LICENSE.bpmn-js

define fetch_bpmn_js
	set -eu; tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	(cd "$$tmp" && npm pack --silent bpmn-js@$(BPMN_JS_VERSION) >/dev/null && tar xzf bpmn-js-$(BPMN_JS_VERSION).tgz); \
	mkdir "$$tmp/out"; \
	cp "$$tmp/package/dist/bpmn-navigated-viewer.production.min.js" "$$tmp/package/dist/assets/diagram-js.css" \
	   "$$tmp/package/dist/assets/bpmn-js.css" "$$tmp/out/"; \
	cp "$$tmp/package/LICENSE" "$$tmp/out/LICENSE.bpmn-js";
endef

vendor:
	@$(fetch_bpmn_js) \
	if ! (cd "$$tmp/out" && sha256sum --quiet -c "$(CURDIR)/$(VENDOR)/SHA256SUMS"); then \
	  echo "bpmn-js $(BPMN_JS_VERSION) does NOT match $(VENDOR)/SHA256SUMS: nothing was replaced." >&2; exit 1; fi; \
	cd "$$tmp/out" && cp $(VENDOR_FILES) "$(CURDIR)/$(VENDOR)/"; \
	echo "bpmn-js $(BPMN_JS_VERSION) fetched; every file matches $(VENDOR)/SHA256SUMS."

vendor-update:
	@$(fetch_bpmn_js) \
	cd "$$tmp/out" && cp $(VENDOR_FILES) "$(CURDIR)/$(VENDOR)/" && sha256sum $(VENDOR_FILES) > "$(CURDIR)/$(VENDOR)/SHA256SUMS"; \
	echo "bpmn-js $(BPMN_JS_VERSION) vendored; $(VENDOR)/SHA256SUMS rewritten: review and commit both."
