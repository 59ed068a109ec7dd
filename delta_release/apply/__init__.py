"""Apply events by source position: compute the new content of the partitions a batch changes."""

from .fold import ApplyPlan, Conflict, plan_apply, reference_fold

__all__ = ["ApplyPlan", "Conflict", "plan_apply", "reference_fold"]
