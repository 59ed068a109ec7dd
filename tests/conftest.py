from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

import delta_release as dr
from delta_release.clock import FixedClock

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
