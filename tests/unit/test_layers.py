"""The import graph of the first-party packages keeps its layers (design.md §2.1).

Built with `ast` from the source, so nothing is imported: every `import` and `from ... import`
counts wherever it is written, inside functions and `if TYPE_CHECKING:` blocks included (a
type-only import still ties the two modules' designs together). Tests are not importers here.
"""

from __future__ import annotations

import ast
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("app", "storage", "api", "cli", "pipeline", "bench", "membership")
# modules whose imports must not form a cycle
ACYCLIC = ("app", "storage", "api", "cli", "pipeline", "membership")


@dataclass(frozen=True, slots=True)
class Import:
    importer: str  # module name
    imported: str  # the first-party module it resolves to, else the name as written
    path: str
    line: int

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.importer} -> {self.imported}"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def first_party_modules(packages: tuple[str, ...]) -> dict[str, Path]:
    modules: dict[str, Path] = {}
    for package in packages:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "__pycache__" not in path.parts:
                modules[module_name(path)] = path
    return modules


MODULES = first_party_modules(PACKAGES)  # the importers
# what an import may resolve to: tests too, so `from tests.support import x` names its module
KNOWN = {**MODULES, **first_party_modules(("tests",))}


def resolve(name: str) -> str:
    """The most specific first-party module `name` denotes, else `name` itself."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in KNOWN:
            return candidate
    return name


def imports_of(module: str, path: Path) -> Iterator[Import]:
    is_package = path.name == "__init__.py"
    rel = str(path.relative_to(ROOT))
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=rel)):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                package = module.split(".")
                if not is_package:
                    package.pop()
                base = package[: len(package) - (node.level - 1)]
                if node.module:
                    base.append(node.module)
                source = ".".join(base)
            else:
                source = node.module or ""
            if source == "__future__":
                continue
            # `from pkg import mod` imports the module pkg.mod; `from mod import name` imports mod
            names = [
                f"{source}.{a.name}" if f"{source}.{a.name}" in KNOWN else source
                for a in node.names
            ]
        for name in dict.fromkeys(names):
            yield Import(module, resolve(name), rel, node.lineno)


IMPORTS = sorted(
    (imp for module, path in MODULES.items() for imp in imports_of(module, path)),
    key=lambda imp: (imp.path, imp.line, imp.imported),
)


def within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def find_cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component that has one (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component: list[str] = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1 or node in edges.get(node, ()):
                        components.append(sorted(component))
    return [cycle_in(set(c), edges) for c in components]


def cycle_in(component: set[str], edges: dict[str, set[str]]) -> list[str]:
    """A shortest cycle through the component's first module, staying inside the component."""
    start = min(component)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following: list[str] = []
        for node in frontier:
            for child in sorted(edges.get(node, set()) & component):
                if child == start:
                    return [*paths[node], start]
                if child not in paths:
                    paths[child] = [*paths[node], child]
                    following.append(child)
        frontier = following
    raise AssertionError(f"no cycle in {sorted(component)}")  # pragma: no cover


def test_no_import_cycle() -> None:
    edges: dict[str, set[str]] = {}
    for imp in IMPORTS:
        if any(within(imp.importer, p) for p in ACYCLIC) and any(
            within(imp.imported, p) for p in ACYCLIC
        ):
            edges.setdefault(imp.importer, set()).add(imp.imported)
    cycles = find_cycles(edges)
    lines = []
    for cycle in cycles:
        lines.append(" -> ".join(cycle))
        for a, b in itertools.pairwise(cycle):
            lines += [f"    {imp}" for imp in IMPORTS if imp.importer == a and imp.imported == b]
    if cycles:
        pytest.fail(f"{len(cycles)} import cycle(s):\n" + "\n".join(lines), pytrace=False)


@dataclass(frozen=True, slots=True)
class Rule:
    importer: str
    forbidden: tuple[str, ...]
    why: str
    allowed: tuple[str, ...] = ()  # exceptions inside `forbidden`

    def __str__(self) -> str:
        but = f" but {', '.join(self.allowed)}" if self.allowed else ""
        return f"{self.importer} imports nothing from {', '.join(self.forbidden)}{but}"


RULES = [
    Rule(
        "storage",
        ("app", "api", "cli", "pipeline"),
        "storage knows no group rule; the security values it stores are its own "
        "(storage/security.py)",
    ),
    Rule(
        "storage.ports",
        ("storage.sql", "sqlalchemy"),
        "the ports know no backend: a new one implements them beside storage/sql",
    ),
    Rule("app", ("api", "cli", "pipeline"), "the edges call the core, not the other way"),
    Rule(
        "app",
        ("storage.sql", "storage.log", "storage.export", "storage.migrate"),
        "the node depends on storage's ports (storage/ports.py); whoever builds it opens the "
        "SQL store",
    ),
    Rule(
        "app.group",
        ("app.runtime", "app.kafka", "storage", "asyncio", "sqlalchemy", "socket"),
        "the core is pure: no I/O, no runtime, no wire format",
    ),
    Rule(
        "app.runtime",
        ("app.kafka",),
        "the runtime serves any edge through app.service; it knows no wire format",
    ),
    Rule(
        "app.kafka",
        ("app.runtime", "storage"),
        "the wire edge reaches the groups only through app.service",
    ),
    Rule(
        "app.gateway",
        ("app.runtime", "storage"),
        "the gateway is an edge like app.kafka: it reaches the groups through app.service",
    ),
    Rule(
        "app.upstream",
        ("app.runtime", "app.kafka", "storage"),
        "the gateway's dealings with the upstream's groups reach ours through app.service",
    ),
    Rule(
        "app.kafka",
        ("app.gateway",),
        "the wire edge's rooms serve a relay without knowing it (design.md §9.1)",
    ),
    Rule("api", ("cli", "pipeline"), "the admin API stands beside the CLI and the audit"),
    Rule(
        "pipeline",
        ("app", "api", "cli"),
        "the audit decodes records with the core's codecs and places groups by Kafka's rule; "
        "it never reaches into a running node",
        allowed=("app.group", "app.runtime.placement"),
    ),
    Rule(
        "membership",
        ("app", "storage", "api", "cli", "pipeline", "bench", "tests"),
        "the client SDK installs and runs without the server: kio is its codec",
    ),
    Rule(
        "bench",
        ("tests",),
        "benchmarks share the support package (harness, raw client), never a test module",
        allowed=("tests.support",),
    ),
]


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.importer)
def test_layer_rule(rule: Rule) -> None:
    offending = [
        imp
        for imp in IMPORTS
        if within(imp.importer, rule.importer)
        and any(within(imp.imported, f) for f in rule.forbidden)
        and not any(within(imp.imported, a) for a in rule.allowed)
    ]
    if offending:
        pytest.fail(
            f"{rule} ({rule.why}); {len(offending)} offending import(s):\n"
            + "\n".join(f"    {imp}" for imp in offending),
            pytrace=False,
        )


# production modules: everything first-party but the benchmarks, and the migrations beside them
SIZED = (*(p for p in PACKAGES if p != "bench"), "migrations")
MAX_MODULE_LINES = 600


def test_no_production_module_over_the_bound() -> None:
    """A module over 600 lines does several jobs: split it by job (design.md §2.1)."""
    over = sorted(
        (n, str(path.relative_to(ROOT)))
        for name, path in first_party_modules(SIZED).items()
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    )
    assert first_party_modules(SIZED), "no production module found"
    if over:
        pytest.fail(
            f"{len(over)} module(s) over {MAX_MODULE_LINES} lines:\n"
            + "\n".join(f"    {path}: {n}" for n, path in reversed(over)),
            pytrace=False,
        )


def test_the_graph_builder_itself() -> None:
    assert resolve("app.group.records.Record") == "app.group.records"
    assert resolve("sqlalchemy.ext.asyncio") == "sqlalchemy.ext.asyncio"
    assert MODULES["app.group"].name == "__init__.py"
    assert any(imp.importer == "app.group.coordinator" for imp in IMPORTS)
    assert not any(imp.imported == "__future__" for imp in IMPORTS)
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e"}}
    assert find_cycles(edges) == [["a", "b", "c", "a"], ["e", "e"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []
