# Every target creates .venv itself, so `make demo` and `make test` work on a fresh clone.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-long fuzz lint bench clean

$(STAMP): pyproject.toml
	@echo "==> [1/3] creating the virtualenv $(VENV) with $(PYTHON)"
	$(PYTHON) -m venv $(VENV)
	@echo "==> [2/3] upgrading pip"
	$(BIN)/pip install --quiet --upgrade pip
	@echo "==> [3/3] installing delta-release with its dev, interop and distributed extras (deltalake, polars,"
	@echo "    pyarrow, duckdb, the DuckDB delta extension, Sail, Ray, pytest...): about 3 minutes on a first install"
	$(BIN)/pip install --quiet -e '.[dev,interop,distributed]'
	@echo "==> installed; later runs skip this step until pyproject.toml changes"
	touch $(STAMP)

demo: $(STAMP)
	@echo "==> removing ./lake, then the release run: delta-release run config/release.yaml"
	rm -rf lake
	$(BIN)/delta-release run config/release.yaml
	@echo "==> the lake now:"
	$(BIN)/delta-release --lake lake status

test: $(STAMP)
	$(BIN)/python -m pytest -q -n auto --dist loadfile

# The long matrices `make test` leaves out: the whole copied third-party corpus and the full crash matrix.
test-long: $(STAMP)
	$(BIN)/python -m pytest -q -m 'conformance_full or long'

# The decode, hostile-input and apply properties with thousands of random examples each (FUZZ_EXAMPLES=3000);
# `make test` runs the same properties derandomized. Pin what this finds with @example.
FUZZ_EXAMPLES ?= 3000
fuzz: $(STAMP)
	HYPOTHESIS_PROFILE=fuzz FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(BIN)/python -m pytest -q -p no:cacheprovider \
		tests/ingest/test_decode_paths.py tests/ingest/test_stream.py tests/ingest/test_hostile.py tests/apply/test_apply.py

lint: $(STAMP)
	$(BIN)/ruff check delta_release tests
	$(BIN)/mypy delta_release

# Benchmarks against the alternatives (benchmarks/RESULTS.md; benchmarks/README.md). SCALE=small or SCALE=tiny for
# a quick run; LARGE=1 adds the large cases (apply at 50M rows, the 20M-event backfill, the 2 GiB files).
SCALE ?= full
LARGE ?=
$(VENV)/.bench-installed: $(STAMP)
	$(BIN)/pip install --quiet -e '.[dev,distributed,bench]'
	touch $@

bench: $(VENV)/.bench-installed
	$(BIN)/python -m benchmarks.run --scale $(SCALE) $(if $(LARGE),--large)

clean:
	rm -rf $(VENV) lake release-packets
