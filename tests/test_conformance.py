"""Conformance over real third-party Delta tables (tests/data/conformance/, provenance in SOURCES.md there).

Default run: a representative subset at the latest version. `-m conformance_full`: every copied table at
several versions with both engines. Each answer is compared with Spark's expected rows where the table
ships them, else with DuckDB's delta extension and deltalake's scan where those agree (tests/conformance.py).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conformance import run_table

from delta_release import Lake
from delta_release.errors import SafetyError
from delta_release.register import register_table
from delta_release.register.reader import duckdb_delta_available

DATA = Path(__file__).resolve().parent / "data" / "conformance"
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
