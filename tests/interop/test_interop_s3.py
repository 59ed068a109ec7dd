"""The scale-out path on an object store: the lake on S3 (moto's server on 127.0.0.1), readers on Sail.

A reader gets the published version and the table's s3:// location from the catalog and reads it with
Sail's Spark API, which takes the endpoint and keys from its environment. A third-party table uploaded to
the bucket goes through `register`'s inventory gate on the object store like on local disk.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

import delta_release as dr
from delta_release import _delta
from delta_release.gateway.catalog import SqliteCatalog
from delta_release.register import register_table
from delta_release.register.reader import read_registered
from tests.conftest import jsonl, rm, up
from tests.external.conftest import GOLDEN, SPARK, SPARK_COUNTS
from tests.interop.conftest import CURRENT_SQL, assert_same_rows
from tests.interop_engines import run_engine
from tests.s3server import S3Server, s3server  # noqa: F401 - the fixture

pytestmark = [pytest.mark.integration, pytest.mark.interop]


def test_sail_reads_the_published_version_from_s3(s3server: S3Server, tmp_path: Path) -> None:  # noqa: F811
    bucket = s3server.new_bucket()
    catalog = tmp_path / "catalog.sqlite"
    lake = dr.Lake.create(f"s3://{bucket}/lake", storage_options=s3server.options, catalog=SqliteCatalog(catalog))
    lake.ingest(jsonl([up(f"ord-{i}", i, 100 + i, day=40 + i % 3) for i in range(9)]))
    lake.ingest(jsonl([rm("ord-4", 20), up("ord-5", 21, 555, day=41)]))

    reader = dr.Lake.open(f"s3://{bucket}/lake", storage_options=s3server.options, catalog=SqliteCatalog(catalog))
    location, version = reader.gateway.resolve("orders", None)
    assert location == f"s3://{bucket}/lake/orders" and version == 2
    jobs = [{"id": "raw", "uri": location, "version": version, "storage_options": s3server.options},
            {"id": "sql", "uri": location, "version": version, "sql": CURRENT_SQL["orders"],
             "storage_options": s3server.options}]
    runs = {e: run_engine(e, jobs, tmp_path / "engines", env=s3server.options)
            for e in ("polars", "duckdb", "sail")}
    for run in runs.values():
        if not run.installed:
            pytest.skip(f"{run.engine} is not installed: {run.error}")
        assert not run.error, run.error
    raw = pl.DataFrame(pl.from_arrow(runs["polars"].table("raw")))
    assert raw["deleted"].any()
    for engine in ("duckdb", "sail"):  # DuckDB's delta extension through httpfs, Sail through its own reader
        assert_same_rows(pl.DataFrame(pl.from_arrow(runs[engine].table("raw"))), raw)
        assert_same_rows(pl.DataFrame(pl.from_arrow(runs[engine].table("sql"))), lake.read("orders"))


def test_sail_reads_the_published_version_from_the_lake_uri_alone(s3server: S3Server, tmp_path: Path,  # noqa: F811
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A reader with nothing but the lake URI and the standard AWS_* variables: `Lake.open` (no storage
    options, no catalog argument: the lake's own catalog) resolves the published version and location,
    and Sail reads that version with the same variables in its environment."""
    for key, value in s3server.options.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("DELTA_RELEASE_CATALOG", raising=False)
    uri = f"s3://{s3server.new_bucket()}/lake"
    writer = dr.Lake.create(uri)
    writer.ingest(jsonl([up(f"ord-{i}", i, 100 + i, day=40 + i % 3) for i in range(6)]))
    writer.ingest(jsonl([rm("ord-2", 20)]))
    location, version = dr.Lake.open(uri).gateway.resolve("orders", None)
    assert location == f"{uri}/orders" and version == 2
    jobs = [{"id": "sql", "uri": location, "version": version, "sql": CURRENT_SQL["orders"]}]
    run = run_engine("sail", jobs, tmp_path / "engines", env=s3server.options)
    if not run.installed:
        pytest.skip(f"sail is not installed: {run.error}")
    assert not run.error, run.error
    assert_same_rows(pl.DataFrame(pl.from_arrow(run.table("sql"))), writer.read("orders"))


def test_register_a_third_party_table_on_s3(s3server: S3Server, tmp_path: Path) -> None:  # noqa: F811
    bucket = s3server.new_bucket()
    client = s3server.client()
    source = GOLDEN / SPARK
    for path in sorted(p for p in source.rglob("*") if p.is_file()):
        client.put_object(Bucket=bucket, Key=f"ext/spark/{path.relative_to(source).as_posix()}", Body=path.read_bytes())
    lake = dr.Lake.create(f"s3://{bucket}/lake", storage_options=s3server.options,
                        catalog=SqliteCatalog(tmp_path / "catalog.sqlite"))
    reg = register_table(lake, "spark", f"s3://{bucket}/ext/spark")
    assert reg.inventory.ok and reg.version == 13 and reg.inventory.unreferenced == []
    assert lake.read("spark", version=5).height == SPARK_COUNTS[5]
    # DuckDB's delta extension on the object store: httpfs with a secret from the lake's settings
    duck, engine = read_registered(lake, "spark", 5, engine="duckdb")
    assert engine == "duckdb-delta" and duck.height == SPARK_COUNTS[5]
    victim = _delta.file_entries(f"s3://{bucket}/ext/spark", s3server.options, 13)[0].path
    client.delete_object(Bucket=bucket, Key=f"ext/spark/{victim}")
    with pytest.raises(dr.GateError) as info:
        lake.read("spark")
    assert (info.value.mismatch, info.value.path) == ("missing", victim)
