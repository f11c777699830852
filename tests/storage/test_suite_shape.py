"""The storage suite is a factory's: it asks a backend for nothing but how to open stores, speaks
only the ports, and each backend module adds a small class that passes the factory (no test of
the suite overridden or skipped)."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

from tests.storage import security_suite, suite
from tests.storage import test_postgres as postgres_backend
from tests.storage import test_sqlite as sqlite_backend
from tests.storage.sql_suite import SqlStoreSuite
from tests.storage.suite import StoreSuite

# what a test of the suite may ask for: the backend's two factories, or the stores they open
SUITE_FIXTURES = {"open_store", "open_unreachable", "log", "log2"}


def suite_tests() -> dict[str, object]:
    return {
        name: member
        for cls in StoreSuite.__mro__
        for name, member in vars(cls).items()
        if name.startswith("test_")
    }


def test_the_suite_asks_a_backend_only_for_its_store_factories() -> None:
    tests = suite_tests()
    assert len(tests) >= 40  # the introspection finds them
    for name, fn in tests.items():
        assert callable(fn)
        asked = set(inspect.signature(fn).parameters) - {"self"}
        assert asked <= SUITE_FIXTURES, f"{name} asks for {asked - SUITE_FIXTURES}"


def test_the_suite_speaks_only_the_ports() -> None:
    for module in (suite, security_suite):
        tree = ast.parse(Path(module.__file__ or "").read_text(encoding="utf-8"))
        imported = {
            n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level == 0
        } | {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        backend = {
            name
            for name in imported
            if name.split(".")[0] == "sqlalchemy" or name.startswith(("storage.sql", "storage.log"))
        }
        assert backend == set(), f"{module.__name__} imports {backend}"


def test_each_sql_backend_is_one_class_passing_its_database() -> None:
    for backend in (sqlite_backend.TestSQLiteEventLog, postgres_backend.TestPostgresEventLog):
        assert issubclass(backend, SqlStoreSuite)
        own = {name for name in vars(backend) if not name.startswith("__")}
        assert own == {"url", "unreachable_url"}, f"{backend.__name__} defines {own}"
    # the SQL suite turns that database into the factories and overrides none of the tests
    assert {"open_store", "open_unreachable"} <= set(vars(SqlStoreSuite))
    assert set(vars(SqlStoreSuite)) & set(suite_tests()) == set()
