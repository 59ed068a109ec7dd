"""The writers besides ingest, and every writer's upkeep: erase, rollback (restore or repair forward), vacuum,
and `upkeep.before_work`, run by each writer before its write."""
