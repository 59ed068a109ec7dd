# Every target creates .venv itself, so `make demo` and `make test` work on a fresh clone.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-long fuzz lint bench clean

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

# The long matrices `make test` leaves out: the whole copied third-party corpus and the full crash matrix.
test-long: $(STAMP)
	$(BIN)/python -m pytest -q -m 'conformance_full or long'

# The decode and hostile-input properties with thousands of random examples each (FUZZ_EXAMPLES=3000);
# `make test` runs the same properties derandomized. Pin what this finds with @example.
FUZZ_EXAMPLES ?= 3000
fuzz: $(STAMP)
	HYPOTHESIS_PROFILE=fuzz FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(BIN)/python -m pytest -q -p no:cacheprovider \
		tests/test_decode_paths.py tests/test_stream.py tests/test_hostile.py

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
