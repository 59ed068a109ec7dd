"""Candidate (staged files + evidence), gate (files on storage match their evidence), strict commit."""

from .candidate import Candidate, FileEvidence, partition_dir, stage_partitions
from .gate import check_file, gate_candidate

__all__ = ["Candidate", "FileEvidence", "check_file", "gate_candidate", "partition_dir", "stage_partitions"]
