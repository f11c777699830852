"""Coordinator nodes as OS processes: `coordinator serve` started, stopped, killed, paused.

Used by the end-to-end tests (integration, API, pipeline), the chaos suite and the benchmarks.
Every node runs in a session of its own (a Ctrl-C of the test does not reach it) and gets
SIGTERM when the process that started it dies, so a killed run leaves no node behind to join
the next run's cluster.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from app import compiled
from tests.support.ports import free_port

ROOT = Path(__file__).resolve().parents[2]

# what every test node gets unless its caller says otherwise
DEFAULTS = {
    "COORD_INITIAL_REBALANCE_DELAY_MS": "300",
    "COORD_LOG_PARTITIONS": "4",
    "COORD_LOG_LEVEL": "INFO",
}

try:  # loaded here, not in the forked child (where a lock held by another thread would hang it)
    _LIBC: ctypes.CDLL | None = ctypes.CDLL(None, use_errno=True)
except OSError:  # pragma: no cover - not Linux
    _LIBC = None


def die_with_parent() -> None:
    """In the child, before exec: SIGTERM it when its parent dies (Linux prctl)."""
    if _LIBC is not None:
        with contextlib.suppress(AttributeError):
            _LIBC.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class CoordinatorProcess:
    """One `coordinator serve` process; restartable on the same database, ports and node id.

    The environment is the caller's without its COORD_* variables (but COORD_PURE_PYTHON), then
    DEFAULTS, then `env_overrides`. Each start logs to its own file in `workdir`
    (`node<id>-<n>.log`, or `coordinator-<n>.log` without a node id)."""

    def __init__(
        self,
        db_url: str,
        workdir: Path,
        env_overrides: dict[str, str] | None = None,
        *,
        node_id: int | None = None,
        host: str = "127.0.0.1",
        command_prefix: tuple[str, ...] = (),
    ) -> None:
        self.db_url = db_url
        self.host = host  # both listeners' (a network namespace's address, say)
        self.command_prefix = command_prefix  # e.g. `ip netns exec NS`
        self.workdir = workdir
        self.env_overrides = dict(env_overrides or {})
        self.node_id = node_id
        self.kafka_port = free_port()
        self.admin_port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.stopped = False  # SIGSTOPped
        self.log_paths: list[Path] = []

    @property
    def address(self) -> tuple[str, int]:
        return (self.host, self.kafka_port)

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.kafka_port}"

    @property
    def admin_url(self) -> str:
        return f"http://{self.host}:{self.admin_port}"

    @property
    def db_path(self) -> Path:
        """The SQLite file (for a sqlite URL)."""
        return Path(self.db_url.split(":///", 1)[1])

    def env(self) -> dict[str, str]:
        # COORD_PURE_PYTHON stays: it picks the build the node runs, as the test's own does
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("COORD_") or k == compiled.PURE_ENV
        }
        env.update(DEFAULTS)
        env.update(
            COORD_DATABASE_URL=self.db_url,
            COORD_KAFKA_LISTEN=self.bootstrap,
            COORD_ADMIN_LISTEN=f"{self.host}:{self.admin_port}",
            PYTHONUNBUFFERED="1",
        )
        if self.node_id is not None:
            env["COORD_NODE_ID"] = str(self.node_id)
        env.update(self.env_overrides)
        return env

    # --- lifecycle -------------------------------------------------------------------------

    def start(self, wait_ready: bool = True, timeout: float = 60.0) -> None:
        self.starts += 1
        name = "coordinator" if self.node_id is None else f"node{self.node_id}"
        path = self.workdir / f"{name}-{self.starts}.log"
        self.log_paths.append(path)
        with open(path, "wb") as out:
            self.proc = subprocess.Popen(
                [*self.command_prefix, sys.executable, "-m", "cli.main", "serve"],
                cwd=ROOT,
                env=self.env(),
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=die_with_parent,
            )
        self.stopped = False
        if wait_ready:
            self.wait_ready(timeout)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def live(self) -> bool:
        """Running and not paused."""
        return self.running and not self.stopped

    def wait_ready(self, timeout: float = 60.0, poll: float = 0.1) -> None:
        """Until /readyz answers 200 (every partition this node owns is loaded)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(
                    f"{self.name} exited with {self.proc.returncode}:\n{self.logs()}"
                )
            try:
                with urllib.request.urlopen(self.admin_url + "/readyz", timeout=1) as r:
                    if r.status == 200:
                        return
            except OSError:  # refused, or an HTTPError (503 while loading)
                pass
            time.sleep(poll)
        raise TimeoutError(f"{self.name} not ready after {timeout}s:\n{self.logs()}")

    @property
    def name(self) -> str:
        return "coordinator" if self.node_id is None else f"node {self.node_id}"

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs (a paused process dies too)."""
        if self.running:
            assert self.proc is not None
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        self.stopped = False

    def stop(self) -> None:
        """SIGTERM (a clean shutdown: leases handed over), SIGKILL after 10 s."""
        if self.running:
            assert self.proc is not None
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()

    def restart(self, wait_ready: bool = True) -> None:
        """SIGKILL, then start again on the same database and the same ports."""
        self.kill()
        self.start(wait_ready)

    def sigstop(self) -> None:
        assert self.proc is not None and self.running
        os.kill(self.proc.pid, signal.SIGSTOP)
        self.stopped = True

    def sigcont(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGCONT)
        self.stopped = False

    # --- the admin API ---------------------------------------------------------------------

    def get(self, path: str, timeout: float = 5.0) -> Any:
        with urllib.request.urlopen(self.admin_url + path, timeout=timeout) as r:
            return json.loads(r.read())

    def metrics_text(self, timeout: float = 10.0) -> str:
        """GET /metrics: the Prometheus exposition text."""
        with urllib.request.urlopen(self.admin_url + "/metrics", timeout=timeout) as r:
            return str(r.read().decode())

    def cluster(self, timeout: float = 2.0) -> dict[str, Any] | None:
        """This node's /cluster view, or None if it does not answer."""
        if not self.live:
            return None
        try:
            view: dict[str, Any] = self.get("/cluster", timeout)
            return view
        except (OSError, ValueError):
            return None

    # --- logs ------------------------------------------------------------------------------

    def logs(self, tail: int = 6000) -> str:
        """The end of each start's log."""
        return "\n".join(
            f"--- {p.name} (last {tail} chars)\n" + p.read_text(errors="replace")[-tail:]
            for p in self.log_paths
            if p.exists()
        )

    def log_text(self) -> str:
        """Every start's log, whole."""
        return "".join(p.read_text(errors="replace") for p in self.log_paths if p.exists())


@contextlib.contextmanager
def postgres_nodes(
    pg_admin_dsn: str,
    workdir: Path,
    env: dict[str, str],
    count: int = 2,
    prefix: str = "nodes",
    make: Callable[[str, int], CoordinatorProcess] | None = None,
) -> Any:
    """`count` nodes (ids 1..count) on a fresh PostgreSQL database, migrated; every node is
    killed and the database dropped at exit. `make(url, node_id)` builds each node (a gateway,
    say); by default a plain one with `env`."""
    import asyncio
    import uuid

    import asyncpg

    from storage.migrate import upgrade_async

    name = f"{prefix}_{uuid.uuid4().hex[:10]}"

    async def admin(sql: str) -> None:
        conn = await asyncpg.connect(pg_admin_dsn, timeout=10)
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    asyncio.run(admin(f'CREATE DATABASE "{name}"'))
    url = f"{pg_admin_dsn.rsplit('/', 1)[0]}/{name}".replace(
        "postgresql://", "postgresql+asyncpg://"
    )
    asyncio.run(upgrade_async(url))
    if make is None:

        def make(url: str, node_id: int) -> CoordinatorProcess:
            return CoordinatorProcess(url, workdir, dict(env), node_id=node_id)

    nodes = [make(url, i) for i in range(1, count + 1)]
    try:
        for n in nodes:
            n.start(wait_ready=False)
        for n in nodes:
            n.wait_ready(60)
        yield nodes
    finally:
        for n in nodes:
            n.kill()
        asyncio.run(admin(f'DROP DATABASE "{name}" WITH (FORCE)'))
