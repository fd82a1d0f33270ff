# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup demo test browser-test lint bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

demo: setup
	$(BIN)/python -m flows.demo $(DEMO_ARGS)

test: setup
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
