"""The release run's lake: `run` is a writer, but a typo in `lake.uri` must not ship into a new lake.

The run creates a lake only when its config says `lake.create: true`; otherwise a `lake.uri` that holds
no lake (delta_release/lakeroot.py) is a ConfigError naming the file and the key, and nothing is created.
"""

from __future__ import annotations

from ..clock import Clock
from ..errors import ConfigError, LakeNotFoundError
from ..lake import Lake
from .config import ReleaseConfig


def open_run_lake(cfg: ReleaseConfig, clock: Clock | None) -> Lake:
    try:
        return Lake.open(cfg.lake_uri, storage_options=cfg.storage_options, clock=clock, create=cfg.create_lake)
    except LakeNotFoundError as exc:
        raise ConfigError(f"{cfg.path}: lake.uri: no lake at {exc.uri}; set lake.create: true to let this run"
                          " create it", file=str(cfg.path), key="lake.uri") from None
