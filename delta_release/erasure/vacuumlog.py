"""What each vacuum removed, so a pinned read or a rollback of a vacuumed version is a refusal, not a crash.

`vacuum --apply` writes one small record per run, before it deletes anything, at
`<lake>/_vacuum/<table>/<vacuum id>.json`:

    {"vacuum": "20261129T120000Z-1a2b3c", "table": "orders", "at": "2026-11-29T12:00:00Z",
     "removed": ["<partition>=47/part-....parquet", ...], "unreadable": [[1, 4], [6, 6]]}

`unreadable` are the inclusive version ranges that referenced a removed file: those versions can no
longer be read or restored. Records hold file paths and version numbers only (no subject ids). A crash
between the record and the deletes leaves a record that is, at worst, too cautious.

`check_readable` raises `VacuumedVersionError` (exit 3) naming the version, the vacuum that removed its
files, and the nearest version that is still readable (not vacuumed, no erased subject, published or
older). It reads the records only for a pinned version other than the published one (vacuum never
removes the published version's files), so the usual read pays nothing. Why a read that failed
failed (files missing, or damaged) is the gateway's to say (gateway/diagnosis.py), from these records.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..clock import iso
from ..errors import VacuumedVersionError
from .lineage import merge_ranges
from .permission import snapshot_allowed
from .records import Lineage

if TYPE_CHECKING:
    from ..context import LakeContext as Lake

PREFIX = "_vacuum"


def record_vacuum(lake: Lake, table: str, lineage: Lineage, removed: list[str]) -> dict[str, Any] | None:
    """Write the record of a vacuum about to delete `removed` (paths relative to the table root)."""
    if not removed:
        return None
    now = lake.clock.now()
    vacuum_id = now.strftime("%Y%m%dT%H%M%SZ") + "-" + uuid.uuid4().hex[:6]
    ranges = merge_ranges([r for path in removed for r in lineage.ranges(path)])
    record = {"vacuum": vacuum_id, "table": table, "at": iso(now), "removed": sorted(removed),
              "unreadable": ranges}
    lake.storage.write_once(f"{PREFIX}/{table}/{vacuum_id}.json",
                            json.dumps(record, sort_keys=True).encode())
    return record


def vacuum_records(lake: Lake, table: str) -> list[dict[str, Any]]:
    """Every vacuum record of `table`, oldest first; an unreadable record is skipped, not fatal."""
    out = []
    for obj in lake.storage.list(f"{PREFIX}/{table}"):
        if not obj.path.endswith(".json"):
            continue
        try:
            rec = json.loads(lake.storage.read_bytes(obj.path))
        except (OSError, ValueError):
            continue
        if isinstance(rec, dict) and isinstance(rec.get("unreadable"), list):
            out.append(rec)
    return sorted(out, key=lambda r: str(r.get("vacuum", "")))


def _holds(rec: dict[str, Any], version: int) -> bool:
    return any(isinstance(r, list) and len(r) == 2 and r[0] <= version <= r[1] for r in rec["unreadable"])


def removed_by(lake: Lake, table: str, version: int) -> dict[str, Any] | None:
    """The first vacuum that made `version` unreadable, or None."""
    return next((rec for rec in vacuum_records(lake, table) if _holds(rec, version)), None)


def nearest_readable(lake: Lake, table: str, version: int, published: int, records: list[dict[str, Any]],
                     present: Callable[[int], bool] | None = None) -> int | None:
    """The readable version closest to `version` (the newer one on a tie), at most `published`.
    `present` also checks a candidate's files on storage (when files went missing without a record)."""
    for distance in range(1, max(version, published - version) + 1):
        for v in (version + distance, version - distance):
            if (0 <= v <= published and not any(_holds(r, v) for r in records)
                    and snapshot_allowed(lake, table, v) and (present is None or present(v))):
                return v
    return None


def vacuumed_error(lake: Lake, table: str, version: int, published: int, rec: dict[str, Any] | None,
                   *, action: str = "reading",
                   present: Callable[[int], bool] | None = None) -> VacuumedVersionError:
    records = vacuum_records(lake, table)
    nearest = nearest_readable(lake, table, version, published, records, present)
    why = (f"its files were removed by vacuum {rec['vacuum']} at {rec.get('at')}" if rec is not None else
           "its files are missing from storage (removed outside delta-release: no vacuum record)")
    hint = f"; nearest readable version: {nearest}" if nearest is not None else "; no other version is readable"
    return VacuumedVersionError(f"{action} version {version} of {table} is impossible: {why}{hint}",
                                table=table, version=version, vacuum=None if rec is None else rec["vacuum"],
                                nearest_readable=nearest)


def check_readable(lake: Lake, table: str, version: int, *, action: str = "reading") -> None:
    """Raise VacuumedVersionError when a vacuum removed files of `version` of `table`."""
    pub = lake.published(table)
    if pub is not None and version == pub.version:
        return
    rec = removed_by(lake, table, version)
    if rec is not None:
        raise vacuumed_error(lake, table, version, pub.version if pub else version, rec, action=action)
