"""Streams of batches that create, update, move and delete a few orders: what the indexes must follow."""

from __future__ import annotations

import random
from typing import Any

from tests.conftest import rm, up


def stream(seed: int, n_batches: int = 6, per_batch: int = 12) -> list[list[dict[str, Any]]]:
    """Batches that create, update, move (another event_day) and delete a small set of orders."""
    rng = random.Random(seed)
    batches, pos = [], 0
    for _ in range(n_batches):
        batch = []
        for _ in range(per_batch):
            pos += rng.randint(1, 3)
            oid = f"o{rng.randint(1, 15)}"
            if rng.random() < 0.15:
                batch.append(rm(oid, pos, rng.choice([None, 3, 4])))
            else:
                batch.append(up(oid, pos, amount=rng.randint(1, 999), day=rng.randint(1, 6)))
        batches.append(batch)
    return batches
