"""A real S3-compatible server for the integration suite: `moto_server` on 127.0.0.1 and a free port.

Started once per test module in its own process (so its threads never share our GIL or our warning
filters) and stopped by its own pid afterwards. Each test gets a fresh bucket.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest


@dataclass(frozen=True)
class S3Server:
    endpoint: str
    log: Path
    recording: Path
    key_id: str = "test"  # moto accepts any key unless started with authentication (`s3server_auth`)
    secret: str = "test"

    @property
    def options(self) -> dict[str, str]:
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ALLOW_HTTP": "true", "AWS_ACCESS_KEY_ID": self.key_id,
                "AWS_SECRET_ACCESS_KEY": self.secret, "AWS_REGION": "us-east-1"}

    def client(self, service: str = "s3"):  # type: ignore[no-untyped-def]
        import boto3

        return boto3.client(service, endpoint_url=self.endpoint, aws_access_key_id=self.key_id,
                            aws_secret_access_key=self.secret, region_name="us-east-1")

    def record(self, command: str) -> None:
        """moto's request recorder: reset-recording, start-recording, stop-recording."""
        import urllib.request

        req = urllib.request.Request(f"{self.endpoint}/moto-api/recorder/{command}", method="POST")
        urllib.request.urlopen(req, timeout=30).read()

    def recorded(self) -> list[dict[str, Any]]:
        if not self.recording.exists():
            return []
        return [json.loads(line) for line in self.recording.read_text().splitlines() if line.strip()]

    def new_bucket(self) -> str:
        name = f"lake-{uuid.uuid4().hex[:12]}"
        self.client().create_bucket(Bucket=name)
        return name


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _server_command(port: int) -> list[str]:
    """moto's server with its conditional PUTs made atomic, as on S3 (tests/atomic_moto.py says why)."""
    return [sys.executable, str(Path(__file__).with_name("atomic_moto.py")), "-H", "127.0.0.1", "-p", str(port)]


@contextmanager
def _running(work: Path, env: dict[str, str] | None = None) -> Iterator[S3Server]:
    log, recording = work / "moto_server.log", work / "recording.jsonl"
    for _ in range(3):  # a port taken between choosing and binding: choose again
        port = _free_port()
        with open(log, "w") as out:
            proc = subprocess.Popen(_server_command(port), stdout=out, stderr=subprocess.STDOUT,
                                    env={**os.environ, "PYTHONWARNINGS": "ignore",
                                         "MOTO_RECORDER_FILEPATH": str(recording), **(env or {})})
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        if proc.poll() is None:
            break
    else:
        pytest.fail(f"moto_server did not start: {log.read_text()[-2000:]}")
    try:
        yield S3Server(endpoint=f"http://127.0.0.1:{port}", log=log, recording=recording)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="session")
def s3server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """One moto server per test session (per xdist worker): every test makes its own bucket (`new_bucket`)
    and resets the request recorder before it records, so nothing depends on a fresh server, and the
    dozen files that use it no longer start one each (~2-4 s apiece)."""
    with _running(tmp_path_factory.mktemp("moto")) as server:
        yield server


_ALLOW_ALL = '{"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}'
READ_ONLY = ('{"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": ["s3:GetObject", "s3:ListBucket"],'
             ' "Resource": "*"}]}')


@pytest.fixture(scope="module")
def s3server_auth(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """A moto server that checks credentials as S3 does (after its first 3 requests, which create the one
    IAM user whose key it accepts, allowed everything): a wrong key id gets InvalidAccessKeyId, a wrong
    secret SignatureDoesNotMatch. The returned server's `options` and `client()` carry that key;
    `with_user(policy)` makes another."""
    with _running(tmp_path_factory.mktemp("moto-auth"), {"INITIAL_NO_AUTH_ACTION_COUNT": "3"}) as server:
        iam = server.client("iam")
        iam.create_user(UserName="lake")
        key = iam.create_access_key(UserName="lake")["AccessKey"]
        iam.put_user_policy(UserName="lake", PolicyName="s3", PolicyDocument=_ALLOW_ALL)
        yield replace(server, key_id=key["AccessKeyId"], secret=key["SecretAccessKey"])


def with_user(server: S3Server, name: str, policy: str) -> S3Server:
    """`server` seen with the key of a new IAM user allowed `policy` (an `s3server_auth` server)."""
    iam = server.client("iam")
    iam.create_user(UserName=name)
    iam.put_user_policy(UserName=name, PolicyName="policy", PolicyDocument=policy)
    key = iam.create_access_key(UserName=name)["AccessKey"]
    return replace(server, key_id=key["AccessKeyId"], secret=key["SecretAccessKey"])
