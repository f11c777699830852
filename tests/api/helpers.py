"""Helpers of the admin-surface tests: an in-process node served over real HTTP (uvicorn on a
free port), and group members driven with the project's protocol client
(tests/support/kafka_client.py)."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from api.app import create_app, uvicorn_config
from app.config import Settings
from app.runtime.node import CoordinatorNode
from app.security.manager import SecurityManager
from storage.log import EventLog
from storage.migrate import upgrade_async
from storage.writer import LogWriter
from tests.runtime.node_fixture import RunningNode, running_node, sqlite_url
from tests.support.consumer_bytes import assignment, range_assign, subscription
from tests.support.kafka_client import KafkaTestClient
from tests.support.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
MEMBER_ID_REQUIRED = 79
REBALANCE_IN_PROGRESS = 27


# ==== group members driven by the protocol client =============================================


@dataclass
class Member:
    """One group member on its own connection (a parked join blocks only its connection)."""

    client: KafkaTestClient
    group: str
    instance_id: str | None = None
    topics: tuple[str, ...] = ("t6",)
    protocol_type: str = "consumer"
    metadata: bytes | None = None  # default: a v3 consumer subscription of `topics`
    session_timeout_ms: int = 30_000
    rebalance_timeout_ms: int = 30_000
    member_id: str = ""
    generation: int = -1
    leader: str = ""
    members: list[str] = field(default_factory=list)
    assignment: bytes = b""

    def protocols(self) -> list[tuple[str, bytes]]:
        meta = self.metadata
        if meta is None:
            meta = subscription(
                list(self.topics), version=3, rack="rack-a", generation=self.generation
            )
        return [("range", meta)]

    async def join(self, timeout: float = 30.0) -> Any:
        """JoinGroup until a generation is answered (retries MEMBER_ID_REQUIRED)."""
        while True:
            r = await self.client.request(
                self.client.join_group_request(
                    self.group,
                    self.member_id,
                    protocols=self.protocols(),
                    session_timeout_ms=self.session_timeout_ms,
                    rebalance_timeout_ms=self.rebalance_timeout_ms,
                    group_instance_id=self.instance_id,
                    protocol_type=self.protocol_type,
                ),
                timeout=timeout,
            )
            if r.error_code == MEMBER_ID_REQUIRED:
                self.member_id = r.member_id
                continue
            if r.error_code != 0:
                raise AssertionError(f"JoinGroup of {self.instance_id or self.member_id}: {r}")
            self.member_id = r.member_id
            self.generation = r.generation_id
            self.leader = r.leader
            self.members = [m.member_id for m in r.members]
            return r

    async def sync(self, assignments: Mapping[str, bytes] | None = None) -> Any:
        r = await self.client.sync_group(
            self.group,
            self.generation,
            self.member_id,
            assignments=assignments or {},
            group_instance_id=self.instance_id,
            protocol_type=self.protocol_type,
            protocol_name="range",
        )
        if r.error_code != 0:
            raise AssertionError(f"SyncGroup of {self.instance_id or self.member_id}: {r}")
        self.assignment = r.assignment
        return r

    async def heartbeat(self) -> int:
        r = await self.client.heartbeat(
            self.group, self.generation, self.member_id, group_instance_id=self.instance_id
        )
        return int(r.error_code)


async def rebalance(members: Sequence[Member], topics: Mapping[str, int]) -> int:
    """Every member (re)joins at once, the leader assigns by range, everybody syncs."""
    await asyncio.gather(*(m.join() for m in members))
    leader = next(m for m in members if m.member_id == m.leader)
    if leader.protocol_type == "consumer":
        plan = range_assign(leader.members, topics)
        assignments = {mid: assignment(tps) for mid, tps in plan.items()}
    else:
        assignments = {mid: f"opaque-{mid}".encode() for mid in leader.members}
    await asyncio.gather(*(m.sync(assignments if m is leader else None) for m in members))
    return leader.generation


async def form_group(
    port: int,
    group: str,
    instances: Iterable[str | None],
    topics: Mapping[str, int] | None = None,
    **kw: Any,
) -> list[Member]:
    """A Stable group of one member per entry (static when the entry is an instance id)."""
    topics = dict(topics or {"t6": 6})
    members = []
    for i, inst in enumerate(instances):
        client = await KafkaTestClient.connect("127.0.0.1", port, client_id=f"{group}-c{i}")
        members.append(Member(client, group, inst, tuple(topics), **kw))
    await rebalance(members, topics)
    return members


async def close_all(members: Iterable[Member]) -> None:
    for m in members:
        await m.client.close()


# ==== a node served over HTTP ==================================================================


@dataclass
class Api:
    """A running node, its admin app on a real port, and an HTTP client for it."""

    rn: RunningNode
    url: str
    http: httpx.AsyncClient
    token: str | None
    security: SecurityManager | None = None

    @property
    def node(self) -> CoordinatorNode:
        return self.rn.node

    @property
    def kafka_port(self) -> int:
        return self.rn.port

    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}


@asynccontextmanager
async def serve_app(
    node: CoordinatorNode, port: int, token: str | None, security: SecurityManager | None = None
) -> AsyncIterator[None]:
    """The node's FastAPI app on uvicorn, as `coordinator serve` runs it."""
    server = uvicorn.Server(
        uvicorn_config(
            create_app(node, token, security=security),
            node.settings,
            host="127.0.0.1",
            port=port,
            log_config=None,  # propagate to the root logger: tests see what escapes the app
            ws="none",
        )
    )
    task = asyncio.create_task(server._serve(), name=f"admin-{port}")
    try:
        while not server.started:
            if task.done():
                task.result()
                raise RuntimeError("uvicorn did not start")
            await asyncio.sleep(0.01)
        yield
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)


@asynccontextmanager
async def served_node(
    tmp_path: Path, *, token: str | None = None, security: bool = False, **settings: Any
) -> AsyncIterator[Api]:
    """A node and its admin app; `security`: with a SecurityManager on the node's database
    (HTTP Basic, ACL checks when `authorizer="acl"`, /acls and /users)."""
    port = free_port()
    values: dict[str, Any] = {
        "admin_listen": f"127.0.0.1:{port}",
        "initial_rebalance_delay_ms": 200,  # concurrent first joins land in one generation
        "lease_ttl_ms": 30_000,  # a stalled loop on a loaded CI box must not look like a zombie
    }
    values.update(settings)
    if token:
        values["admin_token"] = token
    async with AsyncExitStack() as stack:
        rn = await stack.enter_async_context(running_node(tmp_path, **values))
        manager = None
        if security:
            manager = SecurityManager.from_settings(rn.log, rn.settings)
            await manager.start()
            stack.push_async_callback(manager.stop)
        await stack.enter_async_context(serve_app(rn.node, port, token, manager))
        url = f"http://127.0.0.1:{port}"
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        headers["Content-Type"] = "application/json"  # mutations must say so (api.deps)
        async with httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as http:
            yield Api(rn, url, http, token, manager)


@dataclass
class ClusterNode:
    node: CoordinatorNode
    url: str


@asynccontextmanager
async def two_nodes(
    tmp_path: Path,
    *,
    token: str | None = None,
    per_node: dict[int, dict[str, Any]] | None = None,
    **overrides: Any,
) -> AsyncIterator[tuple[ClusterNode, ClusterNode]]:
    """Two nodes on one SQLite file, each with its admin app on its own port; `per_node`:
    settings of node 1 or 2 only ("{port}" in a value is the node's admin port)."""
    url = sqlite_url(tmp_path)
    await upgrade_async(url)
    async with AsyncExitStack() as stack:
        out = []
        for node_id in (1, 2):
            port = free_port()
            values: dict[str, Any] = {
                "database_url": url,
                "node_id": node_id,
                "kafka_listen": f"127.0.0.1:{free_port()}",
                "admin_listen": f"127.0.0.1:{port}",
                "log_partitions": 8,
                "lease_ttl_ms": 5000,  # placement settles in a few rounds of 1.25 s
                "topics": "t1:3,t6:6",
                "initial_rebalance_delay_ms": 0,
                "admin_token": token or "",
                **overrides,
            }
            for k, v in (per_node or {}).get(node_id, {}).items():
                values[k] = v.replace("{port}", str(port)) if isinstance(v, str) else v
            settings = Settings(**values)
            event_log = await EventLog.open(url)
            stack.push_async_callback(event_log.close)
            writer = LogWriter(event_log, node_id)
            writer.start()
            stack.push_async_callback(writer.stop)
            node = CoordinatorNode(settings, event_log, writer)
            await node.start()
            stack.push_async_callback(node.stop)
            await stack.enter_async_context(serve_app(node, port, token))
            out.append(ClusterNode(node, f"http://127.0.0.1:{port}"))
        yield out[0], out[1]


async def eventually(check: Any, timeout: float = 15.0, what: str = "condition") -> Any:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        got = check()
        if asyncio.iscoroutine(got):
            got = await got
        if got:
            return got
        if loop.time() > deadline:
            raise AssertionError(f"{what} not reached in {timeout}s")
        await asyncio.sleep(0.05)


# ==== the `coordinator` command ================================================================

# what the `coordinator` console script runs (pyproject's [project.scripts]), from this checkout:
# the script itself imports whichever checkout the virtualenv was installed from
COORDINATOR = (sys.executable, "-m", "cli.main")


@dataclass
class CliResult:
    code: int
    stdout: str
    stderr: str


async def run_cli(
    *args: str,
    url: str | None = None,
    token: str | None = None,
    timeout: float = 60.0,
    extra_env: Mapping[str, str] | None = None,
) -> CliResult:
    """The real command in a subprocess (asynchronously: the node under test runs on this
    event loop). The admin URL and token come from COORD_ADMIN_URL/COORD_ADMIN_TOKEN."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("COORD_")}
    env.update(COLUMNS="200", NO_COLOR="1", TERM="dumb")
    env.update(extra_env or {})
    if url is not None:
        env["COORD_ADMIN_URL"] = url
    if token is not None:
        env["COORD_ADMIN_TOKEN"] = token
    proc = await asyncio.create_subprocess_exec(
        *COORDINATOR,
        *args,
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    assert proc.returncode is not None
    return CliResult(proc.returncode, out.decode(), err.decode())
