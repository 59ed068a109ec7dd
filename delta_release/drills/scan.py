"""Which files under a lake hold a given string? Every file is read, parquet pages and footers included.

Used by tests and drills to check "no file outside `_raw/` holds an erased subject's id". A file holds
the needle when any of these contains it (`where_in_file` says which):

- `bytes`: the file's bytes as stored, the needle as UTF-8 or as a JSON string escapes it (`\\u002d`,
  `\\/`), so uncompressed text, JSON, SQLite pages and WAL files, temp files and logs are covered;
- for a parquet file (magic `PAR1` at both ends; a file that fails to parse is reported as `unreadable`):
  `column:<name>`: the decompressed, decoded values of every string or binary column, nested ones
  (structs, lists, maps, dictionaries) included; `metadata`: the footer's key-value metadata (the Arrow
  schema, Delta or pandas metadata); `statistics:<name>`: the min/max statistics of every column chunk of
  every row group (what a footer-only reader sees, and what compression would hide from a byte scan).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

PARQUET_MAGIC = b"PAR1"


def _byte_forms(needle: str) -> list[bytes]:
    forms = {needle.encode("utf-8"), json.dumps(needle)[1:-1].encode("ascii"),
             json.dumps(needle, ensure_ascii=False)[1:-1].encode("utf-8"),
             "".join(f"\\u{ord(c):04x}" if not c.isalnum() else c for c in needle).encode("utf-8")}
    return sorted(f for f in forms if f)


def _leaf_arrays(arr: pa.Array, name: str) -> Iterator[tuple[str, pa.Array]]:
    t = arr.type
    if isinstance(arr, pa.ChunkedArray):
        for chunk in arr.chunks:
            yield from _leaf_arrays(chunk, name)
        return
    if pa.types.is_dictionary(t):
        yield from _leaf_arrays(arr.dictionary, name)
    elif pa.types.is_struct(t):
        for i in range(t.num_fields):
            yield from _leaf_arrays(arr.field(i), f"{name}.{t.field(i).name}")
    elif pa.types.is_map(t):
        yield from _leaf_arrays(arr.keys, f"{name}.key")
        yield from _leaf_arrays(arr.items, f"{name}.value")
    elif pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        yield from _leaf_arrays(arr.flatten(), f"{name}.element")
    elif (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t)
          or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t) or pa.types.is_string_view(t)
          or pa.types.is_binary_view(t)):
        yield name, arr


def _array_holds(arr: pa.Array, needle: str) -> bool:
    if len(arr) == 0:
        return False
    try:
        target = arr if pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type) else arr.cast(pa.binary())
        return bool(pc.any(pc.match_substring(target, needle)).as_py())
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError):
        raw = needle.encode("utf-8")
        return any(v is not None and ((raw in v) if isinstance(v, bytes) else (needle in v)) for v in arr.to_pylist())


def _stat_text(value: object) -> bytes:
    if isinstance(value, bytes):
        return value
    return str(value).encode("utf-8", errors="surrogatepass")


def _stat_values(col: pq.ColumnChunkMetaData) -> list[bytes]:
    """A column chunk's min and max as bytes (also when they are not valid UTF-8: truncated statistics)."""
    try:
        stats = col.statistics
    except (pa.ArrowException, ValueError):
        return []
    if stats is None or not stats.has_min_max:
        return []
    out = []
    for attr in ("min", "max"):
        try:
            out.append(_stat_text(getattr(stats, attr)))
        except (UnicodeDecodeError, ValueError, pa.ArrowException):
            out.append(_stat_text(getattr(stats, attr + "_raw", b"")))
    return out


def _parquet_hits(path: Path, needle: str) -> list[str]:
    hits: list[str] = []
    raw = needle.encode("utf-8")
    pf = pq.ParquetFile(path)
    meta = pf.metadata
    for key, value in (meta.metadata or {}).items():
        if raw in key or raw in value:
            hits.append("metadata")
            break
    for rg in range(meta.num_row_groups):
        group = meta.row_group(rg)
        for c in range(group.num_columns):
            col = group.column(c)
            if any(raw in v for v in _stat_values(col)):
                hits.append(f"statistics:{col.path_in_schema}")
    table = pf.read()
    for name, column in zip(table.column_names, table.columns, strict=True):
        for leaf, arr in _leaf_arrays(column, name):
            if _array_holds(arr, needle):
                hits.append(f"column:{leaf}")
    return sorted(set(hits))


def where_in_file(path: str | os.PathLike[str], needle: str) -> list[str]:
    """The places in one file that hold `needle` (empty: none); see the module docstring."""
    p = Path(path)
    data = p.read_bytes()
    hits = ["bytes"] if any(form in data for form in _byte_forms(needle)) else []
    if len(data) >= 8 and data[:4] == PARQUET_MAGIC and data[-4:] == PARQUET_MAGIC:
        try:
            hits += _parquet_hits(p, needle)
        except (OSError, pa.ArrowException, ValueError):
            hits.append("unreadable")
    return hits


def files_holding(lake_root: str | os.PathLike[str], needle: str, *,
                  skip: tuple[str, ...] = ()) -> list[str]:
    """Paths (relative to `lake_root`, '/'-separated, sorted) of every file under it that holds `needle`,
    dot-files and temp files included; `skip`: path prefixes not to read (e.g. `("_raw/",)`)."""
    root = Path(lake_root)
    out: list[str] = []
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            full = Path(dirpath) / name
            rel = full.relative_to(root).as_posix()
            if any(rel.startswith(s) for s in skip) or full.is_symlink():
                continue
            try:
                if where_in_file(full, needle):
                    out.append(rel)
            except FileNotFoundError:
                continue
    return sorted(out)
