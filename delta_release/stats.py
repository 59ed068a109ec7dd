"""The one implementation of each statistic the product reports."""

from __future__ import annotations

import math
from collections.abc import Sequence


def p95(samples: Sequence[float]) -> float:
    """The 95th percentile by the nearest-rank definition: the smallest sample such that at least 95% of
    the samples are at or below it (sorted[ceil(0.95 * n) - 1]). Always an observed value, never an
    interpolation; 0.0 for no samples. E.g. samples 1..20 give 19.0."""
    if not samples:
        return 0.0
    ordered = sorted(samples)
    return float(ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)])
