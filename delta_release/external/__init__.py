"""External partitions (telemetry): the producer's manifest, its gate, and the publish that registers it."""

from .manifest import GateReport, Manifest, gate_manifest, load_manifest
from .publish import PublishReport, publish_manifest

__all__ = ["GateReport", "Manifest", "PublishReport", "gate_manifest", "load_manifest", "publish_manifest"]
