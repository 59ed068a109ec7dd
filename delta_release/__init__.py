"""delta-release: publish versioned Delta Lake tables that are complete, current, replay-safe and erasure-safe."""

from .errors import (
    ConfigError,
    DeltaReleaseError,
    ErasureExposureError,
    FreshnessError,
    GateError,
    GenerationConflictError,
    InputError,
    LakeNotFoundError,
    ReconciliationError,
    SafetyError,
    StaleParentError,
    VacuumedVersionError,
)
from .lake import Lake

__version__ = "0.1.0"

__all__ = [
    "ConfigError", "DeltaReleaseError", "ErasureExposureError", "FreshnessError", "GateError",
    "GenerationConflictError", "InputError", "Lake", "LakeNotFoundError", "ReconciliationError",
    "SafetyError", "StaleParentError", "VacuumedVersionError", "__version__",
]
