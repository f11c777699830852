"""Raw-protocol scenarios run step by step against a target (Apache Kafka or our node), each
step's reply kept for a field-by-field comparison.

A `Run` is one scenario against one target. Steps are recorded with `run.record(step, reply)`;
`run.transcript()` normalizes them: member ids become the label the scenario gave them (`<A>`)
and their shape (`<prefix>-<uuid>`) is compared separately; fields that cannot agree between two
clusters (throttle times, error messages, coordinator host/port/node id, member id bytes) are
left out by name in IGNORED.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import enum
import re
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from kio.schema.errors import ErrorCode

from tests.support.consumer_bytes import assignment, subscription
from tests.support.kafka_broker import DIFF_TOPIC, DIFF_TOPIC_PARTITIONS
from tests.support.kafka_client import KafkaTestClient

TOPIC = DIFF_TOPIC
PARTITIONS = DIFF_TOPIC_PARTITIONS
CLIENT_ID = "diff-client"
SUB = subscription([TOPIC])
PROTOCOLS = (("range", SUB), ("roundrobin", SUB))
# the coordinator's address and the wait a broker asks for are the cluster's, not the protocol's
IGNORED = frozenset({"throttle_time", "error_message", "host", "port", "node_id"})
UUID_SHAPES = {
    re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"): "uuid",
    re.compile(r"[A-Za-z0-9_-]{22}"): "base64-uuid",
}


@dataclasses.dataclass(frozen=True)
class Target:
    name: str
    address: tuple[str, int]


class Run:
    def __init__(self, target: Target) -> None:
        self.target = target
        self.labels: dict[str, str] = {}
        self.prefixes: dict[str, str] = {}
        self.steps: list[tuple[str, Any]] = []
        self.clients: list[KafkaTestClient] = []

    async def client(self, client_id: str = CLIENT_ID) -> KafkaTestClient:
        c = await KafkaTestClient.connect(*self.target.address, client_id=client_id)
        self.clients.append(c)
        return c

    async def close(self) -> None:
        for c in self.clients:
            if not c.is_closed:
                await c.close()

    def label(self, member_id: str, name: str, prefix: str) -> None:
        if member_id and member_id not in self.labels:
            self.labels[member_id] = f"<{name}>"
            self.prefixes[member_id] = prefix

    def record(self, step: str, reply: Any) -> Any:
        """Keep a step's reply; steps are compared by name (concurrent members record theirs in
        whatever order their replies come), so a name is used once."""
        assert step not in dict(self.steps), f"step {step!r} recorded twice"
        self.steps.append((step, reply))
        return reply

    def shape(self, member_id: str) -> str:
        prefix = self.prefixes[member_id]
        rest = member_id[len(prefix) + 1 :] if member_id.startswith(prefix + "-") else None
        for pattern, name in UUID_SHAPES.items():
            if rest is not None and pattern.fullmatch(rest):
                return f"<prefix>-<{name}>"
        return f"unexpected: {member_id!r}"

    def transcript(self) -> dict[str, Any]:
        steps = {step: self._norm(reply) for step, reply in self.steps}
        steps["member id shapes"] = {self.labels[m]: self.shape(m) for m in self.labels}
        return steps

    def _norm(self, value: Any) -> Any:
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return {
                f.name: self._norm(getattr(value, f.name))
                for f in dataclasses.fields(value)
                if f.name not in IGNORED
            }
        if isinstance(value, list | tuple):
            items = [self._norm(v) for v in value]
            # a group's members come in the coordinator's map order, which means nothing
            if items and all(isinstance(i, dict) and "member_id" in i for i in items):
                items.sort(key=lambda i: str(i["member_id"]))
            return items
        if isinstance(value, enum.Enum):
            return value.name
        if isinstance(value, str):
            return self.labels.get(value, value)
        if isinstance(value, bytes):
            return value.hex()
        return value


Scenario = Callable[[Run], Awaitable[None]]


# --- steps a consumer takes --------------------------------------------------------------------


async def join(
    run: Run,
    c: KafkaTestClient,
    step: str,
    group: str,
    *,
    who: str,
    version: int,
    member_id: str = "",
    instance: str | None = None,
    protocols: Iterable[tuple[str, bytes]] = PROTOCOLS,
    session_timeout_ms: int = 10_000,
    protocol_type: str = "consumer",
    record: bool = True,
) -> Any:
    """JoinGroup as a consumer sends it; a dynamic member told MEMBER_ID_REQUIRED (v4+) joins
    again with the id it was given, and both replies are recorded."""
    settled = _settled.get()
    if settled is not None and (member_id or instance is not None or version < 4):
        # this request waits in the join phase (no MEMBER_ID_REQUIRED round trip comes first)
        settled.set()
    reply = await c.join_group(
        group,
        member_id,
        version=version,
        group_instance_id=instance,
        protocols=protocols,
        session_timeout_ms=session_timeout_ms,
        rebalance_timeout_ms=20_000,
        protocol_type=protocol_type,
        reason=f"{who} joins",
    )
    if reply.error_code in (ErrorCode.none, ErrorCode.member_id_required):
        run.label(reply.member_id, who, instance if instance is not None else c.client_id)
    if record:
        run.record(step, reply)
    if reply.error_code == ErrorCode.member_id_required and not member_id:
        return await join(
            run, c, f"{step} again", group, who=who, version=version, member_id=reply.member_id,
            instance=instance, protocols=protocols, session_timeout_ms=session_timeout_ms,
            protocol_type=protocol_type, record=record,
        )  # fmt: skip
    return reply


# set by `join` when it sends the JoinGroup that waits in the join phase (see join_all)
_settled: contextvars.ContextVar[asyncio.Event | None] = contextvars.ContextVar(
    "settled", default=None
)


async def join_all(*joins: Awaitable[Any], stagger: float = 0.1) -> list[Any]:
    """Start the joins in order (the first to arrive leads, on both clusters): each starts
    `stagger` after the one before sent its waiting JoinGroup (a `join`; any other awaitable,
    `stagger` after it started), so a MEMBER_ID_REQUIRED round trip slowed by a loaded machine
    cannot reorder them."""
    tasks = []
    for j in joins:
        if getattr(j, "cr_code", None) is not join.__code__:  # not a `join`: nothing to wait for
            tasks.append(asyncio.ensure_future(j))
            await asyncio.sleep(stagger)
            continue
        settled = asyncio.Event()
        token = _settled.set(settled)
        try:
            task = asyncio.ensure_future(j)  # the task runs in a copy of this context
        finally:
            _settled.reset(token)
        tasks.append(task)
        waiting = asyncio.ensure_future(settled.wait())
        await asyncio.wait({task, waiting}, timeout=30, return_when=asyncio.FIRST_COMPLETED)
        waiting.cancel()
        await asyncio.sleep(stagger)
    return list(await asyncio.gather(*tasks))


def assignments_for(members: Iterable[str]) -> dict[str, bytes]:
    """partition i of the topic to the i-th member, round the list (in the order given)."""
    ids = list(members)
    owned: dict[str, list[int]] = {m: [] for m in ids}
    for p in range(PARTITIONS):
        owned[ids[p % len(ids)]].append(p)
    return {m: assignment({TOPIC: ps}) for m, ps in owned.items()}


def sync_version(join_version: int) -> int:
    return {2: 1, 3: 2, 4: 3, 5: 3, 6: 4, 7: 5, 8: 5, 9: 5}[join_version]


def heartbeat_version(join_version: int) -> int:
    return min(sync_version(join_version), 4)


def leave_version(join_version: int) -> int:
    return {2: 1, 3: 2, 4: 2, 5: 3, 6: 4, 7: 4, 8: 5, 9: 5}[join_version]
