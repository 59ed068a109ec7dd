"""The keyed hash of a column in Rust (erasure/bulk.py) is the ledger's HMAC-SHA256, or is not used."""

from __future__ import annotations

import hashlib
import hmac
import secrets
import sys
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from delta_release.erasure.bulk import ColumnHmac
from delta_release.erasure.ledger import ErasureLedger
from delta_release.stage.buckets import keyed


def reference(key: bytes, ids: list[str]) -> bytes:
    return b"".join(hmac.new(key, s.encode("utf-8"), hashlib.sha256).digest() for s in ids)


KEYS = [secrets.token_hex(32).encode(), b"", "clé-ü€😀".encode(), b"long" * 40]


@pytest.mark.parametrize("key", KEYS, ids=["lake-key", "empty", "multibyte", "over-a-block"])
def test_a_text_key_is_hashed_in_rust_and_equals_hmac(key: bytes) -> None:
    ledger = ErasureLedger(None, key)  # type: ignore[arg-type]
    ids = ["ord-001", "", "ördér-ü", "x" * 500, "ord-001", "new-060-0006131"]
    assert ledger.subject_digests(pl.Series(ids)) == reference(key, ids)
    assert ledger._hash._column._usable is True  # the Rust path answered (polars-hash is a dependency)
    assert ledger.subject_digests(pl.Series([], dtype=pl.String)) == b""


@settings(max_examples=60, deadline=None)
@given(ids=st.lists(st.text(max_size=80), max_size=40), start=st.integers(0, 10))
def test_any_text_and_any_slice_equal_hmac(ids: list[str], start: int) -> None:
    key = KEYS[0]
    ledger = ErasureLedger(None, key)  # type: ignore[arg-type]
    column = pl.Series(["pad"] * start + ids, dtype=pl.String).slice(start)  # a column with an offset
    assert ledger.subject_digests(column) == reference(key, ids)


def test_a_key_that_is_not_text_is_hashed_in_python() -> None:
    key = bytes(range(256))[128:160]  # not UTF-8: the plugin takes its key as a str
    ledger = ErasureLedger(None, key)  # type: ignore[arg-type]
    ids = ["ord-001", "ördér-ü"]
    assert ledger.subject_digests(pl.Series(ids)) == reference(key, ids)
    assert ledger._hash._column._usable is False


def test_without_the_plugin_the_column_is_hashed_in_python(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "polars_hash", None)  # import fails, as where it is not installed
    key = KEYS[0]
    ledger = ErasureLedger(None, key)  # type: ignore[arg-type]
    ids = ["ord-001", "ord-002"]
    assert ledger.subject_digests(pl.Series(ids)) == reference(key, ids)
    assert ledger._hash._column._usable is False


def test_a_plugin_that_disagrees_on_the_probe_is_never_used(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ColumnHmac, "_run", lambda self, keys: bytes(32 * len(keys)))  # a wrong hash
    key = KEYS[0]
    ledger = ErasureLedger(None, key)  # type: ignore[arg-type]
    ids = ["ord-001", "ord-002"]
    assert ledger.subject_digests(pl.Series(ids)) == reference(key, ids)
    assert ledger._hash._column._usable is False


def test_a_column_with_nulls_is_left_to_the_caller() -> None:
    column = ColumnHmac(KEYS[0], lambda ids: reference(KEYS[0], ids))
    assert column.digests(pl.Series(["a", None])) is None
    assert column.digests(pl.Series([1, 2])) is None


def test_buckets_from_the_rust_hash_equal_the_per_key_hash() -> None:
    key = KEYS[0]
    ledger = ErasureLedger(None, key)  # type: ignore[arg-type]
    ids = pl.Series("order_id", [f"ord-{i:05d}" for i in range(3000)])
    fast = keyed(ids, 8, ledger.subject_key)  # bulk: the ledger's column path
    per_key = keyed(ids, 8, lambda k: ledger.subject_key(k))  # a plain function: called per key
    assert fast.sort("order_id").equals(per_key.sort("order_id"))
    assert ledger._hash._column._usable is True



def _layout(lake: Any) -> dict[str, int]:
    """Rows per (day, bucket tag) of the table's current files."""
    from delta_release import _delta
    from delta_release.stage.buckets import _TAG

    ctx = lake.table("orders")
    out: dict[str, int] = {}
    for e in _delta.file_entries(ctx.uri, ctx.storage_options, lake.latest_version("orders")):
        m = _TAG.match(e.path.rsplit("/", 1)[-1])
        where = f"{e.path.split('/')[0]}/{m.group(0) if m else 'untagged'}"
        out[where] = out.get(where, 0) + (e.num_records or 0)
    return out


def test_an_ingest_with_and_without_the_plugin_writes_the_same_lake(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Same key, same batches: the rows of every (day, bucket) file, the table and the key index's answers
    are equal whether the keyed hashes came from Rust or from Python."""
    import delta_release as dr
    from delta_release import index
    from tests.conftest import jsonl, rm, up

    monkeypatch.setenv("DELTA_RELEASE_ERASURE_KEY", "a-fixed-text-key-for-both-lakes")
    first = [up(f"o{i}", i + 1, amount=i, day=47 + i % 3) for i in range(900)]
    second = ([up(f"o{i}", 2000 + i, amount=i + 1, day=49) for i in range(0, 900, 7)]
              + [rm(f"o{i}", 3000 + i) for i in range(1, 900, 11)])
    lakes = {}
    for name in ("rust", "python"):
        with monkeypatch.context() as m:
            if name == "python":
                m.setitem(sys.modules, "polars_hash", None)
            lake = dr.Lake.create(tmp_path / name)
            for batch in (first, second):
                lake.ingest(jsonl(batch))
            assert lake.erasures._hash._column._usable is (name == "rust")
            lakes[name] = lake
    rust, python = lakes["rust"], lakes["python"]
    assert len(_layout(rust)) > 3 and _layout(rust) == _layout(python)
    assert rust.read().sort("order_id").equals(python.read().sort("order_id"))
    ids = [f"o{i}" for i in range(900)] + ["never-seen"]
    where = {}
    for name, lake in lakes.items():
        keys = index.key_index(lake.table("orders"))
        assert keys is not None
        where[name] = keys.locate(ids, upto=lake.latest_version("orders") or 0)
    assert where["rust"] == where["python"] and where["rust"]["o7"] == 49


def test_digests_the_plugin_answers_malformed_are_refused_and_python_hashes(monkeypatch: pytest.MonkeyPatch) -> None:
    """The hex digests are decoded from the column's buffer in one go; a digest that is not 64 hex
    characters (a plugin that changed its output) is an error there, and the ledger hashes in Python."""
    import polars_hash

    key = KEYS[0]
    ledger = ErasureLedger(None, key)  # type: ignore[arg-type]
    ids = ["ord-001", "ord-002", "ord-003"]
    assert ledger.subject_digests(pl.Series(ids)) == reference(key, ids)  # the plugin is in use
    real = polars_hash.col

    class Short:  # the plugin's column, its digests cut to 62 characters (still an even count of hex)
        def __init__(self, name: str) -> None:
            self.chash = self
            self._col = real(name)

        def hmac_sha256(self, key: str) -> pl.Expr:
            return self._col.chash.hmac_sha256(key=key).str.slice(0, 62)

    monkeypatch.setattr(polars_hash, "col", Short)
    more = ["ord-004", "ord-005"]
    assert ledger.subject_digests(pl.Series(more)) == reference(key, more)
    assert ledger._hash._column._usable is False  # refused, and Python from then on
