"""`quarantine [--batch ID] [--reason R] [--show]`: the ledger's records, and with `show` each line's text
read from its raw batch. A line is withheld whole when its subject is erased or when an erased id stands
anywhere in its text, glued to other text or not (`erasure.text.ErasedText`); a line whose raw batch is
gone (raw retention) has no text to show."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import polars as pl

from ..contract import REASON_CODES
from ..errors import InputError, NotFoundError
from .spans import line_spans

if TYPE_CHECKING:
    from ..context import LakeContext

_BATCH_ID = re.compile(r"[0-9a-f]{1,16}")  # a batch id or a prefix of one (git-style)
WITHHELD = "withheld"
SHOWN = "shown"
NO_RAW = "raw_batch_gone"


def _check(batch_id: str | None, reason: str | None) -> None:
    if batch_id is not None and not _BATCH_ID.fullmatch(batch_id):
        raise InputError(f"--batch {batch_id!r} is not a batch id: give its 16 lower-case hex characters, or a"
                         " unique prefix of them", option="--batch")
    if reason is not None and reason not in REASON_CODES:
        raise InputError(f"--reason must be one of: {', '.join(REASON_CODES)}", option="--reason")


def quarantine_records(lake: LakeContext, *, batch_id: str | None = None, reason: str | None = None,
                       show: bool = False) -> list[dict[str, Any]]:
    """The ledger's records as dicts (batch_id, line, offset, length, reason, detail, subject), filtered;
    with `show`, also `text` (None unless shown) and `text_state` (shown, withheld or raw_batch_gone)."""
    _check(batch_id, reason)
    if batch_id is not None:
        batch_id = resolve_batch(lake, batch_id)
    rows = lake.quarantine.rows(batch_id)
    if reason is not None:
        rows = rows.filter(pl.col("reason") == reason)
    records = rows.to_dicts()
    if show:
        _attach_text(lake, records)
    return records


def resolve_batch(lake: LakeContext, prefix: str) -> str:
    """The one batch whose ledger's id starts with `prefix` (a whole id is its own prefix). None:
    NotFoundError; several: InputError naming how many and a few (both exit 2)."""
    if len(prefix) == 16 and lake.quarantine.has(prefix):
        return prefix
    ids = sorted(p.rsplit("/", 1)[-1].removesuffix(".parquet") for p in lake.quarantine.paths())
    matches = [i for i in ids if i.startswith(prefix)]
    if not matches:
        raise NotFoundError(f"no batch id starts with {prefix} (no quarantine ledger: never ingested?); "
                            "`quarantine` lists every batch's records", batch_id=prefix)
    if len(matches) > 1:
        shown = ", ".join(matches[:3]) + (", ..." if len(matches) > 3 else "")
        raise InputError(f"--batch {prefix} is ambiguous: {len(matches)} batch ids start with it ({shown}); give"
                         " more characters", option="--batch", batch_id=prefix, candidates=len(matches))
    return matches[0]


def _attach_text(lake: LakeContext, records: list[dict[str, Any]]) -> None:
    from ..erasure.text import ErasedText

    erased = lake.erasures.erased_subjects()
    matcher = ErasedText(erased, lake.erasures.subject_digests, lake.erasures.id_lengths() if erased else set())
    batches: dict[str, bytes | None] = {}
    for rec in records:
        bid = rec["batch_id"]
        if bid not in batches:
            try:
                batches[bid] = lake.raw.read(bid)
            except NotFoundError:
                batches[bid] = None
        data = batches[bid]
        rec["text"], rec["text_state"] = None, NO_RAW
        if data is None:
            continue
        offset, length = rec["offset"], rec["length"]
        if offset is None or length is None:
            spans = line_spans(data)
            if not 1 <= rec["line"] <= len(spans):
                continue
            offset, length = spans[rec["line"] - 1]
        text = data[offset:offset + length].decode("utf-8", errors="backslashreplace")
        # withheld whole when an erased id is anywhere in it, as read or as printed (text or JSON)
        if (rec["subject"] is not None and rec["subject"] in erased) \
                or matcher.names_erased(text, escaped(text), json.dumps(text)):
            rec["text_state"] = WITHHELD
            continue
        rec["text"], rec["text_state"] = text, SHOWN


_UNSAFE = re.compile(r"[^\x20-\x7e\u00a0-\U0010ffff]|[\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]")
TEXT_LIMIT = 300


def escaped(text: str) -> str:
    """`text` with control and bidi characters escaped (`\\x07`, `\\u202e`)."""
    return _UNSAFE.sub(lambda m: m.group(0).encode("unicode_escape").decode("ascii"), text)


def printable(text: str, limit: int = TEXT_LIMIT) -> str:
    """One terminal-safe line: control and bidi characters escaped, long text cut with a count."""
    safe = escaped(text)
    if len(safe) > limit:
        return f"{safe[:limit]}... ({len(safe) - limit} more characters)"
    return safe


@dataclass(frozen=True)
class QuarantineListing:
    """`Lake.quarantine`'s answer: the records (with their text when `show`), as JSON and as lines."""
    records: list[dict[str, Any]]
    show: bool

    def to_json(self) -> dict[str, Any]:
        return {"records": self.records, "count": len(self.records)}

    def text(self) -> str:
        return records_text(self.records, show=self.show)


def records_text(records: list[dict[str, Any]], *, show: bool) -> str:
    if not records:
        return "no quarantine records"
    out = [f"{len(records)} quarantine record(s)"]
    for r in records:
        span = "" if r["offset"] is None else f" bytes {r['offset']}+{r['length']}"
        subject = "" if r["subject"] is None else f" subject {r['subject'][:16]}"
        out.append(f"{r['batch_id']} line {r['line']}{span}: {r['reason']}: {r['detail']}{subject}")
        if show:
            if r["text_state"] == SHOWN:
                out.append(f"    | {printable(r['text'])}")
            elif r["text_state"] == WITHHELD:
                out.append("    (withheld: the line names an erased subject)")
            else:
                out.append("    (no text: the raw batch is no longer stored)")
    return "\n".join(out)
