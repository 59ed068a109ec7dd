"""Batches written by racing writers, the table they must give, and how many commits each batch took;
the object-store tests race the same way."""

from __future__ import annotations

import random
from typing import Any

import delta_release as dr
from delta_release import _delta
from delta_release.apply import reference_fold
from delta_release.contract import decode_batch
from tests.conftest import jsonl


def make_batches(writers: int, *, seed: int, events_per_batch: int = 24) -> list[bytes]:
    """Batches that fight over the same orders and days; positions are unique across all batches."""
    rng = random.Random(seed)
    positions = list(range(1, writers * (events_per_batch + 1) + 1))
    rng.shuffle(positions)
    batches = []
    for w in range(writers):
        events: list[dict[str, Any]] = [{"schema_version": 2, "order_id": f"only-{w}", "position": positions.pop(),
                                         "kind": "upsert", "amount_cents": 100 + w, "event_day": w}]
        for _ in range(events_per_batch):
            oid = f"ord-{rng.randrange(10):02d}"
            if rng.random() < 0.2:
                events.append({"schema_version": 2, "order_id": oid, "position": positions.pop(), "kind": "delete"})
            else:
                events.append({"schema_version": 3, "order_id": oid, "position": positions.pop(), "kind": "upsert",
                               "amount_cents": rng.randrange(10_000), "event_day": rng.randrange(4),
                               "currency": "EUR"})
        batches.append(jsonl(events))
    return batches


def expected(batches: list[bytes]) -> dict[str, dict[str, Any]]:
    events = [e for b in batches for e in decode_batch(b).events.to_dicts()]
    return {k: {key: v[key] for key in ("position", "amount_cents", "currency", "event_day")}
            for k, v in reference_fold(events).items()}


def commits_per_batch(lake: dr.Lake) -> dict[str, int]:
    out: dict[str, int] = {}
    for entry in _delta.history(lake.table_uri("orders"), lake.options):
        for b in (entry.evidence or {}).get("batch_ids", []):
            out[b] = out.get(b, 0) + 1
    return out
