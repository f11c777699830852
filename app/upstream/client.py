"""The gateway's admin requests to the upstream cluster, as its own principal.

What moving groups in and out, the mirror, lag and the split-brain check ask the upstream:
FindCoordinator, DescribeGroups, ListGroups, OffsetFetch and OffsetCommit at a group's upstream
coordinator, ListOffsets at partition leaders. One connection per broker (the SDK's client,
membership/wire.py, with the gateway's TLS and SASL settings), opened on first use and dropped
on any failure; requests on one connection are pipelined. Every call is bounded by the
upstream timeout and raises `UpstreamUnavailable` with the reason.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from app.gateway.cluster import UpstreamCluster
from membership.wire import AuthenticationFailed, Connection, ConnectionLost, UnsupportedVersion

FIND_COORDINATOR: Final = 10
OFFSET_FETCH: Final = 9
OFFSET_COMMIT: Final = 8
DESCRIBE_GROUPS: Final = 15
LIST_GROUPS: Final = 16
LIST_OFFSETS: Final = 2
CONSUMER_GROUP_DESCRIBE: Final = 69
# version ranges whose field shapes this module builds (every Kafka since 2.8 serves them;
# FindCoordinator's batched keys since 3.0, one key per request before)
_VERSIONS: Final = {
    FIND_COORDINATOR: (1, 4),
    OFFSET_FETCH: (2, 7),  # one group, null topics = every committed partition
    OFFSET_COMMIT: (2, 8),
    DESCRIBE_GROUPS: (0, 5),
    LIST_GROUPS: (0, 4),
    LIST_OFFSETS: (1, 7),
    CONSUMER_GROUP_DESCRIBE: (0, 1),  # KIP-848 groups (Kafka 4.0+): DescribeGroups says Dead
}
BATCHED_KEYS: Final = 4
GROUP_KEY: Final = 0
NOT_COORDINATOR: Final = 16
COORDINATOR_LOAD_IN_PROGRESS: Final = 14
COORDINATOR_NOT_AVAILABLE: Final = 15
GROUP_ID_NOT_FOUND: Final = 69
_RETRIED: Final = frozenset(
    {NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE}
)
# a DescribeGroups or FindCoordinator request names at most this many groups
BATCH: Final = 500


class UpstreamUnavailable(Exception):
    """The upstream could not answer (unreachable, refused, timed out): the reason."""


@dataclass(frozen=True, slots=True)
class UpstreamOffset:
    topic: str
    partition: int
    offset: int
    leader_epoch: int = -1
    metadata: str = ""


@dataclass(frozen=True, slots=True)
class UpstreamGroup:
    group_id: str
    state: str  # Kafka's: Empty, Stable, PreparingRebalance, CompletingRebalance, Dead
    protocol_type: str
    members: tuple[str, ...]  # client ids of its live members (host: client id)

    @property
    def live(self) -> bool:
        return bool(self.members)


class UpstreamAdmin:
    def __init__(self, cluster: UpstreamCluster) -> None:
        self.cluster = cluster
        self.timeout_s = cluster.config.timeout_s
        self._conns: dict[tuple[str, int], Connection] = {}
        self._opening: dict[tuple[str, int], asyncio.Future[Connection]] = {}
        self._coordinator_of: dict[str, tuple[str, int]] = {}

    async def close(self) -> None:
        conns, self._conns = self._conns, {}
        for conn in conns.values():
            await conn.close()

    # --- connections -----------------------------------------------------------------------

    async def _conn(self, address: tuple[str, int]) -> Connection:
        conn = self._conns.get(address)
        if conn is not None and not conn.closed:
            return conn
        opening = self._opening.get(address)
        if opening is not None:
            return await asyncio.shield(opening)
        fut: asyncio.Future[Connection] = asyncio.get_running_loop().create_future()
        self._opening[address] = fut
        config = self.cluster.config
        try:
            conn = await Connection.open(
                address[0],
                address[1],
                client_id=config.client_id,
                ssl=self.cluster.context,
                sasl=config.sasl,
                timeout=self.timeout_s,
            )
        except (ConnectionLost, AuthenticationFailed, OSError) as e:
            fut.set_exception(UpstreamUnavailable(str(e)))
            fut.exception()  # retrieved: nobody else may be waiting
            raise UpstreamUnavailable(str(e)) from e
        except BaseException:  # cancelled: whoever waits on the same opening learns it
            fut.set_exception(UpstreamUnavailable("connecting was cancelled"))
            fut.exception()
            raise
        finally:
            self._opening.pop(address, None)
        self._conns[address] = conn
        fut.set_result(conn)
        return conn

    def _any_address(self) -> tuple[str, int]:
        brokers = self.cluster.brokers
        if brokers:
            return brokers[min(brokers)]
        return self.cluster.config.bootstrap[0]

    async def _request(self, address: tuple[str, int], api_key: int, **values: Any) -> Any:
        try:
            conn = await self._conn(address)
        except UpstreamUnavailable:
            self._forget_at(address)
            raise
        try:
            version = conn.version(api_key, *_VERSIONS[api_key])
            return await conn.request(api_key, version, timeout=self.timeout_s, **values)
        except UnsupportedVersion as e:
            raise UpstreamUnavailable(f"upstream {address[0]}:{address[1]}: {e}") from e
        except ConnectionLost as e:
            self._conns.pop(address, None)
            self._forget_at(address)
            raise UpstreamUnavailable(f"upstream {address[0]}:{address[1]}: {e}") from e

    def _forget_at(self, address: tuple[str, int]) -> None:
        """A broker that cannot be reached coordinates nothing we know of: asked again."""
        for g in [g for g, a in self._coordinator_of.items() if a == address]:
            del self._coordinator_of[g]

    # --- group coordinators ----------------------------------------------------------------

    async def coordinators(
        self, group_ids: Iterable[str], strict: bool = True
    ) -> dict[str, tuple[str, int]]:
        """Each group's upstream coordinator (cached until it answers NOT_COORDINATOR or cannot
        be reached). A group the upstream gives no coordinator for raises UpstreamUnavailable
        when `strict`, else is left out."""
        out: dict[str, tuple[str, int]] = {}
        wanted = []
        for g in dict.fromkeys(group_ids):
            known = self._coordinator_of.get(g)
            if known is not None:
                out[g] = known
            else:
                wanted.append(g)
        if not wanted:
            return out
        address = self._any_address()
        conn = await self._conn(address)
        batched = conn.versions.get(FIND_COORDINATOR, (0, 0))[1] >= BATCHED_KEYS
        found: list[tuple[str, int, str, int, str | None]] = []  # key, error, host, port, why
        for start in range(0, len(wanted), BATCH if batched else 1):
            keys = wanted[start : start + BATCH] if batched else wanted[start : start + 1]
            if batched:
                reply = await self._request(
                    address, FIND_COORDINATOR, key_type=GROUP_KEY, coordinator_keys=keys
                )
                found += [
                    (str(c.key), int(c.error_code), str(c.host), int(c.port), c.error_message)
                    for c in reply.coordinators
                ]
            else:
                reply = await self._request(address, FIND_COORDINATOR, key=keys[0], key_type=0)
                found.append(
                    (keys[0], int(reply.error_code), str(reply.host), int(reply.port),
                     reply.error_message)
                )  # fmt: skip
        for key, error, host, port, why in found:
            if error:
                if strict:
                    raise UpstreamUnavailable(
                        f"upstream FindCoordinator({key}): error {error}"
                        + (f" ({why})" if why else "")
                    )
                continue
            self._coordinator_of[key] = (host, port)
            out[key] = (host, port)
        return out

    def _forget(self, group_id: str) -> None:
        self._coordinator_of.pop(group_id, None)
        if len(self._coordinator_of) > 100_000:  # bounded: a cache, not a registry
            self._coordinator_of.clear()

    async def _at_coordinator(self, group: str, api_key: int, **values: Any) -> Any:
        """One request at the group's coordinator, once more after a move."""
        for attempt in range(2):
            address = (await self.coordinators([group]))[group]
            try:
                reply = await self._request(address, api_key, **values)
            except UpstreamUnavailable:
                self._forget(group)
                raise
            error = int(getattr(reply, "error_code", 0))
            if error in _RETRIED and attempt == 0:
                self._forget(group)
                continue
            if error:
                raise UpstreamUnavailable(f"upstream API {api_key} for {group!r}: error {error}")
            return reply
        raise AssertionError("unreachable")

    # --- groups ----------------------------------------------------------------------------

    async def describe(
        self, group_ids: Iterable[str], strict: bool = True
    ) -> dict[str, UpstreamGroup]:
        """The upstream coordinator's view of each group (Dead: it has none), classic groups
        by DescribeGroups and KIP-848 ones by ConsumerGroupDescribe. A group the upstream
        cannot describe now (loading, moving, refused) raises UpstreamUnavailable when
        `strict`, else is left out: never taken for one without members."""
        by_address: dict[tuple[str, int], list[str]] = {}
        for g, address in (await self.coordinators(group_ids, strict)).items():
            by_address.setdefault(address, []).append(g)
        out: dict[str, UpstreamGroup] = {}
        for address, groups in by_address.items():
            for start in range(0, len(groups), BATCH):
                batch = groups[start : start + BATCH]
                reply = await self._request(address, DESCRIBE_GROUPS, groups=batch)
                dead = []
                for d in reply.groups:
                    g, error = str(d.group_id), int(d.error_code)
                    if error:
                        if error in _RETRIED:
                            self._forget(g)
                        if strict:
                            raise UpstreamUnavailable(
                                f"upstream DescribeGroups({g}): error {error}"
                            )
                        continue
                    members = tuple(f"{m.client_host}: {m.client_id}" for m in d.members)
                    out[g] = UpstreamGroup(
                        g, str(d.group_state), str(d.protocol_type or ""), members
                    )
                    if not members and str(d.group_state) == "Dead":
                        dead.append(g)
                if dead:
                    await self._consumer_groups(address, dead, out, strict)
        return out

    async def _consumer_groups(
        self,
        address: tuple[str, int],
        groups: list[str],
        out: dict[str, UpstreamGroup],
        strict: bool,
    ) -> None:
        """KIP-848 groups: DescribeGroups (v0-5) answers Dead for them; ask the new API."""
        conn = await self._conn(address)
        if CONSUMER_GROUP_DESCRIBE not in conn.versions:
            return  # an upstream before Kafka 4.0 has no such groups
        reply = await self._request(address, CONSUMER_GROUP_DESCRIBE, group_ids=groups)
        for d in reply.groups:
            g, error = str(d.group_id), int(d.error_code)
            if error == GROUP_ID_NOT_FOUND:
                continue  # no consumer group of that id: Dead stands
            if error:
                if strict:
                    raise UpstreamUnavailable(f"upstream ConsumerGroupDescribe({g}): error {error}")
                out.pop(g, None)
                continue
            members = tuple(f"{m.client_host}: {m.client_id}" for m in d.members)
            out[g] = UpstreamGroup(g, str(d.group_state), "consumer", members)

    async def list_groups(self) -> list[str]:
        """Every group id any upstream broker coordinates."""
        brokers = list(self.cluster.brokers.values()) or [self._any_address()]
        found: set[str] = set()
        for address in brokers:
            reply = await self._request(address, LIST_GROUPS)
            if int(reply.error_code):
                raise UpstreamUnavailable(f"upstream ListGroups: error {int(reply.error_code)}")
            found.update(str(g.group_id) for g in reply.groups)
        return sorted(found)

    async def fetch_offsets(self, group_id: str) -> list[UpstreamOffset]:
        """The group's committed offsets upstream (its whole set)."""
        reply = await self._at_coordinator(group_id, OFFSET_FETCH, group_id=group_id, topics=None)
        out = []
        for t in reply.topics:
            for p in t.partitions:
                if int(p.error_code):  # a position we cannot read must not become a reset
                    raise UpstreamUnavailable(
                        f"upstream OffsetFetch({group_id}): {t.name}-{p.partition_index}: "
                        f"error {int(p.error_code)}"
                    )
                if int(p.committed_offset) < 0:
                    continue
                out.append(
                    UpstreamOffset(
                        str(t.name),
                        int(p.partition_index),
                        int(p.committed_offset),
                        int(getattr(p, "committed_leader_epoch", -1)),
                        str(p.metadata or ""),
                    )
                )
        return sorted(out, key=lambda o: (o.topic, o.partition))

    async def commit_offsets(
        self, group_id: str, offsets: Iterable[UpstreamOffset]
    ) -> dict[tuple[str, int], int]:
        """An admin-style commit (generation -1, no member), as kafka-consumer-groups
        --reset-offsets makes: the upstream refuses it while the group has members there.
        Returns each partition's error code (0: written)."""
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for o in offsets:
            by_topic.setdefault(o.topic, []).append(
                {
                    "partition_index": o.partition,
                    "committed_offset": o.offset,
                    "committed_leader_epoch": o.leader_epoch,
                    "committed_metadata": o.metadata,
                }
            )
        if not by_topic:
            return {}
        topics = [{"name": t, "partitions": ps} for t, ps in by_topic.items()]
        for attempt in range(2):
            address = (await self.coordinators([group_id]))[group_id]
            try:
                reply = await self._request(
                    address,
                    OFFSET_COMMIT,
                    group_id=group_id,
                    generation_id_or_member_epoch=-1,
                    member_id="",
                    topics=topics,
                )
            except UpstreamUnavailable:
                self._forget(group_id)
                raise
            errors = {
                (str(t.name), int(p.partition_index)): int(p.error_code)
                for t in reply.topics
                for p in t.partitions
            }
            if attempt == 0 and any(e in _RETRIED for e in errors.values()):
                self._forget(group_id)
                continue
            return errors
        raise AssertionError("unreachable")

    # --- log-end offsets -------------------------------------------------------------------

    async def log_end_offsets(
        self, partitions: Iterable[tuple[str, int]]
    ) -> dict[tuple[str, int], int]:
        """The high watermark of each partition whose leader is known, one ListOffsets per
        leader (what kafka-consumer-groups computes lag from); the others are left out."""
        leaders = self.cluster.leaders
        brokers = self.cluster.brokers
        by_leader: dict[int, dict[str, list[int]]] = {}
        for topic, partition in partitions:
            leader = leaders.get((topic, partition), -1)
            if leader in brokers:
                by_leader.setdefault(leader, {}).setdefault(topic, []).append(partition)
        out: dict[tuple[str, int], int] = {}
        stale = False

        async def ask(broker: int, topics: Mapping[str, list[int]]) -> None:
            nonlocal stale
            reply = await self._request(
                brokers[broker],
                LIST_OFFSETS,
                replica_id=-1,
                isolation_level=0,
                topics=[
                    {
                        "name": t,
                        "partitions": [
                            {"partition_index": p, "current_leader_epoch": -1, "timestamp": -1}
                            for p in ps
                        ],
                    }
                    for t, ps in topics.items()
                ],
            )
            for t in reply.topics:
                for p in t.partitions:
                    if int(p.error_code):
                        stale = True  # a leader moved: the next metadata refresh knows
                    else:
                        out[(str(t.name), int(p.partition_index))] = int(p.offset)

        results = await asyncio.gather(
            *(ask(b, ts) for b, ts in by_leader.items()), return_exceptions=True
        )
        if stale or any(isinstance(r, BaseException) for r in results):
            self.cluster.request_refresh()
        for r in results:
            if isinstance(r, BaseException) and not isinstance(r, UpstreamUnavailable):
                raise r
        return out
