"""Issue 13 (2, 3): the quarantine holds no payload text, temp files of killed writes never linger, and
the issue's scenarios end with no file outside `_raw/` holding an erased id (read by `files_holding`,
parquet pages and footers included)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import delta_release as dr
from delta_release.cli.main import cli
from delta_release.drills.scan import files_holding, where_in_file
from delta_release.erasure.text import names_erased_subject
from delta_release.quarantine.details import safe_detail
from delta_release.quarantine.ledger import SCHEMA
from delta_release.quarantine.upkeep import MARKER, migrate_legacy
from delta_release.quarantine.view import quarantine_records
from delta_release.storage import HOST_TAG, temp_state
from tests.conftest import jsonl, up

X = "ord-x-731"
OTHER = "ord-other-5"


def _event(order_id: str, position: int, **kw: object) -> bytes:
    return json.dumps({**up(order_id, position), **kw}).encode()


# every way a rejected line can name the subject, and one that names it inside another order's event
NAMING = {
    "other_order": _event(OTHER, 20, amount_cents=X),                       # amount_unit, subject OTHER
    "unquoted": b'{"schema_version": 2, "order_id": ' + X.encode() + b', "position": 21}',
    "single_quoted": b"{'schema_version': 2, 'order_id': '" + X.encode() + b"', 'position': 22}",
    "unterminated": b'{"schema_version": 2, "position": 23, "order_id": "' + X.encode(),
    "whole_line": X.encode(),
    "escaped": b'{"order_id": "ord\\u002dx-731", "position": 24',
    "in_a_sentence": b"refund for " + X.encode() + b". thanks",
}
INNOCENT = _event("ord-fine-9", 30, amount_cents=73.5)  # rejected, names nobody erased


def _cli(lake_dir: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["--lake", str(lake_dir), *args])
    return result.exit_code, result.output


def test_ledger_points_into_the_raw_batch_and_holds_no_text(lake: dr.Lake, tmp_path: Path) -> None:
    data = b"\xef\xbb\xbf" + jsonl([up("a", 1)]).replace(b"\n", b"\r\n") + NAMING["unquoted"] + b"\r\n" + INNOCENT
    report = lake.ingest(data)
    assert report.quarantined == 2
    ledger = lake.quarantine.rows(report.batch_id)
    assert ledger.columns == ["batch_id", "line", "offset", "length", "reason", "detail", "subject"]
    spans = [(r["offset"], r["length"]) for r in ledger.to_dicts()]
    assert [data[o:o + n] for o, n in spans] == [NAMING["unquoted"], INNOCENT]
    path = tmp_path / "lake" / "_quarantine" / f"{report.batch_id}.parquet"
    meta = pq.ParquetFile(path).metadata
    with_stats = {meta.row_group(0).column(i).path_in_schema for i in range(meta.num_columns)
                  if meta.row_group(0).column(i).is_stats_set}
    assert with_stats == {"line", "offset", "length"}  # never a string column
    assert where_in_file(path, X) == [] and where_in_file(path, "ord-fine-9") == []


@pytest.mark.parametrize(("line", "payload"), [
    (b'{"schema_version": 987654, "order_id": "a", "position": 1, "kind": "upsert"}', "987654"),
    (b'{"schema_version": 2, "ordxyzsecret": 1, "order_id": "a", "position": 1, "kind": "upsert"}', "ordxyzsecret"),
    (b'{"schema_version": 2, "zzsecret": 1, "zzsecret": 2}', "zzsecret"),
    (jsonl([up("a", 424242, amount=1), up("b", 424242, amount=2)]).rstrip(b"\n"), "424242"),
])
def test_details_describe_and_never_quote(lake: dr.Lake, line: bytes, payload: str) -> None:
    report = lake.ingest(line + b"\n")
    details = lake.quarantine.rows(report.batch_id)["detail"].to_list()
    assert details and all(payload not in d for d in details), details


def test_safe_detail_keeps_known_forms_and_describes_the_rest() -> None:
    kept = ["amount_cents must be an integer, got a string", "currency is missing (required by schema version 3)",
            "not valid JSON (Expecting value)", "field 'currency' is not allowed in schema version 2",
            "invalid UTF-8 at byte 17", "order_id must be 1 to 128 printable characters"]
    assert [safe_detail("bad_type", d) for d in kept] == kept
    assert safe_detail("position_conflict", "position 77 already holds a different event for this order") == \
        "this position already holds a different event for this order"
    assert safe_detail("malformed_json", f"unexpected token {X}") == "the line is not valid JSON"
    assert safe_detail("bad_type", f"{'ord_x'} must be an integer, got a string") == "a value has the wrong type"


# issue 32, item 4: the id glued to other text, in rejected lines (each is quarantined: not valid JSON)
GLUED = {
    "url": b"https://crm.example/orders/" + X.encode() + b"/view",
    "ref": b"REF#" + X.encode() + b"#END",
    "angle": b"customer<" + X.encode() + b">",
    "windows_path": b"C:\\orders\\" + X.encode() + b".pdf",
    "glued": b"xx" + X.encode() + b"yy",
    "escaped_glued": b'{"note": "see ord\\u002dx\\u002d731yy"}',
    "prefix_of_longer": X.encode() + b"0",
}


def test_matcher_finds_every_form_anywhere_in_the_line(lake: dr.Lake) -> None:
    lake.erasures.record(X, version=None, erased_at="2026-11-29T00:00:00Z")
    erased, key = lake.erasures.erased_subjects(), lake.erasures.subject_key
    lengths = lake.erasures.id_lengths()
    assert lengths == {len(X)}  # read back from the sealed length under the lake key
    for name, line in {**NAMING, **GLUED}.items():
        assert names_erased_subject(line.decode(), erased, key, lengths), name
        assert names_erased_subject(line.decode(), erased, key), name  # lengths unknown: every length
    for text in (INNOCENT.decode(), "ord-x-73", "ord-x-7 31", '{"order_id": "ord-x-73l"}', ""):
        assert not names_erased_subject(text, erased, key, lengths), text
        assert not names_erased_subject(text, erased, key), text


def test_the_ledger_seals_the_length_of_an_erased_id(lake: dr.Lake, tmp_path: Path) -> None:
    lake.erasures.record(X, version=None, erased_at="2026-11-29T00:00:00Z")
    entry = json.loads(next((tmp_path / "lake" / "_erasure" / "subjects").glob("*.json")).read_text())
    assert entry["sealed_length"] != len(X) and X not in json.dumps(entry)
    assert lake.erasures.id_lengths() == {len(X)}


def test_issue_scenario_erase_replay_vacuum_leaves_the_id_only_in_raw(tmp_path: Path, lake: dr.Lake) -> None:
    root = tmp_path / "lake"
    lake.ingest(jsonl([up(X, 1, day=40), up(OTHER, 2, day=41), up("ord-keep", 3, day=40)]))
    bad = b"\n".join([*NAMING.values(), INNOCENT]) + b"\n"
    report = lake.ingest(bad + jsonl([up("ord-later", 40, day=41)]))
    assert report.quarantined == len(NAMING) + 1
    # the quarantine never held the text: before the erasure only the data files do
    assert {p.split("/")[0] for p in files_holding(root, X, skip=("_raw/",))} == {"orders"}
    shown = quarantine_records(lake, batch_id=report.batch_id, show=True)
    assert all(r["text_state"] == "shown" for r in shown) and X in shown[0]["text"]

    erased = lake.erase(X)
    lake.replay(all_batches=True)  # writes every batch's ledger again
    again = lake.ingest(bad.replace(b"20", b"50", 1) + jsonl([up("ord-new", 60)]))
    for batch in (report.batch_id, again.batch_id):
        states = {r["line"]: r["text_state"] for r in quarantine_records(lake, batch_id=batch, show=True)}
        assert [states[i] for i in range(1, len(NAMING) + 1)] == ["withheld"] * len(NAMING)
        assert states[len(NAMING) + 1] == "shown"
    code, out = _cli(root, "quarantine", "--show")
    assert code == 0 and X not in out and "withheld" in out and "ord-fine-9" in out
    code, out = _cli(root, "quarantine", "--show", "--json", "--reason", "amount_unit")
    records = json.loads(out)["records"]
    assert code == 0 and X not in out and {r["reason"] for r in records} == {"amount_unit"}
    by_subject = {(r["subject"], r["text_state"]) for r in records}
    key = lake.erasures.subject_key
    assert by_subject == {(key(OTHER), "withheld"), (key("ord-fine-9"), "shown")}  # OTHER's line names X

    leftovers = files_holding(root, X, skip=("_raw/",))
    pending = next(p for p in erased.pending if p["kind"] == "data_files")["files"]
    assert leftovers == sorted(f"orders/{p}" for p in pending)  # old data files only, reported as pending
    assert not any(p["kind"] == "quarantine" for p in erased.pending)
    code, _ = _cli(root, "vacuum", "--apply", "--retain-versions", "1", "--replay-horizon-hours", "0")
    assert code == 0
    assert files_holding(root, X, skip=("_raw/",)) == []
    assert files_holding(root, X) and all(p.startswith("_raw/") for p in files_holding(root, X))


def test_quarantine_command_usage_errors(tmp_path: Path) -> None:
    root = tmp_path / "lake"
    dr.Lake.create(root)  # readers never create a lake (issue "refusals", on main)
    assert _cli(root, "quarantine", "--reason", "nope")[0] == 2
    assert _cli(root, "quarantine", "--batch", "../etc")[0] == 2
    code, out = _cli(root, "quarantine", "--batch", "0" * 16)
    assert code == 2 and "never ingested" in out
    assert _cli(root, "quarantine") == (0, "no quarantine records\n")


def test_legacy_ledger_is_migrated_by_the_next_writer(lake: dr.Lake, tmp_path: Path) -> None:
    root = tmp_path / "lake"
    data = jsonl([up("a", 1)]) + NAMING["whole_line"] + b"\n" + _event(X, 9, amount_cents="7350") + b"\n"
    report = lake.ingest(data)
    path = root / "_quarantine" / f"{report.batch_id}.parquet"
    legacy = pa.schema([("batch_id", pa.string()), ("line", pa.int64()), ("reason", pa.string()),
                        ("detail", pa.string()), ("raw", pa.string()), ("subject", pa.string())])
    rows = [{"batch_id": report.batch_id, "line": 2, "reason": "malformed_json",
             "detail": f"not valid JSON near {X}", "raw": X, "subject": None},
            {"batch_id": report.batch_id, "line": 3, "reason": "amount_unit",
             "detail": "amount_cents must be a JSON integer of cents, got a string",
             "raw": data.split(b"\n")[2].decode(),
             "subject": lake.erasures.subject_key(X)}]
    pq.write_table(pa.Table.from_pylist(rows, schema=legacy), path)
    (root / MARKER).unlink()
    assert files_holding(root, X, skip=("_raw/", "orders/")) == ["_quarantine/" + path.name]
    lake.ingest(jsonl([up("b", 2)]))  # the writer's start migrates
    assert files_holding(root, X, skip=("_raw/", "orders/")) == []
    migrated = lake.quarantine.rows(report.batch_id).to_dicts()
    assert [(r["line"], r["reason"], r["subject"]) for r in migrated] == [(r["line"], r["reason"], r["subject"])
                                                                          for r in rows]
    assert migrated[0]["detail"] == "the line is not valid JSON" and migrated[1]["detail"] == rows[1]["detail"]
    assert [data[r["offset"]:r["offset"] + r["length"]] for r in migrated] == data.split(b"\n")[1:3]
    assert pq.read_schema(path).names == SCHEMA.names
    assert migrate_legacy(lake.storage) == 0


# -- temp files ----------------------------------------------------------------------------------------

def _killed_ingest(root: Path, batch: Path, point: str) -> subprocess.CompletedProcess[str]:
    code = f"import delta_release as dr; dr.Lake.open({str(root)!r}).ingest({str(batch)!r})"
    env = {**os.environ, "DELTA_RELEASE_CRASH_AT": point}
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False,
                          timeout=300)


def _temps(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob(".tmp-*"))


def test_temp_file_states() -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    pid = int(dead.stdout)
    hexid = "a" * 32
    assert temp_state(f".tmp-{HOST_TAG}-{pid}-{hexid}", 1.0, 3600) == "abandoned"
    assert temp_state(f".tmp-{HOST_TAG}-{os.getppid()}-{hexid}", 1.0, 3600) == "in_flight"
    assert temp_state(f".tmp-{HOST_TAG}-{os.getppid()}-{hexid}", 7200.0, 3600) == "expired"
    assert temp_state(f".tmp-{'0' * 8}-{pid}-{hexid}", 1.0, 3600) == "in_flight"  # another host: age only
    assert temp_state(f".tmp-{hexid}", 1.0, 3600) == "in_flight"  # the old name: age only
    assert temp_state(f".tmp-{hexid}", 7200.0, 3600) == "expired"
    assert temp_state("part-0.parquet", 7200.0, 3600) is None


@pytest.mark.parametrize("point", ["storage.after_temp:_raw", "storage.after_temp:_quarantine"])
def test_killed_temp_write_is_swept_by_the_next_writer(tmp_path: Path, point: str) -> None:
    root = tmp_path / "lake"
    dr.Lake.create(root).ingest(jsonl([up("first", 0)]))  # the ledger's format marker is written by now
    batch = tmp_path / "b.jsonl"
    batch.write_bytes(jsonl([up(X, 1)]) + NAMING["unquoted"] + b"\n")
    proc = _killed_ingest(root, batch, point)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    temps = _temps(root)
    top = point.split(":")[1]
    assert len(temps) == 1 and temps[0].startswith("_tmp/.tmp-")  # the lake's one temp folder, not `top`
    assert not any((root / top).glob(".tmp-*"))
    holding = files_holding(root, X)
    if top == "_raw":
        assert temps[0] in holding  # the raw batch's bytes, not yet under their name
    else:
        assert (root / temps[0]).read_bytes()[:4] == b"PAR1"  # the batch's ledger file, not yet renamed
        assert temps[0] not in holding  # and it holds no text
    lake = dr.Lake.open(root)
    lake.ingest(jsonl([up("other", 7)]))
    assert _temps(root) == []


def test_vacuum_reports_and_removes_temp_files_and_erase_sweeps_them(tmp_path: Path) -> None:
    root = tmp_path / "lake"
    dr.Lake.create(root)
    batch = tmp_path / "b.jsonl"
    batch.write_bytes(jsonl([up(X, 1)]))
    assert _killed_ingest(root, batch, "storage.after_temp:_raw").returncode == -signal.SIGKILL
    (leftover,) = _temps(root)
    code, out = _cli(root, "vacuum")
    assert code == 0 and f"would remove temp file: {leftover} (abandoned" in out
    assert _temps(root) == [leftover]
    code, out = _cli(root, "--json", "vacuum")
    assert json.loads(out)["temp_files"][0] | {"age_seconds": 0} == {
        "path": leftover, "state": "abandoned", "action": "would_remove", "size": batch.stat().st_size,
        "age_seconds": 0}
    code, out = _cli(root, "vacuum", "--apply")
    assert code == 0 and _temps(root) == []

    # an old temp file of unknown origin (no pid in its name) is kept while young, removed once expired
    stray = root / "_tmp" / f".tmp-{'b' * 32}"
    stray.write_bytes(batch.read_bytes())
    legacy = root / "_raw" / f".tmp-{'d' * 32}"  # where an earlier version wrote its temp files
    legacy.write_bytes(batch.read_bytes())
    assert _cli(root, "vacuum", "--apply")[0] == 0 and stray.exists() and legacy.exists()
    old = time.time() - 2 * 3600
    os.utime(stray, (old, old))
    os.utime(legacy, (old, old))
    assert _killed_ingest(root, batch, "storage.after_temp:_raw").returncode == -signal.SIGKILL
    lake = dr.Lake.open(root)
    lake.ingest(jsonl([up("y", 2)]))  # removes the expired stray and the killed write's temp file
    assert _temps(root) == [legacy.relative_to(root).as_posix()]  # a writer start lists `_tmp` only
    assert _cli(root, "vacuum", "--apply")[0] == 0 and _temps(root) == []  # vacuum walks the lake
    assert _killed_ingest(root, batch, "storage.after_temp:_raw").returncode == -signal.SIGKILL
    assert len(_temps(root)) == 1
    report = lake.erase(X, force=True)  # X reached no raw batch (the write was killed)
    assert len(report.temp_files_removed) == 1 and _temps(root) == []
    assert files_holding(root, X, skip=("_raw/", "orders/")) == []


def test_files_holding_reads_parquet_pages_and_footers(tmp_path: Path) -> None:
    needle = "ord-needle-1"
    values = [f"{needle}-{'z' * 50}-{i}" for i in range(2000)]
    table = pa.table({"a": pa.array(values), "n": pa.array([{"k": needle}] * 2000)})
    pq.write_table(table.select(["a"]), tmp_path / "page.parquet", compression="zstd", write_statistics=False)
    pq.write_table(pa.table({"b": ["x"]}).replace_schema_metadata({"note": needle}), tmp_path / "meta.parquet",
                   write_statistics=False)
    pq.write_table(table.select(["n"]), tmp_path / "nested.parquet", compression="zstd")
    (tmp_path / ".tmp-abc").write_text(f'{{"id": "{needle}"}}')
    (tmp_path / "clean.parquet").write_bytes((tmp_path / "meta.parquet").read_bytes().replace(b"ord", b"xyz"))
    assert "column:a" in where_in_file(tmp_path / "page.parquet", needle)
    assert where_in_file(tmp_path / "meta.parquet", needle)[-1] == "metadata"
    nested = where_in_file(tmp_path / "nested.parquet", needle)
    assert "column:n.k" in nested and "statistics:n.k" in nested
    assert files_holding(tmp_path, needle) == [".tmp-abc", "meta.parquet", "nested.parquet", "page.parquet"]


def test_ledger_uses_the_decoders_spans_when_it_sets_them(lake: dr.Lake) -> None:
    from dataclasses import dataclass

    from delta_release.contract import Reason, Reject

    @dataclass(frozen=True)
    class Spanned(Reject):  # what a decoder that knows the spans hands over
        offset: int | None = None
        length: int | None = None

    data = jsonl([up("a", 1)]) + INNOCENT + b"\n"
    lake.ingest(data)
    bid = lake.quarantine.rows()["batch_id"][0]
    rejects = [Spanned(line=2, reason=Reason.AMOUNT_UNIT, detail="x", raw=None, offset=7, length=3)]
    lake.quarantine.write(bid, rejects, lake.erasures.subject_key, data=object())  # data unused: spans given
    assert lake.quarantine.rows(bid).select("offset", "length").row(0) == (7, 3)
    plain = [Reject(line=2, reason=Reason.AMOUNT_UNIT, detail="x", raw=None)]
    lake.quarantine.write(bid, plain, lake.erasures.subject_key, data=object())  # not bytes: read from _raw/
    assert lake.quarantine.rows(bid).select("offset", "length").row(0) == (len(data) - len(INNOCENT) - 1,
                                                                           len(INNOCENT))


def test_glued_ids_are_withheld_after_erase_replay_rollback_vacuum_and_resume(tmp_path: Path,
                                                                              lake: dr.Lake) -> None:
    """Issue 32, item 4: `quarantine --show` printed an erased id glued to other text in plain text."""
    root = tmp_path / "lake"
    lake.ingest(jsonl([up(X, 1, day=40), up("ord-keep", 2, day=41)]))
    report = lake.ingest(b"\n".join(GLUED.values()) + b"\n" + INNOCENT + b"\n" + jsonl([up("ord-later", 3)]))
    assert report.quarantined == len(GLUED) + 1
    code, out = _cli(root, "quarantine", "--show")
    assert code == 0 and X in out  # not erased yet: shown
    lake.erase(X)
    steps = [("replay", "--all"), ("rollback", "--to", "1", "--repair-forward"),
             ("vacuum", "--apply", "--retain-versions", "1", "--replay-horizon-hours", "0"), ("erase", "--resume")]
    for step in [(), *steps]:
        if step:
            code, out = _cli(root, *step)
            assert code == 0 and X not in out, (step, out)
        for args in (("quarantine", "--show"), ("quarantine", "--show", "--json")):
            code, out = _cli(root, *args)
            assert code == 0 and X not in out, (step, args, out)
            assert "ord-fine-9" in out  # the innocent line is still shown
        states = [r["text_state"] for r in quarantine_records(lake, batch_id=report.batch_id, show=True)]
        assert states == ["withheld"] * len(GLUED) + ["shown"], step
