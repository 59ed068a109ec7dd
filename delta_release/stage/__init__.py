"""Stage and gate: a candidate's new files with their evidence, and the check that storage matches them."""

from .candidate import Candidate, FileEvidence, partition_dir, stage_partitions
from .gate import check_file, gate_candidate

__all__ = ["Candidate", "FileEvidence", "check_file", "gate_candidate", "partition_dir", "stage_partitions"]
