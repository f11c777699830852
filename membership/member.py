"""`GroupMember`: one member of a Kafka classic group, run as Kafka's Java `AbstractCoordinator`
runs it — FindCoordinator, JoinGroup (v9 where the server has it, MEMBER_ID_REQUIRED answered),
SyncGroup with the leader's assignment, Heartbeat on its own task, LeaveGroup with a reason —
for any protocol type, not only consumers.

Failure handling, in Kafka's words:
- NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS, a lost connection or
  a request timeout: find the coordinator again and carry on with the same member id and
  generation (a coordinator failover costs no rebalance while the generation is still valid).
- REBALANCE_IN_PROGRESS: revoke, rejoin with the same member id.
- UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION: the assignment is lost; rejoin (a dynamic member as a
  new member).
- FENCED_INSTANCE_ID (another process took this group.instance.id), and configuration errors
  (INCONSISTENT_GROUP_PROTOCOL, INVALID_SESSION_TIMEOUT, GROUP_MAX_SIZE_REACHED, authorization):
  stop, and raise `MembershipError` from `wait()`, `assignments()` and `leave()`.

KIP-814: a static leader that restarts is answered by a v9 coordinator with SkipAssignment. It
then sends SyncGroup with no assignment (the group keeps the current one) and asks its assignor
whether the members' metadata it sees now differs from what that assignment was computed from;
if so it rejoins, which rebalances the group once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import ssl as ssl_module
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from membership.wire import AuthenticationFailed, Connection, ConnectionLost, UnsupportedVersion

log = logging.getLogger("membership")

FIND_COORDINATOR, JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = 10, 11, 12, 13, 14

NONE = 0
COORDINATOR_LOAD_IN_PROGRESS = 14
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
ILLEGAL_GENERATION = 22
INCONSISTENT_GROUP_PROTOCOL = 23
UNKNOWN_MEMBER_ID = 25
INVALID_SESSION_TIMEOUT = 26
REBALANCE_IN_PROGRESS = 27
GROUP_AUTHORIZATION_FAILED = 30
GROUP_MAX_SIZE_REACHED = 81
FENCED_INSTANCE_ID = 82
MEMBER_ID_REQUIRED = 79

COORDINATOR_ERRORS = frozenset(
    {COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR}
)
FATAL_ERRORS = {
    FENCED_INSTANCE_ID: "another member joined with this group.instance.id",
    INCONSISTENT_GROUP_PROTOCOL: "the group's protocol type or protocols do not match ours",
    INVALID_SESSION_TIMEOUT: "the session timeout is outside the coordinator's bounds",
    GROUP_MAX_SIZE_REACHED: "the group is full",
    GROUP_AUTHORIZATION_FAILED: "not authorized to join this group",
}


class MembershipError(Exception):
    """The member stopped for good (fenced, misconfigured, not authorized)."""

    def __init__(self, message: str, error_code: int | None = None) -> None:
        super().__init__(message)
        self.error_code = error_code


class _Rejoin(Exception):
    """Leave the stable phase and join again (the reason is logged and reported)."""


class _CoordinatorGone(Exception):
    pass


@dataclass(frozen=True)
class JoinedMember:
    """A member as the leader sees it in the JoinGroup reply."""

    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True)
class Assignment:
    """What this member holds in `generation` (the fencing token of what it does with it)."""

    generation: int
    member_id: str
    protocol: str
    data: bytes
    leader: bool
    skipped_assignment: bool = False  # KIP-814: this (leader) join skipped the assignment
    assignments_sent: int = 0  # how many assignments this member sent in its SyncGroup


@runtime_checkable
class Assignor(Protocol):
    """Computes the leader's assignment for the selected protocol."""

    def assign(self, protocol: str, members: Sequence[JoinedMember]) -> Mapping[str, bytes]: ...

    def basis_changed(
        self, protocol: str, members: Sequence[JoinedMember], own_assignment: bytes
    ) -> bool:
        """After SkipAssignment: does the metadata seen now differ from what the current
        assignment was computed from?"""
        ...


class CallableAssignor:
    """Any `(protocol, members) -> {member_id: bytes}` callable as an Assignor; it cannot tell
    what an assignment was computed from, so a SkipAssignment never rebalances."""

    def __init__(self, fn: Callable[[str, Sequence[JoinedMember]], Mapping[str, bytes]]) -> None:
        self.fn = fn

    def assign(self, protocol: str, members: Sequence[JoinedMember]) -> Mapping[str, bytes]:
        return self.fn(protocol, members)

    def basis_changed(
        self, protocol: str, members: Sequence[JoinedMember], own_assignment: bytes
    ) -> bool:
        return False


@dataclass
class _Stats:
    joins: int = 0
    rebalances_triggered: int = 0
    coordinator_changes: int = 0
    rejoin_reasons: list[str] = field(default_factory=list)


class GroupMember:
    def __init__(
        self,
        bootstrap: str | Sequence[str],
        group_id: str,
        protocol_type: str,
        protocols: Sequence[tuple[str, bytes]],
        assignor: Assignor | Callable[[str, Sequence[JoinedMember]], Mapping[str, bytes]],
        group_instance_id: str | None = None,
        *,
        session_timeout_ms: int = 10_000,
        rebalance_timeout_ms: int = 30_000,
        heartbeat_interval_ms: int = 1_000,
        client_id: str = "membership",
        ssl: ssl_module.SSLContext | None = None,
        sasl: tuple[str, str, str] | None = None,
        on_assigned: Callable[[Assignment], Any] | None = None,
        on_revoked: Callable[[Assignment], Any] | None = None,
        on_lost: Callable[[Assignment], Any] | None = None,
    ) -> None:
        if not protocols:
            raise ValueError("at least one protocol is needed")
        if heartbeat_interval_ms >= session_timeout_ms:
            raise ValueError("heartbeat_interval_ms must be below session_timeout_ms")
        if isinstance(bootstrap, str):
            bootstrap = [b.strip() for b in bootstrap.split(",") if b.strip()]
        self.bootstrap = [_host_port(b) for b in bootstrap]
        self.group_id = group_id
        self.protocol_type = protocol_type
        self.protocols = list(protocols)
        self.assignor: Assignor = (
            assignor if isinstance(assignor, Assignor) else CallableAssignor(assignor)
        )
        self.group_instance_id = group_instance_id
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.client_id = client_id
        self.ssl = ssl
        self.sasl = sasl
        self.on_assigned = on_assigned
        self.on_revoked = on_revoked
        self.on_lost = on_lost

        self.member_id = ""
        self.generation = -1
        self.assignment: Assignment | None = None
        self.stats = _Stats()
        self._coordinator: Connection | None = None
        self._coordinator_address: tuple[str, int] | None = None
        self._task: asyncio.Task[None] | None = None
        self._error: MembershipError | None = None
        self._rejoin_reason: str | None = "initial join"
        self._queue: asyncio.Queue[Assignment | None] = asyncio.Queue()
        self._changed = asyncio.Event()  # wakes wait_assigned()
        self._wakeup = asyncio.Event()  # wakes the stable phase (only _stay clears it)
        self._closing = False
        # when the last heartbeat that succeeded was sent (monotonic); see `holds_assignment`
        self._alive_since: float = 0.0

    # --- life cycle --------------------------------------------------------------------------

    async def start(self) -> GroupMember:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name=f"member-{self.group_id}"
            )
        return self

    async def __aenter__(self) -> GroupMember:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self, *, leave: bool | None = None, reason: str = "the member closed") -> None:
        """Stop. A dynamic member sends LeaveGroup; a static one does not by default (as Kafka's
        consumer: its restart within the session timeout then costs no rebalance) unless
        `leave=True`."""
        if leave is None:
            leave = self.group_instance_id is None
        self._closing = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        if leave and self.member_id and self._coordinator is not None:
            with contextlib.suppress(Exception):
                await self._leave_group(reason)
        if self.assignment is not None:
            self._call(self.on_revoked, self.assignment)
            self.assignment = None
        if self._coordinator is not None:
            await self._coordinator.close()
        self._queue.put_nowait(None)

    async def leave(self, reason: str = "the member left") -> None:
        """Send LeaveGroup (static members too: the group rebalances without it) and stop."""
        await self.close(leave=True, reason=reason)
        if self._error is not None:
            raise self._error

    async def wait(self) -> None:
        """Until the member stops; raises its MembershipError if it stopped on one."""
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(self._task)
        if self._error is not None:
            raise self._error

    async def assignments(self) -> AsyncIterator[Assignment]:
        """Each new assignment as it comes; ends when the member closes."""
        while True:
            item = await self._queue.get()
            if item is None:
                if self._error is not None:
                    raise self._error
                return
            yield item

    async def wait_assigned(self, timeout: float | None = None) -> Assignment:
        async def first() -> Assignment:
            while self.assignment is None:
                if self._error is not None:
                    raise self._error
                self._changed.clear()
                await self._changed.wait()
            return self.assignment

        async with asyncio.timeout(timeout):
            return await first()

    def request_rejoin(self, reason: str) -> None:
        """Rebalance the group (e.g. this member's metadata changed)."""
        self._rejoin_reason = reason
        self._wakeup.set()

    def set_protocols(self, protocols: Sequence[tuple[str, bytes]], reason: str) -> None:
        self.protocols = list(protocols)
        self.request_rejoin(reason)

    @property
    def holds_assignment(self) -> bool:
        """True while the assignment is surely still this member's: a heartbeat sent less than a
        session timeout ago succeeded. A member cut off from the coordinator stops acting before
        the coordinator could have given its work to another member."""
        if self.assignment is None:
            return False
        return time.monotonic() - self._alive_since < self.session_timeout_ms / 1000

    # --- the loop ----------------------------------------------------------------------------

    async def _run(self) -> None:
        backoff = 0.1
        try:
            while not self._closing:
                try:
                    conn = await self._find_coordinator()
                    if self._rejoin_reason is not None:
                        await self._join_and_sync(conn)
                    await self._stay(conn)
                    backoff = 0.1
                except _Rejoin:
                    continue
                except (_CoordinatorGone, ConnectionLost) as e:
                    log.info("%s: coordinator lost (%s); finding it again", self.group_id, e)
                    await self._drop_coordinator()
                    await asyncio.sleep(backoff * (1 + random.random()))
                    backoff = min(backoff * 2, 2.0)
        except MembershipError as e:
            self._error = e
            log.error("%s: member stopped: %s", self.group_id, e)
            if self.assignment is not None:
                self._call(self.on_lost, self.assignment)
                self.assignment = None
            self._queue.put_nowait(None)
        finally:
            self._changed.set()
            self._wakeup.set()

    async def _drop_coordinator(self) -> None:
        if self._coordinator is not None:
            await self._coordinator.close()
        self._coordinator = None

    async def _find_coordinator(self) -> Connection:
        if self._coordinator is not None and not self._coordinator.closed:
            return self._coordinator
        last: Exception | None = None
        for host, port in random.sample(self.bootstrap, len(self.bootstrap)):
            try:
                conn = await self._connect(host, port)
            except ConnectionLost as e:
                last = e
                continue
            try:
                v = conn.version(FIND_COORDINATOR, 0, 3)  # v4+ batches keys; one is enough
                reply = await conn.request(
                    FIND_COORDINATOR, v, timeout=10.0, key=self.group_id, key_type=0
                )
            except ConnectionLost as e:
                last = e
                continue
            finally:
                await conn.close()
            err = int(reply.error_code)
            if err in FATAL_ERRORS:
                raise MembershipError(f"FindCoordinator: {FATAL_ERRORS[err]} (error {err})", err)
            if err != NONE:
                last = _CoordinatorGone(f"FindCoordinator: error {err}")
                continue
            address = (reply.host, int(reply.port))
            if address != self._coordinator_address and self._coordinator_address is not None:
                self.stats.coordinator_changes += 1
            self._coordinator_address = address
            self._coordinator = await self._connect(*address)
            return self._coordinator
        raise _CoordinatorGone(f"no bootstrap server found the coordinator: {last}")

    async def _connect(self, host: str, port: int) -> Connection:
        try:
            return await Connection.open(
                host, port, client_id=self.client_id, ssl=self.ssl, sasl=self.sasl
            )
        except UnsupportedVersion as e:
            raise MembershipError(str(e)) from e
        except AuthenticationFailed as e:
            raise MembershipError(f"authentication failed: {e}") from e

    # --- join and sync -----------------------------------------------------------------------

    async def _join_and_sync(self, conn: Connection) -> None:
        reason = self._rejoin_reason or "rejoin"
        if self.assignment is not None:
            # eager protocol: what was held is given up before the rebalance
            self._call(self.on_revoked, self.assignment)
            self.assignment = None
        try:
            join_v = conn.version(JOIN_GROUP, 5 if self.group_instance_id else 0, 9)
            sync_v = conn.version(SYNC_GROUP, 3 if self.group_instance_id else 0, 5)
        except UnsupportedVersion as e:
            raise MembershipError(f"static membership needs JoinGroup v5+: {e}") from e
        self.stats.rejoin_reasons.append(reason)
        while True:
            joined = await self._join(conn, join_v, reason)
            members = [
                JoinedMember(m.member_id, m.group_instance_id if join_v >= 5 else None, m.metadata)
                for m in joined.members
            ]
            is_leader = joined.leader == self.member_id
            skip = bool(getattr(joined, "skip_assignment", False))
            plan: Mapping[str, bytes] = {}
            if is_leader and not skip:
                plan = self.assignor.assign(joined.protocol_name, members)
            synced = await conn.request(
                SYNC_GROUP,
                sync_v,
                timeout=self.rebalance_timeout_ms / 1000 + 5,
                group_id=self.group_id,
                generation_id=joined.generation_id,
                member_id=self.member_id,
                group_instance_id=self.group_instance_id,
                protocol_type=self.protocol_type,
                protocol_name=joined.protocol_name,
                assignments=[{"member_id": m, "assignment": a} for m, a in plan.items()],
            )
            err = int(synced.error_code)
            if err == REBALANCE_IN_PROGRESS:
                reason = "the group rebalanced during SyncGroup"
                continue
            self._check(err, "SyncGroup")
            break
        self.generation = joined.generation_id
        self._alive_since = time.monotonic()
        self._rejoin_reason = None
        self.stats.joins += 1
        self.assignment = Assignment(
            generation=joined.generation_id,
            member_id=self.member_id,
            protocol=joined.protocol_name,
            data=synced.assignment,
            leader=is_leader,
            skipped_assignment=skip,
            assignments_sent=len(plan),
        )
        log.info(
            "%s: generation %d, %s%s", self.group_id, self.generation,
            "leader" if is_leader else "follower", " (SkipAssignment)" if skip else "",
        )  # fmt: skip
        self._call(self.on_assigned, self.assignment)
        self._queue.put_nowait(self.assignment)
        self._changed.set()
        if (
            is_leader
            and skip
            and self.assignor.basis_changed(joined.protocol_name, members, synced.assignment)
        ):
            # KIP-814: the metadata changed while the leader was away; rebalance once
            self.stats.rebalances_triggered += 1
            self.request_rejoin("members' metadata changed while the leader was away")

    async def _join(self, conn: Connection, version: int, reason: str) -> Any:
        while True:
            reply = await conn.request(
                JOIN_GROUP,
                version,
                timeout=self.rebalance_timeout_ms / 1000 + 5,
                group_id=self.group_id,
                session_timeout=self.session_timeout_ms,
                rebalance_timeout=self.rebalance_timeout_ms,
                member_id=self.member_id,
                group_instance_id=self.group_instance_id,
                protocol_type=self.protocol_type,
                protocols=[{"name": n, "metadata": m} for n, m in self.protocols],
                reason=reason,
            )
            err = int(reply.error_code)
            if err == MEMBER_ID_REQUIRED:  # KIP-394: join again with the id handed out
                self.member_id = reply.member_id
                continue
            if err == REBALANCE_IN_PROGRESS:
                continue
            self._check(err, "JoinGroup")
            self.member_id = reply.member_id
            return reply

    def _check(self, err: int, api: str) -> None:
        if err == NONE:
            return
        if err in COORDINATOR_ERRORS:
            raise _CoordinatorGone(f"{api}: error {err}")
        if err in FATAL_ERRORS:
            raise MembershipError(f"{api}: {FATAL_ERRORS[err]} (error {err})", err)
        if err in (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION):
            self._lose(f"{api}: error {err}")
            raise _Rejoin(f"{api}: error {err}")
        raise _CoordinatorGone(f"{api}: error {err}")

    def _lose(self, why: str) -> None:
        log.info("%s: assignment lost: %s", self.group_id, why)
        if self.assignment is not None:
            self._call(self.on_lost, self.assignment)
            self.assignment = None
        if self.group_instance_id is None:
            self.member_id = ""
        self.generation = -1
        self._rejoin_reason = f"lost: {why}"

    # --- stable: heartbeats ------------------------------------------------------------------

    async def _stay(self, conn: Connection) -> None:
        """Heartbeat (on its own task) until a rejoin is needed or the coordinator goes."""
        self._wakeup.clear()
        beating = asyncio.get_running_loop().create_task(self._heartbeat(conn))
        waiting = asyncio.get_running_loop().create_task(self._wakeup.wait())
        try:
            while self._rejoin_reason is None:
                await asyncio.wait({beating, waiting}, return_when=asyncio.FIRST_COMPLETED)
                if beating.done():
                    beating.result()  # raises what stopped it
                if waiting.done():
                    self._wakeup.clear()
                    waiting = asyncio.get_running_loop().create_task(self._wakeup.wait())
        finally:
            for t in (beating, waiting):
                t.cancel()
            await asyncio.gather(beating, waiting, return_exceptions=True)

    async def _heartbeat(self, conn: Connection) -> None:
        version = conn.version(HEARTBEAT, 3 if self.group_instance_id else 0, 4)
        while True:
            sent = time.monotonic()
            reply = await conn.request(
                HEARTBEAT,
                version,
                timeout=max(self.session_timeout_ms / 1000, 1.0),
                group_id=self.group_id,
                generation_id=self.generation,
                member_id=self.member_id,
                group_instance_id=self.group_instance_id,
            )
            err = int(reply.error_code)
            if err == REBALANCE_IN_PROGRESS:
                self._alive_since = sent
                self.request_rejoin("the coordinator is rebalancing the group")
                return
            self._check(err, "Heartbeat")
            self._alive_since = sent
            await asyncio.sleep(self.heartbeat_interval_ms / 1000)

    async def _leave_group(self, reason: str) -> None:
        conn = self._coordinator
        if conn is None or conn.closed:
            conn = await self._find_coordinator()
        version = conn.version(LEAVE_GROUP, 0, 5)
        await conn.request(
            LEAVE_GROUP,
            version,
            timeout=10.0,
            group_id=self.group_id,
            member_id=self.member_id,
            members=[
                {"member_id": self.member_id, "group_instance_id": self.group_instance_id,
                 "reason": reason}
            ],
        )  # fmt: skip

    def _call(self, callback: Callable[[Assignment], Any] | None, assignment: Assignment) -> None:
        if callback is None:
            return
        try:
            result = callback(assignment)
            if asyncio.iscoroutine(result):
                asyncio.get_running_loop().create_task(result)
        except Exception:
            log.exception("%s: callback %r failed", self.group_id, callback)


def _host_port(address: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"bootstrap address {address!r} is not host:port")
    return host.strip("[]"), int(port)
