"""The node's hot modules, compiled with mypyc, or the same source interpreted (issue 16).

`make install` compiles them (`build()` below) into `.build/compiled/`, with a manifest of each
source file's SHA-256 and the interpreter it was built for. Importing `app` calls `install()`,
which puts a finder first on `sys.meta_path` that loads those extension modules instead of the
`.py` files, but only when every source still hashes to what was compiled: mypyc binds the
calls between its modules in C, so they run all compiled or all interpreted, never a mix, and
an edited source is never shadowed by a stale build.

`COORD_PURE_PYTHON=1` keeps the interpreted source: it is the same code, and `make test` runs
the suite both ways (tests/conftest.py). `STATUS` says which one this process runs; the node
logs it when it starts.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Final

ROOT: Final = Path(__file__).resolve().parent.parent
BUILD_DIR: Final = ROOT / ".build" / "compiled"
MANIFEST: Final = BUILD_DIR / "manifest.json"
# the shared library every compiled module links to: app_compiled__mypyc
GROUP: Final = "app_compiled"

# the request path of a rebalance, a heartbeat and a commit: the core (app/group), the wire
# edge (app/kafka) and the runtime's routing. Not app/group/immutable.py: its decorator is a
# `dataclass_transform`, which cannot mark a compiled function.
_PACKAGES: Final = ("app/group", "app/kafka")
_RUNTIME: Final = ("app/runtime/runtime.py", "app/runtime/placement.py", "app/runtime/metrics.py")
_NOT_COMPILED: Final = frozenset({"__init__.py", "immutable.py"})

PURE_ENV: Final = "COORD_PURE_PYTHON"

STATUS = "pure Python: not installed yet"


def source_files() -> list[str]:
    """The compiled modules' sources, relative to the project root, in a stable order."""
    files = [
        f"{pkg}/{p.name}"
        for pkg in _PACKAGES
        for p in sorted((ROOT / pkg).glob("*.py"))
        if p.name not in _NOT_COMPILED
    ]
    return files + list(_RUNTIME)


def module_name(source: str) -> str:
    return source.removesuffix(".py").replace("/", ".")


def digests(sources: Sequence[str]) -> dict[str, str]:
    return {s: hashlib.sha256((ROOT / s).read_bytes()).hexdigest() for s in sources}


def build_tag() -> str:
    """The interpreter a build is for: its ABI's extension suffix and version."""
    return f"{sys.implementation.cache_tag} {importlib.machinery.EXTENSION_SUFFIXES[0]}"


def manifest(sources: Sequence[str]) -> dict[str, object]:
    return {"interpreter": build_tag(), "group": GROUP, "sources": digests(sources)}


def _stale_reason() -> str | None:
    """None when the build in BUILD_DIR is this source's, for this interpreter."""
    try:
        built = json.loads(MANIFEST.read_text())
    except FileNotFoundError:
        return "no compiled build (make install builds it)"
    except (OSError, ValueError) as exc:
        return f"unreadable {MANIFEST}: {exc}"
    if built.get("interpreter") != build_tag():
        return f"built for {built.get('interpreter')}, this is {build_tag()}"
    sources = source_files()
    if built.get("sources") != digests(sources):
        return "the sources changed since the build (make install rebuilds it)"
    return None


class _CompiledFinder:
    """Finds the compiled extension of each module in `paths`, before the path finder."""

    def __init__(self, paths: dict[str, Path]) -> None:
        self.paths = paths

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        so = self.paths.get(fullname)
        if so is None:
            return None
        loader = importlib.machinery.ExtensionFileLoader(fullname, str(so))
        return importlib.util.spec_from_file_location(fullname, so, loader=loader)


def _extension(name: str) -> Path:
    parts = name.split(".")
    return BUILD_DIR.joinpath(*parts[:-1], parts[-1] + importlib.machinery.EXTENSION_SUFFIXES[0])


def install() -> None:
    """Load the compiled modules from here on, when the build matches the source."""
    global STATUS
    if os.environ.get(PURE_ENV, "") not in ("", "0"):
        STATUS = f"pure Python: {PURE_ENV} is set"
        return
    if any(isinstance(f, _CompiledFinder) for f in sys.meta_path):
        return
    reason = _stale_reason()
    if reason is not None:
        STATUS = f"pure Python: {reason}"
        return
    names = [module_name(s) for s in source_files()] + [f"{GROUP}__mypyc"]
    paths = {n: _extension(n) for n in names}
    missing = [str(p) for p in paths.values() if not p.is_file()]
    if missing:
        STATUS = f"pure Python: the build lacks {missing[0]}"
        return
    sys.meta_path.insert(0, _CompiledFinder(paths))
    STATUS = f"compiled (mypyc, {len(names) - 1} modules)"


def active() -> bool:
    return STATUS.startswith("compiled")


def build(force: bool = False) -> str:
    """Compile the modules into BUILD_DIR unless its manifest already matches the sources. A
    failed build leaves no manifest, so nothing loads the half of it that was made."""
    sources = source_files()
    want = manifest(sources)
    try:
        if not force and json.loads(MANIFEST.read_text()) == want:
            return f"{BUILD_DIR} is up to date"
    except (OSError, ValueError):
        pass
    # `make install` has them (mypy is a test dependency); a plain `pip install .` needs neither
    from mypyc.build import mypycify
    from setuptools import Distribution

    started = time.monotonic()
    shutil.rmtree(BUILD_DIR, ignore_errors=True)
    cwd = os.getcwd()
    os.chdir(ROOT)  # mypyc names each module after its path relative to here
    try:
        with tempfile.TemporaryDirectory(prefix="mypyc-") as work:
            extensions = mypycify(
                sources, opt_level="3", group_name=GROUP, target_dir=work, multi_file=True
            )
            dist = Distribution({"name": "app-compiled", "ext_modules": extensions})
            cmd = dist.get_command_obj("build_ext")
            cmd.build_lib = str(BUILD_DIR)
            cmd.build_temp = os.path.join(work, "temp")
            cmd.parallel = os.cpu_count() or 1
            dist.run_command("build_ext")
    finally:
        os.chdir(cwd)
    MANIFEST.write_text(json.dumps(want, indent=1, sort_keys=True) + "\n")
    return f"{len(sources)} modules into {BUILD_DIR} in {time.monotonic() - started:.0f} s"
