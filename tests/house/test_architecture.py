"""The import graph of the package, parsed with `ast`: the layering the architecture depends on.

Every import of every module counts, at any depth: module level, function bodies and `TYPE_CHECKING`
blocks alike (an import there is still a dependency, and a loop closed through it is still a loop).

- the module graph has no loop at all;
- each module imports only from its own layer or the layers below it, as the module table of
  docs/architecture.md places them (top to bottom; the most specific entry places a module), and every
  module is placed there;
- `commit/` imports nothing above its floor (no upkeep, no erasure, no writer above it);
- nothing below the facade imports `delta_release.lake` (not even under TYPE_CHECKING); lower layers never
  import the CLI, the drills or the release run (those sit on top of the facade);
- `deltalake` is imported only in `_delta.py`, `polars.scan_delta` is called only there;
- the crash drill does not import the CLI (its child process runs it);
- only the writer commits.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "delta_release"
DOC = ROOT / "docs" / "architecture.md"
UPPER = ("delta_release.lake", "delta_release.cli", "delta_release.drills", "delta_release.release",
         "delta_release.__init__", "delta_release.__main__")
# commit/'s floor: what the one writer path may use (no erasure, quarantine, upkeep, gateway reader, writer)
COMMIT_FLOOR = ("delta_release.commit", "delta_release.context", "delta_release.stage", "delta_release.index",
                "delta_release.evidence", "delta_release.gateway.catalog", "delta_release.gateway.engines",
                "delta_release._delta",
                "delta_release.errors", "delta_release.faults", "delta_release.storage",
                "delta_release.progress")  # a leaf like faults: the writer marks its phases for the ETA

# what the command line may import: the facade, the release run, the drills and the kernel; every user verb
# is a `Lake` method (#38 item 3)
CLI_FLOOR = ("delta_release.cli", "delta_release.lake", "delta_release.__init__", "delta_release.errors",
             "delta_release.release.run", "delta_release.drills", "delta_release.progress",
             "delta_release.arguments", "delta_release.retention", "delta_release.s3config")


def _module(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    return ".".join(rel.parts)


MODULES = frozenset(_module(p) for p in PKG.rglob("*.py"))


def _imports(path: Path) -> set[str]:
    """Every module `path` imports, absolute, at any depth (function bodies and TYPE_CHECKING included)."""
    mod = _module(path)
    package = mod.rsplit(".", 1)[0]  # a package's __init__ too: `from .x` in it is a sibling of __init__
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
            for alias in node.names:  # `from pkg import module` imports the module; `import name`, pkg
                full = f"{root}.{alias.name}"
                out.add(full if full in MODULES or f"{full}.__init__" in MODULES else root)
    return out


@functools.cache
def _parsed() -> dict[str, set[str]]:
    return {_module(p): _imports(p) for p in PKG.rglob("*.py")}


def _graph() -> dict[str, set[str]]:
    return {mod: set(imps) for mod, imps in _parsed().items()}


def _edges() -> dict[str, set[str]]:
    """module -> the package modules it imports (a package is its `__init__`; `from pkg import name` of a
    name that is not a module is an import of `pkg`)."""
    def resolve(name: str) -> str | None:
        while name.startswith("delta_release"):
            for candidate in (name, f"{name}.__init__"):
                if candidate in MODULES:
                    return candidate
            name = name.rpartition(".")[0]
        return None

    return {mod: {t for t in map(resolve, imps) if t is not None and t != mod} for mod, imps in _graph().items()}


def _cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One import loop of `edges` (as a path that returns to its start), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(mod: str) -> list[str] | None:
        state[mod] = 1
        path.append(mod)
        for dep in sorted(edges[mod]):
            if state.get(dep) == 1:
                return path[path.index(dep):] + [dep]
            if dep not in state:
                found = visit(dep)
                if found:
                    return found
        path.pop()
        state[mod] = 2
        return None

    for mod in sorted(edges):
        if mod not in state:
            found = visit(mod)
            if found:
                return found
    return None


def _doc_layers() -> tuple[list[str], dict[str, str]]:
    """The layers of docs/architecture.md's module table, top to bottom, and entry -> layer, an entry being a
    module (`delta_release.erasure.permission`) or a package prefix (`delta_release.cli`)."""
    text = DOC.read_text(encoding="utf-8")
    table = text.split("## Modules", 1)[1].split("\n### ", 1)[0]
    order: list[str] = []
    entries: dict[str, str] = {}
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or cells[0] in ("layer", "") or set(cells[0]) <= {"-", " "}:
            continue
        layer = cells[0]
        if layer not in order:
            order.append(layer)
        for name in re.findall(r"`([\w/]+(?:\.py|/))`", cells[1]):
            dotted = "delta_release." + name.removesuffix("/").removesuffix(".py").replace("/", ".")
            entries[dotted] = layer
    return order, entries


def _layer_of(mod: str, entries: dict[str, str]) -> str | None:
    """The layer of the most specific entry naming `mod` (itself, or a package holding it)."""
    best = max((e for e in entries if mod == e or mod.startswith(e + ".")), key=len, default=None)
    return None if best is None else entries[best]


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
    edges = _edges()
    assert "delta_release._delta" in edges["delta_release.commit.writer"]  # `from .. import _delta`
    assert "delta_release.index.__init__" in edges["delta_release.commit.writer"]  # a package is its __init__


def test_the_loop_finder_finds_a_loop_through_any_import() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_no_import_loop_at_all() -> None:
    """Not through TYPE_CHECKING blocks, not through imports inside functions: none."""
    assert _cycle(_edges()) is None


def test_every_module_is_placed_in_the_documented_layers() -> None:
    order, entries = _doc_layers()
    assert len(order) >= 8, order  # entry ... bottom
    unplaced = sorted(m for m in _graph() if _layer_of(m, entries) is None)
    assert unplaced == [], "add them to the module table of docs/architecture.md"
    stale = sorted(e for e in entries if not any(m == e or m.startswith(e + ".") for m in _graph()))
    assert stale == [], "the module table names modules that do not exist"


def test_each_layer_imports_only_its_own_or_the_layers_below() -> None:
    order, entries = _doc_layers()
    rank = {layer: i for i, layer in enumerate(order)}  # 0: the top
    bad = sorted(f"{mod} ({_layer_of(mod, entries)}) imports {dep} ({_layer_of(dep, entries)})"
                 for mod, deps in _edges().items() for dep in deps
                 if rank[_layer_of(dep, entries) or order[0]] < rank[_layer_of(mod, entries) or order[-1]])
    assert bad == []


def test_the_committer_imports_nothing_above_its_floor() -> None:
    bad = sorted(f"{mod} imports {dep}" for mod, deps in _edges().items() if _is(mod, "delta_release.commit")
                 for dep in deps if not any(_is(dep, f) for f in COMMIT_FLOOR))
    assert bad == []


def test_the_command_line_imports_only_the_facade_the_run_the_drills_and_the_kernel() -> None:
    bad = sorted(f"{mod} imports {dep}" for mod, deps in _edges().items() if _is(mod, "delta_release.cli")
                 for dep in deps if not any(_is(dep, f) for f in CLI_FLOOR))
    assert bad == [], "put the verb on Lake and call it from the CLI"


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


def test_drills_do_not_import_the_release_run() -> None:
    """The release run runs the drills; a drill stages through the writer API (no Release <-> Drills loop)."""
    bad = sorted(f"{mod} imports {dep}" for mod, deps in _edges().items() if _is(mod, "delta_release.drills")
                 for dep in deps if _is(dep, "delta_release.release"))
    assert bad == []


def test_crash_drill_does_not_import_the_cli() -> None:
    assert not [i for i in _graph()["delta_release.drills.crash"] if _is(i, "delta_release.cli")]


def test_one_writer_path() -> None:
    """Only the writer commits: no other module calls `_delta.commit`."""
    callers = sorted(_module(p) for p in PKG.rglob("*.py")
                     if any(isinstance(n, ast.Attribute) and n.attr == "commit" and isinstance(n.value, ast.Name)
                            and n.value.id == "_delta" for n in ast.walk(ast.parse(p.read_text(encoding="utf-8")))))
    assert callers == ["delta_release.commit.writer"]


MAX_FUNCTION_LINES = 80


def test_no_function_over_80_lines() -> None:
    """A step of its own per thing a function does (#38 item 3: run_release, run_freshness_drill): a function of
    the package, decorators included, is at most 80 lines."""
    long = []
    for path in sorted(PKG.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                first = node.decorator_list[0].lineno if node.decorator_list else node.lineno
                size = (node.end_lineno or node.lineno) - first + 1
                if size > MAX_FUNCTION_LINES:
                    long.append(f"{_module(path)}.{node.name}: {size} lines")
    assert long == []
