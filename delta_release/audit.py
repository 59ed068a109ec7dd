"""Pruning evidence for a day-bounded audit query: which files and row groups it must read, and the
bytes that costs against a full scan.

The figures come from the Delta log (partition values, sizes) and the parquet footers (row groups,
compressed column-chunk bytes). They are cross-checked against Polars: the rows the audit query returns
through the gateway must equal the current rows read from the candidate files alone.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from . import _delta
from .errors import DeltaReleaseError, GateError, InputError, NotFoundError
from .views import current_rows

if TYPE_CHECKING:
    from .commit.view import StagedSnapshot
    from .context import LakeContext


_DAYS = re.compile(r"([0-9]{1,10})(?::([0-9]{1,10}))?")


def parse_days(spec: str) -> tuple[int, int]:
    """'47:48' -> (47, 48); a single day '47' -> (47, 47)."""
    m = _DAYS.fullmatch(spec) if isinstance(spec, str) else None
    if m is None:  # (int() would take "1_0", " 47" and other scripts' digits)
        raise InputError(f"--days must look like A:B with integer days, got {spec!r}", days=spec)
    a, b = int(m.group(1)), int(m.group(2) or m.group(1))
    if a < 0 or b < a:
        raise InputError(f"--days {spec!r}: need 0 <= A <= B", days=spec)
    return a, b


def audit_days(lake: LakeContext, table: str = "orders", first_day: int = 0, last_day: int = 0,
               version: int | None = None, *, unpublished_ok: bool = False,
               staged: StagedSnapshot | None = None) -> dict[str, Any]:
    """Audit evidence at `version` (default: published). `unpublished_ok` lets a release run audit its
    candidate version before publication; readers never get that. `staged`: audit a staged candidate's
    file set instead (a release run's, before it commits); `version` is then its parent."""
    tdef = lake.tables.get(table)
    if tdef is None:
        raise NotFoundError(f"audit reads the lake's own tables ({', '.join(sorted(lake.tables))}), not {table!r}",
                            table=table)
    if not tdef.partition.endswith("day"):
        raise InputError(f"audit --days reads day partitions; table {table!r} is partitioned by {tdef.partition!r}",
                         table=table)
    entries: list[_delta.FileEntry] | None = None
    if staged is not None:
        uri, version, entries = staged.uri, staged.parent, staged.entries
        lf = current_rows(staged.scan(), lake.table_def(table))
    elif unpublished_ok and version is not None:
        lake.erasure_reader.check_snapshot(table, version)
        uri = lake.table_uri(table)
        lf = current_rows(_delta.scan(uri, lake.options, version), lake.table_def(table))
    else:
        uri, version = lake.gateway.resolve(table, version)
        lf = lake.gateway.scan(table, version)
    part = tdef.partition
    store = lake.table_storage(table)
    if entries is None:
        entries = _delta.file_entries(uri, lake.options, version)
    files_total = len(entries)
    rg_total = rg_candidate = 0
    chunk_total = chunk_candidate = 0
    bytes_total = bytes_candidate = 0
    candidate_paths: list[str] = []
    for e in entries:
        day = e.partition_values.get(part)
        try:
            meta = pq.read_metadata(store.open_input(e.path))
        except (OSError, pa.ArrowInvalid) as exc:  # truncated or overwritten: say which file (it was exit 1)
            raise GateError(f"data file {e.path} of {table} version {version} is damaged: its parquet footer "
                            f"cannot be read ({str(exc).splitlines()[0][:120]})", path=e.path, mismatch="footer",
                            table=table, version=version) from None
        chunks = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
        rg_total += meta.num_row_groups
        chunk_total += chunks
        bytes_total += e.size
        if day is not None and first_day <= int(day) <= last_day:
            candidate_paths.append(e.path)
            rg_candidate += meta.num_row_groups
            chunk_candidate += chunks
            bytes_candidate += e.size
    query = lf.filter(pl.col(part).is_between(first_day, last_day))
    rows = query.select(pl.len()).collect().item()
    from_candidates = 0
    for path in candidate_paths:
        tomb = tdef.tombstone  # tombstone rows are not current: the gateway's view leaves them out
        t = pq.read_table(store.open_input(path), columns=[tomb] if tomb else None)
        from_candidates += t.num_rows - (int(pc.sum(t[tomb]).as_py() or 0) if tomb else 0)
    if rows != from_candidates:
        raise DeltaReleaseError(
            f"audit cross-check failed: Polars returned {rows} rows, the candidate files hold {from_candidates}",
            polars_rows=rows, candidate_rows=from_candidates)
    return {
        "table": table, "version": version, "days": [first_day, last_day],
        "files": {"candidate": len(candidate_paths), "total": files_total},
        "row_groups": {"candidate": rg_candidate, "total": rg_total},
        "bytes": {"scanned": bytes_candidate, "full_scan": bytes_total},
        "column_chunk_bytes": {"scanned": chunk_candidate, "full_scan": chunk_total},
        "fraction": bytes_candidate / bytes_total if bytes_total else 0.0,
        "rows": rows, "cross_check": {"polars_rows": rows, "candidate_file_rows": from_candidates},
    }
