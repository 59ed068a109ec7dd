"""Issue 12: table-specific column names live only in the table definitions (table_defs/*.yaml).

Generic machinery asks the TableDef (`key`, `ordering`, `tombstone`, `partition`, or `keyed()`) for the
columns it works with; a string literal naming one of a table's columns in those modules is a second
source of truth that a renamed column would silently miss.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from delta_release.errors import ConfigError
from delta_release.tables import load_table_defs

PKG = Path(__file__).resolve().parents[2] / "delta_release"
GENERIC = ["erasure", "index", "commit", "maintenance", "quarantine", "release/checks.py", "release/packet.py",
           "release/run.py", "views.py", "audit.py"]


def _modules() -> list[Path]:
    out: list[Path] = []
    for name in GENERIC:
        p = PKG / name
        out.extend(sorted(p.rglob("*.py")) if p.is_dir() else [p])
    return out


def test_generic_modules_name_no_table_column() -> None:
    defs = load_table_defs()
    # every column of a keyed table, and the role columns of every table ("reading", a telemetry value
    # column, is also an English word the erasure messages use)
    columns = {c for t in defs.values() if t.key for c in t.columns}
    columns |= {c for t in defs.values() for c in (t.key, t.ordering, t.tombstone, t.partition) if c}
    hits = []
    for path in _modules():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        probe = next((n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "check_amount_unit"),
                     None)
        skip = {id(n) for n in ast.walk(probe)} if probe else set()  # a probe event of the order contract
        hits += [f"{path.relative_to(PKG)}:{node.lineno} {node.value!r}" for node in ast.walk(tree)
                 if isinstance(node, ast.Constant) and node.value in columns and id(node) not in skip]
    assert not hits, hits


def test_keyed_columns_come_from_the_definition() -> None:
    defs = load_table_defs()
    orders = defs["orders"].keyed()
    assert (orders.key, orders.ordering, orders.tombstone, orders.partition) == (
        defs["orders"].key, defs["orders"].ordering, defs["orders"].tombstone, defs["orders"].partition)
    with pytest.raises(ConfigError, match="telemetry.*not keyed.*key, ordering, tombstone"):
        defs["telemetry"].keyed()
