"""The release manager's report (issue 15 item 4), checked in a real browser: headless Chromium from the
distribution's packages. Skipped when Chromium is absent, unless CI is set (then it fails)."""

from __future__ import annotations

import hashlib
import html
import json
import os
import re
import shutil
import struct
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from delta_release import __version__
from delta_release.cli.main import cli
from delta_release.release.report import SECTIONS
from tests.conftest import ORDERS
from tests.release.conftest import garbage_batch, write_config


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed (CI is set): .ci/run installs it with apt-get")
        pytest.skip("chromium is not installed (apt-get install -y chromium)")
    return found


def browse(page: Path, screenshot: Path | None = None) -> tuple[str, list[str]]:
    """(the DOM after load, console messages) of `page`; with `screenshot`, also a 1280 px wide PNG."""
    base = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
            f"--user-data-dir={page.parent / '.chromium'}"]
    dom = subprocess.run([*base, "--enable-logging=stderr", "--v=1", "--dump-dom", page.as_uri()],
                         capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    console = [line for line in dom.stderr.splitlines() if ":CONSOLE" in line]
    if screenshot is not None:
        shot = subprocess.run([*base, "--window-size=1280,2600", f"--screenshot={screenshot}", page.as_uri()],
                              capture_output=True, text=True, timeout=120)
        assert shot.returncode == 0 and screenshot.is_file(), shot.stderr[-2000:]
    return dom.stdout, console


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:  # type: ignore[type-arg]
    """A shipped run on a fresh lake whose sources send v2.jsonl twice (a resend: the same bytes under
    another name), then a held run (95% garbage, and v2.jsonl again: applied before) on the same lake and
    packet directory."""
    tmp = tmp_path_factory.mktemp("report")
    resent = tmp / "v2-resent.jsonl"
    resent.write_bytes((ORDERS / "v2.jsonl").read_bytes())
    out = {}
    sources = [str(ORDERS / n) for n in ("history.jsonl", "v2.jsonl", "v3.jsonl", "bad.jsonl")] + [str(resent)]
    ship = CliRunner().invoke(cli, ["--json", "run", str(write_config(tmp, batches=sources))])
    assert ship.exit_code == 0, ship.output
    out["ship"] = json.loads(ship.stdout)
    hold_cfg = write_config(tmp, batches=[str(garbage_batch(tmp / "garbage.jsonl")), str(resent)])
    hold = CliRunner().invoke(cli, ["--json", "run", str(hold_cfg)])
    assert hold.exit_code == 3, hold.output
    out["hold"] = json.loads(hold.stdout)
    return out


def test_console_detection_catches_errors(tmp_path: Path) -> None:
    """The browser check can fail: a page with a console error and a script error is caught."""
    bad = tmp_path / "bad.html"
    bad.write_text('<html><body><script>console.error("boom"); not_defined();</script></body></html>')
    _, console = browse(bad)
    assert any("boom" in c for c in console) and any("not_defined" in c for c in console)


@pytest.mark.parametrize("kind", ["hold", "ship"])
def test_report_in_a_browser(runs, kind: str, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    result = runs[kind]
    report = Path(result["report"])
    shot = Path(os.environ.get("REPORT_SCREENSHOT_DIR", str(tmp_path))) / f"report-{kind}.png"
    dom, console = browse(report, shot)
    assert console == [], console
    missing = [s for s in SECTIONS if f'id="{s}"' not in dom]
    assert missing == [], f"sections missing from the rendered page: {missing}"
    width, height = png_size(shot)
    assert width == 1280 and height > 1000
    text = re.sub(r"<[^>]+>", " ", dom)
    assert "{'" not in text and "None" not in text  # no Python dicts or None leak into the page
    assert f"delta-release {__version__}" in text and result["lake"] in text  # tool version, lake
    packet = json.loads(Path(result["packet"]).read_bytes())
    assert packet["config"]["sha256"] in dom
    assert 'class="threshold"' in dom  # thresholds drawn on the charts
    assert "KiB" in text  # bytes formatted
    plan = packet["rollback_plan"]
    if kind == "hold":  # the held run published nothing: no plan withdraws the earlier release
        assert plan["mode"] == "none" and plan["target"] is None and plan["command"] is None
        assert "nothing to roll back" in _section(text, "Rollback plan", "Cost")
        assert "rollback --to" not in dom and "withdraws every order" not in text
        assert dom.index('id="decision"') < dom.index('id="checks"')
        assert "Held because" in text and "rejected_overall" in text
        assert "Nothing was published" in text
    else:
        assert plan["target"]["version"] != plan["current"]["version"]
        assert plan["command"] == f"delta-release --lake {result['lake']} rollback --to {plan['target']['version']}"
        assert "Release decision: SHIP" in text and "the empty table" in text  # target: version 0
    assert f"--lake {result['lake']}" in dom


def test_index_lists_past_runs(runs) -> None:  # type: ignore[no-untyped-def]
    index = Path(runs["hold"]["index"])
    assert index == Path(runs["ship"]["index"])
    dom, console = browse(index)
    assert console == []
    for kind in ("ship", "hold"):
        run_dir = Path(runs[kind]["report"]).parent.name
        assert f'href="{run_dir}/report.html"' in dom
    assert dom.index(Path(runs["hold"]["report"]).parent.name) < dom.index(Path(runs["ship"]["report"]).parent.name)


def _section(text: str, start: str, end: str) -> str:
    return text[text.index(start):text.index(end, text.index(start))]


def _cells(dom: str, table_id: str) -> list[list[str]]:
    """The text of each cell of each row of the table `table_id` (header row left out)."""
    body = dom[dom.index(f'id="{table_id}"'):]
    body = body[:body.index("</table>")]
    rows = re.findall(r"<tr>(.*?)</tr>", body, flags=re.S)[1:]
    return [[html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", c))).strip()
             for c in re.findall(r"<td[^>]*>(.*?)</td>", r, re.S)] for r in rows]


def _num(cell: str) -> int:
    return int(cell.replace(",", ""))


@pytest.mark.parametrize("kind", ["hold", "ship"])
def test_report_says_one_set_of_counts(runs, kind: str) -> None:  # type: ignore[no-untyped-def]
    """Issue 35 item 2: a resent batch is listed once, marked, with its source files; every table and
    check of the rendered page says the same totals; thresholds show their direction; no None or repr."""
    result = runs[kind]
    dom, console = browse(Path(result["report"]))
    assert console == []
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", dom))
    for leak in ("None", "{'", "['", "'}", "']"):
        assert leak not in text, (leak, text[max(0, text.find(leak) - 200):text.find(leak) + 50])
    packet = json.loads(Path(result["packet"]).read_bytes())
    counts = packet["counts"]
    resent_id = hashlib.sha256((ORDERS / "v2.jsonl").read_bytes()).hexdigest()[:16]

    # the counts table: each batch once, with its source path(s); the resend marked as a duplicate
    rows = _cells(dom, "counts-table")
    *batches, total = rows
    ids = [r[0] for r in batches]
    assert len(ids) == len(set(ids)) == len(counts["batches"])
    resent_row = batches[ids.index(resent_id)]
    assert "v2-resent.jsonl" in resent_row[1] and "duplicate" in resent_row[1]
    if kind == "ship":
        assert counts["received"] == 5 and len(batches) == 4
        assert "v2.jsonl" in resent_row[1] and "received 2 times" in resent_row[1]
        assert all("fixtures/orders/" in r[1] for r in batches)  # every batch names its source file
        counted = batches
    else:  # v2.jsonl was applied by the shipped run: listed, marked, not in the totals
        assert "already applied" in resent_row[1]
        counted = [r for r in batches if r[0] != resent_id]
        assert len(counted) == 1 and "garbage.jsonl" in counted[0][1]
    extracted, accepted, quarantined = (sum(_num(r[i]) for r in counted) for i in (2, 3, 4))
    assert [_num(c) for c in total[2:5]] == [extracted, accepted, quarantined]
    assert (counts["extracted"], counts["accepted"], counts["quarantined"]) == (extracted, accepted, quarantined)
    assert accepted + quarantined == extracted

    # the checks say the same numbers
    checks = {r[0]: r for r in _cells(dom, "checks-table")}
    assert f"{quarantined} of {extracted} lines rejected" in checks["rejected_overall"][4]
    assert f"of {accepted} accepted events" in checks["late_events"][4]
    assert f"of {len(counted)} batches over" in checks["rejected_per_batch"][4]
    if quarantined:
        assert sum(_num(r[1]) for r in _cells(dom, "reasons-table")) == quarantined
    # the per-batch chart: one bar per counted batch, labelled by its file
    chart = dom[dom.index('id="chart-rejected"'):]
    chart = chart[:chart.index("</svg>")]
    assert chart.count("<rect") == len(counted)
    assert ("garbage.jsonl" if kind == "hold" else "history.jsonl") in chart

    # thresholds with their direction: rejected_per_batch passes at or above, the others at or below
    assert checks["rejected_per_batch"][3].startswith(">= ")
    for name in ("rejected_overall", "rejected_by_reason", "late_events", "stale_events", "moved_orders",
                 "audit_bytes"):
        assert checks[name][3].startswith("<= "), (name, checks[name])
    assert packet["checks"]["rejected_per_batch"]["direction"] == ">="
    assert packet["thresholds"]["direction"]["rejected_per_batch"] == ">="
    assert packet["thresholds"]["direction"]["late_events"] == "<="


def test_index_shows_no_none_for_a_held_run(runs) -> None:  # type: ignore[no-untyped-def]
    dom, _ = browse(Path(runs["hold"]["index"]))
    text = re.sub(r"<[^>]+>", " ", dom)
    assert "None" not in text
    held = next(r for r in _cells(dom, "runs") if r[2] == "HOLD")
    assert held[3] == "-" and held[4] == "-"


def test_run_summary_shows_threshold_directions(runs) -> None:  # type: ignore[no-untyped-def]
    summary = {s["check"]: s for s in runs["ship"]["summary"]}
    assert summary["rejected_per_batch"]["direction"] == ">=" and summary["late_events"]["direction"] == "<="


def test_a_rerun_that_changes_nothing_has_nothing_to_roll_back(tmp_path: Path) -> None:
    """The same sources again: every batch was applied by the first run; the rerun ships the same version
    under a new generation, so its plan withdraws nothing (it offered the empty version 0 before)."""
    config = write_config(tmp_path)
    first = CliRunner().invoke(cli, ["--json", "run", str(config)])
    assert first.exit_code == 0, first.output
    again = CliRunner().invoke(cli, ["--json", "run", str(config)])
    assert again.exit_code == 0, again.output
    out = json.loads(again.stdout)
    assert out["snapshot"]["version"] == json.loads(first.stdout)["snapshot"]["version"]
    packet = json.loads(Path(out["packet"]).read_bytes())
    assert packet["rollback_plan"]["mode"] == "none" and packet["rollback_plan"]["command"] is None
    counts = packet["counts"]
    assert all(b["applied_before"] and not b["counted"] for b in counts["batches"])
    assert (counts["extracted"], counts["accepted"], counts["quarantined"]) == (0, 0, 0)
    text = re.sub(r"<[^>]+>", " ", Path(out["report"]).read_text())
    assert "nothing to roll back" in text and "rollback --to" not in text and "None" not in text
