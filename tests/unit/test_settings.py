"""One source of settings: `Settings` (app/config.py) holds every default once, and the core's,
the edge's and the CLI's configuration objects are derived from it, never re-declared."""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer

from app.config import DEFAULTS, Settings, core_config, read_setting
from app.group.config import CoreConfig
from app.kafka.apis import DecodeLimits
from app.kafka.limits import ServerLimits
from cli.main import cli
from cli.security import _database_url

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = set(Settings.model_fields)
# fixed, as in Kafka (protocol.md §1.4): no setting of theirs
FIXED = {"offset_metadata_max_bytes", "new_member_join_timeout_ms"}
# where the defaults are written: the settings themselves, and the pure core's (it runs
# without a node, in the audit too), which Settings takes
SOURCES = {"app/config.py", "app/group/config.py"}


def _other(value: int) -> int:
    """A valid value other than a default."""
    return value + 1000


def test_settings_read_from_no_environment_are_the_defaults(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import os

    for name in [k for k in os.environ if k.startswith("COORD_")]:
        monkeypatch.delenv(name)
    assert Settings().model_dump() == DEFAULTS.model_dump()


def test_the_core_defaults_are_the_nodes() -> None:
    assert core_config(DEFAULTS) == CoreConfig()
    assert DEFAULTS.group_max_size == CoreConfig().group_max_size == 10_000


def test_every_core_tunable_is_a_setting_or_fixed_and_is_carried_over() -> None:
    names = {f.name for f in dataclasses.fields(CoreConfig)}
    assert names - SETTINGS == FIXED
    shared = names & SETTINGS
    given = {name: _other(getattr(DEFAULTS, name)) for name in shared}
    derived = core_config(Settings(**given))
    assert {name: getattr(derived, name) for name in shared} == given


def test_the_edge_limits_are_the_settings() -> None:
    assert ServerLimits() == ServerLimits.from_settings(DEFAULTS)
    assert DecodeLimits() == ServerLimits.from_settings(DEFAULTS).decode
    server = {f.name for f in dataclasses.fields(ServerLimits)} - {"decode"}
    decode = {f.name for f in dataclasses.fields(DecodeLimits)}
    assert server <= SETTINGS and decode <= SETTINGS
    given = {name: _other(getattr(DEFAULTS, name)) for name in server | decode}
    limits = ServerLimits.from_settings(Settings(**given))
    assert {name: getattr(limits, name) for name in server} == {n: given[n] for n in server}
    assert {name: getattr(limits.decode, name) for name in decode} == {n: given[n] for n in decode}


def _defaults(tree: ast.AST) -> Iterator[tuple[str, ast.expr, int]]:
    """(name, default, line) of every class field and function parameter with a default,
    and of every `getattr(settings, "name", default)`."""
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "getattr"
            and len(node.args) == 3
            and isinstance(attr := node.args[1], ast.Constant)
            and isinstance(attr.value, str)
        ):
            yield attr.value, node.args[2], node.lineno
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if (
                    isinstance(item, ast.AnnAssign)
                    and isinstance(item.target, ast.Name)
                    and item.value is not None
                ):
                    yield item.target.id, item.value, item.lineno
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            args = node.args
            positional = [*args.posonlyargs, *args.args]
            pairs = [
                *zip(
                    positional[len(positional) - len(args.defaults) :], args.defaults, strict=True
                ),
                *((a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d),
            ]
            for arg, default in pairs:
                yield arg.arg, default, arg.lineno


def _is_literal(node: ast.expr) -> bool:
    """A value written out (16 * 1024 * 1024 included); None and "" say "nothing", not a
    default."""
    if isinstance(node, ast.Constant):
        return node.value is not None and node.value != ""
    if isinstance(node, ast.BinOp):
        return _is_literal(node.left) and _is_literal(node.right)
    return isinstance(node, ast.UnaryOp) and _is_literal(node.operand)


def test_no_production_module_writes_a_settings_default_again() -> None:
    """A field, parameter or getattr fallback named after a setting takes its default from
    Settings (`DEFAULTS.<name>`) or has none: a value written there would be a second one."""
    found = []
    # storage and the audit may not import app.config (tests/unit/test_layers.py)
    for package in ("app", "api", "cli"):
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = str(path.relative_to(ROOT))
            if rel in SOURCES:
                continue
            for name, default, line in _defaults(ast.parse(path.read_text(encoding="utf-8"))):
                if name in SETTINGS and _is_literal(default):
                    found.append(f"{rel}:{line}: {name} = {ast.unparse(default)}")
    assert found == []


def test_settings_take_the_core_defaults_from_the_core() -> None:
    tree = ast.parse((ROOT / "app/config.py").read_text(encoding="utf-8"))
    (settings,) = [
        n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == "Settings"
    ]
    core = {f.name for f in dataclasses.fields(CoreConfig)}
    taken = {}
    for name, default, _ in _defaults(settings):
        if name in core:
            assert isinstance(default, ast.Call)
            (kw,) = [k for k in default.keywords if k.arg == "default"]
            taken[name] = ast.unparse(kw.value)
    assert taken == {name: f"_CORE.{name}" for name in core - FIXED}


def test_the_cli_options_leave_their_defaults_to_settings() -> None:
    """Each option of the node's commands is a setting and defaults to None: not given,
    Settings decides (the environment, else its default)."""
    group = typer.main.get_command(cli)
    assert isinstance(group, typer.core.TyperGroup)
    for command in ("serve", "migrate", "export"):
        options = [p for p in group.commands[command].params if p.param_type_name == "option"]
        settings = [p for p in options if p.name in SETTINGS]
        assert settings and all(p.default is None for p in settings), command
    serve = [p for p in group.commands["serve"].params if p.name != "help"]
    assert {p.name for p in serve} <= SETTINGS


def test_one_setting_is_read_without_the_others(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COORD_DATABASE_URL", "sqlite+aiosqlite:///elsewhere.db")
    monkeypatch.setenv("COORD_NODE_ID", "-1")  # invalid: the node's business
    with pytest.raises(ValueError, match="node_id"):
        Settings()
    assert read_setting("database_url") == "sqlite+aiosqlite:///elsewhere.db"
    assert _database_url(None) == "sqlite+aiosqlite:///elsewhere.db"
    assert _database_url("sqlite+aiosqlite:///given.db") == "sqlite+aiosqlite:///given.db"
    with pytest.raises(ValueError, match="greater than or equal to 0"):
        read_setting("node_id")
    monkeypatch.delenv("COORD_DATABASE_URL")
    assert read_setting("database_url") == Settings.model_fields["database_url"].default


def test_the_group_commit_writers_bounds_are_the_settings() -> None:
    """LogWriter runs without a node (tests, tools): its defaults are the settings' own, and
    both come from storage/bounds.py, which loads no database driver for Settings."""
    import inspect

    from storage.writer import LogWriter

    params = inspect.signature(LogWriter).parameters
    for name in ("max_record_bytes", "max_queued_records"):
        assert params[name].default == getattr(DEFAULTS, name), name
    source = (ROOT / "app" / "config.py").read_text(encoding="utf-8")
    assert "default=bounds.MAX_RECORD_BYTES" in source
    assert "default=bounds.MAX_QUEUED_RECORDS" in source
