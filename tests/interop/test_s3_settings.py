"""One way to configure an s3:// lake, everywhere (delta_release/s3config.py): explicit options or the
release config, then the `AWS_*` variables, then the AWS profile's shared files; every entry point (the
CLI, `run`, `Lake.open`) and every reader (Polars, DuckDB's file-list read and its delta extension, the
pinned and published versions, the freshness check) on moto's S3 server; a wrong credential, endpoint or
scheme is one line naming the setting (exit 2) and writes nothing; the secret is nowhere in the lake,
the packet or the output.

Most of it runs against a moto server that checks credentials (`s3server_auth`), so a test passes only
when the keys it meant to use were really sent, and its secret is a random string worth searching for.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import polars as pl
import pytest
import yaml

import delta_release as dr
from delta_release import s3config
from delta_release.errors import InputError
from tests.conftest import ORDERS, ROOT
from tests.s3server import READ_ONLY, S3Server, s3server, s3server_auth, with_user  # noqa: F401 - the fixtures

ENV = {"AWS_ENDPOINT_URL": "http://env:9000", "AWS_ACCESS_KEY_ID": "env-id", "AWS_SECRET_ACCESS_KEY": "env-secret",
       "AWS_REGION": "eu-west-1", "AWS_ALLOW_HTTP": "true"}


def _files(tmp_path: Path, creds: str = "", config: str = "") -> dict[str, str]:
    (tmp_path / "credentials").write_text(creds)
    (tmp_path / "config").write_text(config)
    return {"AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "credentials"), "AWS_CONFIG_FILE": str(tmp_path / "config"),
            "HOME": str(tmp_path)}


# -- resolution (no server) ------------------------------------------------------------------------------
def test_explicit_options_then_the_variables_then_the_profile(tmp_path: Path) -> None:
    files = _files(tmp_path, "[default]\naws_access_key_id = file-id\naws_secret_access_key = file-secret\n",
                   "[default]\nregion = ap-south-1\nendpoint_url = https://files:9000\n")
    # the variables alone
    assert s3config.resolve("s3://b/lake", None, {**ENV, **files}) == ENV
    # explicit (any spelling deltalake accepts) wins per setting; the rest from the variables
    got = s3config.resolve("s3://b/lake", {"endpoint_url": "http://mine:1", "region": "us-west-2"}, {**ENV, **files})
    assert got == {**ENV, "AWS_ENDPOINT_URL": "http://mine:1", "AWS_REGION": "us-west-2"}
    # no variables: the default profile of the shared files
    assert s3config.resolve("s3://b/lake", None, files) == {
        "AWS_ACCESS_KEY_ID": "file-id", "AWS_SECRET_ACCESS_KEY": "file-secret", "AWS_REGION": "ap-south-1",
        "AWS_ENDPOINT_URL": "https://files:9000"}
    # AWS_ENDPOINT_URL_S3 before AWS_ENDPOINT_URL, AWS_REGION before AWS_DEFAULT_REGION (as boto3 reads them)
    got = s3config.resolve("s3://b/lake", None, {"AWS_ENDPOINT_URL_S3": "https://s3only", "AWS_ENDPOINT_URL": "https://x",
                                                 "AWS_DEFAULT_REGION": "eu-north-1", "HOME": str(tmp_path / "none")})
    assert got == {"AWS_ENDPOINT_URL": "https://s3only", "AWS_REGION": "eu-north-1"}
    # a local lake's options are its own business
    assert s3config.resolve(str(tmp_path / "lake"), {"x": "y"}, ENV) == {"x": "y"}


def test_a_key_pair_comes_from_one_place(tmp_path: Path) -> None:
    files = _files(tmp_path, "[p]\naws_access_key_id = file-id\naws_secret_access_key = file-secret\n"
                             "aws_session_token = file-token\n", "[profile p]\nregion = ca-central-1\n")
    env = {**ENV, "AWS_SESSION_TOKEN": "env-token", **files}
    # explicit keys: the variables' secret and token are not mixed in
    got = s3config.resolve("s3://b/lake", {"AWS_ACCESS_KEY_ID": "mine", "AWS_SECRET_ACCESS_KEY": "mine-s"}, env)
    assert (got["AWS_ACCESS_KEY_ID"], got["AWS_SECRET_ACCESS_KEY"]) == ("mine", "mine-s")
    assert "AWS_SESSION_TOKEN" not in got
    # the variables' keys before AWS_PROFILE's (boto3's chain); a profile named explicitly before both
    assert s3config.resolve("s3://b/lake", None, {**env, "AWS_PROFILE": "p"})["AWS_ACCESS_KEY_ID"] == "env-id"
    got = s3config.resolve("s3://b/lake", {"profile": "p"}, env)
    assert (got["AWS_ACCESS_KEY_ID"], got["AWS_SESSION_TOKEN"], got["AWS_REGION"]) == (
        "file-id", "file-token", "eu-west-1")  # (the region variable still before the profile's)
    assert "AWS_PROFILE" not in got
    # resolving a result again gives it back (a Storage built from another one's options)
    assert s3config.resolve("s3://b/lake", got, env) == got


def test_a_wrong_setting_is_named_before_any_request(tmp_path: Path) -> None:
    files = _files(tmp_path)
    with pytest.raises(InputError, match="check AWS_PROFILE") as info:
        s3config.resolve("s3://b/lake", None, {"AWS_PROFILE": "nope", **files})
    assert info.value.facts["setting"] == "AWS_PROFILE"
    with pytest.raises(InputError, match="AWS_ALLOW_HTTP"):
        s3config.resolve("s3://b/lake", None, {"AWS_ENDPOINT_URL": "http://127.0.0.1:9", **files})
    with pytest.raises(InputError, match="check AWS_SECRET_ACCESS_KEY"):
        dr.Lake.open("s3://b/lake", storage_options={"AWS_ACCESS_KEY_ID": "x", "AWS_REGION": "us-east-1"})


def test_the_duckdb_secret_carries_the_same_settings() -> None:
    sql = s3config.duckdb_secret_sql({"AWS_ENDPOINT_URL": "http://127.0.0.1:9000", "AWS_ACCESS_KEY_ID": "id",
                                      "AWS_SECRET_ACCESS_KEY": "it's", "AWS_REGION": "eu-west-1",
                                      "AWS_SESSION_TOKEN": "tok"})
    for part in ("TYPE s3", "KEY_ID 'id'", "SECRET 'it''s'", "SESSION_TOKEN 'tok'", "REGION 'eu-west-1'",
                 "ENDPOINT '127.0.0.1:9000'", "URL_STYLE 'path'", "USE_SSL false"):
        assert part in sql
    assert sql.startswith("CREATE TEMPORARY SECRET")
    # an endpoint written without its scheme is https, for DuckDB and pyarrow alike
    assert "ENDPOINT 'minio.local:9000'" in s3config.duckdb_secret_sql({"AWS_ENDPOINT_URL": "minio.local:9000"})
    arrow = s3config.pyarrow_s3_kwargs({"AWS_ENDPOINT_URL": "minio.local:9000"})
    assert (arrow["endpoint_override"], arrow["scheme"]) == ("minio.local:9000", "https")
    assert s3config.resolve("s3://b/l", {"endpoint": "minio.local:9000"}, {})["AWS_ENDPOINT_URL"] == (
        "https://minio.local:9000")  # (object_store needs the scheme)
    # no keys: the aws extension's credential chain (an instance role...), checked when first used
    assert "PROVIDER credential_chain, VALIDATION 'none'" in s3config.duckdb_secret_sql({})


def test_duckdb_without_its_httpfs_wheel_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    from delta_release.gateway import engines

    monkeypatch.setattr(engines, "extension_available", lambda name: name != "httpfs")
    with pytest.raises(InputError, match=r"httpfs extension to read an s3:// lake: pip install") as info:
        engines.connect("s3://b/lake/orders", {"AWS_REGION": "us-east-1"})
    assert info.value.exit_code == 2 and info.value.facts["missing"] == ["httpfs"]
    engines.connect("/a/local/lake").close()  # a local lake needs no extension


# -- on moto's server ------------------------------------------------------------------------------------
def _env(**aws: str) -> dict[str, str]:
    """This process's environment without any AWS_* variable or ~/.aws (HOME moved), plus `aws`."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("AWS_") and k != "DELTA_RELEASE_CATALOG"}
    return {**base, "HOME": aws.pop("HOME", "/nonexistent"), **aws}


def _cli(env: dict[str, str], *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "delta_release", *args], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=300, check=False)


def _objects(server: S3Server, bucket: str) -> dict[str, bytes]:
    client = server.client()
    keys = [o["Key"] for o in client.list_objects_v2(Bucket=bucket).get("Contents", [])]
    return {k: client.get_object(Bucket=bucket, Key=k)["Body"].read() for k in keys}


def _no_secret(secret: str, *texts: str | bytes, folder: Path | None = None) -> None:
    assert len(secret) >= 20
    for text in texts:
        assert secret.encode() not in (text.encode() if isinstance(text, str) else text)
    for path in (p for p in folder.rglob("*") if p.is_file()) if folder else ():
        assert secret.encode() not in path.read_bytes(), path


def _rows(out: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    assert out.returncode == 0, out.stderr
    return sorted(json.loads(out.stdout)["rows"], key=lambda r: r["order_id"])


@pytest.mark.integration
def test_the_cli_and_lake_open_take_the_environment(s3server_auth: S3Server, tmp_path: Path,  # noqa: F811
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    server, bucket = s3server_auth, s3server_auth.new_bucket()
    env, uri = _env(**server.options), f"s3://{bucket}/lake"
    outputs = []

    def cli(*args: str) -> None:
        out = _cli(env, "--lake", uri, "--json", *args, cwd=tmp_path)
        assert out.returncode == 0, (args, out.stderr)
        outputs.extend([out.stdout, out.stderr])

    cli("ingest", "--create", str(ORDERS / "v2.jsonl"))
    cli("ingest", str(ORDERS / "v3.jsonl"))
    pinned = _cli(env, "--lake", uri, "--json", "read", "--engine", "duckdb", "--version", "1")
    assert _rows(pinned) == _rows(_cli(env, "--lake", uri, "--json", "read", "--version", "1"))
    for args in (["status"], ["history"], ["erase", "ord-007"], ["vacuum"]):
        cli(*args)
    polars_rows = _rows(_cli(env, "--lake", uri, "--json", "read"))
    duck = _cli(env, "--lake", uri, "--json", "read", "--engine", "duckdb")
    assert _rows(duck) == polars_rows and len(polars_rows) > 0 and json.loads(duck.stdout)["engine"] == "duckdb"
    assert "ord-007" not in {r["order_id"] for r in polars_rows}
    assert list(tmp_path.iterdir()) == []  # nothing local: the catalog is in the lake
    # the Python API, with no storage options: the same variables
    for key, value in server.options.items():
        monkeypatch.setenv(key, value)
    lake = dr.Lake.open(uri)
    frame = lake.read()
    assert sorted(frame.to_dicts(), key=lambda r: r["order_id"]) == polars_rows
    assert lake.gateway.read_duckdb("orders").sort("order_id").equals(frame.sort("order_id"))
    location, version = lake.gateway.resolve("orders", None)
    direct = pl.scan_delta(location, version=version, storage_options=lake.options).collect()
    assert direct.height >= frame.height  # (the raw table: tombstones too)
    glob = lake.gateway.glob_partition("orders", 47)  # (the erase left the old files until a vacuum --apply)
    assert glob.seen["duckdb_glob"] and not glob.missing["duckdb_glob"]
    _no_secret(server.secret, *outputs, duck.stdout, pinned.stdout, *(_objects(server, bucket).values()))


@pytest.mark.integration
def test_an_aws_profile_is_read_from_the_shared_files(s3server_auth: S3Server, tmp_path: Path) -> None:  # noqa: F811
    server, bucket = s3server_auth, s3server_auth.new_bucket()
    files = _files(tmp_path, f"[lake]\naws_access_key_id = {server.key_id}\naws_secret_access_key = {server.secret}\n",
                   f"[profile lake]\nregion = us-east-1\nendpoint_url = {server.endpoint}\n")
    env = _env(AWS_PROFILE="lake", AWS_ALLOW_HTTP="true", **files)
    uri = f"s3://{bucket}/lake"
    assert _cli(env, "--lake", uri, "ingest", "--create", str(ORDERS / "v3.jsonl")).returncode == 0
    assert _rows(_cli(env, "--lake", uri, "--json", "read", "--engine", "duckdb")) == _rows(
        _cli(env, "--lake", uri, "--json", "read"))
    # the same files without AWS_PROFILE: the default profile, which has no keys here: refused, named
    out = _cli({**env, "AWS_PROFILE": "other"}, "--lake", uri, "status")
    assert out.returncode == 2 and "AWS_PROFILE" in out.stderr and len(out.stderr.splitlines()) == 1


@pytest.mark.integration
@pytest.mark.parametrize("wrong", ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"])
def test_a_wrong_credential_is_one_line_exit_2_and_writes_nothing(s3server_auth: S3Server, tmp_path: Path,  # noqa: F811
                                                                  wrong: str) -> None:
    server, bucket = s3server_auth, s3server_auth.new_bucket()
    env = _env(**{**server.options, wrong: "WRONG" + server.options[wrong][5:]})
    uri = f"s3://{bucket}/lake"
    for args in (["ingest", "--create", str(ORDERS / "v3.jsonl")], ["status"], ["read", "--engine", "duckdb"]):
        out = _cli(env, "--lake", uri, *args, cwd=tmp_path)
        assert out.returncode == 2, (args, out.stderr)
        assert len(out.stderr.splitlines()) == 1 and "AWS_SECRET_ACCESS_KEY" in out.stderr, out.stderr
        _no_secret(server.secret, out.stdout, out.stderr)
    with pytest.raises(InputError, match="AWS_ACCESS_KEY_ID"):
        dr.Lake.open(uri, storage_options=env_options(env))
    assert _objects(server, bucket) == {} and list(tmp_path.iterdir()) == []


@pytest.mark.integration
def test_a_read_only_key_reads_and_a_write_is_refused_naming_the_keys(s3server_auth: S3Server,  # noqa: F811
                                                                      tmp_path: Path) -> None:
    server, bucket = s3server_auth, s3server_auth.new_bucket()
    uri = f"s3://{bucket}/lake"
    assert _cli(_env(**server.options), "--lake", uri, "ingest", "--create", str(ORDERS / "v2.jsonl")).returncode == 0
    before = _objects(server, bucket)
    reader = with_user(server, "reader", READ_ONLY)
    env = _env(**reader.options)
    got = _cli(env, "--lake", uri, "--json", "read", "--engine", "duckdb")
    assert got.returncode == 0, got.stdout + got.stderr
    assert len(_rows(got)) > 0
    out = _cli(env, "--lake", uri, "ingest", "--create", str(ORDERS / "v3.jsonl"), cwd=tmp_path)
    assert out.returncode == 2 and len(out.stderr.splitlines()) == 1, out.stderr
    assert "AWS_SECRET_ACCESS_KEY" in out.stderr and "internal error" not in out.stderr
    _no_secret(reader.secret, out.stdout, out.stderr)
    assert _objects(server, bucket) == before  # nothing written: the first write was refused


def env_options(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith("AWS_")}


@pytest.mark.integration
def test_a_wrong_endpoint_or_scheme_names_the_setting(s3server: S3Server, tmp_path: Path) -> None:  # noqa: F811
    bucket = s3server.new_bucket()
    uri = f"s3://{bucket}/lake"
    closed = s3server.endpoint.rsplit(":", 1)[0] + ":9"  # the discard port: nothing listens on it
    for env, setting in ((_env(**{**s3server.options, "AWS_ENDPOINT_URL": closed}), "AWS_ENDPOINT_URL"),
                         (_env(**{**s3server.options, "AWS_ALLOW_HTTP": "false"}), "AWS_ALLOW_HTTP")):
        out = _cli(env, "--lake", uri, "ingest", "--create", str(ORDERS / "v3.jsonl"), cwd=tmp_path)
        assert out.returncode == 2 and len(out.stderr.splitlines()) == 1 and setting in out.stderr, out.stderr
    assert _objects(s3server, bucket) == {} and list(tmp_path.iterdir()) == []
    # a bucket that does not exist: the writer cannot create the lake, and says where to look
    out = _cli(_env(**s3server.options), "--lake", "s3://no-such-bucket/lake", "ingest", "--create",
               str(ORDERS / "v3.jsonl"))
    assert out.returncode == 2 and len(out.stderr.splitlines()) == 1, out.stderr
    assert "check the bucket in the lake URI" in out.stderr


def _release_config(tmp_path: Path, lake_uri: str) -> Path:
    tmp_path.mkdir(exist_ok=True)
    doc = yaml.safe_load((ROOT / "config" / "release.yaml").read_text())
    doc["lake"] = {"uri": lake_uri, "create": True}  # no storage_options: the environment's
    doc["packet"]["directory"] = str(tmp_path / "packets")
    doc["sources"]["batches"] = [str(ORDERS / n) for n in ("history.jsonl", "v2.jsonl", "v3.jsonl", "bad.jsonl")]
    doc["sources"]["manifests"] = []  # (telemetry objects would have to be uploaded first)
    doc["checks"]["freshness_gate"] = False  # (it reads the telemetry table)
    doc["checks"]["schema_fixtures"] = {"v2": str(ORDERS / "v2.jsonl"), "v3": str(ORDERS / "v3.jsonl")}
    path = tmp_path / "release.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.mark.integration
@pytest.mark.slow
def test_run_takes_the_credentials_from_the_environment(s3server_auth: S3Server, tmp_path: Path) -> None:  # noqa: F811
    server, bucket = s3server_auth, s3server_auth.new_bucket()
    env = _env(**server.options)
    # `run CONFIG --lake s3://...`: the config names a local lake, the command line the bucket
    config = _release_config(tmp_path, str(tmp_path / "local-lake"))
    out = _cli(env, "--json", "run", str(config), "--lake", f"s3://{bucket}/lake", cwd=tmp_path)
    failed = [c for c in json.loads(out.stdout or "{}").get("summary", []) if not c["passed"]]
    assert out.returncode == 0, (out.stderr[-2000:], failed)
    result = json.loads(out.stdout)
    assert result["decision"] == "ship", result.get("failed_checks")
    assert not (tmp_path / "local-lake").exists()
    objects = _objects(server, bucket)
    assert any(k.startswith("lake/orders/_delta_log/") for k in objects)
    _no_secret(server.secret, out.stdout, out.stderr, *objects.values(), folder=tmp_path)
    # a wrong secret: one line naming the setting, exit 2, nothing written to the new bucket
    other = server.new_bucket()
    bad = _cli({**env, "AWS_SECRET_ACCESS_KEY": "x" * 40}, "run", str(_release_config(tmp_path / "b", f"s3://{other}/l")))
    assert bad.returncode == 2 and len(bad.stderr.splitlines()) == 1 and "AWS_SECRET_ACCESS_KEY" in bad.stderr
    assert _objects(server, other) == {} and not (tmp_path / "b" / "packets").exists()


@pytest.mark.integration
def test_the_freshness_check_on_s3(s3server: S3Server, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    for key, value in s3server.options.items():
        monkeypatch.setenv(key, value)
    uri = f"s3://{s3server.new_bucket()}/lake"
    writer = dr.Lake.create(uri)
    writer.ingest(ORDERS / "v2.jsonl")
    strict, relaxed = dr.Lake.open(uri, freshness="error"), dr.Lake.open(uri)
    before = strict.read()
    assert relaxed.read().height == before.height
    writer.ingest(ORDERS / "v3.jsonl")
    with pytest.raises(dr.FreshnessError, match=r"metadata cache of orders is stale: cached generation \d+, published"):
        strict.read()
    assert relaxed.read().equals(writer.read()) and relaxed.published("orders") == writer.published("orders")


@pytest.mark.integration
def test_the_analyst_guide_s3_block_runs(s3server: S3Server, tmp_path: Path) -> None:  # noqa: F811
    """The guide's Python for an S3 lake, run as written but for the bucket, with the variables only."""
    pytest.importorskip("duckdb_ext")
    env = _env(**s3server.options)
    uri = f"s3://{s3server.new_bucket()}/lake"
    for batch in ("v2.jsonl", "v3.jsonl"):
        assert _cli(env, "--lake", uri, "ingest", "--create", str(ORDERS / batch)).returncode == 0
    guide = (ROOT / "docs" / "analyst-guide.md").read_text(encoding="utf-8")
    section = guide.split("## A lake on S3", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```py\n(.*?)```", section, re.S)
    script = tmp_path / "guide_s3.py"
    script.write_text(block.replace("s3://bucket/lake", uri) + textwrap.dedent("""
        assert duck.sort("order_id").equals(df.sort("order_id")) and old.height > 0
        assert raw.collect().height >= df.height
        print("ok")
    """), encoding="utf-8")
    ran = subprocess.run([sys.executable, str(script)], env=env, cwd=tmp_path, capture_output=True, text=True,
                         timeout=300, check=False)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert ran.stdout.rstrip().endswith("ok")


@pytest.mark.integration
def test_the_analyst_example_on_s3(s3server: S3Server, tmp_path: Path) -> None:  # noqa: F811
    env = _env(**s3server.options)
    uri = f"s3://{s3server.new_bucket()}/lake"
    for batch in ("v2.jsonl", "v3.jsonl"):
        assert _cli(env, "--lake", uri, "ingest", "--create", str(ORDERS / batch)).returncode == 0
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "analyst.py"), "--lake", uri,
                          "--out", str(tmp_path / "chart.svg"), "--duckdb"],
                         env=env, capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr
    assert "published version 2" in out.stdout and "duckdb: same rows" in out.stdout
    assert (tmp_path / "chart.svg").read_text().startswith("<svg")
