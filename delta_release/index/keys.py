"""Key index: "in which partition does this order live?" without scanning any other partition.

It holds no order ids: each key is the keyed hash of the erasure ledger (HMAC-SHA256 under the lake
secret, `ErasureLedger.subject_key`). On storage, under `<lake>/_index/<table>/keys/` (local or S3):

    <ss>/b-<V>.arrow     base of shard ss (the first 2 hex digits of the hash): every key -> partition
                         value at version V (Arrow IPC: h, day; create-only)
    <ss>/d-<V>.arrow     what commit V changed in shard ss (h, day, gone; create-only)
    v/<V>                commit V's deltas are all written (create-only marker)
    complete.json        {"version": W}: every commit up to W has its deltas (atomic replace)

A lookup at version P catches up first: for each version in (W, P] whose marker is missing (its writer
crashed after the commit), the deltas are rebuilt from that commit's evidence (the files it added, key
column only); then W moves to P. A shard is read as its newest base plus the deltas after it; after
`COMPACT_AFTER` deltas a reader writes a new base. A missing index (no complete.json) is rebuilt from
the table at P (one scan of the key and partition columns). Entries may be stale (an order that left a
partition): the caller reads that partition and does not find it; an order the index does not name is
nowhere in the table. An erasure removes its subject: a `gone` delta, then its shard compacted and every
older file of that shard deleted, so the hash is in no index file.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable
from typing import Any

import polars as pl

from .. import _delta
from ..evidence import CommitEvidence
from ..storage import Storage
from .watermark import read_watermark, write_watermark

SHARD_DIGITS = 2
COMPACT_AFTER = 16
COMPLETE = "keys/complete.json"
NULL_DAY = -1  # the null partition (event days are >= 0)


def _ipc(frame: pl.DataFrame) -> bytes:
    sink = io.BytesIO()
    frame.write_ipc(sink)
    return sink.getvalue()


def _read_ipc(data: bytes) -> pl.DataFrame:
    return pl.read_ipc(io.BytesIO(data))


def _shard(h: str) -> str:
    return h[:SHARD_DIGITS]


def _day_out(d: int) -> int | None:
    return None if d == NULL_DAY else d


def _day_in(d: Any) -> int:
    return NULL_DAY if d is None else int(d)


class KeyIndex:
    def __init__(self, index: Storage, table: Storage, *, uri: str, options: dict[str, str], key: str,
                 partition: str, hasher: Callable[[str], str]) -> None:
        self.index, self.table, self.uri, self.options = index, table, uri, options
        self.key, self.partition, self.hasher = key, partition, hasher

    # -- writing ----------------------------------------------------------------------------------
    def record(self, version: int, locations: dict[str, int | None], gone: Iterable[str] = (),
               *, files: Iterable[str] = ()) -> None:
        """Commit `version` put each order of `locations` (and every order of the data files `files`) in
        that partition and removed `gone`."""
        if self._watermark() is None:
            return  # no index yet: the next lookup builds it from the table, this commit included
        rows = [(self.hasher(k), _day_in(d), False) for k, d in locations.items()]
        rows += self._locations_of_files(list(files))
        rows += [(self.hasher(k), NULL_DAY, True) for k in gone]
        self._write_deltas(version, rows)

    def _write_deltas(self, version: int, rows: list[tuple[str, int, bool]]) -> None:
        if rows:
            frame = pl.DataFrame(rows, schema={"h": pl.String, "day": pl.Int32, "gone": pl.Boolean}, orient="row")
            frame = frame.with_columns(pl.col("h").str.slice(0, SHARD_DIGITS).alias("shard"))
            for (shard,), part in frame.partition_by("shard", as_dict=True).items():
                self.index.write_once(f"keys/{shard}/d-{version:012d}.arrow", _ipc(part.drop("shard")))
        self.index.write_once(f"keys/v/{version:012d}", b"")

    def _watermark(self) -> int | None:
        return read_watermark(self.index, COMPLETE, self.uri, self.options)

    def _set_watermark(self, version: int) -> None:
        write_watermark(self.index, COMPLETE, self.uri, self.options, version)

    def _locations_of_files(self, paths: list[str]) -> list[tuple[str, int, bool]]:
        rows: list[tuple[str, int, bool]] = []
        for path in paths:
            frame = self._read_file(path)
            for k, d in frame.select(self.key, self.partition).iter_rows():
                rows.append((self.hasher(k), _day_in(d), False))
        return rows

    def _read_file(self, path: str) -> pl.DataFrame:
        import pyarrow.parquet as pq

        with self.table.open_input(path) as handle:
            data = pl.from_arrow(pq.read_table(handle, columns=[self.key]))
        assert isinstance(data, pl.DataFrame)
        value = _partition_of(path, self.partition)
        return data.with_columns(pl.lit(value, dtype=pl.Int32).alias(self.partition))

    def catch_up(self, upto: int) -> None:
        """Make the index valid for `upto`: build it when missing, rebuild lost deltas when behind."""
        start = self._watermark()
        if start is None:
            self.rebuild(upto)
            return
        if start >= upto:
            return
        for version in range(start + 1, upto + 1):
            if self.index.exists(f"keys/v/{version:012d}"):
                continue
            raw = _delta.version_evidence(self.uri, self.options, version)
            if raw is None:  # not a commit of ours (or its log entry is gone): rebuild from the table
                self.rebuild(upto)
                return
            evidence = CommitEvidence.from_json(raw)
            self._write_deltas(version, self._locations_of_files([f.path for f in evidence.files]))
        self._set_watermark(upto)
        for version in range(start + 1, upto + 1):  # the markers behind the watermark are not needed
            self.index.delete(f"keys/v/{version:012d}")

    def rebuild(self, version: int) -> None:
        """The whole index from the table at `version` (a missing index). Deletes nothing: writers may be
        rebuilding at the same time; a base hides every delta up to its version."""
        rows: list[tuple[str, int]] = []
        if version > 0:
            for entry in _delta.file_entries(self.uri, self.options, version):
                frame = self._read_file(entry.path)
                rows += [(self.hasher(k), _day_in(d)) for k, d in frame.select(self.key, self.partition).iter_rows()]
        frame = pl.DataFrame(rows, schema={"h": pl.String, "day": pl.Int32}, orient="row")
        frame = frame.unique("h", keep="last").with_columns(pl.col("h").str.slice(0, SHARD_DIGITS).alias("shard"))
        for (shard,), part in frame.partition_by("shard", as_dict=True).items():
            self.index.write_once(f"keys/{shard}/b-{version:012d}.arrow", _ipc(part.drop("shard")))
        self._set_watermark(version)

    # -- reading ----------------------------------------------------------------------------------
    def _shard_state(self, shard: str, upto: int) -> tuple[pl.DataFrame, int]:
        """The shard's map (h -> day) at `upto`, and how many deltas it applied."""
        for _ in range(3):  # a concurrent compaction may delete a file we listed: list again
            try:
                return self._read_shard(shard, upto)
            except FileNotFoundError:
                continue
        return self._read_shard(shard, upto)

    def _read_shard(self, shard: str, upto: int) -> tuple[pl.DataFrame, int]:
        names = self._names(shard)
        bases = sorted(p for p in names if p.rsplit("/", 1)[-1].startswith("b-"))
        base_v = _version_of(bases[-1]) if bases else -1
        state = (_read_ipc(self.index.read_bytes(bases[-1])) if bases
                 else pl.DataFrame(schema={"h": pl.String, "day": pl.Int32}))
        deltas = sorted(p for p in names if p.rsplit("/", 1)[-1].startswith("d-") and base_v < _version_of(p) <= upto)
        if deltas:
            changes = pl.concat([_read_ipc(self.index.read_bytes(p)) for p in deltas])
            changes = changes.unique("h", keep="last", maintain_order=True)
            state = pl.concat([state.join(changes.select("h"), on="h", how="anti"),
                               changes.filter(pl.col("gone").not_()).select("h", "day")])
        return state, len(deltas)

    def _names(self, shard: str) -> list[str]:
        """The shard's base and delta files (never another writer's temporary file)."""
        return [o.path for o in self.index.list(f"keys/{shard}", recursive=False)
                if o.path.rsplit("/", 1)[-1][:2] in ("b-", "d-") and o.path.endswith(".arrow")]

    def compact(self, shard: str, version: int, *, drop_all_older: bool = False) -> None:
        """Write the shard's base at `version` (all its deltas up to it) and delete what it replaces."""
        state, _ = self._shard_state(shard, version)
        names = self._names(shard)
        prior = sorted(_version_of(p) for p in names
                       if p.rsplit("/", 1)[-1].startswith("b-") and _version_of(p) < version)
        new = f"keys/{shard}/b-{version:012d}.arrow"
        if not self.index.write_once(new, _ipc(state)) and drop_all_older:
            self.index.write_bytes(new, _ipc(state))  # an older compaction at this version kept the subject
        # Keep the previous base and its deltas for readers that listed before us (unless erasing).
        cut = version if drop_all_older else (prior[-1] - 1 if prior else -1)
        for p in names:
            if _version_of(p) <= cut and p != new:
                self.index.delete(p)

    def locate(self, keys: Iterable[str], *, upto: int) -> dict[str, int | None]:
        """order id -> the partition value the index names for it at `upto` (absent: in no partition)."""
        self.catch_up(upto)
        by_hash = {self.hasher(k): k for k in keys}
        out: dict[str, int | None] = {}
        shards: dict[str, list[str]] = {}
        for h in by_hash:
            shards.setdefault(_shard(h), []).append(h)
        for shard, hashes in shards.items():
            state, n_deltas = self._shard_state(shard, upto)
            hits = state.filter(pl.col("h").is_in(pl.Series(hashes, dtype=pl.String).implode()))
            for h, d in hits.iter_rows():
                out[by_hash[h]] = _day_out(d)
            if n_deltas > COMPACT_AFTER:
                self.compact(shard, upto)
        return out

    def forget(self, subject_id: str, version: int) -> None:
        """After an erasure commit at `version`: the subject's hash leaves every file of its shard."""
        self.catch_up(version)
        self.compact(_shard(self.hasher(subject_id)), version, drop_all_older=True)

    def holds(self, subject_hash: str) -> bool:
        """True when any index file names `subject_hash` (for tests and audits)."""
        for path in self._names(_shard(subject_hash)):
            frame = _read_ipc(self.index.read_bytes(path))
            if frame.filter(pl.col("h") == subject_hash).height:
                return True
        return False


def _version_of(path: str) -> int:
    name = path.rsplit("/", 1)[-1]
    return int(name[2:].split(".", 1)[0])


def _partition_of(path: str, column: str) -> int | None:
    prefix = f"{column}="
    for part in path.split("/")[:-1]:
        if part.startswith(prefix):
            value = part[len(prefix):]
            return None if value == "__HIVE_DEFAULT_PARTITION__" else int(value)
    return None
