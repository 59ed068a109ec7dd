# Every target creates .venv itself, so `make demo` and `make test` work on a fresh clone.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	rm -rf lake
	$(BIN)/delta-release --lake lake ingest fixtures/orders/v2.jsonl
	$(BIN)/delta-release --lake lake ingest fixtures/orders/v3.jsonl
	$(BIN)/delta-release --lake lake ingest fixtures/orders/bad.jsonl
	$(BIN)/delta-release --lake lake history
	$(BIN)/delta-release --lake lake read

test: $(STAMP)
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check delta_release tests
	$(BIN)/mypy delta_release

clean:
	rm -rf $(VENV) lake release-packets
