"""The shape docs/architecture.md draws, held by the code: ``internal`` never imports
``butler``, no import cycle between modules nor between packages (lazy and TYPE_CHECKING
imports count), no private module imported from outside its package, no file over 600
lines (modules are split by concept, and one concept may be long; past 600 it is rarely
one); and docs/architecture.md draws only package edges that exist and names only modules
that exist."""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("butler", "internal")
MAX_LINES = 600


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """Project modules ``name`` imports, anywhere in the file."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base
                       for a in node.names]
        else:
            continue
        out.update(t for t in targets if t in MODULES and t != name)
    return out


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def test_internal_never_imports_butler() -> None:
    wrong = sorted((m, t) for m, ts in GRAPH.items() if m.startswith("internal")
                   for t in ts if t.startswith("butler"))
    assert wrong == []


def test_no_import_cycles() -> None:
    """A package's ``__init__`` re-exporting its own private modules is not a cycle."""
    def edges(module: str) -> set[str]:
        return {t for t in GRAPH[module]
                if not (MODULES[module].name == "__init__.py" and t.startswith(module + "."))
                and not (MODULES[t].name == "__init__.py" and module.startswith(t + "."))}

    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(module: str, stack: list[str]) -> None:
        state[module] = 1
        for target in sorted(edges(module)):
            if state.get(target) == 1:
                cycles.append([*stack[stack.index(target):], target])
            elif target not in state:
                visit(target, [*stack, target])
        state[module] = 2

    for module in sorted(GRAPH):
        if module not in state:
            visit(module, [module])
    assert cycles == []


def test_private_modules_are_used_only_inside_their_package() -> None:
    wrong = []
    for module, targets in GRAPH.items():
        for target in targets:
            package, _, last = target.rpartition(".")
            if last.startswith("_") and not (module == package or module.startswith(package + ".")):
                wrong.append((module, target))
    assert sorted(wrong) == []


def test_no_file_over_600_lines() -> None:
    long = {name: n for name, path in MODULES.items()
            if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert long == {}


def _package(module: str) -> str:
    return module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]


def package_graph(graph: dict[str, set[str]], package: Callable[[str], str]
                  ) -> dict[str, set[str]]:
    """Package to the packages its modules import (lazy and TYPE_CHECKING imports count).
    A ``__main__`` module is a program, not a part: nothing imports it, so what it
    imports is not its package's dependency."""
    out: dict[str, set[str]] = {}
    for module, targets in graph.items():
        if module.rpartition(".")[2] == "__main__":
            continue
        source = package(module)
        out.setdefault(source, set()).update(
            t for t in map(package, targets) if t != source)
    return out


def cycles_of(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected parts of ``graph`` with more than one node (Tarjan), each
    sorted: a cycle among them, at any length."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            part = [stack.pop()]
            while part[-1] != node:
                part.append(stack.pop())
            if len(part) > 1:
                found.append(sorted(part))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def test_the_cycle_check_finds_a_cycle() -> None:
    """The check below can fail: a three-package ring, a self-import and a tail."""
    modules = {"a.x": {"b.y"}, "b.y": {"c.z", "a.w"}, "c.z": {"a.x"}, "a.w": set(),
               "d.v": {"a.x"}, "a.__main__": {"d.v"}}
    graph = package_graph(modules, lambda m: m.rpartition(".")[0])
    assert graph == {"a": {"b"}, "b": {"a", "c"}, "c": {"a"}, "d": {"a"}}
    assert cycles_of(graph) == [["a", "b", "c"]]
    assert cycles_of({"a": {"b"}, "b": set()}) == []


def test_no_package_level_import_cycles() -> None:
    """Packages form a hierarchy: no two reach each other through their modules' imports,
    even where no module-level cycle exists."""
    assert cycles_of(package_graph(GRAPH, _package)) == []


ARCHITECTURE = ROOT / "docs" / "architecture.md"


def _drawn_edges(text: str) -> list[tuple[str, str]]:
    """The package lines of the page's first code block, ``a → b, c``, as edges."""
    edges = []
    for line in text.split("```", 2)[1].splitlines():
        source, arrow, targets = line.partition("→")
        if arrow:
            edges += [(source.strip(), t.strip()) for t in targets.split(",")]
    return edges


def test_every_edge_the_architecture_page_draws_exists() -> None:
    """And each points down the page: the lines are layers."""
    text = ARCHITECTURE.read_text()
    drawn = _drawn_edges(text)
    assert drawn, "no package lines found"
    graph = package_graph(GRAPH, _package)
    assert [e for e in drawn if e[1] not in graph.get(e[0], set())] == []
    order = [line.split("→")[0].strip() for line in text.split("```", 2)[1].splitlines()
             if "→" in line]
    upward = [(a, b) for a, b in drawn if b in order and order.index(b) <= order.index(a)]
    assert upward == []


def named_paths(text: str) -> list[tuple[str, str]]:
    """Each project file or folder ``text`` names in backticks, as (as written, resolved
    path). A bare ``x.py`` or ``x/`` is read in the folder last named on its line."""
    found = []
    for line in text.splitlines():
        base: Path | None = None
        for token in re.findall(r"`([^`\s]+)`", line):
            if token.startswith(("butler/", "internal/", "tests/", "bench/", "docs/")):
                path = ROOT / token.rstrip("/")
                found.append((token, str(path)))
                base = path if not path.suffix else path.parent
            elif base is not None and (token.endswith(".py") or token.endswith("/")) \
                    and "/" not in token.rstrip("/"):
                path = base / token.rstrip("/")
                found.append((token, str(path)))
                if token.endswith("/"):
                    base = path
    return found


def test_every_module_the_architecture_page_names_exists() -> None:
    named = named_paths(ARCHITECTURE.read_text())
    assert len(named) > 50
    assert [(token, path) for token, path in named if not Path(path).exists()] == []


def test_the_path_reader_resolves_relative_names() -> None:
    line = ("| x | `butler/engine/store.py`, `task_row.py`; `butler/skills` (`mcp_servers/`: "
            "`tool.py`) |")
    assert [p for _, p in named_paths(line)] == [
        str(ROOT / "butler/engine/store.py"), str(ROOT / "butler/engine/task_row.py"),
        str(ROOT / "butler/skills"), str(ROOT / "butler/skills/mcp_servers"),
        str(ROOT / "butler/skills/mcp_servers/tool.py")]
