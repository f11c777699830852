"""A test context for the pure coordinator core, in the spirit of Kafka's
`GroupMetadataManagerTestContext`: a fake clock, request builders with sensible defaults, a
deterministic member-id factory, automatic request handles, and a write log the test completes
by hand (successfully or with an `AppendFailure`).

Every reply the core produces is collected per handle; a handle answered twice fails the test
at once (the runtime delivers exactly one response per request).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from app.group.config import CoreConfig
from app.group.coordinator import GroupCoordinator
from app.group.messages import (
    DeleteGroupResult,
    DescribedGroup,
    Error,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    LeaveMember,
    ListedGroup,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from app.group.records import (
    GroupMetadataValue,
    OffsetValue,
    Record,
    RecordType,
    decode_group_key,
    decode_group_value,
    decode_offset_key,
    decode_offset_value,
)
from app.group.results import AppendFailure, LogOnly, Reply, Result, Write
from app.group.state import Group, GroupState

T = TypeVar("T")

GROUP = "g"
SESSION_MS = 10_000
REBALANCE_MS = 30_000
DELAY_MS = 3_000  # CoreConfig().initial_rebalance_delay_ms
PROTOCOL_TYPE = "consumer"


def subscription(*topics: str, user_data: bytes | None = None) -> bytes:
    """A ConsumerProtocolSubscription v0 (protocol.md §12): version, topics[], user data."""
    out = [struct.pack(">hi", 0, len(topics))]
    for t in topics:
        raw = t.encode()
        out.append(struct.pack(">h", len(raw)) + raw)
    if user_data is None:
        out.append(struct.pack(">i", -1))
    else:
        out.append(struct.pack(">i", len(user_data)) + user_data)
    return b"".join(out)


DEFAULT_PROTOCOLS: tuple[tuple[str, bytes], ...] = (("range", subscription("t")),)


@dataclass
class StableGroup:
    """What `Context.stable_group` built: members in join order, the leader, the generation."""

    group_id: str
    member_ids: list[str]
    leader: str
    generation: int
    instance_ids: dict[str, str | None] = field(default_factory=dict)  # member id -> instance

    @property
    def followers(self) -> list[str]:
        return [m for m in self.member_ids if m != self.leader]


class Context:
    def __init__(
        self,
        config: CoreConfig | None = None,
        now: int = 0,
        load: bool = True,
    ) -> None:
        self.config = config or CoreConfig()
        self.now = now
        self._ids = 0
        self._handles = 0
        self.coordinator = GroupCoordinator(self.config, self._new_member_id)
        self.replies: dict[int, list[Reply]] = {}
        self.pending: list[Write] = []  # emitted, not yet completed (FIFO, like the log)
        self.records: list[Record] = []  # every record ever emitted
        self.log: list[Record] = []  # records of writes that completed successfully
        if load:
            self._absorb(self.coordinator.on_loaded(self.now))

    # ---- plumbing ------------------------------------------------------------------------

    def _new_member_id(self, prefix: str) -> str:
        self._ids += 1
        return f"{prefix}-{self._ids}"

    def next_member_id(self, prefix: str) -> str:
        """The id the factory will hand out next for `prefix` (without consuming it)."""
        return f"{prefix}-{self._ids + 1}"

    def _handle(self) -> int:
        self._handles += 1
        return self._handles

    def _absorb(self, result: Result) -> Result:
        for handle, reply in result.replies:
            got = self.replies.setdefault(handle, [])
            assert not got, f"handle {handle} answered twice: {got[0]!r} then {reply!r}"
            got.append(reply)
        for write in result.writes:
            self.pending.append(write)
            self.records.extend(write.records)
        return result

    # ---- clock -----------------------------------------------------------------------------

    def advance(self, ms: int) -> Result:
        self.now += ms
        return self._absorb(self.coordinator.poll_timers(self.now))

    def advance_to(self, t: int) -> Result:
        return self.advance(t - self.now)

    # ---- writes ----------------------------------------------------------------------------

    def complete_writes(
        self, failure: AppendFailure | None = None, count: int | None = None
    ) -> int:
        """Complete the oldest `count` pending writes (all by default), in log order.

        Writes a completion emits are completed too when `count` is None."""
        done = 0
        while self.pending and (count is None or done < count):
            write = self.pending.pop(0)
            if failure is None:
                self.log.extend(write.records)
            self._absorb(self.coordinator.on_write_complete(write.continuation, failure, self.now))
            done += 1
        return done

    def fail_writes(
        self, failure: AppendFailure = AppendFailure.STORAGE, count: int | None = None
    ) -> int:
        return self.complete_writes(failure, count)

    def group_records(
        self, group_id: str = GROUP, durable: bool = False
    ) -> list[GroupMetadataValue | None]:
        source = self.log if durable else self.records
        return [
            None if r.value is None else decode_group_value(r.value)
            for r in source
            if r.type is RecordType.GROUP_METADATA and decode_group_key(r.key) == group_id
        ]

    def last_group_record(self, group_id: str = GROUP) -> GroupMetadataValue | None:
        recs = self.group_records(group_id)
        assert recs, f"no group record written for {group_id}"
        return recs[-1]

    def offset_records(
        self, group_id: str = GROUP, durable: bool = False
    ) -> list[tuple[str, int, OffsetValue | None]]:
        source = self.log if durable else self.records
        out: list[tuple[str, int, OffsetValue | None]] = []
        for r in source:
            if r.type is not RecordType.OFFSET_COMMIT:
                continue
            g, t, p = decode_offset_key(r.key)
            if g == group_id:
                out.append((t, p, None if r.value is None else decode_offset_value(r.value)))
        return out

    def pending_is_log_only(self) -> bool:
        return all(isinstance(w.continuation, LogOnly) for w in self.pending)

    # ---- replies ---------------------------------------------------------------------------

    def answered(self, handle: int) -> bool:
        return bool(self.replies.get(handle))

    def reply(self, handle: int, kind: type[T]) -> T:
        got = self.replies.get(handle)
        assert got, f"handle {handle} has no reply"
        assert len(got) == 1
        reply = got[0]
        assert isinstance(reply, kind), f"expected {kind.__name__}, got {reply!r}"
        return reply

    def join_reply(self, handle: int) -> JoinGroupResponse:
        return self.reply(handle, JoinGroupResponse)

    def sync_reply(self, handle: int) -> SyncGroupResponse:
        return self.reply(handle, SyncGroupResponse)

    def leave_reply(self, handle: int) -> LeaveGroupResponse:
        return self.reply(handle, LeaveGroupResponse)

    def commit_reply(self, handle: int) -> OffsetCommitResponse:
        return self.reply(handle, OffsetCommitResponse)

    def delete_reply(self, handle: int) -> DeleteGroupResult:
        return self.reply(handle, DeleteGroupResult)

    def commit_errors(self, handle: int) -> dict[tuple[str, int], Error]:
        return {(p.topic, p.partition): p.error for p in self.commit_reply(handle).partitions}

    # ---- state -----------------------------------------------------------------------------

    def group(self, group_id: str = GROUP) -> Group:
        return self.coordinator.groups[group_id]

    def has_group(self, group_id: str = GROUP) -> bool:
        return group_id in self.coordinator.groups

    def state(self, group_id: str = GROUP) -> GroupState:
        return self.group(group_id).state

    # ---- requests --------------------------------------------------------------------------

    def join(
        self,
        group_id: str = GROUP,
        member_id: str = "",
        instance_id: str | None = None,
        session_ms: int = SESSION_MS,
        rebalance_ms: int = REBALANCE_MS,
        protocol_type: str = PROTOCOL_TYPE,
        protocols: Sequence[tuple[str, bytes]] = DEFAULT_PROTOCOLS,
        client_id: str = "client",
        require_known_member_id: bool | None = None,
        skip_assignment: bool = False,
        reason: str | None = None,
    ) -> int:
        """A JoinGroup; by default v9-like for dynamic (two-step) members. Returns the handle."""
        if require_known_member_id is None:
            require_known_member_id = instance_id is None
        req = JoinGroupRequest(
            group_id=group_id,
            member_id=member_id,
            group_instance_id=instance_id,
            session_timeout_ms=session_ms,
            rebalance_timeout_ms=rebalance_ms,
            protocol_type=protocol_type,
            protocols=tuple(protocols),
            client_id=client_id,
            client_host="/127.0.0.1",
            reason=reason,
            require_known_member_id=require_known_member_id,
            supports_skip_assignment=skip_assignment,
        )
        h = self._handle()
        self._absorb(self.coordinator.join_group(h, req, self.now))
        return h

    def join_dynamic(self, group_id: str = GROUP, **kw: Any) -> tuple[str, int]:
        """The KIP-394 two-step join: MEMBER_ID_REQUIRED, then the real join (parked)."""
        h0 = self.join(group_id, **kw)
        first = self.join_reply(h0)
        assert first.error is Error.MEMBER_ID_REQUIRED, first
        h = self.join(group_id, member_id=first.member_id, **kw)
        return first.member_id, h

    def sync(
        self,
        member_id: str,
        generation: int,
        group_id: str = GROUP,
        instance_id: str | None = None,
        assignments: Iterable[tuple[str, bytes]] = (),
        protocol_type: str | None = None,
        protocol_name: str | None = None,
    ) -> int:
        req = SyncGroupRequest(
            group_id=group_id,
            generation_id=generation,
            member_id=member_id,
            group_instance_id=instance_id,
            protocol_type=protocol_type,
            protocol_name=protocol_name,
            assignments=tuple(assignments),
        )
        h = self._handle()
        self._absorb(self.coordinator.sync_group(h, req, self.now))
        return h

    def heartbeat(
        self,
        member_id: str,
        generation: int,
        group_id: str = GROUP,
        instance_id: str | None = None,
    ) -> Error:
        req = HeartbeatRequest(group_id, generation, member_id, instance_id)
        resp = self.coordinator.heartbeat(req, self.now)
        assert isinstance(resp, HeartbeatResponse)
        return resp.error

    def leave(
        self,
        *members: LeaveMember | str,
        group_id: str = GROUP,
    ) -> int:
        batch = tuple(m if isinstance(m, LeaveMember) else LeaveMember(m) for m in members)
        h = self._handle()
        self._absorb(self.coordinator.leave_group(h, LeaveGroupRequest(group_id, batch), self.now))
        return h

    def commit(
        self,
        offsets: dict[tuple[str, int], int] | None = None,
        group_id: str = GROUP,
        member_id: str = "",
        generation: int = -1,
        instance_id: str | None = None,
        metadata: str | None = "",
        retention_ms: int = -1,
        unknown_group_not_found: bool = False,
        partitions: Sequence[OffsetCommitPartition] | None = None,
    ) -> int:
        if partitions is None:
            offsets = {("t", 0): 10} if offsets is None else offsets
            partitions = [
                OffsetCommitPartition(t, p, o, metadata=metadata) for (t, p), o in offsets.items()
            ]
        req = OffsetCommitRequest(
            group_id=group_id,
            generation_id=generation,
            member_id=member_id,
            group_instance_id=instance_id,
            partitions=tuple(partitions),
            retention_time_ms=retention_ms,
            unknown_group_not_found=unknown_group_not_found,
        )
        h = self._handle()
        self._absorb(self.coordinator.offset_commit(h, req, self.now))
        return h

    def fetch(
        self,
        partitions: Sequence[tuple[str, int]] | None = None,
        group_id: str = GROUP,
        require_stable: bool = False,
    ) -> OffsetFetchResponse:
        req = OffsetFetchRequest(
            group_id, None if partitions is None else tuple(partitions), require_stable
        )
        return self.coordinator.offset_fetch(req)

    def fetched(self, group_id: str = GROUP) -> dict[tuple[str, int], int]:
        """Committed offsets of every partition, as OffsetFetch (all partitions) sees them."""
        return {(p.topic, p.partition): p.offset for p in self.fetch(group_id=group_id).partitions}

    def describe(self, group_id: str = GROUP) -> DescribedGroup:
        return self.coordinator.describe_group(group_id)

    def list_groups(
        self, states: Iterable[str] = (), types: Iterable[str] = ()
    ) -> list[ListedGroup]:
        return self.coordinator.list_groups(states, types)

    def delete(self, group_id: str = GROUP) -> int:
        h = self._handle()
        self._absorb(self.coordinator.delete_group(h, group_id, self.now))
        return h

    # ---- scenarios -------------------------------------------------------------------------

    def complete_initial_rebalance(self, handles: Sequence[int], max_ms: int = 600_000) -> None:
        """Advance the clock window by window until every parked join is answered."""
        start = self.now
        while not all(self.answered(h) for h in handles):
            assert self.now - start <= max_ms, "join never completed"
            deadline = self.coordinator.next_deadline()
            assert deadline is not None, "nothing scheduled"
            self.advance_to(max(deadline, self.now))

    def stable_group(
        self,
        members: int | Sequence[str | None] = 2,
        group_id: str = GROUP,
        protocols: Sequence[tuple[str, bytes]] = DEFAULT_PROTOCOLS,
        session_ms: int = SESSION_MS,
        rebalance_ms: int = REBALANCE_MS,
        assignments: dict[int, bytes] | None = None,
    ) -> StableGroup:
        """Members join (dynamic two-step, or static when an instance id is given), the
        initial rebalance completes, the leader assigns `assign-<i>` to member i, everybody
        syncs and the assignment write completes: the group is Stable."""
        specs: list[str | None] = [None] * members if isinstance(members, int) else list(members)
        ids: list[str] = []
        handles: list[int] = []
        instance_of: dict[str, str | None] = {}
        for i, instance in enumerate(specs):
            if instance is None:
                mid, h = self.join_dynamic(
                    group_id,
                    protocols=protocols,
                    session_ms=session_ms,
                    rebalance_ms=rebalance_ms,
                    client_id=f"c{i}",
                )
            else:
                mid = self.next_member_id(instance)
                h = self.join(
                    group_id,
                    instance_id=instance,
                    protocols=protocols,
                    session_ms=session_ms,
                    rebalance_ms=rebalance_ms,
                )
            ids.append(mid)
            handles.append(h)
            instance_of[mid] = instance
        self.complete_initial_rebalance(handles)
        responses = [self.join_reply(h) for h in handles]
        for mid, r in zip(ids, responses, strict=True):
            assert r.error is Error.NONE, r
            assert r.member_id == mid
        generation = responses[0].generation_id
        leader = responses[0].leader
        assign = assignments or {i: f"assign-{i}".encode() for i in range(len(ids))}
        sync_handles = [
            self.sync(
                leader,
                generation,
                group_id,
                instance_id=instance_of[leader],
                assignments=[(ids[i], a) for i, a in assign.items()],
            )
        ]
        for mid in ids:
            if mid != leader:
                sync_handles.append(
                    self.sync(mid, generation, group_id, instance_id=instance_of[mid])
                )
        self.complete_writes()
        for h in sync_handles:
            assert self.sync_reply(h).error is Error.NONE
        assert self.state(group_id) is GroupState.STABLE
        return StableGroup(group_id, ids, leader, generation, instance_of)

    def reloaded(self, log: Sequence[Record] | None = None) -> Context:
        """A fresh coordinator (same config and clock) that replays the durable log."""
        other = Context(self.config, now=self.now, load=False)
        other._ids = self._ids + 1000  # fresh ids never collide with the old coordinator's
        for record in self.log if log is None else log:
            other.coordinator.replay(record)
        other._absorb(other.coordinator.on_loaded(other.now))
        return other
