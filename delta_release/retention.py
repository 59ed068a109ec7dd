"""One set of retention defaults, shared by the CLI (`erase`, `vacuum`), the Python API and the release
config (`retention:` in config/release.yaml). Change them here and nowhere else.

- raw batches are kept RAW_RETENTION_DAYS after they are received (they hold erased subjects until then);
- backups taken before an erasure live BACKUP_EXPIRY_DAYS;
- vacuum keeps the newest RETAIN_VERSIONS versions and every version committed within
  REPLAY_HORIZON_HOURS (`vacuum --replay-horizon-hours`; the release run never vacuums);
- files in no version at all (a killed writer's staged files) go after ORPHAN_GRACE_HOURS.
"""

from __future__ import annotations

RAW_RETENTION_DAYS = 30.0
BACKUP_EXPIRY_DAYS = 35.0
RETAIN_VERSIONS = 10
REPLAY_HORIZON_HOURS = 168.0
ORPHAN_GRACE_HOURS = 1.0
