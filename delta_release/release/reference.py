"""The pinned-query check's oracle, as frames: every accepted event of the candidate's batches, folded by
position independently of the writer's apply code, compared with the candidate's current rows.

Its cost is O(events) with small constants and no per-batch lookups: one listing of the raw store, one
read of the quarantine ledger for every batch, each distinct subject hashed once (the ledger's bulk HMAC),
one vectorised fold. Before, each batch re-listed the raw store, read its own ledger file and filtered
erased subjects per event in Python, then folded dicts (56 s of a release run at version 1,000).

The fold stays deliberately simple, since it checks the writer: the event with the highest position per
key wins (equal positions: the first in batch order, then line order), and a delete leaves nothing.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from ..contract.decode import Decoder, differing_repeats
from ..contract.fast import EVENT_SCHEMA
from ..contract.lines import BOM, iter_chunks
from ..contract.lines import max_line_bytes as line_limit

if TYPE_CHECKING:
    from ..lake import Lake
    from ..tables import KeyedColumns

_SEQ = "_reference_seq"
_BATCH = "_reference_batch"
GROUP_BYTES = 64 << 20  # raw bytes decoded as one stream: bounds the joined buffer, not the events


@dataclass(frozen=True, slots=True)
class Comparison:
    rows: int  # the candidate's current rows
    expected: int  # the reference fold's current rows
    differences: int  # rows in one and not the other (the symmetric difference), plus repeated keys
    duplicate_keys: int  # keys the candidate holds more than one current row for


def accepted_events(lake: Lake, batch_ids: set[str], key: str) -> pl.DataFrame:
    """Every accepted event of the retained raw batches in `batch_ids` (committed ones and the run's own; a
    held run's batches are part of no version), in batch order (received, id) then line order, without the
    lines the quarantine ledger holds and without erased subjects (`key`: the column naming the subject)."""
    batches = [b for b in lake.raw.list() if b.batch_id in batch_ids]  # one listing of the store
    frames = []
    group: list[tuple[str, bytes]] = []
    size = 0
    for batch in batches:
        data = lake.raw.read_sha(batch.sha256)
        group.append((batch.batch_id, data))
        size += len(data)
        if size >= GROUP_BYTES:
            frames.append(_decode_group(group))
            group, size = [], 0
    if group:
        frames.append(_decode_group(group))
    events = pl.concat(frames) if frames else pl.DataFrame(schema={**EVENT_SCHEMA, _BATCH: pl.String})
    events = _position_conflicts_dropped(events)
    ledger = lake.quarantine.lines([b.batch_id for b in batches], lake.options).select(  # one scan, all batches
        pl.col("batch_id").alias(_BATCH), pl.col("line").cast(events.schema["line"]))
    if ledger.height:
        events = events.join(ledger, on=[_BATCH, "line"], how="anti", maintain_order="left")
    return _without_erased(lake, events, key).drop(_BATCH)


def _decode_group(group: list[tuple[str, bytes]]) -> pl.DataFrame:
    """Decode several batches as ONE stream (decoding each alone costs about 3 ms of setup per batch, the
    whole cost for small hourly batches), then give each event its batch id and its line in that batch.
    Each batch's lines are its own: a leading BOM is dropped and a last line without '\n' gets one, so no
    line spans two batches and line counts stay as the batch's own decode counts them."""
    parts, firsts, ids = [], [], []
    line = 0
    for batch_id, data in group:
        if data.startswith(BOM):
            data = data[len(BOM):]
        if not data:
            continue
        ended = data.endswith(b"\n")
        parts.append(data if ended else data + b"\n")
        firsts.append(line)
        ids.append(batch_id)
        line += data.count(b"\n") + (0 if ended else 1)
    limit = line_limit(None)
    decoder = Decoder(max_line=limit)
    for item in iter_chunks(io.BytesIO(b"".join(parts)), max_line=limit):
        decoder.feed(item)
    events = decoder.events_before_position_check()
    starts = np.asarray(firsts, dtype=np.int64)
    index = np.searchsorted(starts, events["line"].to_numpy() - 1, side="right") - 1
    return events.with_columns(pl.Series(_BATCH, ids, dtype=pl.String).gather(index),
                               pl.col("line") - pl.Series(starts[index]))


def _position_conflicts_dropped(events: pl.DataFrame) -> pl.DataFrame:
    """The decoder's rule (`differing_repeats`), per batch: the first line of a position stands, a later
    line of the same position whose content differs is rejected (an exact repeat stays)."""
    return events.filter(~differing_repeats(events, by=[_BATCH])) if events.height else events


def _without_erased(lake: Lake, events: pl.DataFrame, key: str) -> pl.DataFrame:
    erased = lake.erasures.erased_subjects()
    if not erased or not events.height:
        return events
    ids = events[key].drop_nulls().unique()
    digests = lake.erasures.subject_digests(ids)  # each distinct key hashed once
    hit = [k for i, k in enumerate(ids.to_list()) if digests[32 * i:32 * i + 32].hex() in erased]
    return events.filter(~pl.col(key).is_in(hit)) if hit else events


def reference_current(events: pl.DataFrame, cols: KeyedColumns, columns: list[str]) -> pl.DataFrame:
    """The current rows the events make, in `columns`: per key the event with the highest position wins
    (ties: the first in the events' order), and a key whose winner is a delete has no row."""
    if not events.height:
        return pl.DataFrame(schema={c: pl.String if c == cols.key else pl.Int64 for c in columns})
    winners = (events.with_row_index(_SEQ)
               .sort([cols.ordering, _SEQ], descending=[True, False])
               .unique(subset=[cols.key], keep="first"))
    return winners.filter(pl.col("kind") != "delete").select(columns)


def compare(got: pl.DataFrame, want: pl.DataFrame, key: str) -> Comparison:
    """Rows of `got` (the candidate) against `want` (the reference), by every column; `want` is cast to
    `got`'s types first (the events carry their decoded types, the table its own)."""
    columns = got.columns
    want = want.select(columns).cast(dict(got.schema))  # type: ignore[arg-type]
    duplicates = got.height - got[key].n_unique() if got.height else 0
    distinct = got.unique()
    missing = want.join(distinct, on=columns, how="anti", nulls_equal=True).height
    extra = distinct.join(want, on=columns, how="anti", nulls_equal=True).height
    return Comparison(rows=got.height, expected=want.height, differences=missing + extra + duplicates,
                      duplicate_keys=duplicates)
