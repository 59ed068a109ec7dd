"""The release manager's report (issue 15 item 4), checked in a real browser: headless Chromium from the
distribution's packages. Skipped when Chromium is absent, unless CI is set (then it fails)."""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_ops_config import garbage_batch, write_config

from delta_release import __version__
from delta_release.cli.main import cli
from delta_release.release.report import SECTIONS


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
    """A shipped run on a fresh lake, then a held run (95% garbage) on the same lake and packet directory."""
    tmp = tmp_path_factory.mktemp("report")
    out = {}
    ship = CliRunner().invoke(cli, ["--json", "run", str(write_config(tmp))])
    assert ship.exit_code == 0, ship.output
    out["ship"] = json.loads(ship.stdout)
    hold_cfg = write_config(tmp, batches=[str(garbage_batch(tmp / "garbage.jsonl"))])
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
    assert plan["target"]["version"] != plan["current"]["version"]
    assert plan["command"] == f"delta-release --lake {result['lake']} rollback --to {plan['target']['version']}"
    if plan["target"]["orders"] == 0:
        assert "the empty table" in plan["holds"] if "holds" in plan else "the empty table" in plan["target"]["holds"]
    if kind == "hold":
        assert dom.index('id="decision"') < dom.index('id="checks"')
        assert "Held because" in text and "rejected_overall" in text
        assert "Nothing was published" in text
    else:
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
