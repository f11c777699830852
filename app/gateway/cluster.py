"""What the gateway knows of the upstream cluster: its brokers, topics and API ranges.

`UpstreamCluster` keeps one metadata connection (the SDK's client, membership/wire.py, with the
gateway's credentials) to any reachable broker, and asks it for ApiVersions and the Metadata of
every topic every COORD_UPSTREAM_METADATA_REFRESH_MS, or sooner when a relay asks (a broker it
does not know, a broker it cannot reach). A failure is kept as `problem` for /readyz, and the
loop goes on trying: a node whose upstream is away still serves its groups.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import ssl
import uuid
from collections.abc import Callable, Mapping
from typing import Any, Final

from app.gateway.addresses import BrokerPorts
from app.gateway.upstream import UpstreamConfig
from membership.wire import AuthenticationFailed, Connection, ConnectionLost, UnsupportedVersion

log = logging.getLogger("app.gateway")

API_VERSIONS: Final = 18
METADATA: Final = 3
# the newest Metadata with topic ids (v10+) that every Kafka since 2.8 serves
METADATA_VERSIONS: Final = (1, 12)


class UpstreamCluster:
    def __init__(
        self,
        config: UpstreamConfig,
        ports: BrokerPorts,
        refresh_ms: int,
        on_topics: Callable[[Mapping[str, int]], None],
    ) -> None:
        self.config = config
        self.ports = ports
        self.refresh_s = refresh_ms / 1000
        self._on_topics = on_topics
        self.context: ssl.SSLContext | None = config.ssl_context()
        self.brokers: dict[int, tuple[str, int]] = {}  # upstream broker id -> its address
        self.racks: dict[int, str | None] = {}
        self.topics: dict[str, int] = {}
        self.topic_names: dict[uuid.UUID, str] = {}  # Fetch v13+ names topics by id
        # (topic, partition) -> its leader's broker id (-1: none now), for ListOffsets
        self.leaders: dict[tuple[str, int], int] = {}
        self.versions: dict[int, tuple[int, int]] = {}
        self.cluster_id: str | None = None
        self.problem: str | None = "not reached yet"
        self.unplaced: list[int] = []  # broker ids outside the gateway's port range
        self.refreshes = 0
        self._conn: Connection | None = None
        self._wanted = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._next_bootstrap = itertools.cycle(range(len(config.bootstrap)))

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="upstream-metadata")

    async def first_refresh(self) -> None:
        """One refresh before the gateway's listeners open, bounded by the upstream timeout:
        a client that connects before the upstream's ApiVersions are known is answered without
        any relayed API (FindCoordinator, Metadata, Produce, Fetch...), and clients keep that
        answer for the connection's life (aiokafka: IncompatibleBrokerVersion for
        FindCoordinator, Java: "The node does not support METADATA"). An unreachable upstream
        (its problem kept for /readyz) delays the listeners by at most that timeout."""
        try:
            async with asyncio.timeout(self.config.timeout_s):
                await self.refresh()
        except TimeoutError:
            self._failed(f"no Metadata in {self.config.timeout_s:g} s")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._conn is not None:
            await self._conn.close()
            self._conn = None

    def request_refresh(self) -> None:
        self._wanted.set()

    async def _run(self) -> None:
        while True:
            await self.refresh()
            self._wanted.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.refresh_s if self.problem is None else 1.0):
                    await self._wanted.wait()

    # --- one refresh -------------------------------------------------------------------------

    async def refresh(self) -> None:
        try:
            conn = await self._connection()
            version = conn.version(METADATA, *METADATA_VERSIONS)
            reply = await conn.request(
                METADATA,
                version,
                timeout=self.config.timeout_s,
                topics=None,
                allow_auto_topic_creation=False,
            )
        except (ConnectionLost, AuthenticationFailed, UnsupportedVersion, OSError) as e:
            self._failed(str(e))
            return
        self._apply(reply, conn.versions)

    async def _connection(self) -> Connection:
        if self._conn is not None and not self._conn.closed:
            return self._conn
        self._conn = None
        # known brokers first (the bootstrap list may name only some), then the bootstrap list
        candidates = [*self.brokers.values()]
        i = next(self._next_bootstrap)
        candidates += [*self.config.bootstrap[i:], *self.config.bootstrap[:i]]
        errors = []
        for host, port in dict.fromkeys(candidates):
            try:
                self._conn = await Connection.open(
                    host,
                    port,
                    client_id=self.config.client_id,
                    ssl=self.context,
                    sasl=self.config.sasl,
                    timeout=self.config.timeout_s,
                )
                return self._conn
            except AuthenticationFailed:
                raise
            except ConnectionLost as e:
                errors.append(str(e))
        raise ConnectionLost("; ".join(errors) or "no upstream broker to ask")

    def _failed(self, reason: str) -> None:
        shown = f"upstream {self.bootstrap_text}: {reason}"
        if shown != self.problem:
            log.error("%s", shown)
        self.problem = shown
        conn, self._conn = self._conn, None
        if conn is not None and not conn.closed:
            asyncio.get_running_loop().create_task(conn.close())

    @property
    def bootstrap_text(self) -> str:
        return ",".join(f"{h}:{p}" for h, p in self.config.bootstrap)

    def _apply(self, reply: Any, versions: dict[int, tuple[int, int]]) -> None:
        brokers = {int(b.node_id): (str(b.host), int(b.port)) for b in reply.brokers}
        self.racks = {int(b.node_id): b.rack for b in reply.brokers}
        unplaced = sorted(b for b in brokers if not self.ports.placeable(b))
        if unplaced and unplaced != self.unplaced:
            log.error(
                "upstream broker id(s) %s have no gateway port: the gateway places ids %d..%d "
                "(COORD_GATEWAY_BROKER_ID_BASE, COORD_GATEWAY_BROKER_PORTS); clients cannot "
                "reach their partitions through it",
                unplaced,
                self.ports.id_base,
                self.ports.id_base + self.ports.count - 1,
            )
        self.unplaced = unplaced
        topics: dict[str, int] = {}
        names: dict[uuid.UUID, str] = {}
        leaders: dict[tuple[str, int], int] = {}
        for t in reply.topics:
            if int(t.error_code) != 0 or t.name is None:
                continue
            topics[str(t.name)] = len(t.partitions)
            for p in t.partitions:
                leaders[(str(t.name), int(p.partition_index))] = int(p.leader_id)
            topic_id = getattr(t, "topic_id", None)
            if topic_id is not None and topic_id.int:
                names[topic_id] = str(t.name)
        self.brokers = brokers
        self.topics = topics
        self.topic_names = names
        self.leaders = leaders
        self.versions = dict(versions)
        self.cluster_id = reply.cluster_id
        if self.problem is not None:
            log.info(
                "upstream %s reached: cluster %s, brokers %s, %d topics",
                self.bootstrap_text,
                self.cluster_id,
                sorted(brokers),
                len(topics),
            )
        self.problem = None
        self.refreshes += 1
        self._on_topics(topics)

    def learn(self, body: Any) -> None:
        """A relayed Metadata reply's topics (the client asked, so they are fresh): new ones
        and grown ones join the registry before the next refresh."""
        grown = False
        for t in body.topics:
            if int(t.error_code) != 0 or not t.name:
                continue
            n = len(t.partitions)
            if self.topics.get(t.name, 0) < n:
                self.topics[str(t.name)] = n
                grown = True
            topic_id = getattr(t, "topic_id", None)
            if topic_id is not None and topic_id.int:
                self.topic_names[topic_id] = str(t.name)
        if grown:
            self._on_topics(self.topics)

    def status(self) -> dict[str, Any]:
        return {
            "bootstrap": self.bootstrap_text,
            "security_protocol": self.config.security_protocol,
            "reachable": self.problem is None,
            "problem": self.problem,
            "cluster_id": self.cluster_id,
            "brokers": [
                {"node_id": b, "host": h, "port": p, "rack": self.racks.get(b)}
                for b, (h, p) in sorted(self.brokers.items())
            ],
            "unplaced_broker_ids": self.unplaced,
            "topics": len(self.topics),
        }
