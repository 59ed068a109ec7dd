"""Independent Delta readers as witnesses, each run in its own subprocess with a timeout.

Run as a script: `python interop_engines.py ENGINE JOBS.json OUTDIR` reads every job with one engine in
one process (one Sail server for all of them) and writes `OUTDIR/<id>.parquet` per result plus
`OUTDIR/status.json` (job id -> "ok" or the error). A job is {"id", "uri", "version"} and optionally
"sql": a query over the view `t` (the table at that version); without it the whole table is read.

Imported by the tests: `run_engine(engine, jobs, outdir, timeout)` runs the script and loads results.
This file deliberately does not import delta_release: the witnesses must not share our code.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ENGINES = ("polars", "duckdb", "sail")
NOT_INSTALLED = 4  # exit code: the engine's packages are not importable in this environment
TIMEOUTS = {"polars": 120, "duckdb": 120, "sail": 240}


# ---- the witnesses (run inside the subprocess) ------------------------------------------------------
def _polars(jobs: list[dict[str, Any]], emit: Any) -> None:
    import polars as pl

    for job in jobs:
        def read(job: dict[str, Any] = job) -> Any:
            lf = pl.scan_delta(job["uri"], version=job["version"], storage_options=job.get("storage_options"))
            if job.get("sql"):
                return pl.SQLContext(t=lf).execute(job["sql"]).collect().to_arrow()
            return lf.collect().to_arrow()
        emit(job, read)


def _duckdb(jobs: list[dict[str, Any]], emit: Any) -> None:
    import duckdb
    import duckdb_ext  # the duckdb-ext-delta wheel: the delta extension binary for duckdb 1.4.4

    ext_dir = f"{list(duckdb_ext.__path__)[0]}/extensions"
    for job in jobs:
        def read(job: dict[str, Any] = job) -> Any:
            # one connection per job: an internal error invalidates the whole DuckDB database
            con = duckdb.connect(config={"autoinstall_known_extensions": "false",
                                         "autoload_known_extensions": "false"})
            try:
                con.execute(f"SET extension_directory = '{ext_dir}'")
                con.execute("LOAD delta")
                if str(job["uri"]).startswith("s3://"):  # httpfs and a secret from the job's own options
                    con.execute("LOAD httpfs")
                    con.execute(_duckdb_secret(job.get("storage_options") or {}))
                con.execute("SET TimeZone = 'UTC'")
                con.execute(f"ATTACH '{job['uri']}' AS t (TYPE delta, VERSION {int(job['version'])})")
                result = con.sql(job.get("sql") or "SELECT * FROM t").arrow()
                return result.read_all() if hasattr(result, "read_all") else result
            finally:
                con.close()
        emit(job, read)


def _duckdb_secret(options: dict[str, str]) -> str:
    """DuckDB's S3 secret for an endpoint like moto's, written here (the witness shares none of our code)."""
    endpoint = options["AWS_ENDPOINT_URL"]
    scheme, _, host = endpoint.partition("://")
    return (f"CREATE TEMPORARY SECRET s (TYPE s3, KEY_ID '{options['AWS_ACCESS_KEY_ID']}', SECRET "
            f"'{options['AWS_SECRET_ACCESS_KEY']}', REGION '{options.get('AWS_REGION', 'us-east-1')}', ENDPOINT "
            f"'{host.rstrip('/')}', URL_STYLE 'path', USE_SSL {'false' if scheme == 'http' else 'true'})")


_SAIL_SERVER: Any = None  # module level: a collected SparkConnectServer shuts down under the client


def _sail(jobs: list[dict[str, Any]], emit: Any) -> None:
    global _SAIL_SERVER
    from pysail.spark import SparkConnectServer
    from pyspark.sql import SparkSession

    _SAIL_SERVER = SparkConnectServer(ip="127.0.0.1", port=0)
    _SAIL_SERVER.start(background=True)
    port = _SAIL_SERVER.listening_address[1]
    spark = SparkSession.builder.remote(f"sc://127.0.0.1:{port}").getOrCreate()
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    try:
        for job in jobs:
            def read(job: dict[str, Any] = job) -> Any:
                df = spark.read.format("delta").option("versionAsOf", int(job["version"])).load(job["uri"])
                if job.get("sql"):
                    df.createOrReplaceTempView("t")
                    df = spark.sql(job["sql"])
                return df.toArrow()
            emit(job, read)
    finally:
        spark.stop()
        _SAIL_SERVER.stop()


def main(engine: str, jobs_file: str, outdir: str) -> int:
    import pyarrow.parquet as pq

    jobs = json.loads(Path(jobs_file).read_text())
    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    status: dict[str, Any] = {}

    def emit(job: dict[str, Any], read: Any) -> None:
        started = time.perf_counter()
        try:
            table = read()
            pq.write_table(table, out / f"{job['id']}.parquet")
            status[job["id"]] = {"ok": True, "rows": table.num_rows, "seconds": time.perf_counter() - started}
        except Exception as exc:  # noqa: BLE001 - a witness's failure is a result to report
            status[job["id"]] = {"ok": False, "error": f"{type(exc).__name__}: {str(exc)[:500]}"}
        (out / "status.json").write_text(json.dumps(status, indent=1))

    readers = {"polars": _polars, "duckdb": _duckdb, "sail": _sail}
    try:
        reader = readers[engine]
        reader(jobs, emit)
    except ImportError as exc:
        print(f"{engine} is not installed: {exc}", file=sys.stderr)
        return NOT_INSTALLED
    (out / "status.json").write_text(json.dumps(status, indent=1))
    return 0


# ---- the test side --------------------------------------------------------------------------------
class EngineRun:
    def __init__(self, engine: str, outdir: Path, status: dict[str, Any], *, installed: bool, error: str,
                 seconds: float) -> None:
        self.engine = engine
        self.outdir = outdir
        self.status = status
        self.installed = installed
        self.error = error
        self.seconds = seconds

    def table(self, job_id: str) -> Any:
        import pyarrow.parquet as pq

        info = self.status.get(job_id)
        if info is None:
            raise AssertionError(f"{self.engine} produced no result for {job_id}: {self.error}")
        if not info["ok"]:
            raise AssertionError(f"{self.engine} failed on {job_id}: {info['error']}")
        return pq.read_table(self.outdir / f"{job_id}.parquet")


def run_engine(engine: str, jobs: list[dict[str, Any]], workdir: Path, timeout: float | None = None,
               env: dict[str, str] | None = None) -> EngineRun:
    """Run one engine over all jobs in a fresh interpreter; a hang becomes a timeout, not a stuck suite.

    `env` is added to the child's environment (Sail takes its S3 endpoint and keys from there)."""
    workdir.mkdir(parents=True, exist_ok=True)
    jobs_file = workdir / f"{engine}-jobs.json"
    jobs_file.write_text(json.dumps(jobs))
    outdir = workdir / engine
    env = {**os.environ, "PYTHONWARNINGS": "ignore", **(env or {})}
    started = time.perf_counter()
    error = ""
    installed = True
    try:
        proc = subprocess.run([sys.executable, __file__, engine, str(jobs_file), str(outdir)], capture_output=True,
                              text=True, timeout=timeout or TIMEOUTS[engine], env=env, stdin=subprocess.DEVNULL)
        if proc.returncode == NOT_INSTALLED:
            installed = False
            error = proc.stderr.strip().splitlines()[-1]
        elif proc.returncode != 0:
            error = f"exit {proc.returncode}: {proc.stderr.strip()[-2000:]}"
    except subprocess.TimeoutExpired:
        error = f"timed out after {timeout or TIMEOUTS[engine]} s"
    status_file = outdir / "status.json"
    status = json.loads(status_file.read_text()) if status_file.exists() else {}
    return EngineRun(engine, outdir, status, installed=installed, error=error,
                     seconds=time.perf_counter() - started)


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
