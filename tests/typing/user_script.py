"""What a user types, checked with `mypy --strict` by tests/house/test_typing.py: every verb's report, no casts."""

from __future__ import annotations

import polars as pl

import delta_release as dr


def main(uri: str, batch: str) -> None:
    lake = dr.Lake.create(uri, storage_options={}, freshness="refresh", tables_dir=None)
    report: dr.IngestReport = lake.ingest(batch)
    version: int | None = report.version
    reasons: dict[str, int] = report.reasons
    print(report.batch_id, report.extracted + report.accepted + report.quarantined, version, reasons,
          report.duplicate, report.attempts, report.schema_versions)
    replays: list[dr.IngestReport] = lake.replay(all_batches=True)
    print(sum(r.accepted for r in replays))
    lf: pl.LazyFrame = lake.scan("orders", version=version)
    df: pl.DataFrame = lake.read()
    print(lf.collect().height, df.height)
    for entry in lake.history():
        allowed: bool = entry["allowed"]
        v: int = entry["version"]
        op: str = entry["operation"]
        print(v, op, allowed, entry["generations"], entry["erased_subjects"])
    try:
        erased: dr.ErasureReport = lake.erase("ord-47")
        print(erased.version, erased.rows_removed, erased.subject, erased.exposed_versions)
        for item in erased.pending:
            print(item["what"], item["until"])
    except dr.InputError as exc:
        print(exc.message)
    pending: list[dr.PendingItem] = lake.erasure_pending(backup_expiry_days=35)
    print([(p["subject"], p["what"], p["until"], p["kind"]) for p in pending])
    try:
        rolled: dr.RollbackReport = lake.rollback(1, repair_forward=True)
        restored: int = rolled.restored_to
        print(restored, rolled.version, rolled.mode, rolled.files_added)
    except (dr.ErasureExposureError, dr.StaleParentError, dr.GateError, dr.NotFoundError) as exc:
        print(exc.message)
    vac: dr.VacuumReport = lake.vacuum(apply=False, retain_versions=2)
    print(vac.dry_run, vac.bytes_removed, vac.removed, vac.to_json())
    publication = lake.published("orders")
    if publication is not None:
        print(publication.version, publication.generation)


if __name__ == "__main__":
    main("lake", "fixtures/orders/v3.jsonl")
