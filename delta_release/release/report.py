"""The report a person reads: one self-contained HTML page with inline SVG charts."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any


def bar_chart(title: str, bars: list[tuple[str, float]], unit: str, chart_id: str) -> str:
    width, row, left = 640, 34, 190
    top = max((v for _, v in bars), default=0.0) or 1.0
    height = 40 + row * len(bars)
    parts = [f'<svg id="{chart_id}" role="img" aria-label="{html.escape(title)}" xmlns="http://www.w3.org/2000/svg" '
             f'width="{width}" height="{height}" viewBox="0 0 {width} {height}">',
             f'<text x="0" y="18" font-size="14" font-weight="bold">{html.escape(title)}</text>']
    for i, (label, value) in enumerate(bars):
        y = 30 + i * row
        w = max(1.0, (width - left - 120) * value / top)
        parts.append(f'<text x="0" y="{y + 17}" font-size="12">{html.escape(label)}</text>')
        parts.append(f'<rect x="{left}" y="{y}" width="{w:.1f}" height="22" fill="#3b6ea5"/>')
        parts.append(f'<text x="{left + w + 6:.1f}" y="{y + 17}" font-size="12">{value:,.3f} {unit}</text>'
                     if unit == "ms" else
                     f'<text x="{left + w + 6:.1f}" y="{y + 17}" font-size="12">{value:,.0f} {unit}</text>')
    parts.append("</svg>")
    return "\n".join(parts)


def render_report(packet: dict[str, Any], digest: str, path: Path) -> Path:
    snap = packet["snapshot"]
    audit = packet.get("audit") or {}
    bytes_chart = bar_chart("Bytes scanned: audit query vs full scan",
                            [(f"audit days {audit.get('days', ['?', '?'])[0]}..{audit.get('days', ['?', '?'])[1]}",
                              float(audit.get("bytes", {}).get("scanned", 0))),
                             ("full scan", float(audit.get("bytes", {}).get("full_scan", 0)))], "bytes", "chart-bytes")
    planning = packet.get("planning_ms") or {}
    plan_chart = bar_chart("Planning time (p95, ms)", [(k, float(v)) for k, v in planning.items()], "ms",
                           "chart-planning") if planning else "<p>No planning times were recorded.</p>"
    rows = "\n".join(
        f"<tr><td>{html.escape(name)}</td><td class={'ok' if c['passed'] else 'fail'}>"
        f"{'pass' if c['passed'] else 'FAIL'}</td><td>{html.escape(str(c['detail']))}</td></tr>"
        for name, c in packet["checks"].items())
    pending = "\n".join(f"<li>{html.escape(i['what'])}: until {html.escape(i['until'])}"
                        f"{' (beyond the release window)' if i['beyond_release_window'] else ''}</li>"
                        for i in packet["pending"]["items"])
    plan = packet["rollback_plan"]
    body = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Release {html.escape(packet['run_id'])}</title>
<style>body{{font-family:sans-serif;max-width:900px;margin:2em auto}} td,th{{padding:4px 8px;text-align:left}}
.ok{{color:#196619}} .fail{{color:#a11}} code{{background:#eee;padding:1px 4px}}</style></head>
<body>
<h1>Release decision: {html.escape(packet['decision'].upper())}</h1>
<p id="snapshot">Snapshot: table <code>{html.escape(snap['table'])}</code>, Delta version
<code>{snap['version']}</code>, catalog generation <code>{snap['generation']}</code>.
Schema versions seen: {', '.join(map(str, packet['schema_versions']))}.</p>
<p>Packet <code>packet.json</code>, sha256 <code>{digest}</code>.</p>
<h2>Checks</h2><table><tr><th>check</th><th>result</th><th>evidence</th></tr>{rows}</table>
<h2>Pruning</h2>{bytes_chart}
<h2>Planning</h2>{plan_chart}
<h2>Counts</h2><p>extracted {packet['counts']['extracted']}, accepted {packet['counts']['accepted']},
quarantined {packet['counts']['quarantined']} {html.escape(str(packet['counts']['by_reason']))}</p>
<h2>Rollback plan</h2><p>{html.escape(plan['mode'])}: {html.escape(str(plan.get('command', '')))}
({html.escape(plan['reason'])})</p>
<h2>Cost</h2><ul>{''.join(f'<li>{html.escape(k)}: {html.escape(str(v))}</li>' for k, v in packet['cost'].items())}</ul>
<h2>Pending evidence</h2><ul>{pending}</ul>
</body></html>
"""
    path.write_text(body, encoding="utf-8")
    return path
