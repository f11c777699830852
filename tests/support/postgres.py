"""A private PostgreSQL cluster: initdb into a temp dir, its own port on 127.0.0.1, trust auth,
started, stopped and restarted with pg_ctl.

The test session starts one and shares it (tests/conftest.py), the chaos suite starts one per
run so it can restart it, and `python -m bench` starts one when no server is named. initdb and
pg_ctl refuse to run as root, so when we are root they run as the `postgres` OS user through
runuser (the data directory is handed to that user first). A server already on the machine is
never touched. Missing binaries fail loudly (`make deps` installs them): nothing that needs
PostgreSQL is ever skipped.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from tests.support.ports import free_port as _free_port

PG_USER = "postgres"  # OS user that runs the server when we are root; also the DB superuser


def find_pg_bin() -> Path:
    """The newest /usr/lib/postgresql/*/bin holding initdb, pg_ctl and postgres (or $PG_BIN)."""
    wanted = ("initdb", "pg_ctl", "postgres")
    candidates = [os.environ["PG_BIN"]] if os.environ.get("PG_BIN") else []
    candidates += sorted(
        glob.glob("/usr/lib/postgresql/*/bin"),
        key=lambda p: int(Path(p).parent.name) if Path(p).parent.name.isdigit() else 0,
        reverse=True,
    )
    for c in candidates:
        if all(os.access(Path(c) / w, os.X_OK) for w in wanted):
            return Path(c)
    raise RuntimeError(
        "PostgreSQL server binaries (initdb, pg_ctl, postgres) not found in "
        f"{candidates or '/usr/lib/postgresql/*/bin'}: run `make deps` (installs Debian's "
        "postgresql package), set PG_BIN, or point COORD_TEST_PG_DSN at a running server"
    )


class PrivatePostgres:
    """`start()`, `stop(mode)`, `restart(mode)`, `url(db)`; `cleanup()` stops it for good."""

    def __init__(
        self,
        base: Path | None = None,
        port: int | None = None,
        prefix: str = "coord-pg-",
        fsync: bool = False,
        hosts: tuple[str, ...] = (),
        trust_from: tuple[str, ...] = (),
    ) -> None:
        self.bin = find_pg_bin()
        self.hosts = hosts  # addresses it listens on beside 127.0.0.1
        self.trust_from = trust_from  # the networks (CIDR) it lets in beside loopback
        self.as_root = os.geteuid() == 0
        if self.as_root:
            try:
                self.pw = pwd.getpwnam(PG_USER)
            except KeyError:
                raise RuntimeError(
                    f"running as root but there is no {PG_USER!r} OS user to run initdb/pg_ctl"
                ) from None
            if shutil.which("runuser") is None:
                raise RuntimeError("running as root but `runuser` is missing")
        # not under pytest's tmp_path: its parents are root-only (0700) and postgres must reach it
        self.owns_base = base is None
        self.base = Path(tempfile.mkdtemp(prefix=prefix)) if base is None else base
        self.datadir = self.base / "pgdata"
        self.sockdir = self.base / "pgsock"
        self.logfile = self.base / "postgres.log"
        self.port = port or _free_port()
        self.superuser = PG_USER if self.as_root else pwd.getpwuid(os.geteuid()).pw_name
        self.fsync = fsync
        self.starts = 0
        self.restarts = 0
        self._initdb()

    # --- plumbing ----------------------------------------------------------------------------

    def _run(self, *args: str, timeout: float = 60.0, check: bool = True) -> str:
        cmd = [str(self.bin / args[0]), *args[1:]]
        if self.as_root:
            cmd = ["runuser", "-u", PG_USER, "--", *cmd]
        p = subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout, cwd=self.base, check=False
        )
        if check and p.returncode != 0:
            raise RuntimeError(
                f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}\n"
                f"--- server log:\n{self.log_tail()}"
            )
        return p.stdout + p.stderr

    def _initdb(self) -> None:
        for d in (self.base, self.sockdir):
            d.mkdir(parents=True, exist_ok=True)
        if self.as_root:
            for d in (self.base, self.sockdir):
                os.chown(d, self.pw.pw_uid, self.pw.pw_gid)
        self.logfile.touch()
        if self.as_root:
            os.chown(self.logfile, self.pw.pw_uid, self.pw.pw_gid)
        self._run(
            "initdb", "-D", str(self.datadir), "-U", self.superuser, "--auth=trust",
            "--encoding=UTF8", "--no-instructions", "--no-sync",
        )  # fmt: skip
        conf = self.datadir / "postgresql.conf"
        with open(conf, "a") as f:
            f.write(
                "\n# private, disposable cluster of the test suite\n"
                f"port = {self.port}\n"
                f"listen_addresses = '{','.join(('127.0.0.1', *self.hosts))}'\n"
                f"unix_socket_directories = '{self.sockdir}'\n"
                "max_connections = 200\n"
                "shared_buffers = 32MB\n"
                # fsync off loses nothing when only the server process dies (the WAL written
                # at commit is in the OS cache); it keeps the machine's disk out of the timing
                # of tests. Benchmarks of durable commits keep it on.
                f"fsync = {'on' if self.fsync else 'off'}\n"
                f"full_page_writes = {'on' if self.fsync else 'off'}\n"
                "logging_collector = off\n"
                "log_min_messages = warning\n"
                "log_connections = off\n"
            )
        with open(self.datadir / "pg_hba.conf", "a") as f:
            f.writelines(f"host all all {net} trust\n" for net in self.trust_from)

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        self.starts += 1
        self._run(
            "pg_ctl", "start", "-D", str(self.datadir), "-l", str(self.logfile), "-w", "-t", "60"
        )
        self.wait_accepting()

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "stop", "-D", str(self.datadir), "-m", mode, "-w", "-t", "60")

    def restart(self, mode: str = "fast", down_s: float = 0.0) -> None:
        """Stop (`fast`: clean, `immediate`: like a crash, WAL recovery at start), stay down
        `down_s`, start again."""
        self.restarts += 1
        self.stop(mode)
        if down_s > 0:
            time.sleep(down_s)
        self.start()

    @contextlib.contextmanager
    def frozen(self) -> Iterator[None]:
        """The server and every backend stopped (SIGSTOP) and resumed after: connections stay
        open and nothing answers on them, as over a link that drops every packet."""
        postmaster = int((self.datadir / "postmaster.pid").read_text().split()[0])
        pids = [postmaster, *_children(postmaster)]
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
        try:
            yield
        finally:
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)

    def running(self) -> bool:
        out = self._run("pg_ctl", "status", "-D", str(self.datadir), check=False)
        return "server is running" in out

    def wait_accepting(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return
            except OSError:
                time.sleep(0.05)
        raise TimeoutError(f"PostgreSQL on port {self.port} not accepting:\n{self.log_tail()}")

    def cleanup(self, remove: bool = True) -> None:
        """Stop the server for good (immediate; SIGKILL if pg_ctl cannot) and remove our dir."""
        pid_file = self.datadir / "postmaster.pid"
        if pid_file.exists():
            try:
                self.stop("immediate")
            except Exception:
                with contextlib.suppress(OSError, ValueError):
                    os.kill(int(pid_file.read_text().split()[0]), 9)
        if remove and self.owns_base:
            shutil.rmtree(self.base, ignore_errors=True)

    # --- access ------------------------------------------------------------------------------

    def url(self, database: str = "postgres", host: str = "127.0.0.1") -> str:
        return f"postgresql+asyncpg://{self.superuser}@{host}:{self.port}/{database}"

    def dsn(self, database: str = "postgres") -> str:
        return f"postgresql://{self.superuser}@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        import asyncio

        import asyncpg

        async def go() -> None:
            conn = await asyncpg.connect(self.dsn(), timeout=10)
            try:
                await conn.execute(f'CREATE DATABASE "{name}"')
            finally:
                await conn.close()

        asyncio.run(go())
        return self.url(name)

    def query(self, database: str, sql: str) -> list[dict[str, object]]:
        import asyncio

        import asyncpg

        async def go() -> list[dict[str, object]]:
            conn = await asyncpg.connect(self.dsn(database), timeout=5)
            try:
                return [dict(r) for r in await conn.fetch(sql, timeout=5)]
            finally:
                await conn.close()

        return asyncio.run(go())

    def log_tail(self, n: int = 4000) -> str:
        try:
            return self.logfile.read_text(errors="replace")[-n:]
        except OSError:
            return ""


def check_reachable(dsn: str) -> None:
    """Raise RuntimeError naming `dsn` unless a PostgreSQL server answers there."""
    import asyncio

    import asyncpg

    async def go() -> None:
        conn = await asyncpg.connect(dsn, timeout=10)
        await conn.close()

    try:
        asyncio.run(go())
    except Exception as e:  # refused, timed out, asyncpg's own (auth, missing database, ...)
        raise RuntimeError(
            f"PostgreSQL is required but unreachable at {dsn} ({type(e).__name__}: {e})"
        ) from e


def _children(pid: int) -> list[int]:
    """The processes whose parent is `pid` (PostgreSQL's backends and workers)."""
    out = []
    for stat in glob.glob("/proc/[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = Path(stat).read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid:
                out.append(int(Path(stat).parent.name))
    return out
