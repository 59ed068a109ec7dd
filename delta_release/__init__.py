"""delta-release: publish versioned Delta Lake tables that are complete, current, replay-safe and erasure-safe."""

# The reports the verbs return (typed; `.to_json()` gives the CLI's JSON).
from ._version import __version__
from .api_checks import UnknownSubjectError  # noqa: E402
from .erasure.ledger import ErasureKeyError  # noqa: E402
from .erasure.records import PendingItem  # noqa: E402
from .errors import (
    CatalogIntegrityError,
    ConfigError,
    DeltaReleaseError,
    ErasureExposureError,
    FreshnessError,
    GateError,
    GenerationConflictError,
    InputError,
    LakeNotFoundError,
    NotFoundError,
    ReconciliationError,
    SafetyError,
    StaleParentError,
    VacuumedVersionError,
)
from .external import GateReport, PublishReport  # noqa: E402
from .gateway.engines import EngineMismatchError  # noqa: E402
from .history import HistoryEntry  # noqa: E402
from .ingest import IngestReport  # noqa: E402
from .lake import Lake
from .maintenance.catalog import CatalogMigration  # noqa: E402
from .maintenance.erase import ErasureReport  # noqa: E402
from .maintenance.rollback import RollbackReport  # noqa: E402
from .maintenance.upkeep import Upkeep  # noqa: E402
from .maintenance.vacuum import VacuumReport  # noqa: E402
from .quarantine.view import QuarantineListing  # noqa: E402
from .register import Registration  # noqa: E402
from .status import LakeStatus  # noqa: E402

__all__ = [
    "CatalogIntegrityError", "ConfigError", "DeltaReleaseError", "ErasureExposureError", "FreshnessError", "GateError",
    "GenerationConflictError", "InputError", "Lake", "NotFoundError", "ReconciliationError", "SafetyError",
    "StaleParentError", "__version__", "LakeNotFoundError", "VacuumedVersionError",
    "ErasureReport", "PendingItem", "HistoryEntry", "IngestReport",
    "RollbackReport", "VacuumReport", "UnknownSubjectError", "ErasureKeyError", "EngineMismatchError",
    "GateReport", "PublishReport", "Registration", "QuarantineListing", "LakeStatus", "Upkeep", "CatalogMigration",
]
