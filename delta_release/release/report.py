"""The report a release manager acts on: one self-contained HTML page (inline SVG, no scripts, no network).

Order: the decision and why, what to do next (copy-paste commands with --lake), the checks with observed
value vs threshold, charts with the thresholds drawn on them, counts, the rollback plan (what the target
holds), cost, pending evidence, and where it came from (tool version, lake, config digest). `render_index`
writes `index.html` in the packet directory: every past run, newest first.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from ..progress import human_bytes
from .counts import duplicate_text, source_text

SECTIONS = ("decision", "next-steps", "checks", "charts", "counts", "rollback", "cost", "pending", "about")
_CSS = """body{font-family:system-ui,sans-serif;max-width:1100px;margin:1.5em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:.5em 0} td,th{padding:4px 10px;text-align:left;border-bottom:1px solid #ddd;
vertical-align:top} th{background:#f3f3f3} td.num{text-align:right;font-variant-numeric:tabular-nums}
.ok{color:#196619;font-weight:bold} .fail{color:#a11;font-weight:bold}
.banner{padding:12px 16px;border-radius:6px;margin-bottom:1em} .banner.ship{background:#e3f4e3;border:1px solid #196619}
.banner.hold{background:#fbe5e5;border:1px solid #a11} .banner h1{margin:0 0 .3em 0}
pre.cmd{background:#f4f4f4;padding:6px 10px;border-left:3px solid #3b6ea5;overflow-x:auto;margin:.2em 0 .8em 0}
code{background:#eee;padding:1px 4px} .muted{color:#666} svg text{font-family:system-ui,sans-serif}
.dup{color:#8a5a00;font-weight:bold}"""


def _e(value: Any) -> str:
    return html.escape(str(value))


def _pct(value: Any) -> str:
    return "-" if value is None else f"{100 * float(value):.1f}%"


def bar_chart(title: str, bars: list[tuple[str, float]], unit: str, chart_id: str, *,
              threshold: float | None = None, threshold_label: str = "threshold",
              fmt: Any = None, judged: int | None = None, direction: str = "<=") -> str:
    """Horizontal bars; a dashed red line marks the threshold, bars on its failing side are red (`direction`:
    a bar passes when its value is <= the threshold, or >=)."""
    fmt = fmt or (lambda v: f"{v:,.3f} {unit}" if unit == "ms" else f"{v:,.0f} {unit}")
    width, row, left, right = 760, 30, 230, 150
    top = max([v for _, v in bars] + ([threshold] if threshold is not None else []), default=0.0) or 1.0
    span = width - left - right
    height = 52 + row * len(bars)
    parts = [f'<svg id="{chart_id}" role="img" aria-label="{_e(title)}" xmlns="http://www.w3.org/2000/svg" '
             f'width="{width}" height="{height}" viewBox="0 0 {width} {height}">',
             f'<text x="0" y="18" font-size="14" font-weight="bold">{_e(title)}</text>']
    for i, (label, value) in enumerate(bars):
        y = 30 + i * row
        w = max(1.0, span * value / top)
        over = (threshold is not None and judged in (None, i)
                and (value < threshold if direction == ">=" else value > threshold))
        parts.append(f'<text x="0" y="{y + 16}" font-size="12">{_e(label)}</text>')
        parts.append(f'<rect x="{left}" y="{y}" width="{w:.1f}" height="20" fill="{"#c0392b" if over else "#3b6ea5"}">'
                     f'<title>{_e(label)}: {_e(fmt(value))}</title></rect>')
        parts.append(f'<text x="{left + w + 6:.1f}" y="{y + 15}" font-size="12">{_e(fmt(value))}</text>')
    if threshold is not None:
        x = left + span * threshold / top
        bottom = 30 + row * len(bars)
        parts.append(f'<line class="threshold" x1="{x:.1f}" y1="24" x2="{x:.1f}" y2="{bottom}" stroke="#a11" '
                     'stroke-width="2" stroke-dasharray="5,3"/>')
        parts.append(f'<text x="{x:.1f}" y="{bottom + 16}" font-size="11" fill="#a11" text-anchor="middle">'
                     f'{_e(threshold_label)}: {_e(direction)} {_e(fmt(threshold))}</text>')
    parts.append("</svg>")
    return "\n".join(parts)


def _table(columns: list[str], rows: list[list[Any]], *, numeric: set[int] | None = None, table_id: str = "") -> str:
    numeric = numeric or set()
    head = "".join(f"<th>{_e(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f'<td class="num">{_e(v)}</td>' if i in numeric else f"<td>{v}</td>"
                                    for i, v in enumerate(r)) + "</tr>" for r in rows)
    return f'<table{f" id={chr(34)}{table_id}{chr(34)}" if table_id else ""}><tr>{head}</tr>{body}</table>'


def _observed(c: dict[str, Any]) -> tuple[str, str]:
    """(observed, threshold with its direction: `<= 20.0%` passes at or below, `>= 75.0%` at or above)."""
    obs, thr = c.get("observed"), c.get("threshold")
    if obs is None and thr is None:
        return "", ""
    return _pct(obs), f"{c.get('direction', '<=')} {_pct(thr)}" if thr is not None else ""


def _decision(packet: dict[str, Any]) -> str:
    snap = packet["snapshot"]
    decision = packet["decision"]
    if decision == "ship":
        head = "SHIP"
        lines = [f"Published orders version <b>{_e(snap['version'])}</b> as catalog generation "
                 f"<b>{_e(snap['generation'])}</b>. Every check passed."]
    else:
        head = "HOLD"
        pub = snap.get("published_version")
        lines = ["Held because " + "; ".join(f"<b>{_e(r.split(':', 1)[0])}</b>:{_e(r.split(':', 1)[1])}"
                                            for r in packet.get("reasons", [])) + "."]
        gone = packet.get("discarded") or {}
        readers = ("readers still get no version of orders (none was ever published)" if pub is None else
                   f"readers still get orders version <b>{_e(pub)}</b>"
                   f" (generation <b>{_e(snap.get('published_generation'))}</b>)")
        lines.append(f"Nothing was published: {readers}. Nothing was committed: the"
                     f" candidate staged on version {_e(snap.get('parent'))} was discarded"
                     f" ({_e(len(gone.get('files', [])))} file(s), {_e(gone.get('rows', 0))} row(s));"
                     " the Delta log is as it was before the run.")
    version = snap["version"] if snap["version"] is not None else f"none (staged on {snap.get('parent')}, discarded)"
    snapshot = (f'<p id="snapshot">Snapshot: table <code>{_e(snap["table"])}</code>, Delta version'
                f' <code>{_e(version)}</code>, catalog generation'
                f' <code>{_e(snap["generation"] if snap["generation"] is not None else "none (not published)")}'
                "</code>.</p>")
    return (f'<section id="decision" class="banner {decision}"><h1>Release decision: {head}</h1>'
            + "".join(f"<p>{line}</p>" for line in lines) + snapshot + "</section>")


def _next_steps(packet: dict[str, Any]) -> str:
    items = []
    for s in packet.get("next_steps", []):
        cmd = f'<pre class="cmd">{_e(s["command"])}</pre>' if s.get("command") else ""
        items.append(f"<li>{_e(s['what'])}{cmd}</li>")
    return f'<section id="next-steps"><h2>Next steps</h2><ol>{"".join(items)}</ol></section>'


def _checks(packet: dict[str, Any]) -> str:
    rows = []
    for name, c in packet["checks"].items():
        obs, thr = _observed(c)
        rows.append([_e(name), f'<span class="{"ok" if c["passed"] else "fail"}">{"pass" if c["passed"] else "FAIL"}'
                     "</span>", _e(obs), _e(thr), _e(c["detail"])])
    failed_first = sorted(rows, key=lambda r: "FAIL" not in r[1])
    return ('<section id="checks"><h2>Checks</h2>'
            + _table(["check", "result", "observed", "threshold", "evidence"], failed_first, table_id="checks-table")
            + "</section>")


def _charts(packet: dict[str, Any]) -> str:
    charts = []
    checks = packet["checks"]
    per_batch = (checks.get("rejected_per_batch") or {})
    limit = per_batch.get("per_batch_limit")
    batches = [b for b in packet["counts"]["batches"] if b.get("counted", True)]  # those the check judges
    if batches:
        charts.append(bar_chart(
            "Rejected share per batch", [(_short_source(b), b["quarantined"] / b["extracted"]
                                          if b["extracted"] else 0.0) for b in batches],
            "", "chart-rejected", threshold=limit, threshold_label="per-batch limit", fmt=_pct))
    shares = [(n, float(checks[n]["observed"]), float(checks[n]["threshold"]), checks[n].get("direction", "<="))
              for n in ("rejected_per_batch", "rejected_overall", "late_events", "stale_events", "moved_orders")
              if n in checks and checks[n].get("threshold") is not None]
    for n, obs, thr, direction in shares:
        what = ("share of the run's lines in batches within the per-batch limit" if n == "rejected_per_batch"
                else n.replace("_", " "))
        charts.append(bar_chart(f"{what}: observed vs threshold", [("observed", obs)], "",
                                f"chart-{n.replace('_', '-')}", threshold=thr, fmt=_pct, direction=direction))
    audit = packet.get("audit") or {}
    if audit:
        full = float(audit["bytes"]["full_scan"])
        limit_bytes = full * float((checks.get("audit_bytes") or {}).get("threshold", 1.0))
        charts.append(bar_chart("Bytes scanned: audit query vs full scan",
                                [(f"audit days {audit['days'][0]}..{audit['days'][1]}",
                                  float(audit["bytes"]["scanned"])),
                                 ("full scan", full)], "bytes", "chart-bytes", threshold=limit_bytes,
                                threshold_label="audit limit", fmt=human_bytes, judged=0))
    planning = packet.get("planning_ms") or {}
    charts.append(bar_chart("Planning time (p95, ms)", [(k, float(v)) for k, v in planning.items()], "ms",
                            "chart-planning") if planning else
                  '<p class="muted">Planning times are measured only when a release ships.</p>')
    return '<section id="charts"><h2>Thresholds and charts</h2>' + "\n".join(charts) + "</section>"


def _short_source(b: dict[str, Any]) -> str:
    """A chart label: the source file's name (and part) with the batch id."""
    src = (b.get("sources") or [{}])[0]
    name = Path(str(src.get("path") or b.get("source") or "")).name or "batch"
    part = f" part {src['part']}/{src['parts']}" if src.get("parts") else ""
    return f"{name}{part} ({b['batch_id'][:8]})"


def _counts(packet: dict[str, Any]) -> str:
    counts = packet["counts"]
    batch_rows = []
    for b in counts["batches"]:
        sources = "<br>".join(f"<code>{_e(source_text(src))}</code>" for src in b.get("sources", [])) or "-"
        dup = duplicate_text(b) if "sent" in b else ""
        mark = f'<br><span class="dup">duplicate: {_e(dup)}</span>' if dup else ""
        batch_rows.append([f"<code>{_e(b['batch_id'])}</code>", sources + mark, b["extracted"], b["accepted"],
                           b["quarantined"],
                           _e(", ".join(f"{k} {v}" for k, v in sorted(b["reasons"].items())) or "-"),
                           _e("-" if b["version"] is None else b["version"])])
    counted = counts.get("counted_batches", len(counts["batches"]))
    label = (f'<b>total</b><br><span class="muted">{counted} batch(es) this run applies, each once</span>'
             if any(b.get("duplicate") for b in counts["batches"]) else "<b>total</b>")
    batch_rows.append([label, "", counts["extracted"], counts["accepted"], counts["quarantined"], "", ""])
    reason_rows = [[_e(k), v, _pct(v / counts["extracted"] if counts["extracted"] else 0)]
                   for k, v in sorted(counts["by_reason"].items(), key=lambda kv: -kv[1])]
    return ('<section id="counts"><h2>Counts</h2>'
            + _table(["batch", "source", "extracted", "accepted", "quarantined", "reasons", "version"],
                     [[c if isinstance(c, str) else f"{c:,}" for c in r] for r in batch_rows], numeric={2, 3, 4},
                     table_id="counts-table")
            + "<h3>Rejected lines by reason</h3>"
            + (_table(["reason", "lines", "share of extracted"], [[r[0], f"{r[1]:,}", r[2]] for r in reason_rows],
                      numeric={1, 2}, table_id="reasons-table") if reason_rows else "<p>No line was rejected.</p>")
            + "</section>")


def _rollback(packet: dict[str, Any]) -> str:
    plan = packet["rollback_plan"]
    parts = ['<section id="rollback"><h2>Rollback plan</h2>']
    cur = plan.get("current")
    if cur:
        orders = "?" if cur["orders"] is None else f"{cur['orders']:,}"
        parts.append(f"<p>Readers now get version <b>{_e(cur['version'])}</b> (generation {_e(cur['generation'])},"
                     f" {_e(orders)} orders).</p>")
    target = plan.get("target")
    if target:
        parts.append(f"<p>Target: version <b>{_e(target['version'])}</b> (generation {_e(target['generation'])}),"
                     f" which holds {_e(target['holds'])}. Mode: {_e(plan['mode'])}.</p>")
    parts.append(f"<p>{_e(plan['reason'])}.</p>")
    if plan.get("command"):
        parts.append(f'<pre class="cmd">{_e(plan["command"])}</pre>')
    return "".join(parts) + "</section>"


def _cost(packet: dict[str, Any]) -> str:
    rows = []
    for k, v in packet["cost"].items():
        shown = human_bytes(v) if k.endswith("bytes") and isinstance(v, int | float) else (
            f"{v:,}" if isinstance(v, int) else v)
        rows.append([_e(k.replace("_", " ")), _e(shown)])
    return '<section id="cost"><h2>Cost</h2>' + _table(["what", "value"], rows, numeric={1}) + "</section>"


def _pending(packet: dict[str, Any]) -> str:
    rows = [[_e(i["what"]), _e(i["until"]), "beyond the release window" if i["beyond_release_window"] else ""]
            for i in packet["pending"]["items"]]
    win = packet["pending"]["release_window"]
    return (f'<section id="pending"><h2>Pending evidence</h2><p>Release window {_e(win["start"])} to '
            f'{_e(win["end"])}.</p>' + _table(["what still holds data", "until", ""], rows) + "</section>")


def _about(packet: dict[str, Any], digest: str) -> str:
    tool = packet.get("tool", {})
    cfg = packet.get("config", {})
    rows = [["tool", _e(f"{tool.get('name', 'delta-release')} {tool.get('version', '?')}")],
            ["run", _e(packet["run_id"])], ["created", _e(packet["created"])],
            ["lake", f"<code>{_e(packet.get('lake', '?'))}</code> (from {_e(cfg.get('lake_from', 'config'))})"],
            ["config", f"<code>{_e(cfg.get('path', '?'))}</code> sha256 <code>{_e(cfg.get('sha256', '?'))}</code>"],
            ["packet", f"<code>packet.json</code> sha256 <code>{_e(digest)}</code>"],
            ["schema versions seen", _e(", ".join(map(str, packet["schema_versions"])))]]
    return '<section id="about"><h2>About this run</h2>' + _table(["", ""], rows) + "</section>"


def render_report(packet: dict[str, Any], digest: str, path: Path) -> Path:
    body = "\n".join([_decision(packet), _next_steps(packet), _checks(packet), _charts(packet), _counts(packet),
                      _rollback(packet), _cost(packet), _pending(packet), _about(packet, digest)])
    page = (f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><title>Release {_e(packet["run_id"])}: '
            f'{_e(packet["decision"].upper())}</title><style>{_CSS}</style></head>\n<body>\n'
            f'<p class="muted"><a href="../index.html">All runs</a></p>\n{body}\n</body></html>\n')
    path.write_text(page, encoding="utf-8")
    return path


def render_index(packet_dir: Path) -> Path:
    """`index.html` in the packet directory: every run with a packet, newest first."""
    rows = []
    for packet_path in sorted(packet_dir.glob("*/packet.json"), reverse=True):
        try:
            p = json.loads(packet_path.read_bytes())
        except (OSError, ValueError):
            continue
        run = packet_path.parent.name
        snap = p.get("snapshot", {})
        ok = p.get("decision") == "ship"
        rows.append([f'<a href="{_e(run)}/report.html">{_e(run)}</a>', _e(p.get("created", "")),
                     f'<span class="{"ok" if ok else "fail"}">{_e(str(p.get("decision", "?")).upper())}</span>',
                     _e("-" if snap.get("version") is None else snap["version"]),
                     _e("-" if snap.get("generation") is None else snap["generation"]),
                     _e(", ".join(p.get("failed_checks", [])) or "-"), f"<code>{_e(p.get('lake', '?'))}</code>"])
    page = (f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><title>Release runs</title>'
            f"<style>{_CSS}</style></head>\n<body>\n<h1>Release runs</h1>\n"
            + _table(["run", "created", "decision", "version", "generation", "failed checks", "lake"], rows,
                     table_id="runs")
            + "\n</body></html>\n")
    out = packet_dir / "index.html"
    packet_dir.mkdir(parents=True, exist_ok=True)
    out.write_text(page, encoding="utf-8")
    return out
