"""Committed offsets (protocol.md §8, §9.3): OffsetCommit, OffsetFetch, OffsetDelete, retention,
and DeleteGroups, whose tombstones end a group's offsets with it (Kafka's OffsetMetadataManager).

Committed offsets become visible only once durable: the completion replays the records.
"""

from __future__ import annotations

from app.group.config import CoreConfig
from app.group.messages import (
    NO_ERROR,
    DeleteGroupResult,
    Error,
    FetchedOffset,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetFetchRequest,
    OffsetFetchResponse,
    PartitionResult,
)
from app.group.records import (
    OFFSET_SOURCE_MEMBER,
    OFFSET_SOURCE_RESET,
    OFFSET_SOURCE_UPSTREAM,
    OffsetValue,
    Record,
    group_record,
    offset_record,
    registration_record,
)
from app.group.registrations import rearm_expansion
from app.group.replay import drop_if_unused, replay, replay_offset
from app.group.results import (
    AppendFailure,
    OffsetsDone,
    Result,
    TombstonesDone,
    Write,
    group_write_error,
    offset_write_error,
)
from app.group.state import (
    COMPLETING_REBALANCE,
    DEAD,
    EMPTY,
    PREPARING_REBALANCE,
    STABLE,
    Group,
)
from app.group.timers import RETENTION_KEY, TimerQueue, expansion_key, heartbeat_key


class Offsets:
    def __init__(self, config: CoreConfig, groups: dict[str, Group], queue: TimerQueue) -> None:
        self.config = config
        self.groups = groups
        self.queue = queue

    # ==== OffsetCommit / OffsetFetch ============================================================

    def offset_commit(self, handle: int, req: OffsetCommitRequest, now: int) -> Result:
        out = Result()
        group = self.groups.get(req.group_id)
        if group is None:
            if req.generation_id >= 0:
                return _fail_all(
                    out,
                    handle,
                    req,
                    Error.GROUP_ID_NOT_FOUND
                    if req.unknown_group_not_found
                    else Error.ILLEGAL_GENERATION,
                )
            group = Group(req.group_id, state_timestamp=now)  # a "simple" group
            self.groups[req.group_id] = group
        error = _commit_error(group, req)
        if error is not NO_ERROR:
            return _fail_all(out, handle, req, error)
        member = group.members.get(req.member_id)
        state = group.state
        if member is not None and (state is STABLE or state is PREPARING_REBALANCE):
            deadline = now + member.session_timeout_ms
            self.queue.schedule(heartbeat_key(group.group_id, member.member_id), deadline)
        results: list[PartitionResult] = []
        records: list[Record] = []
        written: list[tuple[str, int]] = []
        values: list[OffsetValue | None] = []
        expire = now + req.retention_time_ms if req.retention_time_ms != -1 else -1
        # no member, generation -1, Empty group: a reset, which the audit must tell apart
        # from members' commits (OffsetValue v1)
        source = (
            OFFSET_SOURCE_RESET
            if req.generation_id < 0 and member is None and group.is_(EMPTY)
            else OFFSET_SOURCE_MEMBER
        )
        for p in req.partitions:
            metadata = p.metadata or ""
            if len(metadata.encode()) > self.config.offset_metadata_max_bytes:
                results.append(
                    PartitionResult(p.topic, p.partition, Error.OFFSET_METADATA_TOO_LARGE)
                )
                continue
            value = OffsetValue(p.offset, p.leader_epoch, metadata, now, expire, source)
            records.append(offset_record(group.group_id, p.topic, p.partition, value))
            written.append((p.topic, p.partition))
            values.append(value)
        if not records:
            out.reply(handle, OffsetCommitResponse(tuple(results)))
            drop_if_unused(self.groups, group)  # a simple group created for nothing
            return out
        pending = group.transient.pending_offset_commits
        for tp in written:
            pending[tp] = pending.get(tp, 0) + 1
        out.writes.append(
            Write(
                records,
                OffsetsDone(group.group_id, handle, tuple(results), tuple(written), tuple(values)),
            )
        )
        return out

    def offsets_written(
        self, cont: OffsetsDone, failure: AppendFailure | None, now: int, out: Result
    ) -> None:
        group = self.groups.get(cont.group_id)
        if group is not None:
            pending = group.transient.pending_offset_commits
            for tp in cont.written:
                n = pending.get(tp, 0) - 1
                if n > 0:
                    pending[tp] = n
                else:
                    pending.pop(tp, None)
        if failure is None:
            # protocol.md §8.2: visible only once durable
            for (topic, partition), value in zip(cont.written, cont.values, strict=True):
                replay_offset(self.groups, cont.group_id, topic, partition, value)
            error = NO_ERROR
        else:
            error = offset_write_error(failure)
            if group is not None:
                drop_if_unused(self.groups, group)  # a simple group whose first commit failed
        if cont.handle is not None:
            results = cont.results + tuple(PartitionResult(t, p, error) for t, p in cont.written)
            out.reply(cont.handle, OffsetCommitResponse(results))

    def offset_fetch(self, req: OffsetFetchRequest) -> OffsetFetchResponse:
        group = self.groups.get(req.group_id)
        if group is None or group.is_(DEAD):
            parts = tuple(FetchedOffset(t, p) for t, p in (req.partitions or ()))
            return OffsetFetchResponse(req.group_id, NO_ERROR, parts)
        wanted = sorted(group.offsets) if req.partitions is None else list(req.partitions)
        pending = group.transient.pending_offset_commits
        out = []
        for tp in wanted:
            if req.require_stable and pending.get(tp):
                out.append(FetchedOffset(tp[0], tp[1], error=Error.UNSTABLE_OFFSET_COMMIT))
                continue
            value = group.offsets.get(tp)
            if value is None:
                out.append(FetchedOffset(tp[0], tp[1]))
            else:
                out.append(
                    FetchedOffset(tp[0], tp[1], value.offset, value.leader_epoch, value.metadata)
                )
        return OffsetFetchResponse(req.group_id, NO_ERROR, tuple(out))

    # ==== moving a group in from the upstream cluster (gateway mode) ============================

    def import_offsets(
        self,
        handle: int,
        group_id: str,
        origin: str,
        partitions: tuple[OffsetCommitPartition, ...],
        now: int,
    ) -> Result:
        """The upstream's committed offsets become the group's positions, durably, where the
        group has none here: a partition already committed (or being committed) here keeps
        its own, so an import never moves a position a member of ours wrote. The reply lists
        the partitions written; the rest were kept."""
        out = Result()
        group = self.groups.get(group_id)
        if group is not None and group.is_(DEAD):
            results = tuple(
                PartitionResult(p.topic, p.partition, Error.COORDINATOR_NOT_AVAILABLE)
                for p in partitions
            )
            out.reply(handle, OffsetCommitResponse(results))
            return out
        if group is None:
            group = Group(group_id, state_timestamp=now)
            self.groups[group_id] = group
        pending = group.transient.pending_offset_commits
        limit = self.config.offset_metadata_max_bytes
        records: list[Record] = []
        written: list[tuple[str, int]] = []
        values: list[OffsetValue | None] = []
        for p in partitions:
            tp = (p.topic, p.partition)
            if tp in group.offsets or pending.get(tp) or tp in written:
                continue
            metadata = p.metadata or ""
            if len(metadata.encode()) > limit:
                metadata = ""  # the position matters, not a note our limit cannot hold
            value = OffsetValue(
                p.offset, p.leader_epoch, metadata, now, -1, OFFSET_SOURCE_UPSTREAM, origin
            )
            records.append(offset_record(group_id, p.topic, p.partition, value))
            written.append(tp)
            values.append(value)
        if not records:
            out.reply(handle, OffsetCommitResponse(()))
            drop_if_unused(self.groups, group)
            return out
        for tp in written:
            pending[tp] = pending.get(tp, 0) + 1
        done = OffsetsDone(group_id, handle, (), tuple(written), tuple(values))
        out.writes.append(Write(records, done))
        return out

    # ==== OffsetDelete ==========================================================================

    def delete_offsets(self, handle: int, req: OffsetDeleteRequest, now: int) -> Result:
        """Kafka's OffsetMetadataManager.deleteOffsets: tombstones for the partitions that have
        an offset; GROUP_SUBSCRIBED_TO_TOPIC for the topics a member of an active consumer group
        subscribes to; NONE for the rest. A group-level refusal is a DeleteGroupResult."""
        out = Result()
        group = self.groups.get(req.group_id)
        if group is None or group.is_(DEAD):
            out.reply(handle, DeleteGroupResult(req.group_id, Error.GROUP_ID_NOT_FOUND))
            return out
        subscribed: set[str] = set()
        if not group.is_(EMPTY):
            # Kafka's ClassicGroup.validateOffsetDelete: only the consumer protocol lets a
            # group with members lose offsets, and only of topics nobody subscribes to
            if group.protocol_type != "consumer":
                out.reply(handle, DeleteGroupResult(req.group_id, Error.NON_EMPTY_GROUP))
                return out
            subscribed = group.subscribed_topics() or set()  # unparseable: none (as Kafka)
        pending = group.transient.pending_offset_commits
        results: list[PartitionResult] = []
        records: list[Record] = []
        written: list[tuple[str, int]] = []
        for tp in dict.fromkeys(req.partitions):
            topic, partition = tp
            if topic in subscribed:
                results.append(PartitionResult(topic, partition, Error.GROUP_SUBSCRIBED_TO_TOPIC))
            elif tp in group.offsets or pending.get(tp):
                # an offset still being written is tombstoned too: its record precedes this one
                records.append(offset_record(group.group_id, topic, partition, None))
                written.append(tp)
            else:
                results.append(PartitionResult(topic, partition, NO_ERROR))  # nothing to delete
        if not records:
            out.reply(handle, OffsetCommitResponse(tuple(results)))
            return out
        for tp in written:
            pending[tp] = pending.get(tp, 0) + 1
        tombstones = (None,) * len(written)
        out.writes.append(
            Write(
                records,
                OffsetsDone(group.group_id, handle, tuple(results), tuple(written), tombstones),
            )
        )
        return out

    # ==== retention (protocol.md §8.4) ==========================================================

    def on_retention_timer(self, now: int, out: Result) -> None:
        self.queue.schedule(RETENTION_KEY, now + self.config.offsets_retention_check_interval_ms)
        for group in list(self.groups.values()):
            if group.is_(DEAD):
                continue
            expired = self._expired_offsets(group, now)
            records = [offset_record(group.group_id, t, p, None) for t, p in expired]
            pending = group.transient
            kills = (
                group.is_(EMPTY)
                and not group.members
                and not pending.pending_members
                and not pending.pending_offset_commits  # Kafka: hasOffsets counts pending ones
                # static members registered and still expected (protocol.md §5.7)
                and not group.registered
                and len(expired) == len(group.offsets)
            )
            before = group.state_timestamp
            if kills:
                records += self._end(group, now)
            if records:
                done = TombstonesDone(group.group_id, None, tuple(records), kills, before)
                out.writes.append(Write(records, done))

    def _expired_offsets(self, group: Group, now: int) -> list[tuple[str, int]]:
        """protocol.md §8.4: the group's state decides whether offsets may expire at all and from
        which base time; an explicit expire timestamp replaces only the age test."""
        retention = self.config.offsets_retention_ms
        use_state_time = False
        kept_topics: set[str] = set()
        if group.protocol_type and group.is_(EMPTY):
            use_state_time = group.state_timestamp is not None
        elif (
            group.protocol_type == "consumer"
            and group.is_(STABLE)
            and group.members
            and (subscribed := group.subscribed_topics()) is not None
        ):
            kept_topics = subscribed  # only offsets of topics nobody subscribes to
        elif group.protocol_type:
            return []  # rebalancing, or a non-consumer protocol with members
        pending = group.transient.pending_offset_commits
        expired: list[tuple[str, int]] = []
        for tp, value in group.offsets.items():
            if tp[0] in kept_topics or pending.get(tp):
                continue
            if value.expire_timestamp != -1:
                if now >= value.expire_timestamp:
                    expired.append(tp)
                continue
            since = value.commit_timestamp
            if use_state_time and group.state_timestamp is not None:
                since = group.state_timestamp
            if now - since >= retention:
                expired.append(tp)
        return expired

    # ==== DeleteGroups ==========================================================================

    def delete_group(self, handle: int, group_id: str, now: int) -> Result:
        out = Result()
        group = self.groups.get(group_id)
        if group is None or group.is_(DEAD):
            out.reply(handle, DeleteGroupResult(group_id, Error.GROUP_ID_NOT_FOUND))
            return out
        if not group.is_(EMPTY):
            out.reply(handle, DeleteGroupResult(group_id, Error.NON_EMPTY_GROUP))
            return out
        # Offsets still being written are tombstoned too: their records precede these in the
        # log, so a reload must not resurrect them (protocol.md §9.3: fetch returns -1 afterwards).
        partitions = list(group.offsets)
        partitions += [
            tp for tp in group.transient.pending_offset_commits if tp not in group.offsets
        ]
        records = [offset_record(group_id, t, p, None) for t, p in partitions]
        before = group.state_timestamp
        records += self._end(group, now)
        done = TombstonesDone(group_id, handle, tuple(records), True, before)
        out.writes.append(Write(records, done))
        return out

    def _end(self, group: Group, now: int) -> list[Record]:
        """The group goes Dead: no expansion deadline may write its registration after the
        tombstones that end it (returned), nor reach a new group of the same id."""
        group.transition(DEAD, now)
        self.queue.cancel(expansion_key(group.group_id))
        return _last_records(group)

    def tombstones_written(
        self, cont: TombstonesDone, failure: AppendFailure | None, now: int, out: Result
    ) -> None:
        group = self.groups.get(cont.group_id)
        if failure is not None:
            if cont.kills_group and group is not None and group.is_(DEAD):
                # the group was never deleted: back to its last durable state, with its
                # expansion's deadline
                group.state = EMPTY
                group.state_timestamp = cont.state_timestamp_before
                rearm_expansion(self.queue, group)
            if cont.handle is not None:
                out.reply(cont.handle, DeleteGroupResult(cont.group_id, group_write_error(failure)))
            return
        for record in cont.records:
            replay(self.groups, record)
        if cont.kills_group:
            self.groups.pop(cont.group_id, None)
        if cont.handle is not None:
            out.reply(cont.handle, DeleteGroupResult(cont.group_id, NO_ERROR))


def _last_records(group: Group) -> list[Record]:
    """The tombstones that end a group: its registration's, if it ever had one (compaction
    keeps a registration record otherwise, and a reload would bring the group back with it),
    then the group's."""
    records = [] if group.registration is None else [registration_record(group.group_id, None)]
    records.append(group_record(group.group_id, None))
    return records


def _fail_all(out: Result, handle: int, req: OffsetCommitRequest, error: Error) -> Result:
    out.reply(
        handle,
        OffsetCommitResponse(
            tuple(PartitionResult(p.topic, p.partition, error) for p in req.partitions)
        ),
    )
    return out


def _commit_error(group: Group, req: OffsetCommitRequest) -> Error:
    if group.is_(DEAD):
        return Error.COORDINATOR_NOT_AVAILABLE
    if req.generation_id < 0 and group.is_(EMPTY):
        return NO_ERROR  # admin/simple commit: no member validation
    if req.generation_id >= 0 or req.member_id or req.group_instance_id is not None:
        error = group.validate_member(req.member_id, req.group_instance_id)
        if error is not NO_ERROR:
            return error
        if req.generation_id != group.generation:
            return Error.ILLEGAL_GENERATION
    else:
        return Error.UNKNOWN_MEMBER_ID
    if group.is_(COMPLETING_REBALANCE):
        return Error.REBALANCE_IN_PROGRESS
    return NO_ERROR
