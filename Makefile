# Every target creates .venv itself, so `make demo` and `make test` work on a fresh clone.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev,interop]'
	touch $(STAMP)

demo: $(STAMP)
	rm -rf lake
	$(BIN)/delta-release run config/release.yaml

test: $(STAMP)
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check delta_release tests
	$(BIN)/mypy delta_release

# Benchmarks against the alternatives (benchmarks/RESULTS.md; benchmarks/README.md). SCALE=small or SCALE=tiny for
# a quick run; LARGE=1 adds the large cases (apply at 50M rows, the 20M-event backfill, the 2 GiB files).
SCALE ?= full
LARGE ?=
$(VENV)/.bench-installed: $(STAMP)
	$(BIN)/pip install --quiet -e '.[dev,bench]'
	touch $@

bench: $(VENV)/.bench-installed
	$(BIN)/python -m benchmarks.run --scale $(SCALE) $(if $(LARGE),--large)

clean:
	rm -rf $(VENV) lake release-packets
