"""`delta-release status`: the lake at a glance, from the lake alone (catalog, Delta logs, erasure ledger,
the last release run's record `_release/last_run.json`). Below the facade (`Lake.status`), so it reads
through the context and the writers' modules, never through `Lake`'s verbs."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from . import _delta, progress
from .clock import iso
from .history import commit_operation
from .maintenance.vacuum import vacuum_table

if TYPE_CHECKING:
    from .context import LakeContext

LAST_RUN = "_release/last_run.json"
_UNPUBLISHED_SHOWN = 20


def _ms(ts: int) -> str | None:
    return iso(datetime.fromtimestamp(ts / 1000, tz=UTC)) if ts else None


def table_status(lake: LakeContext, name: str, kind: str) -> dict[str, Any]:
    pub = lake.published(name)
    out: dict[str, Any] = {"table": name, "kind": kind,
                           "published": None if pub is None else {"version": pub.version, "generation": pub.generation,
                                                                  "at": pub.completed, "label": pub.label}}
    try:
        uri = lake.table_uri(name)
        latest = lake.latest_version(name)
    except Exception as exc:  # noqa: BLE001 - a table that cannot be opened is shown, not fatal
        out.update(latest=None, error=f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
        return out
    if latest is None:
        out.update(latest=None, unpublished=[], vacuum_debt=None)
        return out
    ahead = latest - (pub.version if pub is not None else -1)
    recent = _delta.history(uri, lake.options, max(1, min(ahead, _UNPUBLISHED_SHOWN)))
    head = recent[0]
    out["latest"] = {"version": head.version, "at": _ms(head.timestamp), "operation": commit_operation(head)}
    out["unpublished"] = [{"version": e.version, "at": _ms(e.timestamp), "operation": commit_operation(e),
                           "deferred": (e.evidence or {}).get("publication") == "deferred"}
                          for e in recent if pub is None or e.version > pub.version]
    out["unpublished_count"] = max(0, ahead if pub is not None else latest + 1)
    out["vacuum_debt"] = None
    if kind != "registered":
        try:
            v = vacuum_table(lake, table=name, apply=False).to_json()
            out["vacuum_debt"] = {"files": len(v["removed"]), "bytes": v["bytes_removed"],
                                  "by_reason": v["removed_by_reason"]}
        except Exception as exc:  # noqa: BLE001
            out["vacuum_debt"] = {"error": f"{type(exc).__name__}"}
    return out


def erasure_status(lake: LakeContext) -> list[dict[str, Any]]:
    """Per erased subject (hash prefix only): what still holds it and when the last of it clears."""
    by_subject: dict[str, list[dict[str, Any]]] = {}
    for item in lake.erasure_reader.pending():
        by_subject.setdefault(item["subject"], []).append(dict(item))
    out = []
    for subject, items in sorted(by_subject.items()):
        needs_vacuum = [i for i in items if i.get("kind") == "data_files"]
        dated = [i["until"] for i in items if i.get("kind") != "data_files"]
        out.append({"subject": subject, "items": [{"what": i["what"], "until": i["until"], "kind": i.get("kind")}
                                                  for i in items],
                    "clears": max(dated) if dated else None, "needs_vacuum": bool(needs_vacuum)})
    return out


def last_run(lake: LakeContext) -> dict[str, Any] | None:
    if not lake.storage.exists(LAST_RUN):
        return None
    try:
        data: dict[str, Any] = json.loads(lake.storage.read_bytes(LAST_RUN))
    except ValueError:
        return None
    return data


@dataclass(frozen=True, slots=True)
class LakeStatus:
    """`Lake.status`'s answer: the facts (`to_json`) and the terminal view of them (`text`)."""
    facts: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return self.facts

    def text(self) -> str:
        return status_text(self.facts, progress.table)


def lake_status(lake: LakeContext) -> dict[str, Any]:
    tables = [table_status(lake, t.name, t.kind) for t in sorted(lake.catalog.tables(), key=lambda t: t.name)]
    return {"lake": lake.storage.root, "tables": tables, "erasures": erasure_status(lake), "last_run": last_run(lake)}


def status_text(s: dict[str, Any], table_fn: Any) -> str:
    from .progress import human_bytes

    rows = []
    for t in s["tables"]:
        pub = t["published"]
        latest = t.get("latest")
        debt = t.get("vacuum_debt")
        rows.append([t["table"], t["kind"],
                     "-" if pub is None else f"v{pub['version']} gen {pub['generation']}",
                     "-" if latest is None else
                     f"v{latest['version']} {latest['operation'] or ''} {latest['at'] or ''}",
                     str(t.get("unpublished_count", 0)) if t.get("unpublished_count") else "none",
                     "-" if not debt or "files" not in debt else
                     (f"{debt['files']} files, {human_bytes(debt['bytes'])}" if debt["files"] else "none")])
    lines = [f"lake {s['lake']}", table_fn(["table", "kind", "published", "latest commit", "unpublished",
                                            "vacuum debt"], rows)]
    for t in s["tables"]:
        if t.get("unpublished"):
            lines.append(f"{t['table']}: committed but not published: "
                         + ", ".join(f"v{u['version']} ({u['operation']}{', deferred' if u['deferred'] else ''})"
                                     for u in t["unpublished"]))
        if t.get("error"):
            lines.append(f"{t['table']}: cannot be opened: {t['error']}")
    if s["erasures"]:
        lines.append(f"pending erasures: {len(s['erasures'])}")
        for e in s["erasures"]:
            lines.append(f"  subject {e['subject']}: clears {e['clears'] or 'when vacuumed'}"
                         + ("; old data files wait for `vacuum --apply`" if e["needs_vacuum"] else "")
                         + f" ({len(e['items'])} item(s))")
    else:
        lines.append("pending erasures: none")
    run = s["last_run"]
    if run is None:
        lines.append("last release run: none recorded in this lake")
    else:
        snap = run.get("snapshot", {})
        what = f"orders v{snap['version']}" if snap.get("version") is not None else "nothing committed"
        lines.append(f"last release run: {run['run_id']} {str(run['decision']).upper()} ({what}"
                     + (f", held because {', '.join(run['failed_checks'])}" if run.get("failed_checks") else "")
                     + f")\n  packet {run['packet']}\n  report {run['report']}")
    return "\n".join(lines)
