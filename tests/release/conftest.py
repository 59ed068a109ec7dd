"""Release configs written from config/release.yaml for a test's tmp_path, and the Delta log's bytes to
prove a held run committed nothing."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import yaml

import delta_release as dr
from tests.conftest import ORDERS, ROOT, jsonl, up


def write_config(tmp_path: Path, *, drills: bool = False, batches: list[str] | None = None,
                 text_edit: tuple[str, str] | None = None, **override: object) -> Path:
    doc = yaml.safe_load((ROOT / "config" / "release.yaml").read_text())
    doc["lake"]["uri"] = str(tmp_path / "lake")
    doc["packet"]["directory"] = str(tmp_path / "packets")
    doc["sources"]["batches"] = batches or [str(ORDERS / n) for n in
                                            ("history.jsonl", "v2.jsonl", "v3.jsonl", "bad.jsonl")]
    doc["sources"]["manifests"] = [str(ROOT / "fixtures" / "telemetry" / "telemetry-48.manifest.json")]
    doc["checks"]["schema_fixtures"] = {"v2": str(ORDERS / "v2.jsonl"), "v3": str(ORDERS / "v3.jsonl")}
    doc["checks"]["conflict_drill"] = doc["checks"]["erasure_drill"] = drills
    for dotted, value in override.items():
        node = doc
        *parents, last = dotted.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = value
    text = yaml.safe_dump(doc)
    if text_edit:
        assert text_edit[0] in text, text_edit[0]
        text = text.replace(text_edit[0], text_edit[1], 1)
    path = tmp_path / "release.yaml"
    path.write_text(text)
    return path


def garbage_batch(path: Path) -> Path:
    lines = [b"garbage line %d {" % i for i in range(95)]
    lines += [json.dumps({"schema_version": 2, "order_id": f"ord-g{i}", "position": 9000 + i, "kind": "upsert",
                          "amount_cents": 100, "event_day": 48}).encode() for i in range(5)]
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


FAST_CHECKS = ("schema_fixtures", "amount_unit", "reconciliation", "checksums", "pinned_query", "audit",
               "freshness_gate")


def release_config(tmp: Path, batches: list[Path], *, broken_v3: bool) -> Path:
    doc = yaml.safe_load((ROOT / "config" / "release.yaml").read_text())
    doc["lake"]["uri"] = str(tmp / "lake")
    doc["packet"]["directory"] = str(tmp / "packets")
    doc["sources"]["batches"] = [str(b) for b in batches]
    doc["sources"]["manifests"] = [str(ROOT / "fixtures" / "telemetry" / "telemetry-48.manifest.json")]
    v3 = ORDERS / "v3.jsonl"
    if broken_v3:
        v3 = tmp / "v3-broken.jsonl"
        v3.write_text((ORDERS / "v3.jsonl").read_text().replace('"currency": "USD"', '"currency": "usd"', 1))
    doc["checks"] = {k: v for k, v in doc["checks"].items() if k in FAST_CHECKS}
    doc["checks"]["schema_fixtures"] = {"v2": str(ORDERS / "v2.jsonl"), "v3": str(v3)}
    doc["checks"]["audit"]["max_fraction"] = 1.0  # a tiny lake: pruning is not what these tests measure
    doc["checks"]["thresholds"] = False  # nor the rejected-line shares of a three-line batch
    path = tmp / "release.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def log_hashes(root: Path) -> dict[str, str]:
    """sha256 of every file under every `_delta_log` of the lake."""
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and "_delta_log" in p.parts}


def ingest_base(lake: dr.Lake) -> None:
    lake.ingest(jsonl([up("ord-base-1", 1, amount=10, day=47), up("ord-base-2", 2, amount=20, day=48),
                       up("ord-base-3", 3, amount=30, day=47)]))
