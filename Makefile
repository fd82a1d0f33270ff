# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup test-fast haproxy demo test browser-test lint bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test,torch]'
	touch $(STAMP)

# The quick loop (~25 s of CPU): no servers or emulators, no child Pythons (torchrun, trainers,
# the CLI) and no HAProxy; `make test` runs those too (tests/conftest.py has the tiers).
test-fast: setup
	$(BIN)/python -m pytest -q -m "not integration and not processes"

# HAProxy fronts the serving demo and the traffic tests (Debian's package; root installs it).
haproxy:
	@command -v haproxy >/dev/null || test -x /usr/sbin/haproxy || \
	  { test "$$(id -u)" = 0 && apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq haproxy; } || \
	  { echo "haproxy is missing: sudo apt-get install -y haproxy" >&2; exit 1; }

demo: setup haproxy
	$(BIN)/python -m lifeboat_dr.demo $(DEMO_ARGS)

test: setup haproxy
	$(BIN)/python -m pytest -q
	$(BIN)/ruff check .

# The on-call's path in headless Chromium (Debian's chromium + haproxy; `make test` runs it too).
browser-test: setup
	$(BIN)/python -m pytest -q -m browser

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

bench: setup
	$(BIN)/python -m benchmarks

clean:
	rm -rf $(VENV) .lifeboat .pytest_cache
