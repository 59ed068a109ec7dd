"""delta-release: publish versioned Delta Lake tables that are complete, current, replay-safe and erasure-safe."""

from .errors import (
    ConfigError,
    DeltaReleaseError,
    ErasureExposureError,
    FreshnessError,
    GateError,
    GenerationConflictError,
    InputError,
    ReconciliationError,
    SafetyError,
    StaleParentError,
)
from .lake import Lake

__version__ = "0.1.0"

__all__ = [
    "ConfigError", "DeltaReleaseError", "ErasureExposureError", "FreshnessError", "GateError",
    "GenerationConflictError", "InputError", "Lake", "ReconciliationError", "SafetyError",
    "StaleParentError", "__version__",
]
