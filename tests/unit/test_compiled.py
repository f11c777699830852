"""The compiled hot path (app/compiled.py): used when it was built from this very source, for
every module at once, and never when a source changed since or COORD_PURE_PYTHON is set."""

from __future__ import annotations

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
    "import app.compiled as c, app.kafka.server as s, app.group.membership as m; "
    "print(c.STATUS); print(s.__file__); print(m.__file__)"
)


def _probe(root: Path, **env: str) -> list[str]:
    clean = {k: v for k, v in os.environ.items() if k != compiled.PURE_ENV}
    out = subprocess.run(
        [sys.executable, "-c", PROBE],
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
    shutil.copytree(compiled.ROOT / "app", tmp_path / "app", ignore=shutil.ignore_patterns("*.pyc"))
    shutil.copytree(compiled.BUILD_DIR, tmp_path / ".build" / "compiled")
    return tmp_path


def test_this_process_runs_what_its_environment_asks_for() -> None:
    import app.kafka.hot_group as hot_group

    if os.environ.get(compiled.PURE_ENV):
        assert f"pure Python: {compiled.PURE_ENV} is set" == compiled.STATUS
        assert hot_group.__file__ is not None and hot_group.__file__.endswith(".py")
    else:
        assert compiled.active(), compiled.STATUS
        assert hot_group.__file__ is not None and hot_group.__file__.endswith(SUFFIX)


def test_a_matching_build_loads_every_compiled_module(tree: Path) -> None:
    status, server, membership = _probe(tree)
    assert status == f"compiled (mypyc, {len(compiled.source_files())} modules)"
    assert server == str(tree / ".build/compiled/app/kafka" / f"server{SUFFIX}")
    assert membership.endswith(f"membership{SUFFIX}")


def test_an_edited_source_falls_back_to_the_interpreted_modules_all_of_them(tree: Path) -> None:
    server = tree / "app/kafka/server.py"
    server.write_text(server.read_text() + "\n# edited after the build\n")
    status, server_file, membership = _probe(tree)
    assert status == "pure Python: the sources changed since the build (make install rebuilds it)"
    assert server_file == str(server)
    assert membership == str(tree / "app/group/membership.py")  # not a mix


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
