"""The pinned-query check's oracle against the retained history (issue 14 item 1), standalone:

    PYTHONPATH=. .venv/bin/python -m benchmarks.bench_pinned_oracle [--batches 1000] [--events 20]

Puts `--batches` raw batches of `--events` valid contract events each (upserts, deletes, one quarantined
line in every 50th batch, one erased subject) into a fresh lake, then times the frame oracle
(release/reference.py: accepted events + vectorised fold) against the per-batch dict oracle it replaced
(per batch: raw read by id, its quarantine file, decode, a keyed hash per event; then the dict fold), and
checks that both give the same current rows. Nothing is committed: this times the oracle alone."""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any


def _old_oracle(lake: Any, batch_ids: set[str]) -> dict[str, dict[str, Any]]:
    from delta_release.apply import reference_fold
    from delta_release.contract import decode_batch

    events = []
    erased = lake.erasures.erased_subjects()
    for batch in lake.raw.list():
        if batch.batch_id not in batch_ids:
            continue
        data = lake.raw.read(batch.batch_id)
        quarantined = set(lake.quarantine.rows(batch.batch_id)["line"].to_list())
        for ev in decode_batch(data).events.to_dicts():
            if ev["line"] in quarantined or lake.erasures.subject_key(ev["order_id"]) in erased:
                continue
            events.append(ev)
    return reference_fold(events)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", type=int, default=1000)
    ap.add_argument("--events", type=int, default=20)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--new-only", action="store_true", help="skip the old oracle (quadratic in batches)")
    args = ap.parse_args()

    import delta_release as dr
    from delta_release.contract import decode_batch
    from delta_release.release.reference import accepted_events, reference_current
    from delta_release.tables import DEFAULT_TABLE

    with tempfile.TemporaryDirectory() as tmp:
        lake = dr.Lake.create(Path(tmp) / "lake")
        ids = set()
        received = datetime(2026, 1, 1, tzinfo=UTC)
        for b in range(args.batches):
            lines = []
            for k in range(args.events):
                pos = b * args.events + k
                oid = f"ord-{(pos * 7919) % (args.batches * args.events // 3 + 1)}"
                if k % 9 == 8:
                    lines.append(json.dumps({"schema_version": 2, "order_id": oid, "position": pos, "kind": "delete"}))
                else:
                    lines.append(json.dumps({"schema_version": 3, "order_id": oid, "position": pos, "kind": "upsert",
                                             "amount_cents": pos % 9000, "event_day": pos % 365, "currency": "USD"}))
            if b % 50 == 0:
                lines.append('{"schema_version": 2, "order_id": "bad", "position": 1, "kind": "upsert"}')
            data = ("\n".join(lines) + "\n").encode()
            decoded = decode_batch(data)
            record, _ = lake.raw.put(data, extracted=decoded.extracted, schema_versions=decoded.schema_versions,
                                     received=received)
            lake.quarantine.write(record.batch_id, decoded.rejects, lake.erasures.subject_key, data)
            ids.add(record.batch_id)
        lake.erasures.record("ord-7", version=None, erased_at="2026-01-02T00:00:00Z")
        cols = lake.table_def(DEFAULT_TABLE).keyed()
        columns = ["order_id", "amount_cents", "currency", "event_day", "position"]

        t0 = time.perf_counter()
        old = None if args.new_only else _old_oracle(lake, ids)
        t_old = time.perf_counter() - t0
        t0 = time.perf_counter()
        if args.profile:
            import cProfile
            cProfile.runctx("accepted_events(lake, ids, cols.key)", globals(), locals(), sort="tottime")
        events = accepted_events(lake, ids, cols.key)
        new = reference_current(events, cols, columns)
        t_new = time.perf_counter() - t0
        same = None if old is None else ({r[0]: tuple(r[1:]) for r in new.rows()}
                                         == {k: tuple(v[c] for c in columns[1:]) for k, v in old.items()})
        print(json.dumps({"batches": args.batches, "events": events.height, "current_rows": new.height,
                          "old_s": None if old is None else round(t_old, 3), "new_s": round(t_new, 3),
                          "same_rows": same}))


if __name__ == "__main__":
    main()
