"""The node's hot modules, compiled with mypyc, or the same source interpreted.

`make install` compiles them (`build()` below) into `.build/compiled/`, with a manifest of the
SHA-256 of every source under app/ and storage/ (mypyc copies `Final` constants of the modules
the compiled ones import into the build), the size of every extension it made, the interpreter
and the compiler's version. Importing `app` calls `install()`, which puts a finder first on
`sys.meta_path` that loads those extension modules instead of the `.py` files, but only when
the build is whole and every source still hashes to what was compiled: mypyc binds the calls
between its modules in C, so they run all compiled or all interpreted, never a mix, and an
edited source is never shadowed by a stale build. A file whose size and modification time are
the recorded ones is not hashed again.

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
import sys
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
# edge (app/kafka), the gateway's relay (app/gateway: its connection subclasses the edge's, and
# an interpreted class cannot inherit from a compiled one) and the runtime's routing. Not
# app/group/immutable.py: its decorator is a `dataclass_transform`, which cannot mark a
# compiled function.
_PACKAGES: Final = ("app/group", "app/kafka", "app/gateway")
_RUNTIME: Final = ("app/runtime/runtime.py", "app/runtime/placement.py", "app/runtime/metrics.py")
_NOT_COMPILED: Final = frozenset({"__init__.py", "immutable.py"})
# what the compiled modules may have copied constants from: every source of these packages
_WATCHED: Final = ("app", "storage")

PURE_ENV: Final = "COORD_PURE_PYTHON"

STATUS = "pure Python: not installed yet"


def pure_requested() -> bool:
    return os.environ.get(PURE_ENV, "") not in ("", "0")


def source_files() -> list[str]:
    """The compiled modules' sources, relative to the project root, in a stable order."""
    files = [
        f"{pkg}/{p.name}"
        for pkg in _PACKAGES
        for p in sorted((ROOT / pkg).glob("*.py"))
        if p.name not in _NOT_COMPILED
    ]
    return files + list(_RUNTIME)


def watched_files() -> list[str]:
    return sorted(str(p.relative_to(ROOT)) for d in _WATCHED for p in (ROOT / d).rglob("*.py"))


def module_name(source: str) -> str:
    return source.removesuffix(".py").replace("/", ".")


def build_tag() -> str:
    """The interpreter a build is for: its ABI's extension suffix and version."""
    return f"{sys.implementation.cache_tag} {importlib.machinery.EXTENSION_SUFFIXES[0]}"


def _extension(name: str, build_dir: Path = BUILD_DIR) -> Path:
    parts = name.split(".")
    return build_dir.joinpath(*parts[:-1], parts[-1] + importlib.machinery.EXTENSION_SUFFIXES[0])


def _extensions() -> list[str]:
    return [module_name(s) for s in source_files()] + [f"{GROUP}__mypyc"]


def _sha256(path: str) -> str:
    return hashlib.sha256((ROOT / path).read_bytes()).hexdigest()


def _source_entry(path: str) -> list[object]:
    st = (ROOT / path).stat()
    return [_sha256(path), st.st_size, st.st_mtime_ns]


def _source_matches(path: str, recorded: object) -> bool:
    if not isinstance(recorded, list) or len(recorded) != 3:
        return False
    try:
        st = (ROOT / path).stat()
        return [st.st_size, st.st_mtime_ns] == recorded[1:] or _sha256(path) == recorded[0]
    except OSError:
        return False


def _tools() -> dict[str, str]:
    """The versions a build depends on beyond the interpreter (checked by `build()`)."""
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in ("mypy", "kio"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "none"
    return out


def _stale_reason() -> str | None:
    """None when the build in BUILD_DIR is whole, this source's, for this interpreter."""
    try:
        built = json.loads(MANIFEST.read_text())
    except FileNotFoundError:
        return "no compiled build (make install builds it)"
    except (OSError, ValueError) as exc:
        return f"unreadable {MANIFEST}: {exc}"
    if built.get("interpreter") != build_tag():
        return f"built for {built.get('interpreter')}, this is {build_tag()}"
    sources = built.get("sources")
    if (
        not isinstance(sources, dict)
        or sorted(sources) != watched_files()
        or not all(_source_matches(path, entry) for path, entry in sources.items())
    ):
        return "the sources changed since the build (make install rebuilds it)"
    sizes = built.get("extensions")
    for name in _extensions():
        so = _extension(name)
        try:
            size = so.stat().st_size
        except OSError:
            return f"the build lacks {so}"
        if not isinstance(sizes, dict) or sizes.get(name) != size:
            return f"the build's {so.name} is not the one compiled"
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


def install() -> None:
    """Load the compiled modules from here on, when the build matches the source."""
    global STATUS
    if pure_requested():
        STATUS = f"pure Python: {PURE_ENV} is set"
        return
    if any(isinstance(f, _CompiledFinder) for f in sys.meta_path):
        return
    reason = _stale_reason()
    if reason is not None:
        STATUS = f"pure Python: {reason}"
        return
    names = _extensions()
    sys.meta_path.insert(0, _CompiledFinder({n: _extension(n) for n in names}))
    STATUS = f"compiled (mypyc, {len(names) - 1} modules)"


def active() -> bool:
    return STATUS.startswith("compiled")


def build(force: bool = False) -> str:
    """Compile the modules into BUILD_DIR unless the build there is whole, this source's and
    made by this compiler. The new build is made beside it and put in its place only when
    whole, under a lock: a failed or concurrent build never leaves a half one to load."""
    import fcntl

    BUILD_DIR.parent.mkdir(exist_ok=True)
    with open(BUILD_DIR.parent / "compiled.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _build_locked(force)


def _build_locked(force: bool) -> str:
    tools = _tools()
    if not force and _stale_reason() is None:
        try:
            if json.loads(MANIFEST.read_text()).get("tools") == tools:
                return f"{BUILD_DIR} is up to date"
        except (OSError, ValueError):
            pass
    # `make install` has them (test dependencies); a plain `pip install .` needs neither.
    # Imported here, as the rest the build alone needs: importing `app` stays light.
    import shutil
    import tempfile
    import time

    from mypyc.build import mypycify
    from setuptools import Distribution

    started = time.monotonic()
    watched = watched_files()
    before = {path: _source_entry(path) for path in watched}
    new = BUILD_DIR.with_name(f"compiled.new-{os.getpid()}")
    shutil.rmtree(new, ignore_errors=True)
    cwd = os.getcwd()
    os.chdir(ROOT)  # mypyc names each module after its path relative to here
    try:
        with tempfile.TemporaryDirectory(prefix="mypyc-") as work:
            extensions = mypycify(
                source_files(), opt_level="3", group_name=GROUP, target_dir=work, multi_file=True
            )
            dist = Distribution({"name": "app-compiled", "ext_modules": extensions})
            cmd = dist.get_command_obj("build_ext")
            cmd.build_lib = str(new)
            cmd.build_temp = os.path.join(work, "temp")
            cmd.parallel = os.cpu_count() or 1
            dist.run_command("build_ext")
    except BaseException:
        shutil.rmtree(new, ignore_errors=True)
        raise
    finally:
        os.chdir(cwd)
    if {path: _sha256(path) for path in watched_files()} != {
        path: entry[0] for path, entry in before.items()
    }:
        shutil.rmtree(new, ignore_errors=True)
        raise RuntimeError("the sources changed while they were compiled: build again")
    made = {name: _extension(name, new).stat().st_size for name in _extensions()}
    manifest = {
        "interpreter": build_tag(),
        "group": GROUP,
        "tools": tools,
        "sources": before,
        "extensions": made,
    }
    (new / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    old = BUILD_DIR.with_name(f"compiled.old-{os.getpid()}")
    if BUILD_DIR.exists():
        os.replace(BUILD_DIR, old)
    os.replace(new, BUILD_DIR)
    shutil.rmtree(old, ignore_errors=True)
    modules = len(made) - 1
    return f"{modules} modules into {BUILD_DIR} in {time.monotonic() - started:.0f} s"
