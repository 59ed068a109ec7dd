"""The writer path: build on the latest parent, stage, gate, strict commit, retry, discard, publish."""

from .writer import (
    MAX_ATTEMPTS,
    Change,
    ExistingFile,
    Plan,
    RetryPolicy,
    StagedCandidate,
    StaleParent,
    WriteResult,
    commit,
    discard,
    recover_publication,
    replace_partitions,
    stage,
    write,
)

__all__ = ["MAX_ATTEMPTS", "Change", "ExistingFile", "Plan", "RetryPolicy", "StagedCandidate", "StaleParent",
           "WriteResult", "commit", "discard", "recover_publication", "replace_partitions", "stage", "write"]
