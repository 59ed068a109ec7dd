"""Only `init` and a writer given --create make a lake (delta_release/lakeroot.py): a typo refuses, creates nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

import delta_release as dr
from delta_release.cli.main import cli
from delta_release.errors import InputError, NotFoundError
from delta_release.gateway.catalog import SqliteCatalog
from delta_release.lakeroot import holds_lake
from delta_release.storage import Storage
from tests.conftest import FIXTURES, ORDERS, jsonl, up
from tests.s3server import S3Server, s3server  # noqa: F401 - the fixture

MANIFEST = FIXTURES / "telemetry" / "telemetry-48.manifest.json"
READERS = [["read"], ["read", "--version", "0"], ["read", "--engine", "duckdb"], ["history"], ["replay", "--all"],
           ["replay", "0" * 64], ["audit", "--days", "47:48"], ["erase", "ord-008"], ["rollback", "--to", "0"],
           ["vacuum"], ["vacuum", "--apply"], ["gate", str(MANIFEST)]]


def tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def one_line_refusal(res, code: int = 2) -> str:  # type: ignore[no-untyped-def]
    assert res.exit_code == code, res.output
    assert res.stderr.count("\n") == 1 and res.stderr.startswith("error: "), res.stderr
    assert "Traceback" not in res.output
    return str(res.stderr)


@pytest.mark.parametrize("args", READERS, ids=lambda a: " ".join(a[:2]))
def test_a_reader_refuses_a_path_without_a_lake_and_creates_nothing(tmp_path: Path, args: list[str]) -> None:
    before = tree(tmp_path)
    res = CliRunner().invoke(cli, ["--lake", str(tmp_path / "lakk"), *args])
    err = one_line_refusal(res)
    assert "--lake" in err and str(tmp_path / "lakk") in err and "holds no lake" in err
    assert tree(tmp_path) == before  # no directory, no key, no catalog


def test_json_refusal_names_the_type_and_the_path(tmp_path: Path) -> None:
    res = CliRunner().invoke(cli, ["--lake", str(tmp_path / "lakk"), "--json", "erase", "ord-008"])
    assert res.exit_code == 2
    error = json.loads(res.stdout)["error"]
    assert error["type"] == "LakeNotFoundError" and error["uri"] == str(tmp_path / "lakk")
    assert not (tmp_path / "lakk").exists()


def test_an_empty_or_foreign_directory_holds_no_lake(tmp_path: Path) -> None:
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "notebooks" / "analysis.ipynb").write_text("{}")
    before = tree(tmp_path)
    for path in (tmp_path / "empty", tmp_path / "notebooks"):
        path.mkdir(exist_ok=True)
        with pytest.raises(dr.LakeNotFoundError,
                           match=r"holds no lake \(Lake\.create\(uri\) or Lake\.open\(uri, create=True\)"
                                 r" creates one\)") as err:
            dr.Lake.open(path)
        assert str(path) in str(err.value) and err.value.exit_code == 2
    assert isinstance(err.value, NotFoundError) and isinstance(err.value, dr.InputError)
    assert tree(tmp_path) == sorted([*before, "empty"])


def test_lake_open_in_a_folder_without_a_lake_creates_nothing(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.chdir(tmp_path)
    with pytest.raises(dr.LakeNotFoundError,
                       match=r"holds no lake \(Lake\.create\(uri\) or Lake\.open\(uri, create=True\) creates one\)"):
        dr.Lake.open()  # the default "lake" in the notebook's folder
    assert tree(tmp_path) == []


@pytest.mark.parametrize("args", [["ingest", str(ORDERS / "v2.jsonl")], ["publish", str(MANIFEST)],
                                  ["register", "sales", str(FIXTURES)]], ids=lambda a: a[0])
def test_a_writer_refuses_a_missing_lake_naming_init_and_create(tmp_path: Path, args: list[str]) -> None:
    """`--lake lakee ingest b.jsonl` created and published a new lake (a `note:` on stderr, exit 0): in a
    scheduled job a typo forked the lake. A writer now creates one only when asked."""
    before = tree(tmp_path)
    err = one_line_refusal(CliRunner().invoke(cli, ["--lake", str(tmp_path / "lakee"), *args]))
    assert err == (f"error: --lake {tmp_path / 'lakee'} holds no lake; create one with `delta-release init "
                   f"{tmp_path / 'lakee'}`, or pass --create to ingest, publish or register\n")
    assert tree(tmp_path) == before


def test_init_creates_a_lake_once(tmp_path: Path) -> None:
    res = CliRunner().invoke(cli, ["init", str(tmp_path / "new")])
    assert res.exit_code == 0 and res.stdout == f"created a new lake at {tmp_path / 'new'}\n", res.output
    assert holds_lake(Storage(str(tmp_path / "new")))
    before = tree(tmp_path)
    again = CliRunner().invoke(cli, ["--lake", str(tmp_path / "new"), "--json", "init"])
    assert again.exit_code == 0 and json.loads(again.stdout) == {"lake": str(tmp_path / "new"), "created": False}
    assert tree(tmp_path) == before
    ingest = CliRunner().invoke(cli, ["--lake", str(tmp_path / "new"), "ingest", str(ORDERS / "v2.jsonl")])
    assert ingest.exit_code == 0 and ingest.stderr == "", ingest.output
    both = CliRunner().invoke(cli, ["--lake", str(tmp_path / "a"), "init", str(tmp_path / "b")])
    assert "init takes the lake as URI or as --lake, not both" in one_line_refusal(both)


def test_writers_create_with_create_and_say_so(tmp_path: Path) -> None:
    res = CliRunner().invoke(cli, ["--lake", str(tmp_path / "new"), "ingest", "--create", str(ORDERS / "v2.jsonl")])
    assert res.exit_code == 0, res.output
    assert res.stderr == f"note: created a new lake at {tmp_path / 'new'}\n"
    again = CliRunner().invoke(cli, ["--lake", str(tmp_path / "new"), "ingest", "--create", str(ORDERS / "v3.jsonl")])
    assert again.exit_code == 0 and "created" not in again.stderr
    read = CliRunner().invoke(cli, ["--lake", str(tmp_path / "new"), "--json", "read"])
    assert read.exit_code == 0 and json.loads(read.stdout)["rows"]


def test_a_writer_with_a_bad_argument_creates_nothing(tmp_path: Path) -> None:
    bad_manifest = tmp_path / "m.json"
    bad_manifest.write_text('{"table": "orders"}')
    not_delta = tmp_path / "not-a-table"
    not_delta.mkdir()
    before = tree(tmp_path)
    # a manifest that parses, whose objects are not under the mistyped lake (its gate would fail after the
    # lake was made), and a register whose table fails its gate, made a lake before they failed
    for args in (["ingest", str(tmp_path / "nope.jsonl")], ["publish", str(bad_manifest)],
                 ["publish", str(tmp_path / "nope.json")], ["publish", str(MANIFEST)],
                 ["register", "sales", str(not_delta)], ["register", "sales", str(tmp_path / "missing")]):
        for create in ([], ["--create"]):
            one_line_refusal(CliRunner().invoke(cli, ["--lake", str(tmp_path / "lakk"), *args, *create]))
    assert tree(tmp_path) == before


def test_lake_create_and_open_create(tmp_path: Path) -> None:
    assert not holds_lake(Storage(str(tmp_path / "a")))
    a = dr.Lake.create(tmp_path / "a")
    assert a.created and holds_lake(a.storage)
    assert not dr.Lake.open(tmp_path / "a").created  # an existing lake opens without create
    assert not dr.Lake.create(tmp_path / "a").created  # and create on an existing lake just opens it
    b = dr.Lake.open(tmp_path / "b", create=True)
    assert b.created and b.read().height == 0


@pytest.mark.parametrize("marker", ["_erasure/key", "_catalog/catalog.sqlite", "orders/_delta_log/0.json"])
def test_each_marker_alone_means_a_lake(tmp_path: Path, marker: str) -> None:
    dr.Lake.create(tmp_path / "lake")
    for other in ("_erasure/key", "_catalog/catalog.sqlite"):
        if other != marker:
            (tmp_path / "lake" / other).unlink()
    if marker != "orders/_delta_log/0.json":
        for f in (tmp_path / "lake" / "orders" / "_delta_log").iterdir():
            f.unlink()
    assert holds_lake(Storage(str(tmp_path / "lake")))
    (tmp_path / "lake" / marker.split("/")[0]).rename(tmp_path / "moved")  # without it: no lake
    assert not holds_lake(Storage(str(tmp_path / "lake")))


def test_a_file_as_lake_is_refused_even_for_writers(tmp_path: Path) -> None:
    for args in (["read"], ["ingest", str(ORDERS / "v2.jsonl")]):
        err = one_line_refusal(CliRunner().invoke(cli, ["--lake", "/dev/null", *args]))
        assert "/dev/null" in err and "not a directory" in err
    with pytest.raises(InputError, match="lake path is not a directory: /dev/null"):
        dr.Lake.create("/dev/null")


def release_config(tmp_path: Path, *, create: bool | None) -> Path:
    doc = yaml.safe_load((Path(__file__).resolve().parents[2] / "config" / "release.yaml").read_text())
    doc["lake"] = {"uri": str(tmp_path / "lakee")}
    if create is not None:
        doc["lake"]["create"] = create
    doc["packet"]["directory"] = str(tmp_path / "packets")
    doc["sources"]["batches"] = [str(ORDERS / "v2.jsonl")]
    doc["sources"]["manifests"] = []
    doc["checks"] = {"schema_fixtures": {"v2": str(ORDERS / "v2.jsonl"), "v3": str(ORDERS / "v3.jsonl")},
                     "audit": {"days": "47:48", "max_fraction": 1.0}}
    path = tmp_path / "release.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.mark.parametrize("create", [None, False])
def test_a_run_refuses_a_missing_lake_unless_the_config_opts_in(tmp_path: Path, create: bool | None) -> None:
    config = release_config(tmp_path, create=create)
    before = tree(tmp_path)
    res = CliRunner().invoke(cli, ["run", str(config)])
    err = one_line_refusal(res)
    assert str(config) in err and "lake.uri" in err and "lake.create" in err
    assert tree(tmp_path) == before  # no lake, no packet directory


def test_a_run_with_lake_create_creates_and_says_so(tmp_path: Path) -> None:
    res = CliRunner().invoke(cli, ["--json", "run", str(release_config(tmp_path, create=True))])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["lake_created"] is True and "created a new lake" in res.stderr
    assert json.loads(Path(out["packet"]).read_text())["lake_created"] is True


# -- s3 ------------------------------------------------------------------------------------------------
def _s3_cli(server: S3Server, tmp_path: Path, uri: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **server.options, "DELTA_RELEASE_CATALOG": str(tmp_path / "catalog.sqlite")}
    return subprocess.run([sys.executable, "-m", "delta_release", "--lake", uri, *args], env=env,
                          capture_output=True, text=True)


def _keys(server: S3Server, bucket: str) -> list[str]:
    return [o["Key"] for o in server.client().list_objects_v2(Bucket=bucket).get("Contents", [])]


@pytest.mark.integration
def test_s3_readers_refuse_a_missing_lake_and_write_nothing(s3server: S3Server, tmp_path: Path) -> None:  # noqa: F811
    bucket = s3server.new_bucket()
    for args in (["read"], ["erase", "ord-008"], ["history"]):
        out = _s3_cli(s3server, tmp_path, f"s3://{bucket}/lakk", *args)
        assert out.returncode == 2, out.stderr
        assert out.stderr.count("\n") == 1 and f"s3://{bucket}/lakk" in out.stderr and "Traceback" not in out.stderr
    assert _keys(s3server, bucket) == []  # no erasure key, no object at all
    assert not (tmp_path / "catalog.sqlite").exists()


@pytest.mark.integration
def test_s3_lake_whose_bucket_is_gone(s3server: S3Server, tmp_path: Path) -> None:  # noqa: F811
    bucket = s3server.new_bucket()
    lake = dr.Lake.create(f"s3://{bucket}/lake", storage_options=s3server.options,
                          catalog=SqliteCatalog(tmp_path / "catalog.sqlite"))
    lake.ingest(jsonl([up("a", 1)]))
    assert lake.created and holds_lake(lake.storage)
    client = s3server.client()
    for key in _keys(s3server, bucket):
        client.delete_object(Bucket=bucket, Key=key)
    client.delete_bucket(Bucket=bucket)
    out = _s3_cli(s3server, tmp_path, f"s3://{bucket}/lake", "read")
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert "holds no lake" in out.stderr and "Traceback" not in out.stderr
    buckets = [b["Name"] for b in client.list_buckets().get("Buckets", [])]
    assert bucket not in buckets  # nothing re-created the bucket or the key


def test_a_lake_that_cannot_be_made_or_reached_is_one_line_exit_2(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """`--lake /proc ingest` failed with exit 1 (FileNotFoundError /proc/_catalog); an s3:// endpoint
    that does not answer said "holds no lake" for readers (a typo hunt) and exit 1 for writers."""
    import socket

    batch = tmp_path / "b.jsonl"
    batch.write_bytes(jsonl([up("a", 1)]))
    if Path("/proc").is_dir():
        assert "cannot create a lake at /proc" in one_line_refusal(
            CliRunner().invoke(cli, ["--lake", "/proc", "ingest", "--create", str(batch)]))
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for k, v in {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "t",
                 "AWS_SECRET_ACCESS_KEY": "t", "AWS_ALLOW_HTTP": "true", "AWS_REGION": "us-east-1"}.items():
        monkeypatch.setenv(k, v)
    for args in (["status"], ["ingest", "--create", str(batch)]):
        line = one_line_refusal(CliRunner().invoke(cli, ["--lake", "s3://bucket/lake", *args]))
        assert "cannot read the lake at s3://bucket/lake" in line and "holds no lake" not in line


def test_no_lake_is_created_inside_another(tmp_path: Path) -> None:
    """`--lake L/orders ingest` built a second lake inside the first one's table folder."""
    dr.Lake.create(tmp_path / "lake").ingest(jsonl([up("a", 1)]))
    batch = tmp_path / "b.jsonl"
    batch.write_bytes(jsonl([up("b", 2)]))
    before = tree(tmp_path)
    for inner in ("orders", "_raw", "orders/event_day=1/deeper"):
        res = CliRunner().invoke(cli, ["--lake", str(tmp_path / "lake" / inner), "ingest", "--create", str(batch)])
        line = one_line_refusal(res)
        assert "inside the lake at" in line
    assert tree(tmp_path) == before
    # a folder of the lake that holds none of its data (a packet folder someone put there, whose release
    # runs make scratch lakes for their drills) may hold a lake
    assert dr.Lake.create(tmp_path / "lake" / "packets" / "run-1" / "scratch").ingest(batch).version == 1
