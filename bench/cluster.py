"""The nodes of the load and failover runs (tests/support/nodes.py's CoordinatorProcess, compaction
pushed out of the way) and what their /cluster says."""

from __future__ import annotations

import contextlib
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from tests.support.nodes import CoordinatorProcess

POLL_S = 0.020
NODE_LOG_LEVEL = "WARNING"
LOAD_FAILED = "failed to load"  # node.py's warning when a load fails and is retried


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def node_env(partitions: int, ttl_ms: int, node_id: int) -> dict[str, str]:
    return {
        "COORD_NODE_ID": str(node_id),
        "COORD_LOG_PARTITIONS": str(partitions),
        "COORD_LEASE_TTL_MS": str(ttl_ms),
        "COORD_COMPACTION_INTERVAL_MS": "3600000",
        "COORD_LOG_LEVEL": NODE_LOG_LEVEL,
    }


@contextlib.contextmanager
def running(nodes: Sequence[CoordinatorProcess]) -> Iterator[None]:
    try:
        yield
    finally:
        for n in nodes:  # SIGTERM all first: they shut down in parallel
            if n.proc is not None and n.proc.poll() is None:
                n.proc.terminate()
        for n in nodes:
            with contextlib.suppress(Exception):
                n.stop()


def views(nodes: Sequence[CoordinatorProcess]) -> dict[int, dict[str, Any]]:
    return {i: v for i, n in enumerate(nodes) if (v := n.cluster(timeout=1)) is not None}


def served(v: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """The partitions a node's /cluster says it holds (loading or active)."""
    return {p["partition"]: p for p in v["partitions"] if p["state"] is not None}


def settled(
    nodes: Sequence[CoordinatorProcess], partitions: int
) -> dict[int, dict[str, Any]] | None:
    """Every live node's view once each partition is active on exactly one node, the one the
    placement plan names, and every live node serves some; else None."""
    live = [i for i, n in enumerate(nodes) if n.running]
    vs = views(nodes)
    if sorted(vs) != live:
        return None
    every: list[int] = []
    for v in vs.values():
        mine = served(v)
        if not mine or any(
            p["state"] != "active" or p["planned_owner"] != v["node_id"] for p in mine.values()
        ):
            return None
        every += mine
    return vs if sorted(every) == list(range(-1, partitions)) else None


def wait_settled(
    nodes: Sequence[CoordinatorProcess], partitions: int, timeout: float
) -> dict[int, dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for n in nodes:
            if n.proc is not None and n.proc.poll() is not None and n.proc.returncode > 0:
                raise RuntimeError(f"node exited:\n{n.logs()}")
        got = settled(nodes, partitions)
        if got is not None:
            return got
        time.sleep(0.1)
    raise TimeoutError(f"cluster did not settle in {timeout:.0f} s: {unsettled(nodes)}")


def unsettled(nodes: Sequence[CoordinatorProcess]) -> str:
    """What each node last showed, with its logs copied where the run's scratch directory
    (deleted at the end) will not take them: a cluster that does not settle is rare, and its
    cause is in the nodes' lease and load warnings."""
    kept = Path(tempfile.mkdtemp(prefix="bench-unsettled-"))
    vs = views(nodes)
    said = []
    for i, n in enumerate(nodes):
        for path in n.log_paths:
            if path.exists():
                shutil.copy(path, kept / path.name)
        if not n.running:
            said.append(f"node {i + 1} not running")
            continue
        v = vs.get(i)
        if v is None:
            said.append(f"node {i + 1} no /cluster answer")
            continue
        mine = served(v)
        off_plan = sorted(
            p for p, st in mine.items()
            if st["state"] != "active" or st["planned_owner"] != v["node_id"]
        )  # fmt: skip
        said.append(
            f"node {i + 1} serves {sorted(mine)}, not active or not its own {off_plan}, "
            f"{n.log_text().count(LOAD_FAILED)} failed loads"
        )
    return f"{'; '.join(said)} (node logs in {kept})"


def wait_all_active(
    node: CoordinatorProcess, partitions: int, t0: float, timeout: float
) -> tuple[dict[str, Any], float | None]:
    """Poll /cluster until every partition is active on the node: (last view, seconds since
    t0), or (last view, None) after `timeout`."""
    want = set(range(-1, partitions))
    while True:
        view = node.get("/cluster", timeout=5)
        t = time.perf_counter()
        if {p["partition"] for p in view["partitions"] if p["state"] == "active"} >= want:
            return view, t - t0
        if t - t0 > timeout:
            return view, None
        time.sleep(POLL_S)
