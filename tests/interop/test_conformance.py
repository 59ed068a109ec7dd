"""Conformance over real third-party Delta tables (tests/data/conformance/, provenance in SOURCES.md there).

Default run: a representative subset at the latest version. `-m conformance_full`: every copied table at
several versions with both engines. Each answer is compared with Spark's expected rows where the table
ships them, else with DuckDB's delta extension and deltalake's scan where those agree (tests/conformance.py).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest

from delta_release import Lake, _delta
from delta_release.errors import GateError, SafetyError
from delta_release.register import register_table
from delta_release.register.log import version_deletion_vectors
from delta_release.register.reader import duckdb_delta_available, read_registered
from delta_release.storage import Storage
from tests.conformance import run_table

DATA = Path(__file__).resolve().parents[1] / "data" / "conformance"
KERNEL = sorted(p.name for p in (DATA / "kernel").iterdir() if p.is_dir())
DELTA_RS = sorted(p.name for p in (DATA / "delta-rs").iterdir() if p.is_dir())
# tables the protocol makes unreadable, and the reason a reader must give
REFUSE = {"deltalog-invalid-protocol-version": "unsupported_feature", "versions-not-contiguous": "version_gap"}
# Timestamp partition columns whose log values name no zone ("2021-09-08 11:11:11"): the protocol's old rule
# is "the time zone of the system which wrote to the table", which the log does not record. The gateway reads
# them as UTC (like deltalake, DuckDB and Delta Kernel) and register flags them (ambiguous_timestamp_partition).
# Spark wrote data-reader-partition-values in a America/Los_Angeles session, so its expected instants are 7 h
# later than the UTC reading; the kernel-timestamp-* tables were written in UTC and match as they are.
AMBIGUOUS = {"data-reader-partition-values": ["as_timestamp"], "kernel-timestamp-int96": ["part"],
             "kernel-timestamp-pst": ["part"], "kernel-timestamp-timestamp_micros": ["part"]}
WRITER_ZONES = {"data-reader-partition-values": {"as_timestamp": "America/Los_Angeles"}}
QUICK = ["data-reader-partition-values", "data-reader-escaped-chars", "data-reader-timestamp_ntz-id-mode",
         "v2-checkpoint-parquet", "kernel-timestamp-int96", "delta-rs/delta-0.8.0-special-partition",
         "versions-not-contiguous"]

pytestmark = pytest.mark.skipif(not duckdb_delta_available(), reason="needs duckdb-ext-delta ('.[interop]')")


def table_path(name: str) -> Path:
    if name.startswith("delta-rs/"):
        return DATA / name
    return DATA / "kernel" / name / "delta"


def check(name: str, tmp_path: Path, *, full: bool) -> None:
    path = table_path(name)
    short = name.removeprefix("delta-rs/")
    outcome = run_table(path, tmp_path / "lake", versions=None if full else [],
                        writer_zones=WRITER_ZONES.get(short))
    if short in REFUSE:
        assert not outcome.registered and outcome.refused and outcome.refused.startswith(REFUSE[short]), outcome
        return
    assert outcome.registered, outcome
    # read as UTC, never silently: exactly the columns whose log values name no zone are flagged
    assert outcome.ambiguous == AMBIGUOUS.get(short, []), outcome.ambiguous
    assert not outcome.failures, outcome.failures
    assert outcome.reads and all(v.startswith(("match", "refused")) for v in outcome.reads.values()), outcome.reads
    # a refusal on a pinned read is allowed only with a reason, and never for the latest version
    latest = max(int(k[1:].split("/")[0]) for k in outcome.reads)
    assert all(v.startswith("match") for k, v in outcome.reads.items()
               if k.startswith(f"v{latest}/") and k.endswith("/polars")), outcome.reads


@pytest.mark.parametrize("name", QUICK)
def test_conformance_quick(name: str, tmp_path: Path) -> None:
    check(name, tmp_path, full=False)


@pytest.mark.conformance_full
@pytest.mark.parametrize("name", KERNEL + [f"delta-rs/{n}" for n in DELTA_RS])
def test_conformance_full(name: str, tmp_path: Path) -> None:
    check(name, tmp_path, full=True)


def _damage(kind: str, table: Path) -> None:
    log = table / "_delta_log"
    commits = sorted(log.glob("*.json"))
    data = sorted(p for p in table.rglob("*.parquet") if "_delta_log" not in p.parts)
    if kind == "corrupt_line":
        text = commits[-1].read_text().splitlines()
        text[-1] = text[-1][: len(text[-1]) // 2]
        commits[-1].write_text("\n".join(text) + "\n")
    elif kind == "deleted_checkpoint":
        next(log.glob("*.checkpoint*.parquet")).unlink()
    elif kind == "truncated_checkpoint":
        ck = next(log.glob("*.checkpoint*.parquet"))
        ck.write_bytes(ck.read_bytes()[: ck.stat().st_size // 2])
    elif kind == "gap":
        commits[-2].unlink()
    elif kind == "deleted_file":
        data[-1].unlink()
    elif kind == "truncated_file":
        data[-1].write_bytes(data[-1].read_bytes()[:100])


DAMAGED = [("corrupt_line", "corrupt_log"), ("deleted_checkpoint", "missing_checkpoint"),
           ("truncated_checkpoint", "corrupt_log"), ("gap", "version_gap")]


@pytest.mark.parametrize(("kind", "reason"), DAMAGED)
def test_damaged_log_is_refused_with_the_reason(kind: str, reason: str, tmp_path: Path) -> None:
    table = tmp_path / "t"
    shutil.copytree(table_path("delta-rs/simple_table"), table)  # commits 0..4, no checkpoint
    if kind in ("deleted_checkpoint", "truncated_checkpoint"):
        shutil.rmtree(table)
        shutil.copytree(table_path("multi-part-checkpoint"), table)
        ck = sorted((table / "_delta_log").glob("*.checkpoint*.parquet"))
        if kind == "deleted_checkpoint":
            ck[0].unlink()
        else:
            ck[0].write_bytes(ck[0].read_bytes()[: ck[0].stat().st_size // 2])
    else:
        _damage(kind, table)
    with pytest.raises(SafetyError) as info:
        register_table(Lake.create(tmp_path / "lake"), "t", str(table))
    assert info.value.exit_code == 3 and info.value.facts["reason"] == reason, info.value.message


@pytest.mark.parametrize("kind", ["deleted_file", "truncated_file"])
@pytest.mark.parametrize("name", ["data-reader-timestamp_ntz", "delta-rs/delta-0.8.0-special-partition"])
def test_damaged_data_in_escaped_partitions_is_refused(kind: str, name: str, tmp_path: Path) -> None:
    table = tmp_path / "t"
    shutil.copytree(table_path(name), table)
    _damage(kind, table)
    with pytest.raises(SafetyError) as info:
        register_table(Lake.create(tmp_path / "lake"), "t", str(table))
    assert info.value.exit_code == 3
    assert info.value.facts["mismatch"] == ("missing" if kind == "deleted_file" else "size_mismatch")


def test_stray_file_in_an_escaped_partition_is_reported_not_refused(tmp_path: Path) -> None:
    table = tmp_path / "t"
    shutil.copytree(table_path("data-reader-timestamp_ntz"), table)
    victim = sorted(p for p in table.rglob("*.parquet"))[0]
    stray = victim.with_name("part-99999-stray.parquet")
    shutil.copy(victim, stray)
    reg = register_table(Lake.create(tmp_path / "lake"), "t", str(table))
    assert reg.inventory.unreferenced == [str(stray.relative_to(table))]


@pytest.mark.parametrize("name", ["data-reader-timestamp_ntz-id-mode", "data-reader-timestamp_ntz-name-mode"])
def test_engine_returning_null_partitions_is_not_used(name: str, tmp_path: Path) -> None:
    """DuckDB returns NULL for the partition column under column mapping; the log has values in 6 of 9 rows."""
    from delta_release.register.reader import UnreadableTableError, read_registered

    lake = Lake.create(tmp_path / "lake")
    register_table(lake, "t", str(table_path(name)))
    frame, used = read_registered(lake, "t", None, engine="polars")
    assert used != "duckdb-delta" and frame.height == 9
    assert frame[frame.columns[-1]].null_count() == 3  # Spark's expected rows: 6 values, 3 nulls
    with pytest.raises(UnreadableTableError, match="came back NULL in 9 rows, the log allows 3"):
        read_registered(lake, "t", None, engine="duckdb")


def test_register_flags_an_ambiguous_timestamp_partition(tmp_path: Path) -> None:
    """`register` says which timestamp partition columns it reads as UTC for want of a zone (text and JSON)."""
    import json

    from click.testing import CliRunner

    from delta_release.cli.main import cli

    table = table_path("data-reader-partition-values")
    res = CliRunner().invoke(cli, ["--lake", str(tmp_path / "lake"), "--json", "register", "--create", "pv",
                                   str(table)])
    assert res.exit_code == 0, res.output
    flagged = json.loads(res.stdout)["ambiguous_timestamp_partition"]
    assert flagged == [{"column": "as_timestamp", "files": 2, "example": "2021-09-08 11:11:11", "read_as": "UTC"}]
    text = CliRunner().invoke(cli, ["--lake", str(tmp_path / "lake2"), "register", "--create", "pv", str(table)])
    assert text.exit_code == 0 and "ambiguous_timestamp_partition: as_timestamp" in text.stdout, text.output
    plain = CliRunner().invoke(cli, ["--lake", str(tmp_path / "lake3"), "--json", "register", "--create", "t",
                                     str(table_path("data-reader-timestamp_ntz"))])  # timestamp_ntz: a wall clock
    assert plain.exit_code == 0 and json.loads(plain.stdout)["ambiguous_timestamp_partition"] == [], plain.output


# -- Deletion vectors (issue 37) ---------------------------------------------------------------------------
# The live deletion-vector files at each table's latest version: kernel's (Spark, classic checkpoint at 10,
# vectors replaced by JSON commits after it) and delta-rs's (Databricks, checkpoint at 20 whose adds carry a
# vector without maxRowIndex, next to remove tombstones of the same path with the older vector).
DV_TABLES = {
    "dv-partitioned-with-checkpoint": ["deletion_vector_179561f5-946c-40d8-b088-0d890e8c854c.bin",
                                       "deletion_vector_f34fad76-197a-4fd7-9382-f7773fc8eff9.bin"],
    "delta-rs/table_with_deletion_logs": ["deletion_vector_a2084964-69d4-4e1e-95f5-9bbd6571d5c3.bin"],
}
DV_DAMAGE = ["deleted", "truncated", "garbage"]  # garbage: the same size, other bytes
DV_MISMATCH = {"deleted": "missing", "truncated": "size_mismatch", "garbage": "damaged"}


def _dv_copy(name: str, tmp_path: Path) -> Path:
    table = tmp_path / "t"
    shutil.copytree(table_path(name), table)
    return table


def _dv_damage(kind: str, file: Path) -> None:
    if kind == "deleted":
        file.unlink()
    elif kind == "truncated":
        file.write_bytes(file.read_bytes()[:-1])
    else:
        file.write_bytes(bytes(b ^ 0x5A for b in file.read_bytes()))


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    """The real command in its own process: a signal would show as a negative return code."""
    return subprocess.run([sys.executable, "-m", "delta_release", "--json", *args], capture_output=True, text=True,
                          check=False, timeout=300)


def _refusal(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert proc.returncode == 3, (proc.returncode, proc.stdout[-500:], proc.stderr[-2000:])
    error: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])["error"]
    return error


@pytest.mark.parametrize("name", sorted(DV_TABLES))
def test_inventory_lists_the_live_deletion_vectors_at_every_version(name: str, tmp_path: Path) -> None:
    """Our replay of the log segment names the same files with a deletion vector as deltalake's own, at
    every version (before, at and after the checkpoint), and register counts and checks them."""
    from deltalake import DeltaTable

    table = table_path(name)
    storage = Storage(str(table), {})
    latest = _delta.latest_version(str(table), {})
    assert latest is not None
    for version in range(latest + 1):
        theirs = DeltaTable(str(table), version=version).deletion_vectors().read_all()
        expected = sorted(unquote(p).split(f"{table}/", 1)[1] for p in theirs.column("filepath").to_pylist())
        assert sorted(version_deletion_vectors(storage, version)) == expected, version
    reg = register_table(Lake.create(tmp_path / "lake"), "t", str(table))
    assert reg.inventory.deletion_vectors == len(DV_TABLES[name]) and reg.inventory.ok


@pytest.mark.parametrize("kind", DV_DAMAGE)
@pytest.mark.parametrize("name", sorted(DV_TABLES))
def test_damaged_deletion_vector_is_refused_at_register(name: str, kind: str, tmp_path: Path) -> None:
    """CLI (its own process) and API: exit 3 naming the file, and no lake entry."""
    for n, dv in enumerate(DV_TABLES[name]):
        table = _dv_copy(name, tmp_path / f"{n}")
        _dv_damage(kind, table / dv)
        error = _refusal(_cli("--lake", str(tmp_path / f"{n}" / "cli-lake"), "register", "--create", "t", str(table)))
        assert (error["path"], error["mismatch"]) == (dv, DV_MISMATCH[kind]) and dv in error["message"], error
        lake = Lake.create(tmp_path / f"{n}" / "api-lake")
        with pytest.raises(GateError) as info:
            register_table(lake, "t", str(table))
        assert info.value.exit_code == 3 and info.value.facts["path"] == dv
        assert lake.catalog.table("t") is None


@pytest.mark.parametrize("kind", DV_DAMAGE)
@pytest.mark.parametrize("name", sorted(DV_TABLES))
def test_deletion_vector_damaged_after_registration_fails_every_read(name: str, kind: str, tmp_path: Path) -> None:
    """Registered while whole, damaged afterwards: every read, CLI (own process) and API, both engines,
    is refused with exit 3 naming the file; none exits 1 or dies by a signal."""
    dv = DV_TABLES[name][-1]
    table = _dv_copy(name, tmp_path)
    lake = Lake.create(tmp_path / "lake")
    register_table(lake, "t", str(table))
    _dv_damage(kind, table / dv)
    for engine in ("polars", "duckdb"):
        error = _refusal(_cli("--lake", str(tmp_path / "lake"), "read", "--table", "t", "--engine", engine))
        assert (error["path"], error["table"]) == (dv, "t") and dv in error["message"], (engine, error)
        with pytest.raises(GateError) as info:
            read_registered(lake, "t", None, engine=engine)
        assert info.value.exit_code == 3 and info.value.facts["path"] == dv, engine
    with pytest.raises(GateError) as info:
        lake.read("t")
    assert info.value.facts["path"] == dv
    if kind != "garbage":  # scan checks presence and sizes and stays lazy: same-size garbage shows at collect
        with pytest.raises(GateError):
            lake.scan("t")


def test_deletion_vectors_from_multi_part_and_v2_checkpoints_and_without_optional_fields(tmp_path: Path) -> None:
    """The same live vector whichever checkpoint holds the adds: the classic one split into two parts, or a
    v2 checkpoint whose adds are in a sidecar; a descriptor without `offset` (read as 1, after the version
    byte, as Delta Kernel does) still needs the whole vector, so a file one byte short is refused."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    name = "delta-rs/table_with_deletion_logs"
    dv = DV_TABLES[name][0]
    wanted = {"part-00000-cb251d5e-b665-437a-a9a7-fbfc5137c77d.c000.snappy.parquet": [dv]}

    log = "_delta_log"
    single = f"{log}/{20:020d}.checkpoint.parquet"
    multi = _dv_copy(name, tmp_path / "multi")
    rows = pq.read_table(multi / single)
    (multi / single).unlink()
    half = rows.num_rows // 2
    for part, piece in enumerate((rows.slice(0, half), rows.slice(half)), start=1):
        pq.write_table(piece, multi / f"{log}/{20:020d}.checkpoint.{part:010d}.{2:010d}.parquet")
    assert live_at(multi, 20) == wanted

    v2 = _dv_copy(name, tmp_path / "v2")
    rows = pq.read_table(v2 / single)
    (v2 / single).unlink()
    files = pa.compute.or_(rows.column("add").is_valid(), rows.column("remove").is_valid())
    (v2 / log / "_sidecars").mkdir()
    pq.write_table(rows.filter(files).select(["add", "remove"]), v2 / log / "_sidecars" / "s1.parquet")
    top = rows.filter(pa.compute.invert(files)).drop_columns(["add", "remove"])
    sidecar = pa.array([None] * top.num_rows + [{"path": "s1.parquet", "sizeInBytes": 1, "modificationTime": 0}])
    top = pa.concat_tables([top, pa.table({c: pa.nulls(1, top.schema.field(c).type) for c in top.column_names})])
    pq.write_table(top.append_column("sidecar", sidecar), v2 / f"{log}/{20:020d}.checkpoint.{uuid.uuid4()}.parquet")
    assert live_at(v2, 20) == wanted

    bare = _dv_copy("dv-partitioned-with-checkpoint", tmp_path / "bare")
    commit = bare / f"{log}/{15:020d}.json"
    commit.write_text(commit.read_text().replace('"offset":1,', ""))
    vector = bare / DV_TABLES["dv-partitioned-with-checkpoint"][0]
    assert '"offset"' not in commit.read_text() and vector.name in str(live_at(bare, 15))
    vector.write_bytes(vector.read_bytes()[:-1])
    with pytest.raises(GateError) as info:
        register_table(Lake.create(tmp_path / "lake"), "t", str(bare))
    assert (info.value.facts["path"], info.value.facts["mismatch"]) == (vector.name, "size_mismatch")


def live_at(table: Path, version: int) -> dict[str, list[str]]:
    return {k: [v.path for v in refs] for k, refs in version_deletion_vectors(Storage(str(table), {}), version).items()}


def test_a_failing_engine_is_a_refusal_naming_the_table(tmp_path: Path) -> None:
    """An engine error on files that are as the log says: exit 3 (engine_failed) naming the table."""
    import polars as pl

    from delta_release.register.problems import LogProblemError
    from delta_release.register.reader import collect_checked

    def boom(frame: pl.DataFrame) -> pl.DataFrame:
        raise RuntimeError("engine worker lost")

    table = table_path("delta-rs/table_with_deletion_logs")
    failing = pl.LazyFrame({"x": [1]}).map_batches(boom)
    with pytest.raises(LogProblemError) as info:
        collect_checked(Storage(str(table), {}), "t", 20, failing, "polars")
    assert info.value.exit_code == 3 and info.value.reason == "engine_failed" and info.value.facts["table"] == "t"
    assert "engine worker lost" in info.value.message


CRASH_GUARD = """
import atexit, os, signal, sys
import delta_release.register.reader as reader
table, lake, dv = sys.argv[1:4]
check = reader.check_inventory
def racing(storage, version, **kw):  # the file vanishes between the check and the engine's read
    report = check(storage, version, **kw)
    if not kw.get("verify_vectors") and os.path.exists(dv):
        os.remove(dv)
    return report
reader.check_inventory = racing
# the engine's worker threads crashing the interpreter's shutdown (observed: SIGSEGV/SIGBUS, 1 exit in 3)
atexit.register(lambda: os.kill(os.getpid(), signal.SIGSEGV))
from delta_release.cli.main import main
sys.argv = ["delta-release", "--json", "--lake", lake, "read", "--table", "t"]
main()
"""


def test_crash_guard_a_read_whose_engine_failed_ends_with_exit_3_not_a_signal(tmp_path: Path) -> None:
    """The deletion vector disappears after the pre-engine check (a race): Polars' read fails; the CLI
    names the file (exit 3) and ends the process without the interpreter's shutdown, where the engine's
    leftover threads crashed it."""
    name = "dv-partitioned-with-checkpoint"
    dv = DV_TABLES[name][-1]
    table = _dv_copy(name, tmp_path)
    register_table(Lake.create(tmp_path / "lake"), "t", str(table))
    proc = subprocess.run([sys.executable, "-c", CRASH_GUARD, str(table), str(tmp_path / "lake"), str(table / dv)],
                          capture_output=True, text=True, check=False, timeout=300)
    error = _refusal(proc)
    assert (error["path"], error["mismatch"], error["table"]) == (dv, "missing", "t"), error


def test_a_deletion_vector_descriptor_that_names_no_file_is_a_corrupt_log(tmp_path: Path) -> None:
    """deltalake replays a 'u' path too short for its UUID; our inventory refuses it (exit 3), never a
    traceback (it was an uncaught error, exit 1)."""
    table = _dv_copy("dv-partitioned-with-checkpoint", tmp_path)
    commit = table / "_delta_log" / f"{15:020d}.json"
    commit.write_text(commit.read_text().replace('"7NnC4LX-RqU.S:B4VD9n"', '"7NnC4LX"'))
    with pytest.raises(SafetyError) as info:
        register_table(Lake.create(tmp_path / "lake"), "t", str(table))
    assert info.value.exit_code == 3 and info.value.facts["reason"] == "corrupt_log", info.value.message
    assert "shorter than its 20-character UUID" in info.value.message
