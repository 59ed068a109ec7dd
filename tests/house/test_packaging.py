"""The package works outside the repository: a wheel built from the checkout, installed non-editable.

Everything the package reads at run time (the table definitions, py.typed) must be in the wheel. The
wheel is built from a copy of only what a wheel is made of (pyproject.toml, README.md, delta_release/),
installed with `pip install --no-deps --target SITE`, and run with the shared interpreter (which has the
dependencies) from a temporary folder, with PYTHONPATH=SITE and the checkout nowhere on sys.path.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "fixtures"


def _run(args: list[str], *, cwd: Path, site: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSAFEPATH")}
    env["PYTHONPATH"] = str(site)
    env.pop("DELTA_RELEASE_CATALOG", None)
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(site, wheel): the wheel built from the checkout and installed into SITE."""
    work = tmp_path_factory.mktemp("packaging")
    src = work / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, src / name)
    # A copy, so the build writes no build/ or *.egg-info into the checkout and no stale build/lib
    # from an earlier build can smuggle a file into the wheel.
    shutil.copytree(REPO / "delta_release", src / "delta_release",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                            "-w", str(work / "wheel"), str(src)],
                           cwd=work, capture_output=True, text=True, timeout=180, check=False)
    assert built.returncode == 0, built.stderr[-2000:]
    wheels = list((work / "wheel").glob("delta_release-*.whl"))
    assert len(wheels) == 1, wheels
    site = work / "site"
    inst = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-compile", "-q",
                           "--target", str(site), str(wheels[0])],
                          cwd=work, capture_output=True, text=True, timeout=180, check=False)
    assert inst.returncode == 0, inst.stderr[-2000:]
    return site, wheels[0]


def test_wheel_ships_table_definitions_and_py_typed(installed: tuple[Path, Path]) -> None:
    _, wheel = installed
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "delta_release/py.typed" in names
    shipped = {n for n in names if n.startswith("delta_release/table_defs/") and n.endswith(".yaml")}
    source = {f"delta_release/table_defs/{p.name}" for p in (REPO / "delta_release" / "table_defs").glob("*.yaml")}
    assert source and shipped == source
    assert not any(n.startswith(("tests/", "benchmarks/", "fixtures/")) for n in names)


def test_installed_package_ingests_reads_and_runs_from_another_folder(installed: tuple[Path, Path],
                                                                     tmp_path: Path) -> None:
    site, _ = installed
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    py = [sys.executable]

    where = _run(py + ["-c", "import json, os, sys, delta_release;"
                       " print(json.dumps([delta_release.__file__, [os.path.abspath(p) for p in sys.path]]))"],
                 cwd=cwd, site=site)
    assert where.returncode == 0, where.stderr
    module_file, sys_path = json.loads(where.stdout)
    assert Path(module_file).is_relative_to(site), f"imported {module_file}, not the installed wheel"
    # the checkout's own folders stay off sys.path; the environment's site-packages may live in it (.venv)
    env = Path(sys.prefix).resolve()
    assert not any(Path(p).is_relative_to(REPO) and not Path(p).resolve().is_relative_to(env) for p in sys_path), \
        sys_path

    # the console script the wheel installs
    script = _run([str(site / "bin" / "delta-release"), "--help"], cwd=cwd, site=site)
    assert script.returncode == 0, script.stderr
    assert "ingest" in script.stdout and "run" in script.stdout

    cli = py + ["-m", "delta_release", "--lake", "lake", "--json"]
    assert _run(cli + ["init"], cwd=cwd, site=site).returncode == 0  # ingest creates no lake by itself
    ingest = _run(cli + ["ingest", str(FIXTURES / "orders" / "v3.jsonl")], cwd=cwd, site=site)
    assert ingest.returncode == 0, ingest.stdout + ingest.stderr
    report = json.loads(ingest.stdout)
    assert report["accepted"] > 0 and report["accepted"] + report["quarantined"] == report["extracted"]
    assert report["version"] == 1
    assert (cwd / "lake" / "orders" / "_delta_log").is_dir()

    read = _run(cli + ["read"], cwd=cwd, site=site)
    assert read.returncode == 0, read.stdout + read.stderr
    rows = json.loads(read.stdout)["rows"]
    assert len(rows) > 0 and all(r["order_id"].startswith("ord-") for r in rows)

    history = _run(cli + ["history"], cwd=cwd, site=site)
    assert history.returncode == 0, history.stdout + history.stderr

    # a release run from a config outside the repository, naming the repository's fixtures by absolute path
    config = cwd / "release.yaml"
    config.write_text(
        "lake: {uri: runlake, create: true}\n"
        "sources:\n"
        f"  batches: [{FIXTURES / 'orders' / 'v2.jsonl'}, {FIXTURES / 'orders' / 'v3.jsonl'},"
        f" {FIXTURES / 'orders' / 'bad.jsonl'}]\n"
        "release: {window_days: 7}\n"
        "retention: {raw_days: 30, backup_days: 35, retained_snapshots: 5}\n"
        "checks:\n"
        f"  schema_fixtures: {{v2: {FIXTURES / 'orders' / 'v2.jsonl'}, v3: {FIXTURES / 'orders' / 'v3.jsonl'}}}\n"
        "  reconciliation: true\n"
        "  checksums: true\n"
        "  pinned_query: true\n"
        "  audit: {days: '47:47', max_fraction: 1.0}\n"
        "packet: {directory: packets}\n",
        encoding="utf-8")
    # no --lake here: `run --lake` overrides the config's lake.uri (issue 15), and this run means runlake
    run = _run(py + ["-m", "delta_release", "--json", "run", str(config)], cwd=cwd, site=site, timeout=180)
    assert run.returncode == 0, run.stdout + run.stderr
    result = json.loads(run.stdout)
    assert result["decision"] == "ship", result
    assert Path(result["packet"]).is_file()
    assert Path(result["packet"]).is_relative_to(cwd / "packets")


def test_every_third_party_import_is_a_declared_dependency() -> None:
    """The wheel's tests run with the shared interpreter, which has every extra installed, so an import of
    a package that only a dev or interop extra pulls in (numpy, once) passes them and fails for a user's
    `pip install`. A module-level import of the package must be the standard library, the package itself,
    or a module of a distribution in `[project] dependencies`; an import inside a function (an optional
    feature that checks for it, e.g. the duckdb delta extension) may also come from an extra."""
    import ast
    import importlib.metadata as md
    import re
    import tomllib

    def names(specs: list[str]) -> set[str]:
        return {re.split(r"[<>=!~\[; ]", d, maxsplit=1)[0].lower().replace("_", "-") for d in specs}

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    declared = names(project["dependencies"])
    extras = declared | names([d for group in project.get("optional-dependencies", {}).values() for d in group])
    owners = md.packages_distributions()

    def imported(node: ast.AST) -> list[str]:
        if isinstance(node, ast.Import):
            return [a.name.split(".")[0] for a in node.names]
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            return [node.module.split(".")[0]]
        return []

    undeclared: dict[str, str] = {}
    for path in sorted((REPO / "delta_release").rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        top_level = {id(n) for stmt in tree.body for n in ast.walk(stmt)
                     if not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
        for node in ast.walk(tree):
            for top in imported(node):
                if top in sys.stdlib_module_names or top == "delta_release":
                    continue
                dists = {d.lower().replace("_", "-") for d in owners.get(top, [top])}
                if not dists & (declared if id(node) in top_level else extras):
                    undeclared.setdefault(top, str(path.relative_to(REPO)))
    assert undeclared == {}, f"imported but not in [project] dependencies: {undeclared}"
