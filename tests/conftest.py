from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

import delta_release as dr
from delta_release.clock import FixedClock

# Hypothesis profiles (issue 17.5). "ci", the default of `make test`: derandomized, so a red run is
# reproducible and a property fails on every run or on none. "fuzz" (`make fuzz`): random seeds and
# thousands of examples per property; a falsifying example it finds is fixed and pinned with @example.
FUZZ_EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "3000"))
settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
settings.register_profile("fuzz", derandomize=False, deadline=None, print_blob=True, max_examples=FUZZ_EXAMPLES,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def examples(n: int, fuzz: int | None = None) -> int:
    """`n` examples under the default profile; under `make fuzz` the fuzz profile's count (thousands), or
    `fuzz` for a property whose examples are slow (a whole ingest each)."""
    if settings.get_current_profile_name() != "fuzz":
        return n
    return max(n, FUZZ_EXAMPLES if fuzz is None else fuzz)

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures"
ORDERS = FIXTURES / "orders"
DATA = Path(__file__).resolve().parent / "data"


@pytest.fixture
def clock() -> FixedClock:
    return FixedClock(datetime(2026, 11, 29, 12, 0, tzinfo=UTC))


@pytest.fixture
def lake(tmp_path: Path, clock: FixedClock) -> dr.Lake:
    return dr.Lake.create(tmp_path / "lake", clock=clock)


def jsonl(events: list[dict[str, Any]]) -> bytes:
    return b"".join(json.dumps(e).encode() + b"\n" for e in events)


def up(order_id: str, position: int, amount: int = 100, day: int = 47, version: int = 2,
       currency: str = "USD") -> dict[str, Any]:
    ev: dict[str, Any] = {"schema_version": version, "order_id": order_id, "position": position,
                          "kind": "upsert", "amount_cents": amount, "event_day": day}
    if version == 3:
        ev["currency"] = currency
    return ev


def rm(order_id: str, position: int, day: int | None = None) -> dict[str, Any]:
    ev: dict[str, Any] = {"schema_version": 2, "order_id": order_id, "position": position, "kind": "delete"}
    if day is not None:
        ev["event_day"] = day
    return ev
