"""A registered table's log or engine problems, as refusals with a reason code (exit 3), never exit 1.

Reasons: `corrupt_log` (a commit, checkpoint or sidecar the version needs cannot be parsed, or the log
holds no protocol/metadata), `missing_checkpoint` (`_last_checkpoint` names a checkpoint that is gone),
`version_gap` (a commit the version needs is missing), `unsupported_feature: X` (a protocol or feature
no installed reader supports), `engine_failed` (the engine asked for could not read the table).
The log is judged by deltalake's own replay (delta-kernel), whose error text is classified here.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from .. import _delta
from ..errors import DeltaReleaseError, NotFoundError, SafetyError

T = TypeVar("T")

_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    ("version_gap", re.compile(r"gap between|contiguous commit|found gap|missing commit|versions? .*not contiguous",
                               re.I)),
    ("missing_checkpoint", re.compile(r"_last_checkpoint hint but didn't find|checkpoint .*(not found|missing)", re.I)),
    ("unsupported_feature", re.compile(r"unsupported|not supported|unknown (reader )?feature|reader version|"
                                       r"invalid protocol|requires? .*feature", re.I)),
    ("corrupt_log", re.compile(r"json error|parquet error|corrupt|truncated|invalid json|expected value|eof while|"
                               r"no table metadata or protocol|missing (metadata|protocol)|invalid parquet|"
                               r"failed to parse|schema error|deserializ|invalid log", re.I)),
]


class LogProblemError(SafetyError):
    """The table's log (or the engine asked for) cannot give a correct answer for this version."""

    def __init__(self, table: str, version: int | None, reason: str, detail: str) -> None:
        where = f"{table}" + (f" at version {version}" if version is not None else "")
        super().__init__(f"refused {where}: {reason} ({detail})", table=table, version=version, reason=reason,
                         detail=detail)
        self.reason = reason
        self.detail = detail


def _one_line(text: str) -> str:
    line = next((x.strip() for x in text.splitlines() if x.strip()), "")
    return line[:300]


def classify(message: str) -> str | None:
    """The reason code for a log-replay error message, or None when it is no log problem we know."""
    for reason, pattern in _PATTERNS:
        if pattern.search(message):
            if reason == "unsupported_feature":
                return f"unsupported_feature: {_feature(message)}"
            return reason
    return None


def _feature(message: str) -> str:
    quoted = re.search(r"[`'\"]([A-Za-z][\w-]*)[`'\"]", message)
    if quoted:
        return quoted.group(1)
    version = re.search(r"(reader|writer) version[^0-9]*(\d+)", message, re.I)
    if version:
        return f"{version.group(1).lower()} version {version.group(2)}"
    return _one_line(message)[:120]


@contextmanager
def log_guard(table: str, version: int | None) -> Iterator[None]:
    """Turn deltalake's log-replay errors inside the block into LogProblemError (exit 3)."""
    try:
        yield
    except LogProblemError:
        raise
    except NotFoundError as exc:  # `_delta` wraps a pinned version's replay failure as "cannot be opened"
        reason = classify(exc.message) if "cannot be opened" in exc.message else None
        if reason is None:
            raise
        raise LogProblemError(table, version, reason, _one_line(exc.message.split("cannot be opened: ", 1)[-1])) \
            from exc
    except DeltaReleaseError:
        raise
    except Exception as exc:  # noqa: BLE001 - only deltalake's own errors are classified, the rest re-raised
        if not _delta.is_delta_error(exc):
            raise
        detail = _one_line(str(exc))
        raise LogProblemError(table, version, classify(detail) or "corrupt_log", detail) from exc


def guarded(table: str, version: int | None, call: Callable[[], T]) -> T:
    with log_guard(table, version):
        return call()
