"""The wire edge's rooms keep to their jobs (design.md §9.1): the connection room
(app/kafka/connection.py) and the authentication gate (app/kafka/gate.py) know nothing of the
API table, so a relaying connection can reuse them without the dispatch; neither they, the
dispatch (app/kafka/dispatch.py) nor the listener (app/kafka/server.py) name an API: a fast
path is declared on its API's row, never a branch of the server.

Built with `ast` from the source, like tests/unit/test_layers.py.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
KAFKA = ROOT / "app" / "kafka"
ROOMS = ("connection", "gate", "dispatch", "server")
# what each room may import of the project: the connection and the gate nothing of the API
# table, its rows or their handlers
ALLOWED_IMPORTS = {
    "connection": ("app.kafka.limits",),
    "gate": ("app.kafka.connection", "app.security"),
}


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


def _api_modules() -> list[Path]:
    return [*sorted(KAFKA.glob("*_apis.py")), KAFKA / "apis.py"]


def api_vocabulary() -> set[str]:
    """Names that mean one API: the API key constants of the API modules (module-level
    UPPER_CASE names bound to an int), the request and response types of app/group/messages.py,
    and the hot readers and answers of app/kafka/hot*.py."""
    names: set[str] = set()
    for path in _api_modules():
        for node in _tree(path).body:
            target, value = None, None
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                target, value = node.target.id, node.value
            elif isinstance(node, ast.Assign) and len(node.targets) == 1:
                first = node.targets[0]
                target = first.id if isinstance(first, ast.Name) else None
                value = node.value
            if (
                target is not None
                and target.isupper()
                and isinstance(value, ast.Constant)
                and type(value.value) is int
            ):
                names.add(target)
    for node in _tree(ROOT / "app" / "group" / "messages.py").body:
        if isinstance(node, ast.ClassDef) and node.name.endswith(("Request", "Response")):
            names.add(node.name)
    for path in sorted(KAFKA.glob("hot*.py")):
        for node in _tree(path).body:
            if isinstance(node, ast.FunctionDef | ast.ClassDef) and not node.name.startswith("_"):
                names.add(node.name)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names.add(node.target.id)
    return names


def api_names() -> set[str]:
    """The rows' API names ("Heartbeat", ...): the string literal of each `Api(...)` row."""
    out: set[str] = set()
    for path in _api_modules():
        for node in ast.walk(_tree(path)):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "Api"
                and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant)
            ):
                out.add(node.args[1].value)
    return out


def api_specific(source: str, vocabulary: set[str], names: set[str]) -> list[str]:
    """Where `source` names an API: an identifier of its vocabulary (imported or used), an API
    name as a string, or a key tested for equality with a number literal."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Name) and node.id in vocabulary:
            found.append(f"line {node.lineno}: {node.id}")
        elif isinstance(node, ast.Attribute) and node.attr in vocabulary:
            found.append(f"line {node.lineno}: .{node.attr}")
        elif isinstance(node, ast.ImportFrom):
            found += [
                f"line {node.lineno}: imports {a.name}" for a in node.names if a.name in vocabulary
            ]
        elif isinstance(node, ast.Constant) and node.value in names:
            found.append(f"line {node.lineno}: {node.value!r}")
        elif isinstance(node, ast.Compare) and all(
            isinstance(op, ast.Eq | ast.NotEq) for op in node.ops
        ):
            sides = [node.left, *node.comparators]
            if any("key" in ast.unparse(s) for s in sides) and any(
                isinstance(s, ast.Constant) and type(s.value) is int for s in sides
            ):
                found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def test_the_vocabulary_is_the_tables() -> None:
    vocabulary, names = api_vocabulary(), api_names()
    assert {"HEARTBEAT", "JOIN_GROUP", "SYNC_GROUP", "OFFSET_COMMIT", "API_VERSIONS"} <= vocabulary
    assert {
        "JoinGroupRequest",
        "SyncGroupRequest",
        "read_join_group",
        "HEARTBEAT_HOT",
    } <= vocabulary
    assert {"Heartbeat", "JoinGroup", "OffsetCommit", "ApiVersions", "SaslHandshake"} <= names


def test_the_checker_finds_the_branches_it_forbids() -> None:
    """The shapes the server had before its fast paths moved onto their rows."""
    vocabulary, names = api_vocabulary(), api_names()
    for branch in (
        "from app.kafka.group_apis import HEARTBEAT\nif api_key == HEARTBEAT: pass",
        "if api_key == 12: pass",
        "if entry.api.name == 'JoinGroup': pass",
        "body = read_offset_commit(frame, version, 1, 2)",
        "isinstance(hot, JoinGroupRequest)",
        "x = group_apis.SYNC_GROUP",
    ):
        assert api_specific(branch, vocabulary, names), branch
    assert api_specific("if size >= 8 and api.hot is not None: pass", vocabulary, names) == []


@pytest.mark.parametrize("room", ROOMS)
def test_no_room_of_the_edge_names_an_api(room: str) -> None:
    path = KAFKA / f"{room}.py"
    found = api_specific(path.read_text(), api_vocabulary(), api_names())
    assert found == [], (
        f"{path.relative_to(ROOT)} names an API (declare it on the API's row): {found}"
    )


@pytest.mark.parametrize("room", sorted(ALLOWED_IMPORTS))
def test_the_connection_and_the_gate_stand_without_the_table(room: str) -> None:
    """What a relaying connection reuses imports nothing of the dispatch or the API rows."""
    path = KAFKA / f"{room}.py"
    imported = set()
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.ImportFrom) and node.module is not None:
            imported.add(node.module)
        elif isinstance(node, ast.Import):
            imported.update(a.name for a in node.names)
    project = {m for m in imported if m.split(".")[0] in ("app", "storage", "api", "cli")}
    allowed = ALLOWED_IMPORTS[room]
    outside = sorted(
        m for m in project if not any(m == a or m.startswith(a + ".") for a in allowed)
    )
    assert outside == [], f"{path.relative_to(ROOT)} imports {outside} (allowed: {allowed})"
