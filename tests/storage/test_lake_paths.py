"""Issue 32, item 5: any path the filesystem allows works, or is refused up front.

A lake path with a space or non-ASCII letters works end to end through the command line (ingest, read
with Polars and DuckDB, erase, audit, history, vacuum); a path with a character delta-rs or Polars cannot
address (`%`, `#`, `?`, a glob character, a backslash, a control character) or a name the filesystem
refuses (256 bytes) exits 2 with one line naming the path and the character, and creates nothing. No path
exits 1. Before: `my lake` ingested, then `read`, `erase` and `audit` exited 1 (`FileNotFoundError` on
`my%20lake/...`), DuckDB said "engines disagree", and `lake%41` was read as `lakeA`."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import delta_release as dr
from delta_release.errors import InputError
from tests.conftest import ORDERS
from tests.s3server import S3Server, s3server  # noqa: F401 - the fixture

FIXTURE = ORDERS / "v3.jsonl"


def _cli(lake: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "delta_release", "--lake", str(lake), "--json", *args],
                          capture_output=True, text=True, check=False, timeout=300)


def _ok(lake: Path, *args: str) -> Any:
    done = _cli(lake, *args)
    assert done.returncode == 0, (args, done.stdout[-500:], done.stderr[-500:])
    return json.loads(done.stdout)


def _ids(report: Any) -> list[str]:
    return [r["order_id"] for r in report["rows"]]


@pytest.mark.slow  # a dozen CLI processes per path
@pytest.mark.parametrize("name", ["my lake", "lé lake"])
def test_a_path_with_a_space_or_non_ascii_works_end_to_end(tmp_path: Path, name: str) -> None:
    root = tmp_path / name / "lake"
    ingested = _ok(root, "ingest", "--create", str(FIXTURE))
    assert ingested["accepted"] > 1 and ingested["version"] is not None
    polars = _ok(root, "read")
    duck = _ok(root, "read", "--engine", "duckdb")
    assert polars["rows"] and duck["rows"] == polars["rows"]
    victim = _ids(polars)[0]
    assert _ok(root, "audit", "--days", "0:100")["rows"] == len(polars["rows"])
    erased = _ok(root, "erase", victim)
    assert erased["rows_removed"] >= 1
    assert victim not in _ids(_ok(root, "read")) and victim not in _ids(_ok(root, "read", "--engine", "duckdb"))
    assert len(_ok(root, "history")["versions"]) == erased["version"] + 1
    _ok(root, "vacuum", "--apply", "--retain-versions", "1", "--replay-horizon-hours", "0")
    assert _ids(_ok(root, "read")) == [i for i in _ids(polars) if i != victim]
    assert not (tmp_path / name.replace(" ", "%20")).exists()  # nothing written at an encoded twin


@pytest.mark.parametrize(("name", "char"), [
    ("lake%41", "%"), ("a#b", "#"), ("q?x", "?"), ("br[1]", "["), ("st*r", "*"), ("e\\f", "\\"),
    ("nl\nx", "\n"), ("tab\tx", "\t"),
])
def test_a_path_the_engines_cannot_address_is_refused_up_front(tmp_path: Path, name: str, char: str) -> None:
    root = tmp_path / name
    for args in (("ingest", "--create", str(FIXTURE)), ("read",)):
        done = _cli(root, *args)
        assert done.returncode == 2, (args, done.stdout, done.stderr)
        error = json.loads(done.stdout)["error"]
        assert repr(str(root)) in error["message"] and repr(char) in error["message"]
        assert "\n" not in error["message"]
    assert list(tmp_path.iterdir()) == []  # nothing created, not even at a decoded twin (lakeA)


def test_a_name_longer_than_the_filesystem_allows_exits_2(tmp_path: Path) -> None:
    root = tmp_path / ("x" * 256)
    for args in (("ingest", "--create", str(FIXTURE)), ("read",)):
        done = _cli(root, *args)
        assert done.returncode == 2, (args, done.stdout, done.stderr)
        assert "cannot use lake path" in json.loads(done.stdout)["error"]["message"]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.integration
@pytest.mark.parametrize("prefix", ["my lake", "lé"])
def test_an_s3_prefix_with_a_space_or_non_ascii_works(s3server: S3Server, prefix: str) -> None:  # noqa: F811
    lake = dr.Lake.create(f"s3://{s3server.new_bucket()}/{prefix}", storage_options=s3server.options)
    lake.ingest(FIXTURE)
    ids = lake.read()["order_id"].to_list()  # Polars was given s3://.../my%20lake/...: no such key
    assert ids
    lake.erase(ids[0])
    assert lake.read()["order_id"].to_list() == ids[1:]


@pytest.mark.integration
@pytest.mark.parametrize("char", ["#", "?", "%"])
def test_an_s3_prefix_the_engines_cannot_address_is_refused(s3server: S3Server, char: str) -> None:  # noqa: F811
    bucket = s3server.new_bucket()
    with pytest.raises(InputError, match=re.escape(repr(char))):
        dr.Lake.create(f"s3://{bucket}/a{char}b", storage_options=s3server.options)
    assert "Contents" not in s3server.client().list_objects_v2(Bucket=bucket)  # nothing written


@pytest.mark.parametrize(("name", "code"), [("my table", 0), ("a#b", 2)])
def test_register_takes_a_table_at_such_a_path_or_refuses_it(tmp_path: Path, name: str, code: int) -> None:
    import pyarrow as pa
    from deltalake import write_deltalake  # noqa: TID251 - a table written by someone else

    write_deltalake(str(tmp_path / name), pa.table({"a": [1, 2], "p": ["x", "y"]}), partition_by=["p"])
    root = tmp_path / "lake"
    done = _cli(root, "register", "--create", "ext", str(tmp_path / name))
    assert done.returncode == code, done.stdout + done.stderr
    if code == 2:  # before: registered, then `status` exited 1 (delta-rs lists no history under '#')
        assert repr("#") in json.loads(done.stdout)["error"]["message"] and not root.exists()
        return
    assert _ok(root, "status")["tables"]
    rows = _ok(root, "read", "--table", "ext")["rows"]
    assert sorted(r["a"] for r in rows) == [1, 2]
    assert _ok(root, "read", "--table", "ext", "--engine", "duckdb")["rows"] == rows


@pytest.mark.parametrize("table", ["data-reader-partition-values", "data-reader-escaped-chars"])
def test_a_writers_own_escapes_below_an_encoded_root_stay_literal(tmp_path: Path, table: str) -> None:
    """Only the root of a table's file URIs is decoded: Spark's partition folders hold literal escapes
    (`as_timestamp=2021-09-08 11%3A11%3A11/`), which a decode of the whole URI turned into `:` (no such
    file, and every Polars read of such a table refused)."""
    import shutil

    from delta_release import _delta

    src = Path(__file__).parents[1] / "data" / "conformance" / "kernel" / table / "delta"
    root = tmp_path / "my lake" / table
    shutil.copytree(src, root)
    uris = _delta.file_uris(str(root), {}, 0)
    assert uris and all(Path(u).is_file() for u in uris), [u for u in uris if not Path(u).is_file()]
    assert any("%" in u for u in uris) or table == "data-reader-escaped-chars"
