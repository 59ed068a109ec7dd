"""Erasure: one strict commit, a keyed ledger, blocking on ingest and replay, snapshot permission (I4)."""

from __future__ import annotations

import hashlib
import hmac
import stat
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest

import delta_release as dr
from delta_release import _delta
from delta_release import ingest as ingest_mod
from delta_release.commit import writer as writer_mod
from delta_release.erasure.lineage import table_lineage
from delta_release.errors import ErasureExposureError, InputError
from tests.conftest import jsonl, rm, up

SUBJECT = "ord-subject-47"


def all_rows(lake: dr.Lake, version: int | None = None) -> pl.DataFrame:
    """Every row of a version, tombstones included, straight from Delta (no gateway, no permission)."""
    uri = lake.table_uri("orders")
    v = lake.latest_version("orders") if version is None else version
    return pl.read_delta(uri, version=v).sort("order_id")


def holds(lake: dr.Lake, version: int, order_id: str = SUBJECT) -> bool:
    return order_id in all_rows(lake, version)["order_id"].to_list()


def data_files_holding(lake: dr.Lake, order_id: str = SUBJECT) -> list[str]:
    root = Path(lake.table_uri("orders"))
    return sorted(str(p.relative_to(root)) for p in root.rglob("*.parquet")
                  if "_delta_log" not in p.parts and order_id in pq.read_table(p, columns=["order_id"])
                  .column("order_id").to_pylist())


def files_with_bytes(root: Path, needle: bytes, *, skip: tuple[str, ...] = ()) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*")
                  if p.is_file() and not p.relative_to(root).as_posix().startswith(skip) and needle in p.read_bytes())


@pytest.fixture
def history_lake(lake: dr.Lake) -> dr.Lake:
    """v1: subject on day 47; v2: moved to day 48; v3: tombstoned; v4: an unrelated change on day 50."""
    lake.ingest(jsonl([up(SUBJECT, 10), up("a", 11), up("b", 12, day=48)]))
    lake.ingest(jsonl([up(SUBJECT, 20, amount=250, day=48), up("c", 21, day=49)]))
    lake.ingest(jsonl([rm(SUBJECT, 30)]))
    lake.ingest(jsonl([up("d", 40, day=50)]))
    assert lake.latest_version("orders") == 4
    return lake


def test_erase_removes_every_row_tombstones_included_in_one_commit(history_lake: dr.Lake) -> None:
    lake = history_lake
    before = all_rows(lake)
    assert before.filter(pl.col("order_id") == SUBJECT)["deleted"].to_list() == [True]  # only a tombstone left
    files_before = {e.path: e for e in _delta.file_entries(lake.table_uri("orders"), {}, 4)}
    report = lake.erase(SUBJECT)
    assert report.version == 5 and lake.latest_version("orders") == 5
    assert lake.published("orders").version == 5
    assert report.rows_removed == 1 and report.partitions == [48]
    after = all_rows(lake)
    assert SUBJECT not in after["order_id"].to_list()
    assert after.to_dicts() == before.filter(pl.col("order_id") != SUBJECT).to_dicts()
    # only the subject's partition was rewritten; every other file is the same file
    files_after = {e.path: e for e in _delta.file_entries(lake.table_uri("orders"), {}, 5)}
    untouched = {p for p, e in files_before.items() if e.partition_values["event_day"] != 48}
    assert untouched <= set(files_after)
    assert [h["operation"] for h in lake.history()][-1] == "erase"
    # the versions that held the subject (as a row or a tombstone) are exactly 1..4
    assert report.exposed_versions == [[1, 4]]
    assert all(holds(lake, v) for v in range(1, 5)) and not holds(lake, 0)


def test_ledger_stores_a_keyed_hash_with_version_and_time(history_lake: dr.Lake, tmp_path: Path) -> None:
    lake = history_lake
    lake.erase(SUBJECT)
    key_file = tmp_path / "lake" / "_erasure" / "key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    expected = hmac.new(key_file.read_bytes().strip(), SUBJECT.encode(), hashlib.sha256).hexdigest()
    (entry,) = lake.erasures.entries()
    assert entry.subject == expected and entry.version == 5 and entry.state == "done"
    assert entry.erased_at == "2026-11-29T12:00:00.000Z"
    assert lake.erasures.is_erased(SUBJECT) and not lake.erasures.is_erased("a")
    assert not files_with_bytes(tmp_path / "lake" / "_erasure", SUBJECT.encode())


def test_key_from_environment_changes_the_hash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a = dr.Lake.create(tmp_path / "a")
    monkeypatch.setenv("DELTA_RELEASE_ERASURE_KEY", "k" * 64)
    b = dr.Lake.create(tmp_path / "b")
    assert b.erasures.subject_key(SUBJECT) == hmac.new(b"k" * 64, SUBJECT.encode(), hashlib.sha256).hexdigest()
    assert a.erasures.subject_key(SUBJECT) != b.erasures.subject_key(SUBJECT)


def test_replay_and_a_newer_event_keep_the_subject_absent(history_lake: dr.Lake) -> None:
    lake = history_lake
    lake.erase(SUBJECT)
    reports = lake.replay(all_batches=True)
    assert len(reports) == 4 and sum(r.reasons.get("erased_subject", 0) for r in reports) == 3
    assert all(r.accepted + r.quarantined == r.extracted for r in reports)
    assert not holds(lake, lake.latest_version("orders"))
    newer = lake.ingest(jsonl([up(SUBJECT, 1000, amount=1, day=51), up("e", 1001, day=51)]))
    assert newer.reasons == {"erased_subject": 1} and newer.accepted == 1
    row = lake.quarantine.rows(newer.batch_id)
    assert row["reason"].to_list() == ["erased_subject"]
    assert row["subject"].to_list() == [lake.erasures.subject_key(SUBJECT)]
    current = lake.read()["order_id"].to_list()
    assert SUBJECT not in current and "e" in current
    assert not holds(lake, lake.latest_version("orders"))


def test_rejected_lines_of_the_subject_are_withheld_once_it_is_erased(lake: dr.Lake) -> None:
    from delta_release.quarantine.view import quarantine_records

    bad = {**up(SUBJECT, 5), "amount_cents": 73.5}
    early = lake.ingest(jsonl([bad, up("a", 6)]))
    shown = quarantine_records(lake, batch_id=early.batch_id, show=True)
    assert shown[0]["text_state"] == "shown" and SUBJECT in shown[0]["text"]
    lake.erase(SUBJECT)
    assert [r["text_state"] for r in quarantine_records(lake, batch_id=early.batch_id, show=True)] == ["withheld"]
    late = lake.ingest(jsonl([{**bad, "position": 7}, up("b", 8)]))
    assert late.reasons == {"amount_unit": 1}
    assert [r["text"] for r in quarantine_records(lake, batch_id=late.batch_id, show=True)] == [None]


def test_pinned_reads_refused_and_history_marks_them(history_lake: dr.Lake) -> None:
    lake = history_lake
    lake.erase(SUBJECT)
    for v in range(1, 5):
        with pytest.raises(ErasureExposureError,
                           match=rf"reading version {v} of orders would expose an erased subject .*; the nearest"
                                 r" readable version is \d+") as info:
            lake.scan("orders", version=v)
        assert info.value.exit_code == 3 and info.value.facts["version"] == v
        assert SUBJECT not in str(info.value.to_json())
    assert lake.read(version=0).height == 0
    assert SUBJECT not in lake.read(version=5)["order_id"].to_list()
    assert [h["allowed"] for h in lake.history()] == [True, False, False, False, False, True]


def test_exposure_matches_a_scan_of_every_version(lake: dr.Lake) -> None:
    """The ledger's version ranges (from lineage, no data read) agree with the data of every version,
    including a gap: the subject gone (restored to before it) and back again."""
    lake.ingest(jsonl([up("a", 1)]))                                     # v1
    lake.ingest(jsonl([up(SUBJECT, 2, day=48)]))                         # v2
    lake.rollback(1)                                                     # v3 = v1 (subject gone)
    lake.ingest(jsonl([up("b", 3, day=49)]))                             # v4
    lake.replay(all_batches=True)                                        # re-applies v2's batch: v5 holds it
    lake.ingest(jsonl([up("c", 4, day=50)]))                             # v6
    latest = lake.latest_version("orders")
    truth = [v for v in range(latest + 1) if holds(lake, v)]
    assert truth and truth != list(range(truth[0], truth[-1] + 1))      # there is a gap
    lineage = table_lineage(lake, "orders")
    for v in range(latest + 1):
        assert lineage.files_at(v) == {e.path for e in _delta.file_entries(lake.table_uri("orders"), {}, v)}
    lake.erase(SUBJECT)
    assert [h["version"] for h in lake.history() if not h["allowed"]] == truth


def test_pending_entry_fails_closed_until_the_erasure_completes(history_lake: dr.Lake) -> None:
    """A crash after the ledger's pending entry, before the commit: nothing that holds the subject reads."""
    lake = history_lake
    lake.erasures.record(SUBJECT, version=None, erased_at="2026-11-29T12:00:00.000Z", state="pending")
    with pytest.raises(ErasureExposureError,
                       match=r"an erasure was interrupted before its commit: run `delta-release --lake .* erase"
                             r" --resume`"):
        lake.read()
    assert lake.read(version=0).height == 0
    blocked = lake.ingest(jsonl([up(SUBJECT, 500), up("z", 501)]))
    assert blocked.reasons == {"erased_subject": 1}
    lake.erase(SUBJECT)  # the rerun completes it
    assert SUBJECT not in lake.read()["order_id"].to_list()
    assert lake.erasures.entries()[0].done


def test_erasure_between_filter_and_commit_cannot_be_undone(lake: dr.Lake, monkeypatch: pytest.MonkeyPatch) -> None:
    """An erasure commits while a writer holding the subject's event is preparing on the old parent: the
    writer's retry must see the erasure (the filter runs after the parent is read, on every attempt)."""
    lake.ingest(jsonl([up(SUBJECT, 1), up("a", 2)]))
    real = ingest_mod.ApplyEvents.build
    raced: list[int] = []

    def racing(self: ingest_mod.ApplyEvents, ctx: object, parent: int) -> object:
        if not raced:
            raced.append(lake.erase(SUBJECT).version or -1)
        return real(self, ctx, parent)  # type: ignore[arg-type]

    monkeypatch.setattr(ingest_mod.ApplyEvents, "build", racing)
    report = lake.ingest(jsonl([up(SUBJECT, 10, amount=5), up("b", 11)]))
    assert report.stale_parents and report.reasons == {"erased_subject": 1}
    assert not holds(lake, lake.latest_version("orders"))
    assert "b" in lake.read()["order_id"].to_list()


def test_erasure_retries_on_a_stale_parent(history_lake: dr.Lake, monkeypatch: pytest.MonkeyPatch) -> None:
    lake = history_lake
    real = writer_mod.gate_candidate  # the erasure stages and gates through the one writer
    calls: list[int] = []

    def racing_gate(store: object, candidate: object) -> None:
        if not calls:  # another writer commits between the erasure's read and its commit
            calls.append(-1)  # first: the racing ingest gates through here too
            calls[0] = lake.ingest(jsonl([up("w", 900, day=48)])).version or -1
        real(store, candidate)  # type: ignore[arg-type]

    monkeypatch.setattr(writer_mod, "gate_candidate", racing_gate)
    report = lake.erase(SUBJECT)
    assert report.stale_parents == [{"expected": 4, "found": 5, "rebased": False}]  # an erasure never rebases
    assert report.attempts == 2 and report.version == 6
    rows = all_rows(lake)["order_id"].to_list()
    assert SUBJECT not in rows and "w" in rows
    assert report.exposed_versions == [[1, 5]]
    # the stale attempt's staged files were discarded: every data file is referenced by some version
    lineage = table_lineage(lake, "orders")
    on_disk = {str(p.relative_to(Path(lake.table_uri("orders")))) for p in Path(lake.table_uri("orders"))
               .rglob("*.parquet") if "_delta_log" not in p.parts}
    assert on_disk <= set(lineage.lifetimes)


def test_subject_never_seen_is_recorded_and_blocked(lake: dr.Lake) -> None:
    # issue 15: an id the lake never saw is refused unless forced (it would be blocked forever)
    from delta_release.api_checks import UnknownSubjectError

    lake.ingest(jsonl([up("a", 1)]))
    with pytest.raises(UnknownSubjectError,
                       match=r"never saw that id .*: check the id, or pass --force \(API: force=True\)") as info:
        lake.erase(SUBJECT)
    assert info.value.exit_code == 3 and SUBJECT not in str(info.value) and "--force" in str(info.value)
    assert lake.erasures.entries() == []
    report = lake.erase(SUBJECT, force=True)
    assert report.version is None and report.rows_removed == 0 and report.exposed_versions == []
    assert lake.latest_version("orders") == 1
    assert lake.ingest(jsonl([up(SUBJECT, 2)])).reasons == {"erased_subject": 1}
    again = lake.erase(SUBJECT)
    assert again.already_erased and len(lake.erasures.entries()) == 1


def test_a_word_of_a_malformed_line_does_not_count_as_a_seen_order(lake: dr.Lake) -> None:
    """The never-seen guard took any text of a line that could not be read as an event as "seen": `erase
    upsert` (or `USD`, `47`) went through without force and blocked that id forever. An order named by a
    malformed line's order_id is still seen, and its raw batch is still reported as holding it."""
    from delta_release.api_checks import UnknownSubjectError

    lake.ingest(jsonl([up("a", 1)]) + b'{"schema_version": 3, "order_id": "m-1", "position": 2, "kind": "upsert", '
                b'"amount_cents": 1, "event_day": 47, "currency": "USD"\n')  # (no closing brace)
    for word in ("upsert", "USD", "47", "schema_version"):
        with pytest.raises(UnknownSubjectError,
                           match=r"never saw that id .*: check the id, or pass --force \(API: force=True\)"):
            lake.erase(word)
    assert lake.erasures.entries() == []
    report = lake.erase("m-1")
    assert [p["kind"] for p in report.pending].count("raw_batch") == 1


def test_erase_rejects_bad_ids_without_echoing_them(lake: dr.Lake) -> None:
    with pytest.raises(InputError, match="an order id must be 1 to 128 characters") as info:
        lake.erase("x" * 500)
    assert "x" * 20 not in str(info.value.to_json())
    with pytest.raises(InputError, match="an order id must be 1 to 128 characters"):
        lake.erase("")


def test_no_plain_id_in_any_file_we_write(history_lake: dr.Lake, tmp_path: Path) -> None:
    """I4: after the erasure nothing outside the raw store holds the id: catalog, ledger, quarantine, the
    Delta log; after vacuum not even the table directory."""
    lake = history_lake
    lake.ingest(jsonl([{**up(SUBJECT, 35), "amount_cents": "7350"}]))  # a rejected line naming the subject
    broken = b'{"schema_version": 2, "order_id": "' + SUBJECT.encode() + b'", "position": 36\n'
    lake.ingest(broken + jsonl([up("keep", 37)]))  # unparseable: its subject is unknown, its text is kept
    root = tmp_path / "lake"
    needle = SUBJECT.encode()
    assert files_with_bytes(root, needle, skip=("_raw/",))  # before: data files (and quarantine) hold it
    assert files_with_bytes(root, needle, skip=("_raw/", "orders/")) == []  # the quarantine never holds it
    report = lake.erase(SUBJECT)
    lake.replay(all_batches=True)
    lake.ingest(jsonl([up(SUBJECT, 2000)]))
    # only the old data files still hold it, and they are exactly the ones reported as pending
    leftovers = files_with_bytes(root, needle, skip=("_raw/",))
    pending_files = next(p for p in report.pending if p["kind"] == "data_files")["files"]
    assert leftovers == sorted(f"orders/{p}" for p in pending_files)
    lake.vacuum(apply=True, retain_versions=2, replay_horizon_hours=0)
    assert files_with_bytes(root, needle, skip=("_raw/",)) == []
    assert files_with_bytes(root / "_raw", needle)  # raw batches stay immutable (reported as pending)


def test_pending_evidence_names_raw_batches_old_files_and_backups(history_lake: dr.Lake) -> None:
    lake = history_lake
    report = lake.erase(SUBJECT, raw_retention_days=30, backup_expiry_days=35)
    kinds = [p["kind"] for p in report.pending]
    assert kinds.count("raw_batch") == 3 and "data_files" in kinds and "backup" in kinds
    assert all(set(p) >= {"what", "until"} for p in report.pending)
    raw_until = {p["until"] for p in report.pending if p["kind"] == "raw_batch"}
    assert raw_until == {"2026-12-29T12:00:00.000Z"}  # received (fixed clock) + 30 days
    backup = next(p for p in report.pending if p["kind"] == "backup")
    assert backup["until"] == "2027-01-03T12:00:00.000Z"
    files = next(p for p in report.pending if p["kind"] == "data_files")["files"]
    assert sorted(files) == data_files_holding(lake)
    lake.vacuum(apply=True, retain_versions=2, replay_horizon_hours=0)
    after = lake.erasure_pending(backup_expiry_days=35)
    assert "data_files" not in [p["kind"] for p in after] and len(after) == 4
    assert all(p["subject"] == report.subject[:16] for p in after)


def test_second_engine_never_returns_the_subject(history_lake: dr.Lake) -> None:
    lake = history_lake
    read_duckdb = getattr(lake.gateway, "read_duckdb", None)
    if read_duckdb is None:
        pytest.skip("the gateway has no second engine yet")
    assert SUBJECT in read_duckdb("orders", 3, include_tombstones=True)["order_id"].to_list()
    lake.erase(SUBJECT)
    assert SUBJECT not in read_duckdb("orders", include_tombstones=True)["order_id"].to_list()
    with pytest.raises(ErasureExposureError,
                       match=r"would expose an erased subject .*; the nearest readable version is \d+"):
        read_duckdb("orders", 3)


def test_broken_lines_naming_an_erased_subject_keep_no_raw_text_on_replay(lake: dr.Lake) -> None:
    from delta_release.erasure.text import names_erased_subject

    lake.erase(SUBJECT, force=True)  # erased before it was ever seen
    erased, key = lake.erasures.erased_subjects(), lake.erasures.subject_key
    escaped = '{"order_id": "ord-\\u0073ubject-47", "position": '   # the id written with a JSON escape
    assert names_erased_subject(escaped, erased, key)
    assert not names_erased_subject('{"order_id": "ord-other", "position": ', erased, key)
    batch = escaped.encode() + b"\n" + b'{"order_id": "ord-other", "position": \n' + jsonl([up("a", 1)])
    from delta_release.quarantine.view import quarantine_records

    for report in (lake.ingest(batch), *lake.replay(all_batches=True)):
        shown = quarantine_records(lake, batch_id=report.batch_id, show=True)
        assert [r["text_state"] for r in shown] == ["withheld", "shown"] and "ord-other" in shown[1]["text"]


@pytest.mark.parametrize("key", [b"", b"k" * 32, b"long" * 40])
def test_subject_key_is_hmac_sha256_under_the_lake_secret(key: bytes) -> None:
    import hashlib
    import hmac

    from delta_release.erasure.ledger import ErasureLedger

    ledger = ErasureLedger(None, key)  # type: ignore[arg-type]
    for subject in ("ord-001", "", "ördér-ü", "x" * 500):
        assert ledger.subject_key(subject) == hmac.new(key, subject.encode("utf-8"), hashlib.sha256).hexdigest()
    subjects = ["ord-001", "", "ördér-ü", "x" * 500, "ord-001"]
    assert ledger.subject_digests(subjects) == b"".join(
        hmac.new(key, s.encode("utf-8"), hashlib.sha256).digest() for s in subjects)
    assert ledger.subject_digests([]) == b""


def test_pending_evidence_keeps_the_retention_the_erasure_was_asked_with(history_lake: dr.Lake) -> None:
    """`erase --raw-retention-days 2 --backup-expiry-days 0` is recorded in the subject's ledger entry, so
    `status` and `erasure_pending()` later give the same answer as the erase report (they used the
    defaults: backups pending for 35 days, raw batches for 30)."""
    lake = history_lake
    report = lake.erase(SUBJECT, raw_retention_days=2, backup_expiry_days=None)
    later = lake.erasure_pending()  # defaults in the call: the entry's own settings win
    for pending in (report.pending, later):
        assert "backup" not in [p["kind"] for p in pending]
        assert {p["until"] for p in pending if p["kind"] == "raw_batch"} == {"2026-12-01T12:00:00.000Z"}
    entry = lake.erasures.entries()[0]
    assert entry.retention == {"raw_days": 2, "backup_days": 0.0}


def test_a_key_that_is_not_the_lakes_is_refused_before_it_can_let_an_erased_order_back(
        history_lake: dr.Lake, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """DELTA_RELEASE_ERASURE_KEY set to another key made every erased order's keyed hash miss the ledger:
    `replay --all` then brought the order back into the table. Both directions are refused (exit 3), with
    no key material in the message, and nothing is written."""
    from delta_release.erasure.ledger import CHECK_PATH, ENV_KEY, ErasureKeyError

    lake = history_lake
    lake.erase(SUBJECT)
    root = tmp_path / "lake"
    assert (root / CHECK_PATH).is_file()
    monkeypatch.setenv(ENV_KEY, "some-other-key")
    before = sorted(p.relative_to(root) for p in root.rglob("*"))
    with pytest.raises(ErasureKeyError, match="not this lake's key") as refused:
        dr.Lake.open(root)
    assert refused.value.exit_code == 3 and "some-other-key" not in str(refused.value)
    assert sorted(p.relative_to(root) for p in root.rglob("*")) == before
    monkeypatch.delenv(ENV_KEY)
    assert SUBJECT not in dr.Lake.open(root).read()["order_id"].to_list()

    # a lake whose key came from the environment: opening it without the variable does not make a new key
    monkeypatch.setenv(ENV_KEY, "the-lakes-own-key")
    env_lake = dr.Lake.create(tmp_path / "env")
    env_lake.ingest(jsonl([up(SUBJECT, 1), up("other", 2)]))
    env_lake.erase(SUBJECT)
    monkeypatch.delenv(ENV_KEY)
    with pytest.raises(ErasureKeyError, match=ENV_KEY):
        dr.Lake.open(tmp_path / "env")
    assert not (tmp_path / "env" / "_erasure" / "key").exists()
    monkeypatch.setenv(ENV_KEY, "the-lakes-own-key")
    again = dr.Lake.open(tmp_path / "env")
    again.replay(all_batches=True)
    assert again.read()["order_id"].to_list() == ["other"]


def test_a_lake_written_before_the_key_check_gets_one_and_refuses_another_key(
        history_lake: dr.Lake, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from delta_release.erasure.ledger import CHECK_PATH, ENV_KEY, ErasureKeyError

    root = tmp_path / "lake"
    (root / CHECK_PATH).unlink()  # as an earlier version left it
    monkeypatch.setenv(ENV_KEY, "some-other-key")
    with pytest.raises(ErasureKeyError, match="_erasure/key"):
        dr.Lake.open(root)
    assert not (root / CHECK_PATH).exists()
    monkeypatch.delenv(ENV_KEY)
    dr.Lake.open(root)
    assert (root / CHECK_PATH).is_file()
