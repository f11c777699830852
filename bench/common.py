"""Shared plumbing: coordinator nodes in their own processes, load generators in several.

A load generator must not be the bottleneck (issue 6): figures spread their clients over
`worker_processes()` OS processes running `tests/kafka_client.py` (raw frames, many requests in
flight), started together at an agreed wall-clock instant so their windows overlap.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.report import ROOT, BenchOptions
from tests.integration.harness import CoordinatorProcess

try:  # the node serves on uvloop when it is installed; the load generators should too
    import uvloop

    def run_async(coro: Any) -> Any:
        return uvloop.run(coro)

except ImportError:  # pragma: no cover - uvloop ships with uvicorn[standard]
    import asyncio

    def run_async(coro: Any) -> Any:
        return asyncio.run(coro)


@contextmanager
def node(
    opts: BenchOptions, name: str, db_url: str | None = None, **env: str
) -> Iterator[CoordinatorProcess]:
    """One `coordinator serve` on its own SQLite file (or `db_url`), stopped on exit."""
    workdir = opts.workdir / name
    workdir.mkdir(parents=True, exist_ok=True)
    url = db_url or f"sqlite+aiosqlite:///{workdir / 'coordinator.db'}"
    env.setdefault("COORD_LOG_LEVEL", "WARNING")
    proc = CoordinatorProcess(url, workdir, env_overrides=env)
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


def worker_processes() -> int:
    """How many load-generator processes to use: the cores the node does not need."""
    return max(2, (os.cpu_count() or 2))


def run_workers(
    module: str, args: Sequence[dict[str, Any]], timeout: float = 600.0
) -> list[dict[str, Any]]:
    """Run `module.worker(args[i])` (an async function returning a JSON-able dict) in one OS
    process per entry, all at once; return their results in order. A failing worker fails
    the figure with its stderr."""
    procs = []
    for a in args:
        code = (
            "import json, sys\n"
            f"from bench.common import run_async\nfrom {module} import worker\n"
            "print(json.dumps(run_async(worker(json.loads(sys.argv[1])))))\n"
        )
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", code, json.dumps(a)],
                cwd=ROOT,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
            )
        )
    results = []
    deadline = time.monotonic() + timeout
    for p in procs:
        try:
            out, err = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise RuntimeError(f"{module} worker timed out after {timeout}s") from None
        if p.returncode != 0:
            for q in procs:
                q.kill()
            raise RuntimeError(f"{module} worker failed ({p.returncode}):\n{err.decode()[-4000:]}")
        results.append(json.loads(out.decode().strip().splitlines()[-1]))
    return results


def start_barrier(delay: float = 1.5) -> float:
    """A wall-clock instant, shared by the workers, at which every one starts its window."""
    return time.time() + delay


async def sleep_until(t: float) -> None:
    import asyncio

    await asyncio.sleep(max(0.0, t - time.time()))


def rss_bytes(pid: int) -> int:
    """Resident set size of a process (Linux /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")
