"""Run Alembic programmatically: `upgrade(url)` from a CLI, `await upgrade_async(url)` in a loop.

The script location is resolved from the installed `migrations` package, so this works from any
working directory.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from alembic import command
from alembic.config import Config

from storage.errors import translate_errors


def _migrations_dir() -> Path:
    # Editable installs may expose `migrations` as a namespace package (no __file__): look at
    # its search path, then beside this package (source checkout).
    candidates: list[Path] = []
    try:
        import migrations

        candidates += [Path(p) for p in migrations.__path__]
    except ImportError:
        pass
    candidates.append(Path(__file__).resolve().parent.parent / "migrations")
    for c in candidates:
        if (c / "env.py").is_file():
            return c.resolve()
    raise RuntimeError(f"Alembic migrations not found (looked in {candidates})")


MIGRATIONS_DIR = _migrations_dir()

# Alembic keeps its running environment in module globals (alembic.context): two upgrades in
# threads of one process would trample each other. Across processes env.py takes a DB lock.
_LOCK = threading.Lock()


def alembic_config(url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.attributes["url"] = url  # not via the ini option: configparser would mangle '%'
    return cfg


def upgrade(url: str, revision: str = "head") -> None:
    """`alembic upgrade head` against `url`. Runs its own event loop: do not call it from a
    running loop (use upgrade_async). Database errors are raised as storage.errors types."""
    with _LOCK, translate_errors():
        command.upgrade(alembic_config(url), revision)


async def upgrade_async(url: str, revision: str = "head") -> None:
    """upgrade() in a worker thread, for callers inside a running event loop."""
    await asyncio.to_thread(upgrade, url, revision)
