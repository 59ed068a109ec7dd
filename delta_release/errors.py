"""One error root with a few meaningful subclasses; each carries its facts and its exit code."""

from __future__ import annotations

from typing import Any


class DeltaReleaseError(Exception):
    """Root of every error the product raises on purpose. Exit code 1 unless a subclass says otherwise."""

    exit_code = 1

    def __init__(self, message: str, **facts: Any) -> None:
        super().__init__(message)
        self.message = message
        self.facts = facts

    def to_json(self) -> dict[str, Any]:
        return {"type": type(self).__name__, "message": self.message, **self.facts}


def rust_panic(exc: BaseException) -> bool:
    """A Rust panic in Polars or delta-rs: pyo3's PanicException, a BaseException (not an Exception)."""
    return type(exc).__name__ == "PanicException"


class InputError(DeltaReleaseError):
    """Bad usage, bad input file or bad argument (exit 2)."""

    exit_code = 2


class ConfigError(InputError):
    """A configuration file is wrong: names the file and the dotted key."""

    def __init__(self, message: str, *, file: str, key: str | None = None) -> None:
        super().__init__(message, file=file, key=key)
        self.file = file
        self.key = key


class SafetyError(DeltaReleaseError):
    """Refused by a safety rule (exit 3)."""

    exit_code = 3


class StaleParentError(SafetyError):
    """A commit was prepared on a parent version that is no longer the latest."""

    def __init__(self, table: str, expected: int | None, found: int | None) -> None:
        super().__init__(
            f"table {table} has changed: expected parent version {expected}, found {found}",
            table=table,
            expected=expected,
            found=found,
        )
        self.table = table
        self.expected = expected
        self.found = found


class GateError(SafetyError):
    """A staged file (or a manifest) does not match its recorded evidence."""

    def __init__(self, message: str, *, path: str, mismatch: str, **facts: Any) -> None:
        super().__init__(message, path=path, mismatch=mismatch, **facts)
        self.path = path
        self.mismatch = mismatch


class ReconciliationError(SafetyError):
    """accepted + quarantined != extracted for a batch."""

    def __init__(self, batch_id: str, extracted: int, accepted: int, quarantined: int) -> None:
        super().__init__(
            f"batch {batch_id} does not reconcile: accepted {accepted} + quarantined {quarantined}"
            f" != extracted {extracted}",
            batch_id=batch_id,
            extracted=extracted,
            accepted=accepted,
            quarantined=quarantined,
        )


class FreshnessError(SafetyError):
    """A reader's metadata cache is behind the catalog and the policy says fail."""


class ErasureExposureError(SafetyError):
    """The requested snapshot still holds an erased subject."""


class NotFoundError(InputError):
    """A table, version, batch or file named by the user does not exist."""


class LakeNotFoundError(NotFoundError):
    """The URI holds no lake (see delta_release/lakeroot.py) and the caller may not create one."""

    def __init__(self, uri: str, *, argument: str | None = None) -> None:
        if argument:  # the command line: a typo must not fork the lake, so creating one is asked for by name
            import shlex

            text = (f"{argument} {uri} holds no lake; create one with `delta-release init {shlex.quote(uri)}`, "
                    "or pass --create to ingest, publish or register")
        else:
            text = f"{uri} holds no lake (Lake.create(uri) or Lake.open(uri, create=True) creates one)"
        super().__init__(text, uri=uri)
        self.uri = uri


class VacuumedVersionError(SafetyError):
    """A pinned version whose data files a vacuum removed: it can no longer be read or restored."""


class CatalogIntegrityError(SafetyError):
    """A catalog object is not what the lake wrote: damaged, missing, stray, out of its generation chain,
    disagreeing with the lake's commits, or naming a table location outside the lake (exit 3). Facts:
    `path` (the object), `repair` (what to run or do to repair it), `table` when known."""

    def __init__(self, message: str, *, path: str, repair: str, **facts: Any) -> None:
        super().__init__(f"{message}; repair: {repair}", path=path, repair=repair, **facts)
        self.path = path
        self.repair = repair


class GenerationConflictError(SafetyError):
    """A publisher's expected catalog generation is no longer current (compare-and-swap failed)."""

    def __init__(self, table: str, expected: int | None, found: int | None) -> None:
        super().__init__(
            f"catalog generation of {table} has changed: expected {expected}, found {found}",
            table=table, expected=expected, found=found)
        self.table = table
        self.expected = expected
        self.found = found
