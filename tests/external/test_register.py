"""`register NAME URI`: Delta tables written by others (Spark, Databricks) through the inventory gate.

The tables under tests/data/golden/ are copies of third-party test tables (provenance and licenses in
tests/data/golden/SOURCES.md and LICENSES/). Tests that damage a table work on a copy in tmp_path.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

import delta_release as dr
from delta_release.cli.main import cli
from delta_release.register import check_inventory, polars_limits, read_duckdb_delta, register_table
from delta_release.register.log import deletion_vector_ref, read_log, z85_decode
from delta_release.register.reader import NS_MAX, UnreadableTableError
from delta_release.storage import Storage
from tests.external.conftest import GOLDEN, SPARK, SPARK_COUNTS

PARTITIONED = "delta-2.2.0-partitioned-types"  # Spark 3.3 / Delta 2.2, two partition columns
DV = "table-with-dv-small"  # Databricks: one file, a deletion vector removes 2 of 10 rows
EDGE = "table_with_edge_timestamps"  # Databricks: INT96 9999-12-31, which Polars clamps to 2262-04-11
MAPPING = "table_with_column_mapping"  # Databricks: column mapping by name, spaces in column names


def copy(name: str, tmp_path: Path) -> Path:
    target = tmp_path / "tables" / name
    shutil.copytree(GOLDEN / name, target)
    return target


def invoke(lake: Path, *args: str) -> tuple[int, dict]:  # type: ignore[type-arg]
    result = CliRunner().invoke(cli, ["--lake", str(lake), "--json", *args])
    return result.exit_code, json.loads(result.output.strip().splitlines()[-1])


@pytest.mark.parametrize("name", [SPARK, PARTITIONED, DV, EDGE, MAPPING])
def test_intact_third_party_tables_pass_the_gate(tmp_path: Path, name: str) -> None:
    code, out = invoke(tmp_path / "lake", "register", "--create", "t", str(copy(name, tmp_path)))
    assert code == 0, out
    assert out["ok"] and out["kind"] == "registered" and out["generation"] == 1
    assert out["missing"] == [] and out["size_mismatch"] == [] and out["unreferenced"] == []
    assert out["files"] > 0 and out["bytes"] > 0


def test_spark_table_pinned_reads_through_the_gateway(tmp_path: Path) -> None:
    table = copy(SPARK, tmp_path)
    code, out = invoke(tmp_path / "lake", "register", "--create", "spark", str(table))
    assert code == 0 and out["version"] == 13 and out["reader"]["engine"] == "polars"
    for version in (0, 5, 9, 10, 13):  # before, at and after the checkpoint
        code, read = invoke(tmp_path / "lake", "read", "--table", "spark", "--version", str(version))
        assert code == 0, read
        assert read["version"] == version and len(read["rows"]) == SPARK_COUNTS[version]
    code, read = invoke(tmp_path / "lake", "read", "--table", "spark")
    assert read["version"] == 13 and len(read["rows"]) == 41


def test_registered_table_stays_at_its_published_version(tmp_path: Path, lake: dr.Lake) -> None:
    """A foreign writer's newer commit is not visible until `register` gates and publishes it."""
    table = copy(SPARK, tmp_path)
    log = table / "_delta_log"
    for version in (12, 13):
        (log / f"{version:020d}.json").rename(tmp_path / f"{version}.json")
    assert register_table(lake, "spark", str(table)).version == 11
    for version in (12, 13):
        (tmp_path / f"{version}.json").rename(log / f"{version:020d}.json")
    assert lake.read("spark").height == SPARK_COUNTS[11]
    with pytest.raises(dr.DeltaReleaseError, match="not published"):
        lake.scan("spark", 13)
    again = register_table(lake, "spark", str(table))
    assert (again.version, again.generation) == (13, 2)
    assert lake.read("spark").height == SPARK_COUNTS[13]


@pytest.mark.parametrize("damage", ["delete", "truncate"])
@pytest.mark.parametrize("name", [SPARK, PARTITIONED, DV])
def test_damaged_data_file_fails_the_gate_before_any_read(tmp_path: Path, name: str, damage: str) -> None:
    table = copy(name, tmp_path)
    storage = Storage(str(table))
    victim = check_inventory(storage, _latest(storage)).to_json()  # intact first
    assert victim["ok"]
    entries = sorted(p for p in _referenced_data(storage))
    target = table / entries[0]
    if damage == "delete":
        target.unlink()
    else:
        target.write_bytes(target.read_bytes()[: target.stat().st_size // 2])
    code, out = invoke(tmp_path / "lake", "register", "--create", "t", str(table))
    assert code == 3, out
    err = out["error"]
    assert err["type"] == "GateError"
    assert err["mismatch"] == ("missing" if damage == "delete" else "size_mismatch")
    assert err["path"] == entries[0]
    code, read = invoke(tmp_path / "lake", "read", "--table", "t")
    assert code != 0 and "t" in read["error"]["message"]  # never registered: nothing to read


def test_file_damaged_after_registration_fails_the_read(tmp_path: Path, lake: dr.Lake) -> None:
    table = copy(SPARK, tmp_path)
    register_table(lake, "spark", str(table))
    victim = sorted(_referenced_data(Storage(str(table))))[0]
    (table / victim).write_bytes(b"PAR1")
    with pytest.raises(dr.GateError) as info:
        lake.scan("spark")
    assert info.value.path == victim and info.value.mismatch == "size_mismatch"
    code, out = invoke(tmp_path / "lake", "read", "--table", "spark", "--version", "13")
    assert code == 3 and out["error"]["type"] == "GateError"


def test_missing_deletion_vector_fails_the_gate(tmp_path: Path) -> None:
    table = copy(DV, tmp_path)
    dv_file = next(table.glob("deletion_vector_*.bin"))
    dv_file.unlink()
    code, out = invoke(tmp_path / "lake", "register", "--create", "dv", str(table))
    assert code == 3 and out["error"]["missing"] == [dv_file.name]


def test_unreferenced_files_are_reported_not_refused(tmp_path: Path) -> None:
    table = copy(PARTITIONED, tmp_path)
    stray = table / "c1=4" / "c2=c" / "part-99999-stray.c000.snappy.parquet"
    shutil.copy(next((table / "c1=4" / "c2=c").glob("*.parquet")), stray)
    (table / ".hidden.crc").write_bytes(b"x")  # hidden side files are not data
    code, out = invoke(tmp_path / "lake", "register", "--create", "t", str(table))
    assert code == 0 and out["unreferenced"] == ["c1=4/c2=c/part-99999-stray.c000.snappy.parquet"]
    assert pl.DataFrame(invoke(tmp_path / "lake", "read", "--table", "t")[1]["rows"]).height == 3


def test_removed_but_retained_files_count_as_referenced(tmp_path: Path) -> None:
    """Files that only older versions reference (deleted rows, before vacuum) are not 'unreferenced'."""
    storage = Storage(str(GOLDEN / SPARK))
    report = check_inventory(storage, 13)
    data = [p for p in (o.path for o in storage.list("")) if p.endswith(".parquet") and "/" not in p]
    assert report.files == 7 and len(data) == 14 and report.unreferenced == []


def test_deletion_vectors_are_applied(lake: dr.Lake, tmp_path: Path) -> None:
    """Polars (delta-rs) applies the vector: checked against DuckDB's delta extension, an independent reader."""
    table = copy(DV, tmp_path)
    reg = register_table(lake, "dv", str(table))
    assert reg.inventory.deletion_vectors == 1 and reg.reader["engine"] == "polars"
    got = sorted(lake.read("dv")["value"].to_list())
    assert got == list(range(1, 9))  # the DELETE removed 0 and 9
    assert sorted(lake.read("dv", version=0)["value"].to_list()) == list(range(10))
    if _duckdb_delta():
        assert sorted(read_duckdb_delta(str(table), 1)["value"].to_list()) == got


def test_edge_timestamps_never_come_back_as_2262(lake: dr.Lake, tmp_path: Path) -> None:
    table = copy(EDGE, tmp_path)
    reg = register_table(lake, "edge", str(table))
    assert any("outside" in r for r in reg.reader["polars_limits"])
    if not _duckdb_delta():
        with pytest.raises(UnreadableTableError, match="Polars"):
            lake.read("edge")
        return
    frame = lake.read("edge").sort("SOME_VALUE")
    assert reg.reader["engine"] == "duckdb-delta"
    big = frame["BIG_DATE"].to_list()
    assert [d.date().isoformat() for d in big] == ["9999-12-31", "9999-12-30"]
    assert all(d.year != 2262 for d in big) and NS_MAX.year == 2262
    code, out = invoke(lake.storage.local_path().parent / "lake", "read", "--table", "edge", "--version", "0")
    assert code == 0 and all(not str(r["BIG_DATE"]).startswith("2262") for r in out["rows"])
    assert sorted(str(r["BIG_DATE"])[:10] for r in out["rows"]) == ["9999-12-30", "9999-12-31"]


def test_edge_timestamps_refused_without_a_correct_engine(lake: dr.Lake, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Without DuckDB's delta extension the read is refused with the reason, never answered wrongly."""
    from delta_release.register import reader

    register_table(lake, "edge", str(copy(EDGE, tmp_path)))
    monkeypatch.setattr(reader, "duckdb_delta_available", lambda: False)
    with pytest.raises(UnreadableTableError) as info:
        lake.read("edge")
    assert info.value.exit_code == 3 and "outside 1677-09-21..2262-04-11" in info.value.reasons[0]


def test_column_mapping_reads_logical_names_or_refuses(lake: dr.Lake, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    table = copy(MAPPING, tmp_path)
    assert polars_limits(Storage(str(table)), 0) == ["column mapping mode 'name'"]
    register_table(lake, "mapped", str(table))
    if _duckdb_delta():
        frame = lake.read("mapped")
        assert frame.columns == ["Company Very Short", "Super Name"] and frame.height == 5
        assert sorted(set(frame["Company Very Short"])) == ["BME", "BMS"]
    from delta_release.register import reader

    monkeypatch.setattr(reader, "duckdb_delta_available", lambda: False)
    # without DuckDB, deltalake's own scan (which applies column mapping) answers, with the same rows
    frame = lake.read("mapped")
    assert frame.columns == ["Company Very Short", "Super Name"] and frame.height == 5

    def broken(*_: object) -> pl.DataFrame:
        raise RuntimeError("engine down")

    monkeypatch.setattr(reader, "read_deltalake", broken)
    with pytest.raises(UnreadableTableError, match="column mapping"):
        lake.read("mapped")


def test_register_refuses_the_lakes_own_names_and_taken_names(lake: dr.Lake, tmp_path: Path) -> None:
    with pytest.raises(dr.InputError, match="own tables"):
        register_table(lake, "orders", str(copy(SPARK, tmp_path)))
    register_table(lake, "spark", str(GOLDEN / SPARK))
    with pytest.raises(dr.InputError, match="already in the catalog"):
        register_table(lake, "spark", str(GOLDEN / PARTITIONED))
    with pytest.raises(dr.InputError, match="no Delta table"):
        register_table(lake, "nothing", str(tmp_path))


def test_deletion_vector_descriptor_decodes_to_the_file_name() -> None:
    assert len(z85_decode("vBn[lx{q8@P<9BNH/isA")) == 16
    ref = deletion_vector_ref({"storageType": "u", "pathOrInlineDv": "vBn[lx{q8@P<9BNH/isA", "offset": 1,
                               "sizeInBytes": 36, "cardinality": 2})
    assert ref is not None and ref.path == "deletion_vector_61d16c75-6994-46b7-a15b-8b538852e50e.bin"
    assert ref.needed_bytes == (GOLDEN / DV / ref.path).stat().st_size
    assert deletion_vector_ref({"storageType": "i", "pathOrInlineDv": "abcde", "sizeInBytes": 1}) is None


def _latest(storage: Storage) -> int:
    return max(read_log(storage).versions)


def _referenced_data(storage: Storage) -> list[str]:
    from delta_release import _delta

    return [e.path for e in _delta.file_entries(storage.root, {}, _latest(storage))]


def _duckdb_delta() -> bool:
    from delta_release.register.reader import duckdb_delta_available

    return duckdb_delta_available()


@pytest.mark.interop
def test_every_spark_version_matches_duckdbs_own_log_replay(lake: dr.Lake, tmp_path: Path) -> None:
    """Pinned reads through the gateway equal DuckDB's delta extension at every version of the Spark table."""
    if not _duckdb_delta():
        pytest.skip("duckdb-ext-delta is not installed (pip install -e '.[interop]')")
    table = copy(SPARK, tmp_path)
    register_table(lake, "spark", str(table))
    for version, count in enumerate(SPARK_COUNTS):
        ours = lake.read("spark", version=version)
        theirs = read_duckdb_delta(str(table), version)
        assert ours.height == count
        assert ours.sort(ours.columns).equals(theirs.select(ours.columns).cast(dict(ours.schema)).sort(ours.columns))


@pytest.mark.parametrize("engine", ["polars", "duckdb"])
def test_read_cli_reports_the_engine_that_read_a_registered_table(tmp_path: Path, engine: str) -> None:
    code, _ = invoke(tmp_path / "lake", "register", "--create", "edge",
                     str(copy("table_with_edge_timestamps", tmp_path)))
    assert code == 0
    code, out = invoke(tmp_path / "lake", "read", "--table", "edge", "--engine", engine)
    assert code == 0, out
    assert out["engine"] == "duckdb-delta"  # Polars would read 9999-12-31 as 2262-04-11, so DuckDB answers
    assert not any("2262" in json.dumps(r, default=str) for r in out["rows"])


def test_log_paths_decode_as_the_protocol_specifies() -> None:
    """PROTOCOL.md's own examples, Spark's escaped partitions, absolute URIs and v2 sidecars."""
    from delta_release.register.paths import decode, sidecar_relative, table_relative

    root = "/data/mytable"
    # add/remove/cdc examples in PROTOCOL.md: relative paths, decoded once
    assert table_relative("date=2017-12-10/part-000...c000.gz.parquet", root) == \
        "date=2017-12-10/part-000...c000.gz.parquet"
    assert table_relative("_change_data/cdc-00001-c.snappy.parquet", root) == "_change_data/cdc-00001-c.snappy.parquet"
    # Spark: partition value `2013-07-05 17:01:00` -> directory `ts=2013-07-05 17%3A01%3A00` -> log path encoded again
    assert table_relative("ts=2013-07-05%2017%253A01%253A00/part-0.parquet", root) == \
        "ts=2013-07-05 17%3A01%3A00/part-0.parquet"
    # delta-kernel-rs data-reader-escaped-chars: value `bar+%21`; '+' is not a space
    assert table_relative("_2=bar+%252521/part-00000.parquet", root) == "_2=bar+%2521/part-00000.parquet"
    assert decode("a%20b%3Ac%2Fd%2Be%25f") == "a b:c/d+e%f"
    assert decode("%E2%82%AC") == "€"
    # absolute URIs: inside the root -> relative; elsewhere -> None (external)
    assert table_relative("file:/data/mytable/a%20b/p.parquet", root) == "a b/p.parquet"
    assert table_relative("file:///data/mytable/p.parquet", root) == "p.parquet"
    assert table_relative("/data/mytable/x/p.parquet", root) == "x/p.parquet"
    assert table_relative("file:/data/other/p.parquet", root) is None
    assert table_relative("s3://mytable/deletion_vector_d2c639aa.bin", "s3://mytable") == "deletion_vector_d2c639aa.bin"
    assert table_relative("s3://other/p.parquet", "s3://mytable") is None
    assert table_relative("../escape.parquet", root) is None
    # sidecar example: a bare file name in _delta_log/_sidecars
    assert sidecar_relative("016ae953-37a9-438e-8683-9a9a4a79a395.parquet", root) == \
        "_delta_log/_sidecars/016ae953-37a9-438e-8683-9a9a4a79a395.parquet"
    # deletion vector example 1 (storageType u, random prefix `ab`)
    ref = deletion_vector_ref({"storageType": "u", "pathOrInlineDv": "ab^-aqEH.-t@S}K{vb[*k^", "offset": 4,
                               "sizeInBytes": 40, "cardinality": 6})
    assert ref is not None and ref.path == "ab/deletion_vector_d2c639aa-8816-431a-aaf6-d3fe2512ff61.bin"


def test_edge_timestamps_without_statistics_never_read_2262(lake: dr.Lake, tmp_path: Path) -> None:
    """With the optional `stats` removed, the INT96 data itself shows the range: Polars is not used."""
    table = copy(EDGE, tmp_path)
    for commit in (table / "_delta_log").glob("*.json"):
        lines = [json.loads(x) for x in commit.read_text().splitlines() if x.strip()]
        for action in lines:
            action.get("add", {}).pop("stats", None)
        commit.write_text("\n".join(json.dumps(a) for a in lines) + "\n")
    reg = register_table(lake, "edge", str(table))
    assert reg.reader["engine"] != "polars" and any("no statistics" in r for r in reg.reader["polars_limits"])
    if _duckdb_delta():
        big = sorted(d.date().isoformat() for d in lake.read("edge")["BIG_DATE"].to_list())
        assert big == ["9999-12-30", "9999-12-31"]


def test_history_of_a_registered_table_counts_each_commits_files(tmp_path: Path) -> None:
    """A commit another writer made carries none of our evidence: `history` counts the add and remove
    actions of its log entry (it reported 0 and 0 for every version)."""
    table = copy(SPARK, tmp_path)
    assert invoke(tmp_path / "lake", "register", "--create", "spark", str(table))[0] == 0
    result = CliRunner().invoke(cli, ["--lake", str(tmp_path / "lake"), "--json", "history", "--table", "spark"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)["versions"]
    for row in rows:
        actions = [json.loads(line) for line in (table / "_delta_log" / f"{row['version']:020d}.json").read_text()
                   .splitlines() if line.strip()]
        assert (row["files_added"], row["files_removed"]) == (sum("add" in a for a in actions),
                                                              sum("remove" in a for a in actions))
    assert all(r["files_added"] > 0 for r in rows) and any(r["files_removed"] > 0 for r in rows)
