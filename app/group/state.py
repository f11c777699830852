"""Group and member state (protocol.md §2). Plain data plus the few invariants Kafka keeps on them.

A group's durable state comes in three parts, one per record type, and replay builds each from
its own records: the membership (GROUP_METADATA: the fields of `Group` itself), `offsets`
(OFFSET_COMMIT) and `registration` (STATIC_REGISTRATION). Everything else is transient
(`GroupTransient`, and a member's parked requests): never written, empty after a load.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from enum import Enum, StrEnum
from types import MappingProxyType
from typing import Final

from app.group.messages import NO_ERROR, Error
from app.group.records import (
    GroupMetadataValue,
    MemberValue,
    OffsetValue,
    Record,
    RegistrationValue,
    decode_group_fields,
    group_record,
    registration_record,
)


class GroupState(StrEnum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


# Python 3.11's EnumType defines __getattr__, which sends every `GroupState.STABLE` through a
# slow attribute hook (0.25 µs each on this machine; 3.12 dropped it): the per-request
# paths compare with these module constants, the very same members.
EMPTY: Final = GroupState.EMPTY
PREPARING_REBALANCE: Final = GroupState.PREPARING_REBALANCE
COMPLETING_REBALANCE: Final = GroupState.COMPLETING_REBALANCE
STABLE: Final = GroupState.STABLE
DEAD: Final = GroupState.DEAD

# protocol.md §2.4: allowed predecessors of each state
VALID_PREVIOUS: dict[GroupState, frozenset[GroupState]] = {
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.EMPTY, GroupState.STABLE, GroupState.COMPLETING_REBALANCE}
    ),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.DEAD: frozenset(GroupState),
}


class IllegalStateTransition(Exception):
    pass


class JoinPhase(Enum):
    """What the join timer of a PreparingRebalance group waits for."""

    INITIAL = "initial"  # the delayed initial rebalance's windows (protocol.md §5.2)
    REBALANCE = "rebalance"  # the rebalance timeout; completes early once all have joined


def interned(protocols: tuple[tuple[str, bytes], ...]) -> tuple[tuple[str, bytes], ...]:
    """The protocol names shared with every other member naming them (see Member)."""
    return tuple([(sys.intern(name), meta) for name, meta in protocols])  # a list: compiled


@dataclass(slots=True)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    assignment: bytes = b""
    # transient: the member's parked requests, kept here (not in a map beside it) because
    # every member has them and a second object per member would cost memory
    awaiting_join: int | None = None  # handle of the parked JoinGroup
    awaiting_sync: int | None = None  # handle of the parked SyncGroup
    is_new: bool = False

    # The hot dataclasses' __init__ are written out: mypyc compiles these, while the one
    # `dataclass` generates runs interpreted (a fifth of a load's replay).
    def __init__(
        self,
        member_id: str,
        group_instance_id: str | None,
        client_id: str,
        client_host: str,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        protocol_type: str,
        protocols: tuple[tuple[str, bytes], ...],
        assignment: bytes = b"",
        awaiting_join: int | None = None,
        awaiting_sync: int | None = None,
        is_new: bool = False,
    ) -> None:
        # Most members of a fleet share these strings (a client library's protocol names, a
        # host, often a client id); each arrives as its own copy from the wire or the log.
        # Interned, a member holds references, not copies (mortal: freed with their last
        # member, so ids a client makes up cannot pile up).
        self.member_id = member_id
        self.group_instance_id = group_instance_id
        self.client_id = sys.intern(client_id)
        self.client_host = sys.intern(client_host)
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.session_timeout_ms = session_timeout_ms
        self.protocol_type = sys.intern(protocol_type)
        self.protocols = interned(protocols)
        self.assignment = assignment
        self.awaiting_join = awaiting_join
        self.awaiting_sync = awaiting_sync
        self.is_new = is_new

    def metadata(self, protocol: str | None) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        return b""

    def matches(self, protocols: tuple[tuple[str, bytes], ...]) -> bool:
        # protocol.md §4.6: same names, same order, byte-equal metadata
        return self.protocols == protocols

    def vote(self, candidates: set[str]) -> str:
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise IllegalStateTransition(f"member {self.member_id} supports none of {candidates}")


@dataclass(slots=True)
class DurableStatic:
    """The durable identity of a static member while replacements of it are being written.

    Replacements can chain (O -> N1 -> N2) before their writes complete; a failed write must
    revert to what the log holds (O, or N1 if N1's write succeeded), not to the previous
    in-memory id (protocol.md §4.5, design.md §5.2)."""

    member_id: str
    protocols: tuple[tuple[str, bytes], ...]
    rebalance_timeout_ms: int
    session_timeout_ms: int
    in_flight: int = 0


@dataclass(slots=True)
class Registration:
    """Static members registered ahead of a scale-up (admin API), as its record holds it."""

    batch: tuple[str, ...] = ()  # the open registration, as persisted
    timeout_ms: int = 0
    registered_ms: int = -1
    expansion_started_ms: int = -1  # first JoinGroup of a registered instance
    # the instances of the batch that have not joined yet (a load drops those that did)
    registered: dict[str, None] = field(default_factory=dict)

    @classmethod
    def from_value(cls, v: RegistrationValue) -> Registration:
        return cls(
            v.expected,
            v.expansion_timeout_ms,
            v.registered_ms,
            v.expansion_started_ms,
            dict.fromkeys(v.expected),
        )

    def record(self, group_id: str, dropped: tuple[str, ...] = ()) -> Record:
        """The open registration keeps its whole batch until the scale-up is durable, so a
        failover mid-expansion still expects members whose join was not yet synced."""
        value = RegistrationValue(
            self.batch, self.timeout_ms, self.registered_ms, self.expansion_started_ms, dropped
        )
        return registration_record(group_id, value)

    def holds_join(self, now: int) -> bool:
        """A registered scale-up is under way: the join phase waits for the rest of it."""
        return (
            bool(self.registered)
            and self.expansion_started_ms >= 0
            and now < self.expansion_started_ms + self.timeout_ms
        )


@dataclass(slots=True)
class GroupTransient:
    """What a group holds only in memory: never written, empty after a load."""

    previous_state: GroupState = EMPTY
    pending_members: set[str] = field(default_factory=set)  # KIP-394 ids handed out
    pending_sync: set[str] = field(default_factory=set)
    join_phase: JoinPhase | None = None
    # the initial rebalance's delay windows
    new_member_added: bool = False
    initial_window_ms: int = 0
    initial_remaining_ms: int = 0
    # generation whose leader assignment is being written (one write per generation)
    assignment_write_generation: int | None = None
    # instance id -> durable identity, while static-replacement writes are in flight
    static_in_flight: dict[str, DurableStatic] = field(default_factory=dict)
    # offset commits being written, per partition: fetch with require_stable waits on them
    pending_offset_commits: dict[tuple[str, int], int] = field(default_factory=dict)
    # registration changes being written (admin API), and whether no registration record of
    # the group was written yet: a registration whose every write failed leaves nothing behind
    registration_writes: int = 0
    registration_unwritten: bool = False

    def __init__(self) -> None:  # every group has one (see Member.__init__)
        self.previous_state = EMPTY
        self.pending_members = set()
        self.pending_sync = set()
        self.join_phase = None
        self.new_member_added = False
        self.initial_window_ms = 0
        self.initial_remaining_ms = 0
        self.assignment_write_generation = None
        self.static_in_flight = {}
        self.pending_offset_commits = {}
        self.registration_writes = 0
        self.registration_unwritten = False


_NOTHING_REGISTERED: Mapping[str, None] = MappingProxyType({})


@dataclass(slots=True)
class Group:
    group_id: str
    # -- durable: what a GROUP_METADATA record holds -----------------------------------------
    state: GroupState = EMPTY
    state_timestamp: int | None = None
    protocol_type: str | None = None
    protocol_name: str | None = None
    generation: int = 0
    leader_id: str | None = None
    # insertion-ordered: "oldest member" is the deterministic leader fallback (protocol.md §2.3)
    members: dict[str, Member] = field(default_factory=dict)
    # why and when the current/last rebalance started (GroupMetadataValue v1)
    rebalance_reason: str | None = None
    rebalance_started_ms: int = -1
    # -- indexes over `members`, kept by add/remove ------------------------------------------
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    protocol_support: dict[str, int] = field(default_factory=dict)
    awaiting_join_count: int = 0
    # -- durable, from their own records -----------------------------------------------------
    offsets: dict[tuple[str, int], OffsetValue] = field(default_factory=dict)
    registration: Registration | None = None  # None: never registered
    # -- transient ---------------------------------------------------------------------------
    transient: GroupTransient = field(default_factory=GroupTransient)

    def __init__(  # see Member.__init__
        self,
        group_id: str,
        state: GroupState = EMPTY,
        state_timestamp: int | None = None,
        protocol_type: str | None = None,
        protocol_name: str | None = None,
        generation: int = 0,
        offsets: dict[tuple[str, int], OffsetValue] | None = None,
    ) -> None:
        self.group_id = group_id
        self.state = state
        self.state_timestamp = state_timestamp
        self.protocol_type = protocol_type
        self.protocol_name = protocol_name
        self.generation = generation
        self.leader_id = None
        self.members = {}
        self.rebalance_reason = None
        self.rebalance_started_ms = -1
        self.static_members = {}
        self.protocol_support = {}
        self.awaiting_join_count = 0
        self.offsets = {} if offsets is None else offsets
        self.registration = None
        self.transient = GroupTransient()

    # -- records ----------------------------------------------------------------------------

    @classmethod
    def from_value(cls, group_id: str, value: bytes) -> Group:
        """The membership part as a GROUP_METADATA record's value holds it (the inverse of
        `metadata_record`)."""
        protocol_type, generation, name, leader, ts, members, reason, started, _ = (
            decode_group_fields(value)
        )
        # Group(), not cls(): a native call, not one through the argument parser
        group = Group(group_id, STABLE if members else EMPTY, None if ts < 0 else ts,
                      protocol_type or None, name, generation)  # fmt: skip
        # shared by every member: interned once here, Member's own intern finds them so
        protocol_type = sys.intern(protocol_type)
        protocol = sys.intern(name or "")
        for member_id, instance, client, host, rebalance_ms, session_ms, sub, assigned in members:
            group.add(
                Member(
                    member_id,
                    instance,
                    client,
                    host,
                    rebalance_ms if rebalance_ms >= 0 else session_ms,
                    session_ms,
                    protocol_type,
                    ((protocol, sub),),
                    assigned,
                )
            )
        group.leader_id = leader
        group.rebalance_reason = reason
        group.rebalance_started_ms = started
        return group

    def metadata_record(
        self, assignments: dict[str, bytes] | None = None, skip_assignment: bool = False
    ) -> Record:
        proto = self.protocol_name
        # positional, in field order: a keyword call costs three times as much, and a
        # rebalance's record holds every member (between the leader's SyncGroup and the write)
        members = tuple(
            [
                MemberValue(
                    m.member_id,
                    m.group_instance_id,
                    m.client_id,
                    m.client_host,
                    m.rebalance_timeout_ms,
                    m.session_timeout_ms,
                    m.metadata(proto),
                    m.assignment if assignments is None else assignments[m.member_id],
                )
                for m in self.members.values()
            ]
        )
        value = GroupMetadataValue(
            protocol_type=self.protocol_type or "",
            generation=self.generation,
            protocol_name=proto,
            leader=self.leader_id,
            current_state_timestamp=-1 if self.state_timestamp is None else self.state_timestamp,
            members=members,
            rebalance_reason=self.rebalance_reason,
            rebalance_started_ms=self.rebalance_started_ms,
            skip_assignment=skip_assignment,
        )
        return group_record(self.group_id, value)

    def open_registration(self) -> Registration:
        if self.registration is None:
            self.registration = Registration()
        return self.registration

    # -- read-only shortcuts into the parts (for readers: tests, views) ----------------------

    @property
    def pending_members(self) -> AbstractSet[str]:
        return self.transient.pending_members

    @property
    def pending_sync(self) -> AbstractSet[str]:
        return self.transient.pending_sync

    @property
    def static_in_flight(self) -> Mapping[str, DurableStatic]:
        return self.transient.static_in_flight

    @property
    def pending_offset_commits(self) -> Mapping[tuple[str, int], int]:
        return self.transient.pending_offset_commits

    @property
    def registered(self) -> Mapping[str, None]:
        reg = self.registration
        return _NOTHING_REGISTERED if reg is None else reg.registered

    @property
    def expansion_started_ms(self) -> int:
        reg = self.registration
        return -1 if reg is None else reg.expansion_started_ms

    # -- state ------------------------------------------------------------------------------

    def transition(self, target: GroupState, now: int) -> None:
        if self.state not in VALID_PREVIOUS[target]:
            raise IllegalStateTransition(f"{self.group_id}: {self.state.value} -> {target.value}")
        self.transient.previous_state = self.state
        self.state = target
        self.state_timestamp = now

    def is_(self, state: GroupState) -> bool:
        return self.state is state

    # -- members ----------------------------------------------------------------------------

    def add(self, member: Member) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        self._count(member, +1)
        if member.awaiting_join is not None:
            self.awaiting_join_count += 1
        if self.leader_id is None:
            self.leader_id = member.member_id

    def remove(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        self._count(member, -1)
        if member.awaiting_join is not None:
            self.awaiting_join_count -= 1
        if (
            member.group_instance_id is not None
            and self.static_members.get(member.group_instance_id) == member_id
        ):
            del self.static_members[member.group_instance_id]
            # a later member with this instance id starts a new identity history
            self.transient.static_in_flight.pop(member.group_instance_id, None)
        self.transient.pending_sync.discard(member_id)
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)  # oldest remaining member
        return member

    def replace_static_member(self, instance_id: str, old_id: str, new_id: str) -> Member:
        """Re-key a static member to its new id, keeping its place in the member order."""
        member = self.members[old_id]
        self.members = {(new_id if k == old_id else k): v for k, v in self.members.items()}
        member.member_id = new_id
        self.static_members[instance_id] = new_id
        if self.leader_id == old_id:
            self.leader_id = new_id
        pending_sync = self.transient.pending_sync
        if old_id in pending_sync:
            pending_sync.discard(old_id)
            pending_sync.add(new_id)
        return member

    def update_protocols(self, member: Member, protocols: tuple[tuple[str, bytes], ...]) -> None:
        self._count(member, -1)
        member.protocols = interned(protocols)
        self._count(member, +1)

    def set_awaiting_join(self, member: Member, handle: int | None) -> None:
        if member.awaiting_join is None and handle is not None:
            self.awaiting_join_count += 1
        elif member.awaiting_join is not None and handle is None:
            self.awaiting_join_count -= 1
        member.awaiting_join = handle

    def _count(self, member: Member, delta: int) -> None:
        for name, _ in member.protocols:
            n = self.protocol_support.get(name, 0) + delta
            if n:
                self.protocol_support[name] = n
            else:
                self.protocol_support.pop(name, None)

    # -- queries ----------------------------------------------------------------------------

    def validate_member(self, member_id: str, instance_id: str | None) -> Error:
        """protocol.md §4.7 validateCurrentMember, shared by Join/Sync/Heartbeat/Leave/Commit."""
        if instance_id is not None:
            known = self.static_members.get(instance_id)
            if known is None:
                return Error.UNKNOWN_MEMBER_ID
            if known != member_id:
                return Error.FENCED_INSTANCE_ID
        if member_id not in self.members:
            return Error.UNKNOWN_MEMBER_ID
        return NO_ERROR

    def expansion_holds_join(self, now: int) -> bool:
        return self.registration is not None and self.registration.holds_join(now)

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def has_all_members_joined(self) -> bool:
        return len(self.members) == self.awaiting_join_count and not self.transient.pending_members

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def supports_protocols(self, protocol_type: str, names: list[str]) -> bool:
        if self.state is EMPTY:
            return bool(protocol_type) and bool(names)
        n = len(self.members)
        return self.protocol_type == protocol_type and any(
            self.protocol_support.get(name, 0) == n for name in names
        )

    def select_protocol(self) -> str:
        """protocol.md §5.5: vote among protocols every member supports.

        Ties (unspecified in Kafka) go to the candidate the oldest member prefers most, which
        is deterministic and usually the group's established choice.
        """
        n = len(self.members)
        candidates = {name for name, count in self.protocol_support.items() if count == n}
        votes: dict[str, int] = {}
        for m in self.members.values():
            choice = m.vote(candidates)
            votes[choice] = votes.get(choice, 0) + 1
        best = max(votes.values())
        oldest = next(iter(self.members.values()))
        for name, _ in oldest.protocols:
            if votes.get(name) == best:
                return name
        raise IllegalStateTransition("protocol vote found no winner")  # unreachable

    def can_rebalance(self) -> bool:
        return self.state in (
            STABLE,
            COMPLETING_REBALANCE,
            EMPTY,
        )

    def is_unused(self) -> bool:
        """Nothing in it, nothing written: what a failed first join or commit leaves behind
        (a registration is written, or being written: protocol.md §5.7)."""
        return (
            self.state is EMPTY
            and not self.members
            and not self.transient.pending_members
            and not self.offsets
            and self.generation == 0
            and not self.transient.pending_offset_commits
            and self.registration is None
        )

    def subscribed_topics(self) -> set[str] | None:
        """Topics of every member's consumer-protocol subscription; None if not parseable."""
        from app.group.consumer_protocol import subscription_topics

        if self.protocol_type != "consumer" or self.protocol_name is None:
            return None
        topics: set[str] = set()
        for m in self.members.values():
            parsed = subscription_topics(m.metadata(self.protocol_name))
            if parsed is None:
                return None
            topics.update(parsed)
        return topics
