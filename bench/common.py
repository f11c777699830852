"""Shared plumbing: coordinator nodes in their own processes, load generators in several.

A load generator must not be the bottleneck: figures spread their clients over
`worker_processes()` OS processes running `tests/support/kafka_client.py` (raw frames, many
requests in flight), started together at an agreed wall-clock instant so their windows overlap.
"""

from __future__ import annotations

import gc
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.report import ROOT, BenchOptions
from tests.support.nodes import CoordinatorProcess

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


@contextmanager
def no_collection() -> Iterator[None]:
    """A timed window of the load generator without its own garbage collection: what was
    allocated before is collected first (outside the window), and the collector is off until
    the window ends. One Python process simulates every client, so a full collection of all
    their objects (tens of ms) would otherwise land in some windows, the floor's and the node's
    alike: a pause of the load generator, not of what is measured."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def worker_processes() -> int:
    """How many load-generator processes to use: the cores the node does not need."""
    return max(2, (os.cpu_count() or 2))


def run_workers(
    module: str,
    args: Sequence[dict[str, Any]],
    timeout: float = 600.0,
    command: Sequence[str] | None = None,
) -> list[dict[str, Any]]:
    """Run `module.worker(args[i])` (an async function returning a JSON-able dict) in one OS
    process per entry, all at once; return their results in order. A failing worker fails
    the figure with its stderr. Results travel through files, not pipes: a pipe read after a
    worker exits can come back cut short, and several pipes read in turn can stall a writer.
    `command`: a program of its own instead, run with the entry's JSON and the result file's
    path as its last two arguments."""
    out_dir = Path(tempfile.mkdtemp(prefix="bench-workers-"))
    procs = []
    code = (
        "import json, sys\n"
        f"from bench.common import run_async\nfrom {module} import worker\n"
        "result = run_async(worker(json.loads(sys.argv[1])))\n"
        "with open(sys.argv[2], 'w') as f:\n    json.dump(result, f)\n"
    )
    argv = list(command) if command is not None else [sys.executable, "-c", code]
    try:
        for i, a in enumerate(args):
            err = open(out_dir / f"{i}.err", "wb")  # noqa: SIM115 - closed below
            procs.append(
                (
                    subprocess.Popen(
                        [*argv, json.dumps(a), str(out_dir / f"{i}.json")],
                        cwd=ROOT,
                        stdout=subprocess.DEVNULL,
                        stderr=err,
                        env={**os.environ, "PYTHONPATH": str(ROOT)},
                    ),
                    err,
                )
            )
        deadline = time.monotonic() + timeout
        results = []
        for i, (p, err) in enumerate(procs):
            try:
                p.wait(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                raise RuntimeError(f"{module} worker timed out after {timeout}s") from None
            err.close()
            if p.returncode != 0:
                tail = (out_dir / f"{i}.err").read_text(errors="replace")[-4000:]
                raise RuntimeError(f"{module} worker failed ({p.returncode}):\n{tail}")
            results.append(json.loads((out_dir / f"{i}.json").read_text()))
        return results
    finally:
        for p, err in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
            err.close()
        shutil.rmtree(out_dir, ignore_errors=True)


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


@contextmanager
def server_process(code: str, what: str) -> Iterator[tuple[int, int]]:
    """(port, pid) of a floor server run as `python -c code` (`{port}` in `code` is filled in
    with a free port); it prints `ready` once it listens, and is stopped on exit."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    proc = subprocess.Popen(
        [sys.executable, "-c", code.format(port=port)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert proc.stdout is not None
        if proc.stdout.readline().strip() != b"ready":
            raise RuntimeError(f"{what} did not start (exit {proc.poll()})")
        yield port, proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
