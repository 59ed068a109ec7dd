"""The one module that imports `deltalake`. It turns delta-rs calls and errors into the project's terms.

Commits are strict: version parent + 1 is created only if it does not exist, so any newer version fails
the commit instead of silently rebasing it (delta-rs rebases by default when partitions differ). That
failure becomes `StaleParentError`. On a plain table (no writer features) we write the log entry ourselves
(`_commit_entry`, see the comment there for why); otherwise the transaction is built on a `DeltaTable`
opened at the writer's parent version with `CommitProperties(max_commit_retries=0)`.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import polars as pl
import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, QueryBuilder, Schema
from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError
from deltalake.transaction import AddAction, PostCommitHookProperties, RemoveAction

from . import _delta_checkpoint, _delta_log
from ._version import __version__
from .errors import NotFoundError, StaleParentError

if TYPE_CHECKING:
    from .storage import Storage

METADATA_KEY = "delta_release"


@dataclass(frozen=True, slots=True, kw_only=True)
class FileAdd:
    path: str
    size: int
    partition_values: dict[str, str | None]
    stats: str
    modification_time: int


@dataclass(frozen=True, slots=True, kw_only=True)
class FileEntry:
    path: str
    size: int
    partition_values: dict[str, Any]
    num_records: int | None


def _open(uri: str, options: dict[str, str], version: int | None = None) -> DeltaTable:
    try:
        return DeltaTable(uri, version=version, storage_options=options or None)
    except TableNotFoundError as exc:
        raise NotFoundError(f"no Delta table at {uri}", uri=uri) from exc
    except DeltaError as exc:
        if version is not None:
            raise NotFoundError(f"version {version} of {uri} cannot be opened: {str(exc).splitlines()[0]}",
                                uri=uri, version=version) from exc
        raise


# One handle per table, kept at the newest version this process has seen and moved forward with
# `update_incremental` (reads only the commits since, or the newest checkpoint): no log replay per call.
# A table deleted and created again under the same URI (a scratch lake) is caught by the identity of the
# cached version's log entry (modification time and size): a different entry means another table.
CacheKey = tuple[str, tuple[tuple[str, str], ...]]  # a table's URI and storage options
_HANDLES: dict[CacheKey, tuple[DeltaTable, tuple[int, int] | None]] = {}


def _storage(uri: str, options: dict[str, str]) -> Storage:
    """The storage of a table's root. A local one is kept per URI: building one resolves its path (~25 us,
    several times that on a busy machine), and a writer stats log entries ~50 times an ingest
    (`_log_identity`), more when it rebases. An s3:// one is built afresh: its settings follow the AWS_*
    variables of the moment (s3config.py)."""
    from .storage import Storage

    if not _is_local(uri):
        return Storage(uri, options)
    key = _cache_key(uri, options)
    storage = _STORAGES.get(key)
    if storage is None:
        storage = _STORAGES[key] = Storage(uri, options)
    return storage


_STORAGES: dict[CacheKey, Storage] = {}


def _is_local(uri: str) -> bool:
    """A path or file:// URI (Storage refuses any other scheme but s3://)."""
    return "://" not in uri or uri.startswith("file://")


def _log_identity(uri: str, options: dict[str, str], version: int) -> tuple[int, int] | None:
    """(modification time, size) of the log entry of `version`, or None when it does not exist: one stat
    (a HEAD on S3), not a listing of `_delta_log`."""
    storage = _storage(uri, options)
    info = storage.fs.get_file_info(storage.full_path(_delta_log.log_path(version)))
    if info.size is None:
        return None
    return int(info.mtime_ns or 0), int(info.size)


def _commit_exists(uri: str, options: dict[str, str], version: int) -> bool:
    """Whether the log entry of `version` exists.

    Delta versions are contiguous, so a handle at V is the newest exactly when V + 1 has no entry. delta-rs
    finds the newest version by listing `_delta_log` from V, and on a local disk object_store reads (and
    stats) every entry of the folder to do so: 0.4 ms at 10 versions, 13 ms at 5,000, on every call."""
    return _log_identity(uri, options, version) is not None


def _remember(key: CacheKey, uri: str, options: dict[str, str],
              handle: DeltaTable) -> DeltaTable:
    _HANDLES[key] = (handle, _log_identity(uri, options, int(handle.version())))
    return handle


def _cached(uri: str, options: dict[str, str]) -> DeltaTable | None:
    """The cached handle of `uri` if it still belongs to the table there."""
    key = _cache_key(uri, options)
    entry = _HANDLES.get(key)
    if entry is None:
        return None
    handle, identity = entry
    if identity is None or _log_identity(uri, options, int(handle.version())) != identity:
        _drop(key)
        return None
    return handle


def _drop(key: CacheKey) -> None:
    """Forget a table's handle and what was learnt beside it (another table may now be at its URI)."""
    _HANDLES.pop(key, None)
    _TIPS.pop(key, None)
    _LISTED.pop(key, None)
    _STATES.pop(key, None)
    _FACTS.pop(key, None)


def _cache_key(uri: str, options: dict[str, str]) -> CacheKey:
    return uri.rstrip("/"), tuple(sorted((options or {}).items()))


def _latest_handle(uri: str, options: dict[str, str]) -> DeltaTable | None:
    """The cached handle of `uri`, brought up to the newest version; None when there is no table."""
    key = _cache_key(uri, options)
    handle = _cached(uri, options)
    if handle is not None:
        if not _commit_exists(uri, options, int(handle.version()) + 1):
            return handle  # nothing newer: skip delta-rs's listing of the whole `_delta_log`
        try:
            handle.update_incremental()
            return _remember(key, uri, options, handle)
        except DeltaError:
            _drop(key)  # the log was cleaned past it: open afresh
    try:
        handle = DeltaTable(uri, storage_options=options or None)
    except TableNotFoundError:
        return None
    return _remember(key, uri, options, handle)


def _snapshot(uri: str, options: dict[str, str], version: int) -> DeltaTable:
    """A handle at `version`: the cached one when it is there (or can move forward to it), else a new one.
    Callers must not keep it across calls that may move the cached handle (`latest_version`)."""
    key = _cache_key(uri, options)
    handle = _cached(uri, options)
    if handle is not None:
        current = handle.version()
        if current == version:
            return handle
        if current < version:
            try:
                handle.load_as_version(version)
                return _remember(key, uri, options, handle)
            except DeltaError:
                _HANDLES.pop(key, None)
    return _open(uri, options, version)


def forget_handles() -> None:
    """Drop the cached handles (a test that rewrites a table's log under the same URI)."""
    _HANDLES.clear()
    _STATES.clear()
    _TIPS.clear()
    _LISTED.clear()
    _FACTS.clear()
    _STORAGES.clear()


def table_id(uri: str, options: dict[str, str]) -> str | None:
    """The Delta table's id (metaData.id): another table created under the same URI has another id."""
    handle = _cached(uri, options)
    if handle is not None:
        return str(handle.metadata().id)
    version = latest_version(uri, options)
    return None if version is None else str(_facts(uri, options, version)[1]["id"])


def latest_version(uri: str, options: dict[str, str]) -> int | None:
    """The newest version, or None when there is no Delta table at `uri`.

    With a cached handle or writer state, the log entries after it (and after the newest version seen) are
    probed one stat each, up to PROBE_AHEAD: neither moves (delta-rs replays every file of the table to move
    a handle, 60-110 ms per version at 29,200 files); a reader that needs a snapshot moves it (`_snapshot`).
    With neither, the entry names after the newest checkpoint are listed once (`_log_tip`)."""
    key = _cache_key(uri, options)
    handle = _cached(uri, options)
    known = int(handle.version()) if handle is not None else _state_version(uri, options)
    listed = _LISTED.get(key)
    if known is None and listed is not None and _log_identity(uri, options, listed[0]) == listed[1]:
        known = listed[0]  # a version the log's listing gave, whose entry is still the one listed
    if known is not None:
        version = max(known, _TIPS.get(key, -1))
        for _ in range(PROBE_AHEAD):
            if not _commit_exists(uri, options, version + 1):
                _TIPS[key] = version
                return version
            version += 1
    elif (tip := _log_tip(uri, options)) is not None:
        _TIPS[key] = tip
        _LISTED[key] = (tip, _log_identity(uri, options, tip))
        return tip
    handle = _latest_handle(uri, options)
    return None if handle is None else int(handle.version())


def _log_tip(uri: str, options: dict[str, str]) -> int | None:
    """The newest version from the log alone, when nothing of the table is cached: the newest entry after
    the checkpoint `_last_checkpoint` names (or after version 0), from one listing of the names after it (one
    request on S3); None when that does not settle it, a gap among the entries included (the caller asks
    delta-rs, which lists the whole `_delta_log` and says what is wrong)."""
    storage = _storage(uri, options)
    start = _delta_log.last_checkpoint(_reader(uri, options))
    if start is None:
        start = 0
    if not _commit_exists(uri, options, start):
        return None
    if storage.is_local:
        try:
            names = os.listdir(storage.local_path("_delta_log"))
        except OSError:
            return None
    else:
        names = [o.path.rsplit("/", 1)[-1] for o in storage.list_after("_delta_log", _delta_log.log_path(start))]
    after = sorted(int(n[:20]) for n in names if len(n) == 25 and n.endswith(".json") and n[:20].isdigit()
                   and int(n[:20]) > start)
    if after and after != list(range(start + 1, after[-1] + 1)):
        return None
    return after[-1] if after else start


PROBE_AHEAD = 64  # log entries probed past the cached handle before delta-rs lists `_delta_log` instead
_TIPS: dict[CacheKey, int] = {}  # the newest version seen, per cached handle
# A version found by listing the log (no handle or state cached) and its entry's identity.
_LISTED: dict[CacheKey, tuple[int, tuple[int, int] | None]] = {}


def _plain_steps(uri: str, options: dict[str, str], first: int, last: int) -> list[_delta_log.Actions] | None:
    """The adds and removes of the commits first..last, or None when one holds anything else, is gone, or
    there are more than PROBE_AHEAD of them."""
    if last - first + 1 > PROBE_AHEAD:
        return None
    steps = []
    for version in range(first, last + 1):
        try:
            lines = _log_entry_lines(uri, options, version)
            step = None if lines is None else _delta_log.plain_actions(lines)
        except (ValueError, KeyError, TypeError, AttributeError):  # (UnicodeDecodeError is a ValueError)
            step = None  # an entry we cannot read (not JSON, a field missing): delta-rs's snapshot says why
        if step is None:
            return None
        steps.append(step)
    return steps


def create_table(uri: str, options: dict[str, str], schema: pa.Schema, partition_by: list[str],
                 *, name: str) -> None:
    """Create an empty table (version 0) unless one exists; an existing one is opened (its writer's state
    read, as delta-rs's open reads its snapshot: the first plan lists from it)."""
    if (version := latest_version(uri, options)) is not None:
        _state(uri, options, version)
        return
    try:
        DeltaTable.create(uri, Schema.from_arrow(schema), partition_by=partition_by, mode="error",
                          name=name, storage_options=options or None)
    except DeltaError:
        if latest_version(uri, options) is None:
            raise


# After each commit delta-rs writes a checkpoint every `delta.checkpointInterval` (100) versions, and by
# default (`delta.enableExpiredLogCleanup`) also deletes the log entries older than
# `delta.logRetentionDuration` (30 days) that precede a checkpoint. That cleanup lists the whole
# `_delta_log` on every commit (crates/core/src/protocol/checkpoints.rs `cleanup_expired_logs_for`: cost
# grows with the version count), and what it deletes breaks the contract: a pinned read, `history`, a
# rollback, and the batch index's rebuild of any version older than 30 days would fail or lose it. Log
# entries hold no subject ids (DESIGN.md 5), so they are kept; checkpoints still bound a replay.
POST_COMMIT = PostCommitHookProperties(create_checkpoint=True, cleanup_expired_logs=False)


def commit(uri: str, options: dict[str, str], *, table: str, parent: int, adds: list[FileAdd],
           removes: list[FileEntry], evidence: dict[str, Any], partition_by: list[str]) -> int:
    """One atomic commit of adds and removes on `parent`; returns the new version or raises StaleParent."""
    # A remove needs a deletion time even when the commit adds nothing (an erasure emptying a partition).
    now = max([a.modification_time for a in adds], default=0) or int(time.time() * 1000)
    if _is_local(uri) and _commit_exists(uri, options, parent + 1):
        # Taken already (one stat; a HEAD on S3 would cost every commit a round trip): among many writers
        # most attempts lose, and each would read the parent's facts, write and fsync an entry for nothing.
        # The create-only write below stays the arbiter of a race after this check.
        raise StaleParentError(table, parent, latest_version(uri, options))
    facts = _facts(uri, options, parent)  # protocol and metadata as at `parent` (no file list needed)
    if _plain_writer(facts, adds, removes):
        return _commit_entry(uri, options, facts, table=table, parent=parent, adds=adds, removes=removes,
                             evidence=evidence, partition_by=partition_by, now=now)
    handle = _snapshot(uri, options, parent)  # delta-rs commits on its snapshot of the parent
    actions: list[AddAction | RemoveAction] = [
        AddAction(path=a.path, size=a.size, partition_values=a.partition_values,
                  modification_time=a.modification_time, data_change=True, stats=a.stats)
        for a in adds
    ]
    actions += [
        RemoveAction(path=r.path, data_change=True, deletion_timestamp=now, size=r.size,
                     partition_values=_remove_values(r))
        for r in removes
    ]
    props = CommitProperties(max_commit_retries=0,
                             custom_metadata={METADATA_KEY: json.dumps(evidence, sort_keys=True)})
    try:
        handle.create_write_transaction(actions, mode="append", schema=handle.schema(),
                                        partition_by=partition_by, commit_properties=props,
                                        post_commithook_properties=POST_COMMIT)
    except CommitFailedError as exc:
        raise StaleParentError(table, parent, latest_version(uri, options)) from exc
    return parent + 1


# Our own log entry, for the tables whose protocol asks nothing of a writer beyond add and remove actions.
# delta-rs's commit (create_write_transaction) brings its in-memory snapshot up to the new version before
# it returns, replaying every file of the table: 13 ms at 2,920 files, 60-110 ms at 29,200 (the 50M-row
# bench lake), paid by every commit whatever its size. The entry written here holds what delta-rs writes for
# the same actions (the same action fields; commitInfo with operation WRITE and our evidence), created with
# the same atomic create-if-absent (`Storage.write_once`: a hard link on local disk, `If-None-Match: *` on
# S3), so a writer on a stale parent fails exactly as with delta-rs; the checkpoint delta-rs's post-commit
# hook writes every `delta.checkpointInterval` versions is written here too. Anything else (writer
# features, invariants, append-only tables, paths that need percent-encoding) goes through delta-rs.
_PLAIN_PATH = re.compile(r"[A-Za-z0-9._=/-]+")
CHECKPOINT_INTERVAL = 100  # delta.checkpointInterval's default
# A commit of this many actions is followed by a checkpoint: opening the 50M-row bench table (29,200 files
# added by one commit) took 0.22-0.33 s from its JSON entry and 0.10-0.19 s from a checkpoint.
CHECKPOINT_ACTIONS = 10_000


def _plain_writer(facts: Facts, adds: list[FileAdd], removes: list[FileEntry]) -> bool:
    protocol, metadata = facts
    config = metadata.get("configuration") or {}
    if int(protocol.get("minWriterVersion") or 0) > 2 or protocol.get("writerFeatures"):
        return False
    if str(config.get("delta.appendOnly", "false")).lower() == "true":
        return False
    if "delta.invariants" in str(metadata.get("schemaString")):
        return False
    return all(_PLAIN_PATH.fullmatch(path) for path in [*(a.path for a in adds), *(r.path for r in removes)])


def _remove_values(r: FileEntry) -> dict[str, str | None]:
    return {k: None if v is None else str(v) for k, v in r.partition_values.items()}


def _entry_bytes(*, parent: int, adds: list[FileAdd], removes: list[FileEntry], evidence: dict[str, Any],
                 partition_by: list[str], now: int) -> bytes:
    engine = f"delta-release/{__version__}"
    return _delta_log.entry_bytes(
        parent=parent,
        info={"operationParameters": {"mode": "Append", "partitionBy": json.dumps(partition_by)},
              "engineInfo": engine, "clientVersion": engine, METADATA_KEY: json.dumps(evidence, sort_keys=True)},
        adds=[{"path": a.path, "partitionValues": a.partition_values, "size": a.size,
               "modificationTime": a.modification_time, "dataChange": True, "stats": a.stats or None} for a in adds],
        removes=[{"path": r.path, "dataChange": True, "deletionTimestamp": now, "extendedFileMetadata": True,
                  "partitionValues": _remove_values(r), "size": r.size} for r in removes])


def _commit_entry(uri: str, options: dict[str, str], facts: Facts, *, table: str, parent: int,
                  adds: list[FileAdd], removes: list[FileEntry], evidence: dict[str, Any],
                  partition_by: list[str], now: int) -> int:
    version = parent + 1
    rel = _delta_log.log_path(version)
    data = _entry_bytes(parent=parent, adds=adds, removes=removes, evidence=evidence,
                        partition_by=partition_by, now=now)
    storage = _storage(uri, options)
    if not storage.write_once(rel, data):
        # The name was taken: by another writer, or (on S3) by this very PUT retried after a lost response,
        # which the server refuses as a second create; our bytes there mean the commit is ours.
        theirs = storage.read_tagged(rel)
        if theirs is None or theirs[0] != data:
            raise StaleParentError(table, parent, latest_version(uri, options))
    config = facts[1].get("configuration") or {}
    interval = int(config.get("delta.checkpointInterval") or CHECKPOINT_INTERVAL)
    # Where delta-rs's hook puts them (99, 199, ...: test_log_retention), and after a commit of many actions
    # (a backfill): every later open would otherwise parse that entry's JSON.
    if (version + 1) % interval == 0 or len(adds) + len(removes) >= CHECKPOINT_ACTIONS:
        try:
            if not _own_checkpoint(storage, uri, options, version, now):
                _snapshot(uri, options, version).create_checkpoint()  # (a handle is kept only if one was)
        except (DeltaError, OSError):
            pass  # the commit stands (its entry exists): a checkpoint only spares later opens some reading
    return version


def _own_checkpoint(storage: Storage, uri: str, options: dict[str, str], version: int, now: int) -> bool:
    """Write the checkpoint of `version` from the previous one and the entries since
    (`_delta_checkpoint`), without delta-rs's snapshot of the whole table; False: it cannot (delta-rs then
    writes it). The file is created create-only; `_last_checkpoint` then names it unless it names a newer one."""
    read = _reader(uri, options)
    built = _delta_checkpoint.build(read, version, now_ms=now, open_file=storage.open_input)
    if built is None:
        return False
    data, doc = built
    try:
        created = storage.write_once(_delta_log.checkpoint_path(version), data)
    except Exception:  # noqa: BLE001 - any store error: delta-rs tries (the commit stands either way)
        return False
    if created:
        current = _delta_log.last_checkpoint(read)  # (read again: another writer may have moved it meanwhile)
        if current is None or current < version:
            with contextlib.suppress(Exception):  # the checkpoint exists; a listing reader still finds it
                storage.write_bytes(_delta_log.LAST_CHECKPOINT, json.dumps(doc, separators=(",", ":")).encode())
    return True


def file_entries(uri: str, options: dict[str, str], version: int) -> list[FileEntry]:
    """The files a version references, with their partition values and record counts."""
    return snapshot_entries(_snapshot(uri, options, version))


def partition_entries(uri: str, options: dict[str, str], version: int, column: str,
                      values: list[str | None]) -> list[FileEntry]:
    """The files of `version` in the partitions `values` of `column` (None: the null partition), filtered
    before they become Python objects: cost grows with the files returned, not the table's file count."""
    frame = _state(uri, options, version).frame
    name = f"partition.{column}"
    text = frame[name].cast(pl.String)
    plain = [v for v in values if v is not None]
    mask = text.is_in(pl.Series(plain, dtype=pl.String).implode()).fill_null(False)
    if any(v is None for v in values):
        mask = mask | text.is_null()
    # Polars, not pa.array(list): pyarrow imports pandas (0.3 s) the first time it converts a Python list.
    return _entries(frame.filter(mask).to_arrow())


def file_count(uri: str, options: dict[str, str], version: int) -> int:
    """How many files `version` references (no Python object per file)."""
    return _state(uri, options, version).frame.height


# The writer's state (`_delta_log.State`: protocol, metadata, file frame) of the last version asked, per
# table, keyed by its log entry's identity (a table re-created at the same URI has other entries): a plan
# lists a few partitions of one parent several times, and at 3,000 files each listing cost ~60 ms (5M rows,
# 365 days x 8 buckets). It is read from the log (`_delta_log.load`: the newest checkpoint and the entries
# after it), else from delta-rs's snapshot. A later version's state is this one moved forward by the commits
# since (`_delta_log.advance`) when they hold only adds and removes: the next ingest in the same process
# reads those commits' entries, not the whole table again.
_STATES: dict[CacheKey, tuple[tuple[Any, ...], _delta_log.State]] = {}
STATES_KEPT = 4  # tables whose state is kept (a lake's tables, opened one after the other)


def _state(uri: str, options: dict[str, str], version: int) -> _delta_log.State:
    key = _cache_key(uri, options)
    ident = (version, _log_identity(uri, options, version))
    hit = _STATES.get(key)
    if hit is not None and ident[1] is not None:
        if hit[0] == ident:
            return hit[1]
        moved = _advanced(uri, options, hit, version)
        if moved is not None:
            _keep(key, ident, moved)
            return moved
    state = None if ident[1] is None else _delta_log.load(_reader(uri, options), version)
    if state is None:  # beyond what we read (or no such version: delta-rs's one-line error)
        state = _handle_state(_snapshot(uri, options, version))
    _keep(key, ident, state)
    return state


def _keep(key: CacheKey, ident: tuple[Any, ...], state: _delta_log.State) -> None:
    _STATES.pop(key, None)
    _STATES[key] = (ident, state)
    while len(_STATES) > STATES_KEPT:
        _STATES.pop(next(iter(_STATES)))


# The protocol and metaData actions of a version (`Facts`) are all a commit (`_plain_writer`, the checkpoint
# interval) and `table_id` read of it. A commit after a stale parent asks them of a newer version than the
# cached state's: the entries in between are read (as for `_advanced`), and when they hold only adds and
# removes the facts are the cached state's, without moving its file frame (a Polars filter and concat per
# commit: ~1 ms each at 256 files, paid again on every retry of a rebase over other writers' commits). The
# frame moves when a plan asks for it (`partition_entries`). Kept per table, by the version's log identity.
Facts = tuple[dict[str, Any], dict[str, Any]]  # (protocol, metaData)
_FACTS: dict[CacheKey, tuple[tuple[Any, ...], Facts]] = {}


def _facts(uri: str, options: dict[str, str], version: int) -> Facts:
    key = _cache_key(uri, options)
    ident = (version, _log_identity(uri, options, version))
    if ident[1] is not None:
        known = [hit for hit in (_FACTS.get(key), _STATES.get(key)) if hit is not None and hit[0][0] <= version]
        for (at, identity), got in sorted(known, key=lambda h: -int(h[0][0])):  # the newest first
            facts = got if isinstance(got, tuple) else (got.protocol, got.metadata)
            if (at, identity) == ident:
                return facts
            if identity is not None and _log_identity(uri, options, at) == identity \
                    and _plain_steps(uri, options, at + 1, version) is not None:
                _FACTS[key] = (ident, facts)
                return facts
    state = _state(uri, options, version)
    return state.protocol, state.metadata


def _state_version(uri: str, options: dict[str, str]) -> int | None:
    """The version of the cached state of `uri` while its log entry is the one it was read from."""
    hit = _STATES.get(_cache_key(uri, options))
    if hit is None:
        return None
    (version, identity), _ = hit
    if identity is None or _log_identity(uri, options, version) != identity:
        _drop(_cache_key(uri, options))
        return None
    return int(version)


def _handle_state(handle: DeltaTable) -> _delta_log.State:
    protocol, meta = handle.protocol(), handle.metadata()
    frame = pl.from_arrow(pa.table(handle.get_add_actions(flatten=True)))
    assert isinstance(frame, pl.DataFrame)
    return _delta_log.State(
        version=int(handle.version()),
        protocol={"minReaderVersion": protocol.min_reader_version, "minWriterVersion": protocol.min_writer_version,
                  "readerFeatures": protocol.reader_features, "writerFeatures": protocol.writer_features},
        metadata={"id": str(meta.id), "partitionColumns": list(meta.partition_columns),
                  "configuration": dict(meta.configuration), "schemaString": handle.schema().to_json()},
        frame=_delta_log.slim(frame))


def _reader(uri: str, options: dict[str, str]) -> _delta_log.Read:
    storage = _storage(uri, options)

    def read(rel: str) -> bytes | None:
        try:
            return storage.read_bytes(rel)
        except (FileNotFoundError, OSError):
            return None

    return read


def _advanced(uri: str, options: dict[str, str], hit: tuple[tuple[Any, ...], _delta_log.State],
              version: int) -> _delta_log.State | None:
    """The cached state `hit` moved forward to `version`, or None (it is not behind it, its entry changed,
    or a commit since holds more than adds and removes)."""
    (at, identity), state = hit
    if identity is None or at >= version or _log_identity(uri, options, at) != identity:
        return None
    steps = _plain_steps(uri, options, at + 1, version)
    try:
        frame = None if steps is None else _delta_log.advance(state.frame, steps)
    except (pl.exceptions.PolarsError, TypeError, ValueError):
        return None  # a value that does not cast to its column's type: read afresh
    return None if frame is None else _delta_log.State(version=version, protocol=state.protocol,
                                                       metadata=state.metadata, frame=frame)


def open_snapshot(uri: str, options: dict[str, str], version: int) -> DeltaTable:
    """A table handle pinned to `version`, log already replayed; `polars.scan_delta` accepts it as is.

    Outside this module treat it as opaque (the gateway caches it so a warm query skips the log replay).
    """
    return _open(uri, options, version)


def snapshot_entries(handle: DeltaTable) -> list[FileEntry]:
    """`file_entries` of an opened snapshot."""
    return _entries(pa.table(handle.get_add_actions(flatten=True)))


def _entries(table: pa.Table) -> list[FileEntry]:
    keep = [c for c in table.column_names if c in ("path", "size_bytes", "num_records") or c.startswith("partition.")]
    out = []
    for row in table.select(keep).to_pylist():
        parts = {k.removeprefix("partition."): v for k, v in row.items() if k.startswith("partition.")}
        out.append(FileEntry(path=row["path"], size=int(row["size_bytes"]), partition_values=parts,
                             num_records=row.get("num_records")))
    return sorted(out, key=lambda e: e.path)


def scan(uri: str, options: dict[str, str], version: int | None = None) -> pl.LazyFrame:
    """Every row of a version (tombstones included) as a Polars LazyFrame; the one `scan_delta` outside
    the gateway's cached-snapshot path. Views (current rows) are in `delta_release.views`."""
    # through a handle whose file list Polars can open (`_FilePaths`): a handle of its own (as
    # scan_delta(uri) opens one), its errors delta-rs's own (register's log_guard reads them)
    return pl.scan_delta(_FilePaths.of(DeltaTable(uri, version=version, storage_options=options or None)))


class _FilePaths(DeltaTable):
    """A handle whose `file_uris` are the files' paths and object keys as they are. delta-rs gives them
    percent-encoded (`/tmp/my%20lake/orders/...` for `/tmp/my lake/orders/...`, `s3://b/my%20lake/...`:
    a space, non-ASCII, ...) though it documents plain local paths, and Polars' `scan_delta` opens them as
    paths or keys: no such file (pola-rs/polars#20944). This is the one place a table's file URIs become
    paths; the readers (`scan`, `scan_snapshot`, `file_uris`: Polars, the gateway's engine comparison)
    take them from here."""

    @classmethod
    def of(cls, handle: DeltaTable) -> DeltaTable:
        if isinstance(handle, cls):
            return handle
        out = cls.__new__(cls)
        out.__dict__.update(handle.__dict__)  # the same delta-rs snapshot, no second log replay
        return out

    def file_uris(self, partition_filters: Any = None, **kwargs: Any) -> list[str]:
        # Only the table root is encoded: the part below it is the log's path as stored on disk, where a
        # writer's own escapes are literal (Spark's `as_timestamp=2021-09-08 11%3A11%3A11/`), so decoding
        # the whole URI would name a file that does not exist.
        root = self.table_uri.removeprefix("file://")
        plain = unquote(root)
        return [plain + u[len(root):] if u.startswith(root) else u
                for u in super().file_uris(partition_filters, **kwargs)]


def _log_entry_lines(uri: str, options: dict[str, str], version: int) -> list[str] | None:
    """The JSON lines of the log entry of `version` (one read, no replay), or None when it does not exist."""
    data = _reader(uri, options)(_delta_log.log_path(version))
    return None if data is None else data.decode().splitlines()


def version_evidence(uri: str, options: dict[str, str], version: int) -> dict[str, Any] | None:
    """Our evidence of one commit, read from that commit's log entry alone (None when it has none or
    the entry is gone): bounded by the commit, never a replay of the history."""
    record = version_record(uri, options, version)
    return None if record is None else record.evidence


def version_record(uri: str, options: dict[str, str], version: int) -> CommitRecord | None:
    """One commit as `history` reports it (timestamp, operation, our evidence), read from that commit's
    log entry alone; None when the entry does not exist (not committed yet, or its log entry is gone)."""
    lines = _log_entry_lines(uri, options, version)
    if lines is None:
        return None
    for line in lines:
        if '"commitInfo"' not in line:
            continue
        info = json.loads(line).get("commitInfo") or {}
        raw, op = info.get(METADATA_KEY), info.get("operation")
        return CommitRecord(version=version, timestamp=int(info.get("timestamp") or 0),
                            operation=None if op is None else str(op),
                            evidence=json.loads(raw) if isinstance(raw, str) else None)
    return CommitRecord(version=version, timestamp=0, operation=None, evidence=None)


def removed_files(uri: str, options: dict[str, str], version: int) -> list[tuple[str, int | None]] | None:
    """(path, size) of every remove action of one commit, from its log entry alone (paths as the log holds
    them, as `file_entries` gives them: delta-rs's add actions are not URI-decoded either); None when the
    entry does not exist."""
    lines = _log_entry_lines(uri, options, version)
    if lines is None:
        return None
    out: list[tuple[str, int | None]] = []
    for line in lines:
        if '"remove"' in line and (action := json.loads(line).get("remove")):
            size = action.get("size")
            out.append((str(action["path"]), None if size is None else int(size)))
    return out


def scan_snapshot(handle: DeltaTable) -> pl.LazyFrame:
    """A LazyFrame over a snapshot from `open_snapshot` (no second log replay)."""
    return pl.scan_delta(_FilePaths.of(handle))


def file_uris(uri: str, options: dict[str, str], version: int) -> list[str]:
    """The files of `version` as Polars reads them (decoded: `_FilePaths`)."""
    return list(_FilePaths.of(_open(uri, options, version)).file_uris())


@dataclass(frozen=True, slots=True, kw_only=True)
class CommitRecord:
    """One commit of a table's Delta log, as `history` returns it."""

    version: int
    timestamp: int  # commit time, ms since the epoch (0 when the log has none)
    operation: str | None  # Delta's operation name (WRITE, DELETE, ...)
    evidence: dict[str, Any] | None  # our commit evidence (decoded JSON), None for a commit not ours


def history(uri: str, options: dict[str, str], limit: int | None = None) -> list[CommitRecord]:
    """Commits newest first: version, timestamp, operation and our evidence (decoded) when present."""
    out = []
    for entry in _open(uri, options).history(limit):
        raw = entry.get(METADATA_KEY)
        op = entry.get("operation")
        out.append(CommitRecord(version=int(entry["version"]), timestamp=int(entry.get("timestamp", 0)),
                                operation=None if op is None else str(op),
                                evidence=json.loads(raw) if isinstance(raw, str) else None))
    return out


def partition_columns_at(uri: str, options: dict[str, str], version: int) -> list[str]:
    return list(_open(uri, options, version).metadata().partition_columns)


def timestamp_partition_columns(uri: str, options: dict[str, str], version: int) -> dict[str, str]:
    """Partition columns of Delta type `timestamp` (an instant; not `timestamp_ntz`): logical name -> the
    key the log's partitionValues use for it (the physical name under column mapping)."""
    handle = _open(uri, options, version)
    parts = set(handle.metadata().partition_columns)
    out: dict[str, str] = {}
    for f in handle.schema().fields:
        if f.name in parts and getattr(f.type, "type", None) == "timestamp":
            out[f.name] = str(f.metadata.get("delta.columnMapping.physicalName", f.name))
    return out


def arrow_schema(uri: str, options: dict[str, str], version: int | None = None) -> pa.Schema:
    return pa.schema(_open(uri, options, version).schema().to_arrow())


def table_configuration(uri: str, options: dict[str, str], version: int | None = None) -> dict[str, Any]:
    handle = _open(uri, options, version)
    protocol = handle.protocol()
    return {
        "configuration": dict(handle.metadata().configuration),
        "min_reader_version": protocol.min_reader_version,
        "reader_features": list(protocol.reader_features or []),
    }


def add_actions_table(uri: str, options: dict[str, str], version: int) -> pa.Table:
    """The add actions of a version, flattened: path, size_bytes, num_records, min.<col>, max.<col>, ..."""
    return pa.table(_open(uri, options, version).get_add_actions(flatten=True))


def is_delta_error(exc: BaseException) -> bool:
    """Whether `exc` is one of deltalake's own errors (its log replay or reader refused something)."""
    return isinstance(exc, DeltaError)


def query_all(uri: str, options: dict[str, str], version: int) -> pa.Table:
    """Every row of `version`, read by deltalake's own scan (column mapping and deletion vectors applied)."""
    handle = _open(uri, options, version)
    return pa.table(QueryBuilder().register("t", handle).execute("SELECT * FROM t").read_all())


__all__ = [
    "FileAdd", "FileEntry", "METADATA_KEY", "add_actions_table", "arrow_schema", "commit",
    "create_table", "file_entries", "file_uris", "forget_handles", "history", "is_delta_error", "latest_version",
    "open_snapshot", "partition_columns_at", "partition_entries", "query_all", "scan", "scan_snapshot",
    "snapshot_entries", "removed_files", "table_configuration", "table_id", "version_evidence", "version_record",
]
