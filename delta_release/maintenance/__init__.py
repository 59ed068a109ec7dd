"""Maintenance of a table's history: rollback (restore or repair forward) and vacuum."""
