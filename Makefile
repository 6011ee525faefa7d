# The README's commands. Each target installs what it needs first.
#   make run    install everything, start the whole stack (Ctrl-C stops it)
#   make test   install everything, run the whole test suite
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup run test unit lint render jaeger lock clean

$(STAMP): requirements.lock pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet --require-hashes -r requirements.lock
	$(PY) -m pip install --quiet --no-deps -e .
	touch $@

setup: $(STAMP)

run: setup
	@$(MAKE) --no-print-directory jaeger || echo "make: Jaeger could not be built; spans go to .run/spans.jsonl"
	$(VENV)/bin/pricingctl up

# pytest's exit code 5 ("no tests collected") is said plainly and not an error.
test: setup jaeger
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

unit: setup
	$(PY) -m pytest tests/unit

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

render: setup
	$(VENV)/bin/pricingctl routes render

# Regenerate the dependency locks after editing pyproject.toml: requirements.lock
# (with the dev extras) for the venv, requirements-runtime.lock for the container image.
lock: setup
	$(VENV)/bin/pip install --quiet uv && $(VENV)/bin/uv pip compile pyproject.toml --extra dev \
	  --python-version 3.11 --generate-hashes -q -o requirements.lock
	$(VENV)/bin/uv pip compile pyproject.toml --python-version 3.11 --python-platform x86_64-manylinux_2_31 \
	  --generate-hashes -q -o requirements-runtime.lock

clean:
	rm -rf $(VENV) .run .pytest_cache .mypy_cache .ruff_cache
