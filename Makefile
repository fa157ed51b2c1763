# Two commands for a fresh machine: `make run` (server on SQLite, in-process workers) and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: run test check lint bench fuzz install bytecode lock client browser sandbox clean vendor vendor-update

# Exactly the versions and files of requirements.lock (every extra: ai, gunicorn, dev), checked
# against its hashes; nothing else is resolved here.
$(BIN)/.installed: requirements.lock
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check --require-hashes -r requirements.lock
	touch $@

install: $(BIN)/.installed

# Baton's own modules compiled ahead: with PYTHONDONTWRITEBYTECODE set (as on the CI machines) every
# process compiled them again on each start, 0.27 s of the ~1.6 s of CPU a server's start costs
# (alternated five times: 1.48 s against 1.75 s for `import app; create_app()`). Up to date in 0.1 s;
# a source changed since is compiled again in memory, as without it.
bytecode:
	@$(BIN)/python -m compileall -q -x '/\.' .

# requirements.lock from pyproject.toml's ranges: the versions it already pins are kept unless a
# range excludes them (`UPGRADE=1 make lock` takes the newest each range allows).
UV_VERSION := 0.13.9
lock: install
	$(BIN)/pip install --quiet --disable-pip-version-check uv==$(UV_VERSION)
	$(BIN)/uv pip compile --quiet pyproject.toml --all-extras --generate-hashes --python-version 3.11 \
	  $(if $(UPGRADE),--upgrade) -o requirements.lock

# baton/client/methods.py, the Python client's typed calls, from this checkout's method table (its
# OpenRPC document); tests/unit/baton/test_client.py fails while the file is stale.
client: install
	$(BIN)/python -c 'import json, baton, rpc.methods, rpc.openrpc; print(json.dumps(rpc.openrpc.document(rpc.methods.build_methods(), version=baton.__version__, url="")))' \
	  | $(BIN)/python -m baton.codegen - > baton/client/methods.py.new
	mv baton/client/methods.py.new baton/client/methods.py

run: install bytecode sandbox
	$(BIN)/flask --app app serve

# Four pytest-xdist workers: each test file runs whole on one worker, so a file's server and
# database are started once; tests never share a port or a database (tests/harness.py). Four, not
# one per core: much of the suite waits on servers, receivers and restarts, so on the 2-core CI
# machine 4 workers took 12 min 12 s where 2 took 21 min 12 s and 3 took 14 min 15 s (2026-11-29,
# a smaller suite). With the operator, history and ecosystem tests the same machine kind took
# 21 min 24 s; creating test tenants in the test process and compiling ahead brought it to 15 min 19 s
# (1,471 s of CPU on two cores, 2026-11-29, CI=true); at 0abc714 a fresh clone's `CI=true .ci/run`
# took 11 min 5 s, installation included (pytest 10 min 38 s, 3,774 tests). The wall time follows
# the machine's speed: a machine running plain Python at about half the speed took twice as long.
test: install bytecode browser sandbox
	$(BIN)/python -m pytest -n 4 --dist loadfile

# The console's browser tests drive Debian's Chromium (Playwright never downloads a browser):
# installed here when it is missing and this user may (root); otherwise they skip, saying why
# (and fail under CI=true).
browser:
	@command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] \
	  && apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } \
	  || echo "Chromium is missing and cannot be installed here: the browser tests will skip." >&2

# Script hosts run in namespaces of Debian's bubblewrap where it works (docs/operations.md, "Script
# hosts"): installed here the same way; without it they still run, limited and unprivileged.
sandbox:
	@command -v bwrap >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] \
	  && apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap; } \
	  || echo "bubblewrap is missing and cannot be installed here: script hosts run without namespaces." >&2

# The fast loop: every unit test and one pass over the main paths through a real server, on SQLite
# only, without the tests marked slow (those and PostgreSQL are `make test`'s); one app per worker.
# Two workers: on the 2-core machine on a slow day (2026-11-29) 54 s, where one took 83 s (three: 55 s).
check: install bytecode
	$(BIN)/python -m pytest -q -n 2 tests/unit tests/integration/test_smoke.py -k "not postgresql" -m "not slow"

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

# The console's vendored libraries (console/static/vendor/README.md): bpmn-js's viewer and
# form-js's viewer as their packages ship them (npm pack), bpmn-auto-layout bundled with its
# dependencies by esbuild at the versions console/vendor-build/package-lock.json pins (npm ci).
# Every file is checked against the recorded SHA-256 sums before anything is replaced.
BPMN_JS_VERSION := 18.31.1
FORM_JS_VERSION := 1.23.0
VENDOR := console/static/vendor
VENDOR_FILES := bpmn-navigated-viewer.production.min.js diagram-js.css bpmn-js.css LICENSE.bpmn-js \
  form-viewer.umd.js form-js.css LICENSE.form-js bpmn-auto-layout.min.js LICENSE.bpmn-auto-layout
AUTO_LAYOUT_LICENSES := bpmn-moddle moddle moddle-xml saxen min-dash

define fetch_vendor
	set -eu; tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	(cd "$$tmp" && npm pack --silent bpmn-js@$(BPMN_JS_VERSION) @bpmn-io/form-js@$(FORM_JS_VERSION) >/dev/null \
	  && mkdir bpmn-js form-js && tar xzf bpmn-js-$(BPMN_JS_VERSION).tgz -C bpmn-js \
	  && tar xzf bpmn-io-form-js-$(FORM_JS_VERSION).tgz -C form-js); \
	mkdir "$$tmp/out" "$$tmp/build"; \
	cp "$$tmp/bpmn-js/package/dist/bpmn-navigated-viewer.production.min.js" "$$tmp/bpmn-js/package/dist/assets/diagram-js.css" \
	   "$$tmp/bpmn-js/package/dist/assets/bpmn-js.css" "$$tmp/out/"; \
	cp "$$tmp/bpmn-js/package/LICENSE" "$$tmp/out/LICENSE.bpmn-js"; \
	cp "$$tmp/form-js/package/dist/form-viewer.umd.js" "$$tmp/form-js/package/dist/assets/form-js.css" "$$tmp/out/"; \
	cp "$$tmp/form-js/package/LICENSE" "$$tmp/out/LICENSE.form-js"; \
	cp console/vendor-build/package.json console/vendor-build/package-lock.json console/vendor-build/entry.js "$$tmp/build/"; \
	(cd "$$tmp/build" && npm ci --silent --no-audit --no-fund >/dev/null \
	  && ./node_modules/.bin/esbuild entry.js --bundle --format=iife --global-name=BpmnAutoLayout --minify \
	     --legal-comments=eof --target=es2020 --log-level=warning --outfile="$$tmp/out/bpmn-auto-layout.min.js" \
	  && { echo "bpmn-auto-layout 1.3.0 is MIT licensed (its package.json; the package ships no licence file)."; \
	       echo "The bundle also holds these packages, each under its own licence:"; \
	       for dep in $(AUTO_LAYOUT_LICENSES); do echo; echo "== $$dep"; cat "node_modules/$$dep/LICENSE"; done; \
	     } > "$$tmp/out/LICENSE.bpmn-auto-layout");
endef

vendor:
	@$(fetch_vendor) \
	if ! (cd "$$tmp/out" && sha256sum --quiet -c "$(CURDIR)/$(VENDOR)/SHA256SUMS"); then \
	  echo "The vendored files do NOT match $(VENDOR)/SHA256SUMS: nothing was replaced." >&2; exit 1; fi; \
	cd "$$tmp/out" && cp $(VENDOR_FILES) "$(CURDIR)/$(VENDOR)/"; \
	echo "bpmn-js $(BPMN_JS_VERSION), form-js $(FORM_JS_VERSION) and bpmn-auto-layout fetched; every file matches $(VENDOR)/SHA256SUMS."

vendor-update:
	@$(fetch_vendor) \
	cd "$$tmp/out" && cp $(VENDOR_FILES) "$(CURDIR)/$(VENDOR)/" && sha256sum $(VENDOR_FILES) > "$(CURDIR)/$(VENDOR)/SHA256SUMS"; \
	echo "Vendored; $(VENDOR)/SHA256SUMS rewritten: review and commit both."
