"""Secrets and erased subjects never appear in logs, errors, CLI output or the quarantine; the erasure key
file is mode 0600."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

import delta_release as dr
from tests.conftest import jsonl, up

SUBJECT = "ord-secret-4711"
SECRET = "S3CR3T-do-not-print-9f8e7d"


def cli(lake: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "delta_release", "--lake", str(lake), *args, "--json"],
                          capture_output=True, text=True, timeout=300, check=False, env=env)


def test_erasure_key_file_is_0600_even_with_an_open_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        lake = dr.Lake.create(tmp_path / "lake")
    finally:
        os.umask(old)
    key = lake.storage.local_path("_erasure/key")
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert len(key.read_bytes().strip()) >= 32


@pytest.mark.slow
def test_erased_subject_never_appears_after_erasure(tmp_path: Path) -> None:
    lake_dir = tmp_path / "lake"
    lake = dr.Lake.create(lake_dir)
    bad = json.dumps({"schema_version": 2, "order_id": SUBJECT, "position": 3, "kind": "upsert",
                      "amount_cents": 73.5, "event_day": 47}).encode() + b"\n"
    # issue 32, item 4: rejected lines that hold the id glued to other text
    glued = b"\n".join(t.replace(b"ID", SUBJECT.encode()) for t in (
        b"https://crm.example/orders/ID/view", b"REF#ID#END", b"customer<ID>", b"C:\\orders\\ID.pdf", b"xxIDyy",
    )) + b"\n"
    lake.ingest(jsonl([up(SUBJECT, 1), up("ord-other", 2)]) + bad + glued)
    assert "raw" not in lake.quarantine.rows().columns  # the ledger never holds a line's text
    erased = cli(lake_dir, "erase", SUBJECT)
    assert erased.returncode == 0, erased.stderr
    key_hex = lake.storage.local_path("_erasure/key").read_text().strip()
    # the subject comes back in a new batch (accepted and rejected lines), a replay, reads and history
    again = tmp_path / "again.jsonl"
    again.write_bytes(jsonl([up(SUBJECT, 9, amount=5), up("ord-new", 10)]) + bad.replace(b'"position": 3',
                                                                                      b'"position": 11'))
    outputs = [cli(lake_dir, "ingest", str(again)), cli(lake_dir, "replay", "--all"), cli(lake_dir, "read"),
               cli(lake_dir, "history"), cli(lake_dir, "read", "--version", "1"), cli(lake_dir, "vacuum"),
               cli(lake_dir, "quarantine", "--show"), cli(lake_dir, "erase", "--resume"),
               cli(lake_dir, "vacuum", "--apply", "--retain-versions", "1", "--replay-horizon-hours", "0"),
               cli(lake_dir, "quarantine", "--show")]
    assert json.loads(outputs[6].stdout)["count"] >= 6
    for proc in outputs:
        assert SUBJECT not in proc.stdout + proc.stderr, proc.args
        assert key_hex not in proc.stdout + proc.stderr, proc.args
    report = json.loads(outputs[0].stdout)
    assert report["reasons"].get("erased_subject", 0) >= 1
    lake = dr.Lake.open(lake_dir)
    assert SUBJECT not in lake.read()["order_id"].to_list()
    q = lake.quarantine.rows()
    assert not any(SUBJECT in r for r in q["detail"].to_list())
    # files we write (catalog, erasure ledger, Delta log with our evidence and stats) never hold the id
    for path in lake_dir.rglob("*"):
        if path.is_file() and (path.suffix in (".json", ".sqlite") or "_erasure" in path.parts):
            assert SUBJECT.encode() not in path.read_bytes(), path


def test_storage_secret_never_in_errors(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once we leave: nothing listens there
    options = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ALLOW_HTTP": "true",
               "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": SECRET, "AWS_REGION": "us-east-1",
               "AWS_EC2_METADATA_DISABLED": "true"}
    from delta_release.gateway.catalog import SqliteCatalog

    with pytest.raises(Exception) as err:  # noqa: B017 - any failure; what matters is what it says
        dr.Lake.open("s3://nowhere/lake", storage_options=options,
                     catalog=SqliteCatalog(tmp_path / "catalog.sqlite"))
    text = f"{err.value!s} {err.value!r}"
    if isinstance(err.value, dr.DeltaReleaseError):
        text += json.dumps(err.value.to_json(), default=str)
    assert SECRET not in text
    no_catalog = cli(tmp_path, "read", env={**os.environ, "AWS_SECRET_ACCESS_KEY": SECRET})
    assert SECRET not in no_catalog.stdout + no_catalog.stderr
    # an s3:// lake no longer needs a local catalog (issue 18: the lake-resident one is the default), so
    # opening it without one reaches the (absent) server and fails there: still without the secret
    with pytest.raises(Exception) as unreachable:  # noqa: B017
        dr.Lake.open("s3://nowhere/lake", storage_options=options)
    text = f"{unreachable.value!s} {unreachable.value!r}"
    if isinstance(unreachable.value, dr.DeltaReleaseError):
        text += json.dumps(unreachable.value.to_json(), default=str)
    assert SECRET not in text
