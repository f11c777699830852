"""The compiled hot path (app/compiled.py): used when it was built from this very source, for
every module at once, and never when a source changed since or COORD_PURE_PYTHON is set."""

from __future__ import annotations

import ast
import importlib.machinery
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from app import compiled

SUFFIX = importlib.machinery.EXTENSION_SUFFIXES[0]
PROBE = (
    "import app.compiled as c, app.kafka.server as s, app.group.members as m; "
    "print(c.STATUS); print(s.__file__); print(m.__file__)"
)
# every compiled module and the library they share, from where they were loaded
EVERY = (
    "import importlib, sys, app.compiled as c\n"
    "for src in c.source_files(): print(importlib.import_module(c.module_name(src)).__file__)\n"
    "print(sys.modules[c.GROUP + '__mypyc'].__file__)"
)


def _probe(root: Path, code: str = PROBE, **env: str) -> list[str]:
    clean = {k: v for k, v in os.environ.items() if k != compiled.PURE_ENV}
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=root,
        env={**clean, "PYTHONPATH": str(root), **env},
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return out.stdout.splitlines()


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of the package and of its build, as `make install` leaves them."""
    assert compiled.MANIFEST.is_file(), f"no build: {compiled.STATUS} (run make install)"
    for package in ("app", "storage"):
        shutil.copytree(
            compiled.ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("*.pyc")
        )
    shutil.copytree(compiled.BUILD_DIR, tmp_path / ".build" / "compiled")
    return tmp_path


def test_this_process_runs_what_its_environment_asks_for() -> None:
    import app.kafka.hot_group as hot_group

    if compiled.pure_requested():
        assert f"pure Python: {compiled.PURE_ENV} is set" == compiled.STATUS
        assert hot_group.__file__ is not None and hot_group.__file__.endswith(".py")
    else:
        assert compiled.active(), compiled.STATUS
        assert hot_group.__file__ is not None and hot_group.__file__.endswith(SUFFIX)


def test_a_matching_build_loads_every_compiled_module(tree: Path) -> None:
    status, server, members = _probe(tree)
    assert status == f"compiled (mypyc, {len(compiled.source_files())} modules)"
    assert server == str(tree / ".build/compiled/app/kafka" / f"server{SUFFIX}")
    assert members.endswith(f"members{SUFFIX}")
    *modules, library = _probe(tree, EVERY)
    build = tree / ".build/compiled"
    assert modules == [
        str(build / src.removesuffix(".py")) + SUFFIX for src in compiled.source_files()
    ]
    assert library == str(build / f"{compiled.GROUP}__mypyc{SUFFIX}")
    # "0" asks for nothing
    assert _probe(tree, **{compiled.PURE_ENV: "0"})[0] == status


def test_every_async_handler_is_run_as_one() -> None:
    """The API table tells a handler to await from `inspect.iscoroutinefunction`, which must
    see a compiled `async def` as one (mypy >= 1.20, pyproject.toml)."""
    from app.kafka.apis import APIS

    sources = (compiled.ROOT / "app/kafka").glob("*.py")
    trees = [ast.parse(p.read_text()) for p in sources]
    coroutines = {n.name for t in trees for n in ast.walk(t) if isinstance(n, ast.AsyncFunctionDef)}
    served = {api.name: api.is_async for api in APIS}
    expected = {api.name: api.handler.__name__ in coroutines for api in APIS}
    assert served == expected
    assert served["JoinGroup"] and served["Metadata"] and not served["Heartbeat"]


def test_an_edited_source_falls_back_to_the_interpreted_modules_all_of_them(tree: Path) -> None:
    server = tree / "app/kafka/server.py"
    server.write_text(server.read_text() + "\n# edited after the build\n")
    status, server_file, members = _probe(tree)
    assert status == "pure Python: the sources changed since the build (make install rebuilds it)"
    assert server_file == str(server)
    assert members == str(tree / "app/group/members.py")  # not a mix


def test_an_edit_to_a_module_it_copies_constants_from_falls_back_too(tree: Path) -> None:
    # app/security/sasl.py is interpreted, but its Final iteration bounds are inlined into the
    # compiled edge
    sasl = tree / "app/security/sasl.py"
    sasl.write_text(sasl.read_text() + "\n")
    assert _probe(tree)[0].startswith("pure Python: the sources changed")


def test_a_build_missing_a_module_is_not_loaded(tree: Path) -> None:
    (tree / ".build/compiled/app/group" / f"members{SUFFIX}").unlink()
    status, server, _ = _probe(tree)
    assert status.startswith("pure Python: the build lacks ") and status.endswith(
        f"members{SUFFIX}"
    )
    assert server == str(tree / "app/kafka/server.py")


def test_a_failed_build_keeps_the_one_before(tree: Path) -> None:
    failing = (
        "import mypyc.build, app.compiled as c\n"
        "def broken(*a, **k): raise RuntimeError('no compiler')\n"
        "mypyc.build.mypycify = broken\n"
        "try:\n    c.build(force=True)\nexcept RuntimeError as e:\n    print(e)\n"
    )
    assert _probe(tree, failing) == ["no compiler"]
    assert sorted(p.name for p in (tree / ".build").iterdir()) == ["compiled", "compiled.lock"]
    assert _probe(tree)[0].startswith("compiled (mypyc")


def test_pure_python_is_chosen_by_the_environment(tree: Path) -> None:
    status, server, _ = _probe(tree, **{compiled.PURE_ENV: "1"})
    assert status == f"pure Python: {compiled.PURE_ENV} is set"
    assert server == str(tree / "app/kafka/server.py")


def test_a_build_for_another_interpreter_is_not_loaded(tree: Path) -> None:
    manifest = tree / ".build/compiled/manifest.json"
    manifest.write_text(manifest.read_text().replace(sys.implementation.cache_tag, "cpython-99"))
    status, server, _ = _probe(tree)
    assert status.startswith("pure Python: built for cpython-99")
    assert server.endswith("server.py")


def test_without_a_build_the_source_runs(tree: Path) -> None:
    shutil.rmtree(tree / ".build")
    status, server, _ = _probe(tree)
    assert status == "pure Python: no compiled build (make install builds it)"
    assert server.endswith("server.py")
