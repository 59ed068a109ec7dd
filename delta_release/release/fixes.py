"""What a failed check found, in words, and its fix: the packet's next steps quote them (packet.next_steps).

A failed check's `detail` says what it found and its evidence's `fix` what to do, naming the config key,
the file or the line; never a Python repr.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..contract.decode import DecodedBatch

GATE_LISTS = ("missing", "unexpected", "size_mismatch", "count_mismatch", "checksum_mismatch", "schema_mismatch")


def counts_text(counts: dict[str, int]) -> str:
    """{'bad_type': 1, 'amount_unit': 3} -> '3 amount_unit, 1 bad_type' (most first): never a dict repr."""
    return ", ".join(f"{n} {k}" for k, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def schema_fixture_failure(config: Path, version: int, path: Path,
                           decoded: DecodedBatch | None) -> tuple[str, str]:
    """(detail, fix) of a failed schema fixture check: the fixture missing, empty, rejected or of
    another schema version."""
    key = f"checks.schema_fixtures.v{version}"
    if decoded is None:
        return (f"fixture not found: {path}",
                f"{key} in {config} names {path}, which does not exist: point it at a JSONL file of schema"
                f" version {version} events")
    if decoded.extracted == 0:
        return (f"{path.name}: no lines", f"{path.name} is empty: {key} in {config} must name a file of schema"
                                          f" version {version} events")
    seen = ", ".join(str(v) for v in decoded.schema_versions) or "none"
    if decoded.rejects:
        first = decoded.rejects[0]
        detail = (f"{path.name}: {len(decoded.rejects)} of {decoded.extracted} lines rejected"
                  f" ({counts_text(decoded.reasons())}); schema versions accepted: {seen}")
        found = f"the first rejected line is line {first.line} ({first.reason.value}: {first.detail})"
    else:
        detail = f"{path.name}: every line decodes, as schema version {seen}, not {version}"
        found = f"its lines are schema version {seen}"
    return detail, (f"{path.name} must hold only lines that decode as schema version {version}, and {found}:"
                    f" fix the file or point {key} in {config} at one that does (if this fixture passed"
                    " before, the decoder changed: do not ship)")


def freshness_failure(config: Path, reports: list[dict[str, Any]]) -> tuple[str, str]:
    """(detail, fix) of a failed freshness gate: which of its three causes happened. (No command shows it
    again: a held run removes the objects it uploaded.)"""
    if not reports:
        return ("no telemetry manifest is configured",
                f"add a producer manifest under sources.manifests in {config}, or set checks.freshness_gate:"
                " false there")
    failed = [r for r in reports if not r["gate"]["ok"]]
    if failed:
        r = failed[0]
        gate = r["gate"]
        found = "; ".join(f"{kind} {p} ({'; '.join(gate['details'].get(p, [])) or kind})"
                          for kind in GATE_LISTS for p in gate[kind])
        more = f" (and {len(failed) - 1} more manifest(s))" if len(failed) > 1 else ""
        return (f"manifest {Path(r['manifest']).name} (generation {r['generation']}) failed the gate: {found}{more}",
                f"the objects beside {r['manifest']} do not match it: have the producer upload"
                f" {r['gate']['table']}'s partition again or send a corrected manifest, then run again")
    blind = next(r for r in reports if not r["omitted_object_rejected"])
    return (f"the gate accepted manifest {Path(blind['manifest']).name} with an object that was never written",
            "the manifest-vs-inventory gate no longer sees a missing object: do not ship; report it as a defect"
            " of delta-release")
