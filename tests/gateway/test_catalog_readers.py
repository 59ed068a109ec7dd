"""Readers anywhere: another process, given only the lake URI and credentials, resolves the published
version from the lake-resident catalog on the S3-compatible server, gets the freshness checks, and reads.
The docs' plain-JSON snippet (docs/catalog-format.md) is executed in a process that never imports
delta_release."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import delta_release as dr
from delta_release.gateway.lake_catalog import CATALOG_ENV, LakeCatalog
from tests.conftest import jsonl, rm, up
from tests.s3server import S3Server, s3server  # noqa: F401 - the fixture

pytestmark = pytest.mark.integration
DOC = Path(__file__).resolve().parents[2] / "docs" / "catalog-format.md"


def snippet() -> str:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    return next(b for b in blocks if "def resolve_published" in b)


PLAIN = """
import json, sys
import boto3
import polars as pl
args = json.loads(sys.argv[1])
exec(compile(args["snippet"], "catalog-format.md", "exec"))
s3 = boto3.client("s3", endpoint_url=args["endpoint"], aws_access_key_id="test", aws_secret_access_key="test",
                  region_name="us-east-1")
pub = resolve_published(s3, args["bucket"], "lake", "orders")
frame = pl.read_delta(pub["location"], version=pub["version"], storage_options=args["options"])
current = frame.filter(~pl.col("deleted")).sort("order_id")
print(json.dumps({"pub": pub, "order_ids": current["order_id"].to_list(),
                  "imported": sorted(m for m in sys.modules if m.split(".")[0] == "delta_release")}))
"""


def child_env(server: S3Server) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != CATALOG_ENV and not k.startswith("AWS_")}
    return {**env, **server.options}


def run_plain(server: S3Server, bucket: str) -> dict[str, Any]:
    args = {"snippet": snippet(), "endpoint": server.endpoint, "bucket": bucket, "options": server.options}
    out = subprocess.run([sys.executable, "-c", PLAIN, json.dumps(args)], capture_output=True, text=True,
                         env={k: v for k, v in child_env(server).items() if k != "PYTHONPATH"}, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


@pytest.fixture
def s3_lake(s3server: S3Server, monkeypatch: pytest.MonkeyPatch) -> tuple[dr.Lake, str]:  # noqa: F811
    monkeypatch.delenv(CATALOG_ENV, raising=False)
    bucket = s3server.new_bucket()
    return dr.Lake.create(f"s3://{bucket}/lake", storage_options=s3server.options), bucket


def test_an_s3_lake_needs_no_local_catalog(s3_lake: tuple[dr.Lake, str], s3server: S3Server) -> None:  # noqa: F811
    lake, bucket = s3_lake
    assert isinstance(lake.catalog, LakeCatalog)
    lake.ingest(jsonl([up("a", 1)]))
    keys = {o["Key"] for o in s3server.client().list_objects_v2(Bucket=bucket, Prefix="lake/_catalog/")["Contents"]}
    assert f"lake/_catalog/publications/orders/{2:020d}.json" in keys
    assert "lake/_catalog/current/orders.json" in keys and "lake/_catalog/format.json" in keys
    record = json.loads(s3server.client().get_object(
        Bucket=bucket, Key=f"lake/_catalog/publications/orders/{2:020d}.json")["Body"].read())
    assert (record["generation"], record["version"], record["table"]) == (2, 1, "orders")


def test_the_documented_snippet_resolves_without_our_library(s3_lake: tuple[dr.Lake, str],
                                                           s3server: S3Server) -> None:  # noqa: F811
    lake, bucket = s3_lake
    lake.ingest(jsonl([up("a", 1), up("b", 2, day=48), up("c", 3)]))
    lake.ingest(jsonl([rm("b", 4)]))
    pub = lake.published("orders")
    assert pub is not None
    got = run_plain(s3server, bucket)
    assert got["imported"] == []
    assert got["pub"] == {"table": "orders", "generation": pub.generation, "version": pub.version,
                          "completed": pub.completed, "location": f"s3://{bucket}/lake/orders"}
    assert got["order_ids"] == lake.read()["order_id"].to_list() == ["a", "c"]

    # a hint that lags (a slow publisher's late pointer write) changes nothing
    client = s3server.client()
    old = client.get_object(Bucket=bucket, Key=f"lake/_catalog/publications/orders/{1:020d}.json")["Body"].read()
    client.put_object(Bucket=bucket, Key="lake/_catalog/current/orders.json", Body=old)
    fresh = LakeCatalog(dr.Lake.open(f"s3://{bucket}/lake", storage_options=s3server.options).storage)
    assert fresh.current("orders") == pub
    assert run_plain(s3server, bucket)["pub"]["generation"] == pub.generation
    # one that names a record that does not exist (the newest deleted) or is damaged is refused, never
    # served around: the pointer is written after its record and never names one that was not created
    for hint in (json.dumps({"generation": 99}).encode(), b"not json"):
        client.put_object(Bucket=bucket, Key="lake/_catalog/current/orders.json", Body=hint)
        with pytest.raises(dr.CatalogIntegrityError, match="current/orders.json"):
            fresh.current("orders")


READER = """
import json, sys
import delta_release as dr
from delta_release.errors import FreshnessError
uri = sys.argv[1]
opts = {k: v for k, v in __import__("os").environ.items() if k.startswith("AWS_")}
lake = dr.Lake.open(uri, storage_options=opts, freshness="error")
for line in sys.stdin:
    cmd = line.strip()
    try:
        if cmd == "refresh":
            lake.gateway.refresh("orders")
        frame = lake.read("orders")
        pub = lake.published("orders")
        out = {"generation": pub.generation, "version": pub.version, "ids": frame["order_id"].to_list()}
    except FreshnessError as exc:
        out = {"error": "FreshnessError", **{k: exc.facts[k] for k in ("cached_generation", "published_generation")}}
    print(json.dumps(out), flush=True)
"""


def test_a_reader_process_with_only_the_uri_sees_each_new_generation(s3_lake: tuple[dr.Lake, str],
                                                                   s3server: S3Server) -> None:  # noqa: F811
    lake, bucket = s3_lake
    lake.ingest(jsonl([up("a", 1)]))
    reader = subprocess.Popen([sys.executable, "-c", READER, f"s3://{bucket}/lake"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env(s3server))

    def ask(cmd: str) -> dict[str, Any]:
        assert reader.stdin is not None and reader.stdout is not None
        reader.stdin.write(cmd + "\n")
        reader.stdin.flush()
        line = reader.stdout.readline()
        assert line, reader.stderr.read() if reader.stderr else ""
        return json.loads(line)  # type: ignore[no-any-return]

    try:
        assert ask("read") == {"generation": 2, "version": 1, "ids": ["a"]}
        lake.ingest(jsonl([up("b", 2)]))  # published by this process, on another "machine"
        stale = ask("read")  # the reader's cache is at generation 2; policy "error" refuses the old answer
        assert stale == {"error": "FreshnessError", "cached_generation": 2, "published_generation": 3}
        assert ask("refresh") == {"generation": 3, "version": 2, "ids": ["a", "b"]}
    finally:
        if reader.stdin is not None:
            reader.stdin.close()
        reader.wait(60)
