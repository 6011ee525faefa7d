# The README's commands. Each target installs what it needs first.
#   make run    install the runtime lock, start the whole stack (Ctrl-C stops it)
#   make test   install the dev lock (runtime + test, lint and bench tools), run the suite
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DEV_STAMP := $(VENV)/.installed-dev

.PHONY: setup setup-dev run test unit lint render docs jaeger lock clean

# Two hash-pinned locks made by `make lock`: requirements.lock (what the service runs)
# and requirements-dev.lock (that plus pytest, ruff, mypy, matplotlib, the bench's
# other HTTP clients). Both go into the one .venv; the dev one is a superset.
# setup.py builds the compiled hot path in place (the timing core's C,
# tracing/timing/csrc/, the call observer's, tracing/_client_native.c, and the span
# encoders', tracing/_export_native.c and tracing/_otlp_native.c); without a
# compiler it says so and the Python reference runs.
NATIVE_SOURCES := $(wildcard tracing/timing/csrc/*.c tracing/timing/csrc/*.h) tracing/_client_native.c \
	tracing/_export_native.c tracing/_otlp_native.c tracing/_encode.h
$(STAMP): requirements.lock pyproject.toml setup.py $(NATIVE_SOURCES)
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet --require-hashes -r requirements.lock
	$(PY) -m pip install --quiet --no-deps -e .
	touch $@

$(DEV_STAMP): $(STAMP) requirements-dev.lock
	$(PY) -m pip install --quiet --require-hashes -r requirements-dev.lock
	touch $@

setup: $(STAMP)

setup-dev: $(DEV_STAMP)

run: setup
	@$(MAKE) --no-print-directory jaeger || echo "make: Jaeger could not be built; spans go to .run/spans.jsonl"
	$(VENV)/bin/pricingctl up

# pytest's exit code 5 ("no tests collected") is said plainly and not an error.
test: setup-dev jaeger
	@$(PY) -m pytest; code=$$?; \
	if [ $$code -eq 5 ]; then echo "make: pytest collected no tests (exit 5)"; exit 0; fi; \
	exit $$code

# Jaeger v2 built from its Go module, and its web UI from the jaeger-ui source
# (JAEGER_UI_SOURCE: a tarball or directory of the pinned tag; unset: git clone).
# Both cached under ~/.cache/pricingservice, so only the first run pays (binary
# about 4-9 minutes on 2 cores, UI about 3). Without Node or a UI source,
# build-ui.sh says so in one line (exit 2) and Jaeger serves its API only.
jaeger:
	@deploy/jaeger/build.sh >/dev/null
	@deploy/jaeger/build-ui.sh >/dev/null; code=$$?; \
	if [ $$code -eq 1 ]; then echo "make: Jaeger's web UI did not build (see above); Jaeger serves its API only"; fi

unit: setup-dev
	$(PY) -m pytest tests/unit

lint: setup-dev
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

# Every committed rendering of routes.toml: envoy.yaml and the deployment targets.
render: setup
	$(VENV)/bin/pricingctl routes render
	$(VENV)/bin/pricingctl deploy render compose
	$(VENV)/bin/pricingctl deploy render kubernetes

# docs/cli.md, the command reference, written from pricingctl's own parsers
# (tests/unit/pricingctl/test_clidoc.py fails when it is stale).
docs: setup
	$(PY) -m pricingctl.clidoc

# Regenerate both locks after editing pyproject.toml (uv keeps the pins already in
# them where it can). The runtime lock is constrained by the dev one, so the two
# never disagree on a version. uv is fetched into a venv of its own: the service's
# venv gets nothing it does not run.
UV := .venv-uv/bin/uv
lock:
	@test -x $(UV) || { $(PYTHON) -m venv .venv-uv && .venv-uv/bin/pip install --quiet uv; }
	$(UV) pip compile pyproject.toml --extra dev --python-version 3.11 --generate-hashes -q \
	  -o requirements-dev.lock
	$(UV) pip compile pyproject.toml -c requirements-dev.lock --python-version 3.11 \
	  --generate-hashes -q -o requirements.lock

clean:
	rm -rf $(VENV) .venv-uv .venv-py* .run .pytest_cache .mypy_cache .ruff_cache
