"""The import graph of the package, parsed with `ast`: the layering the architecture depends on.

- nothing below the facade imports `delta_release.lake` (not even under TYPE_CHECKING);
- lower layers never import the CLI, the drills or the release run (those sit on top of the facade);
- `deltalake` is imported only in `_delta.py`, `polars.scan_delta` is called only there;
- the crash drill does not import the CLI (its child process runs it).
"""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "delta_release"
UPPER = ("delta_release.lake", "delta_release.cli", "delta_release.drills", "delta_release.release",
         "delta_release.__init__", "delta_release.__main__")


def _module(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    return ".".join(rel.parts)


def _imports(path: Path) -> set[str]:
    """Every module `path` imports, absolute, at any depth (function bodies and TYPE_CHECKING included)."""
    mod = _module(path)
    package = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                root = ".".join(base + ([node.module] if node.module else []))
            else:
                root = node.module or ""
            out.add(root)
            out.update(f"{root}.{a.name}" for a in node.names)
    return out


def _graph() -> dict[str, set[str]]:
    return {_module(p): _imports(p) for p in PKG.rglob("*.py")}


def _is(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _lower(mod: str) -> bool:
    return not any(_is(mod, u) for u in UPPER)


def test_the_parser_sees_relative_and_type_checking_imports() -> None:
    graph = _graph()
    assert "delta_release.lake" in graph["delta_release.cli.base"]  # a function-level import
    assert "delta_release.context" in graph["delta_release.gateway.reader"]  # a TYPE_CHECKING import
    assert "delta_release.stage.candidate" in graph["delta_release.commit.writer"]  # `from ..stage.candidate`
    assert sum(_lower(m) for m in graph) > 30


def test_nothing_below_the_facade_imports_it_or_the_layers_above() -> None:
    bad = sorted(f"{mod} imports {imp}" for mod, imps in _graph().items() if _lower(mod)
                 for imp in imps for upper in UPPER if _is(imp, upper))
    assert bad == []


def test_deltalake_only_in_the_adapter() -> None:
    bad = sorted(mod for mod, imps in _graph().items()
                 if mod != "delta_release._delta" and any(_is(i, "deltalake") for i in imps))
    assert bad == []


def test_scan_delta_only_in_the_adapter() -> None:
    bad = [_module(p) for p in PKG.rglob("*.py") if _module(p) != "delta_release._delta"
           and any(isinstance(n, ast.Attribute) and n.attr == "scan_delta"
                   for n in ast.walk(ast.parse(p.read_text(encoding="utf-8"))))]
    assert bad == []


def test_crash_drill_does_not_import_the_cli() -> None:
    assert not [i for i in _graph()["delta_release.drills.crash"] if _is(i, "delta_release.cli")]


def test_one_writer_path() -> None:
    """Only the writer commits: no other module calls `_delta.commit`."""
    callers = sorted(_module(p) for p in PKG.rglob("*.py")
                     if any(isinstance(n, ast.Attribute) and n.attr == "commit" and isinstance(n.value, ast.Name)
                            and n.value.id == "_delta" for n in ast.walk(ast.parse(p.read_text(encoding="utf-8")))))
    assert callers == ["delta_release.commit.writer"]
