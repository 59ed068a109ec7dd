"""Conformance harness for `register` over real third-party Delta tables (used by test_conformance.py).

A table is registered into a fresh lake; pinned versions are read through the gateway with both engines
(`polars`, which may be answered by another engine where Polars would be wrong, and `duckdb`); every
answer is compared with Spark's expected rows where the table ships them (`expected/`, the latest
version of delta-kernel-rs' golden tables) and otherwise with two independent readers (DuckDB's delta
extension and deltalake's own scan) where those two agree. Rows are compared as multisets of
canonical values (timestamps in UTC, decimals normalised, floats to 12 significant digits).
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow.parquet as pq

import delta_release as dr
from delta_release import _delta
from delta_release.errors import DeltaReleaseError, SafetyError
from delta_release.register import register_table
from delta_release.register.reader import read_deltalake, read_duckdb_delta, read_registered


def _canon(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        aware = value if value.tzinfo else value.replace(tzinfo=dt.UTC)
        return aware.astimezone(dt.UTC).isoformat()
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return format(value.normalize(), "f") if value == value else "nan"
    if isinstance(value, float):
        return "nan" if math.isnan(value) else float(f"{value:.12g}")
    if isinstance(value, bytes | bytearray):
        return value.hex()
    if isinstance(value, dict):
        return {str(k): _canon(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, list | tuple):
        items = [_canon(v) for v in value]
        if items and all(isinstance(i, dict) and set(i) == {"key", "value"} for i in items):
            return sorted(items, key=lambda i: json.dumps(i, sort_keys=True))  # a map: order is not data
        return items
    return value


def rows(frame: pl.DataFrame, skip: list[str] | None = None) -> list[str]:
    """The frame as a sorted list of canonical JSON rows, columns by name (minus `skip`)."""
    cols = sorted(c for c in frame.columns if c not in (skip or []))
    return sorted(json.dumps({c: _canon(r[c]) for c in cols}, sort_keys=True, default=str)
                  for r in frame.to_dicts())


def expected_rows(table_dir: Path, writer_zones: dict[str, str] | None = None) -> pl.DataFrame | None:
    """Spark's expected rows for the latest version (delta-kernel-rs golden tables), if shipped.

    `writer_zones` (column -> IANA zone): a timestamp partition column whose log values name no zone holds
    the wall clock of the writer's session zone; Spark's expected instant is turned back into that wall
    clock read as UTC, the reading the gateway decided on (delta_release/register/timestamps.py)."""
    files = sorted((table_dir.parent / "expected").glob("*.parquet")) if table_dir.name == "delta" else []
    if not files:
        return None
    tables = [pq.read_table(f, coerce_int96_timestamp_unit="us") for f in files]
    frames = [pl.from_arrow(t) for t in tables]
    out = pl.concat([f for f in frames if isinstance(f, pl.DataFrame)], how="diagonal_relaxed")
    for col, zone in (writer_zones or {}).items():
        utc = pl.col(col).dt.replace_time_zone("UTC") if out.schema[col].time_zone is None else pl.col(col)  # type: ignore[union-attr]
        out = out.with_columns(utc.dt.convert_time_zone(zone).dt.replace_time_zone(None)
                               .dt.replace_time_zone("UTC").alias(col))
    return out


@dataclass
class Outcome:
    table: str
    registered: bool = False
    refused: str | None = None  # the refusal reason when register exits 3
    reads: dict[str, str] = field(default_factory=dict)  # "v<N>/<engine>" -> match | refused: ... | MISMATCH ...
    ambiguous: list[str] = field(default_factory=list)  # register's ambiguous_timestamp_partition columns

    @property
    def failures(self) -> list[str]:
        return [f"{k}: {v}" for k, v in self.reads.items() if v.startswith(("MISMATCH", "ERROR"))]


def versions_to_read(path: Path, latest: int, limit: int = 3) -> list[int]:
    commits = sorted(int(p.name[:20]) for p in (path / "_delta_log").glob("*.json") if p.name[:20].isdigit())
    picks = {latest, commits[0] if commits else latest, (commits[0] + latest) // 2 if commits else latest}
    return sorted(v for v in picks if v <= latest)[-limit:]


def _reference(path: Path, version: int, latest: int, skip: list[str],
               writer_zones: dict[str, str] | None = None) -> tuple[list[str] | None, str]:
    if version == latest:
        spark = expected_rows(path, writer_zones)
        if spark is not None:
            return rows(spark, skip), "spark"
    answers = []
    for reader in (lambda: read_duckdb_delta(str(path), version), lambda: read_deltalake(str(path), {}, version)):
        try:
            answers.append(rows(reader(), skip))
        except Exception:  # noqa: BLE001 - a reader that cannot read gives no reference
            answers.append(None)
    if answers[0] is not None and answers[0] == answers[1]:
        return answers[0], "duckdb+deltalake"
    return None, "no reference (independent readers disagree or fail)"


def run_table(path: Path, lake_dir: Path, *, engines: tuple[str, ...] = ("polars", "duckdb"),
              versions: list[int] | None = None, skip_columns: list[str] | None = None,
              writer_zones: dict[str, str] | None = None) -> Outcome:
    """Register and read `path`; `versions` None: a few pinned versions, []: the latest only."""
    out = Outcome(table=path.parent.name if path.name == "delta" else path.name)
    lake = dr.Lake.create(lake_dir)
    try:
        reg = register_table(lake, "t", str(path))
    except SafetyError as exc:
        out.refused = str(exc.facts.get("reason") or exc.facts.get("mismatch") or type(exc).__name__)
        return out
    except DeltaReleaseError as exc:
        out.refused = f"exit {exc.exit_code}: {exc.message[:120]}"
        return out
    out.registered = True
    out.ambiguous = [a["column"] for a in reg.to_json()["ambiguous_timestamp_partition"]]
    skip = skip_columns or []
    for version in versions_to_read(path, reg.version) if versions is None else (versions or [reg.version]):
        if version > reg.version:
            continue
        truth, source = _reference(path, version, reg.version, skip, writer_zones)
        for engine in engines:
            key = f"v{version}/{engine}"
            try:
                frame, used = read_registered(lake, "t", version, engine=engine)
            except SafetyError as exc:
                out.reads[key] = f"refused: {exc.facts.get('reason') or type(exc).__name__}"
                continue
            except Exception as exc:  # noqa: BLE001 - anything else is a harness failure to report
                out.reads[key] = f"ERROR {type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
                continue
            if truth is None:
                out.reads[key] = f"unchecked ({used}; {source})"
            elif rows(frame, skip) == truth:
                out.reads[key] = f"match {source} ({used})"
            else:
                out.reads[key] = f"MISMATCH vs {source} ({used}, {frame.height} rows)"
    return out


def latest(path: Path) -> int | None:
    return _delta.latest_version(str(path), {})
