# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup test-fast haproxy demo test browser-test lint bench sim clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test,torch]'
	touch $(STAMP)

# The quick loop (~70 s of CPU, on 2 workers): no servers or emulators, no child Pythons
# (torchrun, trainers, the CLI) and no HAProxy; `make test` runs those too (tests/conftest.py has the tiers).
test-fast: setup
	$(BIN)/python -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder -m "not integration and not processes"

# HAProxy fronts the serving demo and the traffic tests (Debian's package; root installs it).
haproxy:
	@command -v haproxy >/dev/null || test -x /usr/sbin/haproxy || \
	  { test "$$(id -u)" = 0 && apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq haproxy; } || \
	  { echo "haproxy is missing: sudo apt-get install -y haproxy" >&2; exit 1; }

demo: setup haproxy
	$(BIN)/python -m lifeboat_dr.demo $(DEMO_ARGS)

# On TEST_WORKERS pytest-xdist workers (most tests wait on servers and child processes, so
# 3 workers on 2 cores): each file on one worker, the longest files first (tests/conftest.py).
# Then the tests marked `alone` (the partition drill, the fault simulator's CI budget): their checks
# are time bounds, so they get the cores to themselves (3 workers on CI's 2 cores made the drill's
# 2 s probe bound measure the scheduler: tests/drills/test_partition_drill.py).
TEST_WORKERS ?= 3
XDIST := -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder
test: setup haproxy
	$(BIN)/python -m pytest -q -rfEs $(XDIST) -m "not alone"
	$(BIN)/python -m pytest -q -rfEs -m alone
	$(BIN)/ruff check .

# The on-call's path in headless Chromium (Debian's chromium + haproxy; `make test` runs it too).
browser-test: setup
	$(BIN)/python -m pytest -q -m browser

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

bench: setup
	$(BIN)/python -m benchmarks

# The fault simulator (docs/simulation.md): `make sim` runs the CI budget (2,000 histories);
# `make sim SEED=17` replays history 17 exactly (and shrinks what it violates);
# `make sim SEED=1 HISTORIES=100000 JOBS=2` a long run; `make sim SCHEDULE=3:1,40:2` replays a
# shrunk schedule; `SCENARIO=zombie-clock-behind` pins one of issue #27's history shapes.
ifdef SEED
HISTORIES ?= 1
else
HISTORIES ?= 2000
SEED := 1
endif
JOBS ?= 2
sim: setup
	PYTHONHASHSEED=0 $(BIN)/python -m lifeboat_dr.testing.sim --seed $(SEED) --histories $(HISTORIES) \
	  --jobs $(JOBS) $(if $(SCHEDULE),--schedule $(SCHEDULE)) $(if $(SCENARIO),--scenario $(SCENARIO)) $(SIM_ARGS)

clean:
	rm -rf $(VENV) .lifeboat .pytest_cache
