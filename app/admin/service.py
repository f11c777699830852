"""The admin service: what the REST API and the console can do, in Kafka's terms.

Routers parse and format; every rule lives here or in the core. Views read the pure core's
state; changes go through the core like any Kafka request (write, then reply). A call that
cannot be done raises a typed outcome (app/admin/errors.py); a group another node serves
raises NotCoordinator. Nothing here speaks HTTP: asking the other nodes is api/peers.py's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from app.admin import upstream as upstream_side
from app.admin.errors import (
    AdminError,
    Conflict,
    InvalidGroupId,
    InvalidRequest,
    NotCoordinator,
    NotFound,
    TooLarge,
    Unavailable,
)
from app.admin.security import SecurityAdmin
from app.admin.views import assignment_view, mark_view, offsets_view, subscription_view
from app.group.coordinator import GroupCoordinator
from app.group.messages import (
    AdminOutcome,
    AdminResult,
    DeleteGroupResult,
    Error,
    LeaveGroupRequest,
    LeaveGroupResponse,
    LeaveMember,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetCommitResponse,
)
from app.group.records import RecordType, decode_group_value, group_key
from app.group.results import Result
from app.group.state import GroupState
from app.group.timeline import timeline
from app.group.view import GroupView
from app.runtime.node import CoordinatorNode
from app.runtime.placement import partition_for
from app.runtime.runtime import METADATA_PARTITION, PartitionState, now_ms
from app.security.manager import SecurityManager
from app.service import CoordinatorError

# what a core's admin outcome raises (DONE raises nothing)
_OUTCOME_ERROR: dict[AdminOutcome, type[AdminError]] = {
    AdminOutcome.INVALID: InvalidRequest,
    AdminOutcome.NO_SUCH_GROUP: NotFound,
    AdminOutcome.GROUP_EMPTY: Conflict,
    AdminOutcome.NOT_REGISTERED: NotFound,
    AdminOutcome.NOT_WRITTEN: Unavailable,
}


class AdminService:
    """The node's admin operations; `security` (the node's SecurityManager, if it runs one)
    serves the ACL and user operations (`security_admin`)."""

    def __init__(self, node: CoordinatorNode, security: SecurityManager | None = None) -> None:
        self.node = node
        self._security = SecurityAdmin(security) if security is not None else None
        self._peer_key: bytes | None = None

    def security_admin(self) -> SecurityAdmin:
        """ACLs and SCRAM users; Unavailable (SECURITY_DISABLED) without a security manager."""
        if self._security is None:
            raise Unavailable("this node runs without a security manager")
        return self._security

    async def peer_key(self) -> bytes:
        """The key every node of the store shares (cluster_meta, made on first use): what the
        admin API signs one node's requests to another with."""
        if self._peer_key is None:
            self._peer_key = await self.node.log.ensure_peer_key()
        return self._peer_key

    # -- routing ------------------------------------------------------------------------------

    def _serves(self, group_id: str) -> None:
        """Return if this node serves the group now; raises NotCoordinator or an AdminError."""
        if not group_id:
            raise InvalidGroupId("group id must not be empty")
        if len(group_id) > self.node.runtime.max_group_id_length:
            raise InvalidRequest(f"group id of {len(group_id)} characters is too long")
        node = self.node
        pid = partition_for(group_id, node.log_partitions)
        p = node.partitions.get(pid)
        if p is None:
            owner = node.owner_of(pid)
            if owner is None:
                raise Unavailable(f"log partition {pid} of group {group_id!r} has no owner yet")
            raise NotCoordinator(owner, node.admin_urls.get(owner))
        if p.state is not PartitionState.ACTIVE or p.core is None:
            raise Unavailable(f"log partition {pid} is still loading; retry shortly")

    def _view(self, group_id: str) -> GroupView | None:
        """The group as the core shows it; None if it does not exist (or is being deleted)."""
        self._serves(group_id)
        try:
            return self.node.schedule_read(group_id, lambda core, now: core.describe(group_id))
        except CoordinatorError as e:
            raise Unavailable(f"this node does not serve the group right now ({e})") from e

    def _existing(self, group_id: str) -> GroupView:
        g = self._view(group_id)
        if g is None:
            raise NotFound(f"group {group_id!r} does not exist")
        return g

    async def _write(
        self, name: str, group_id: str, op: Callable[[GroupCoordinator, int, int], Result]
    ) -> Any:
        try:
            return await self.node.schedule_write(name, group_id, op)
        except CoordinatorError as e:
            raise Unavailable(f"this node does not serve the group right now ({e})") from e

    # -- groups -------------------------------------------------------------------------------

    def list_groups(self, state: str | None = None) -> list[dict[str, Any]]:
        wanted = state.lower() if state else None
        out = []
        for pid, g in self.node.group_summaries():
            if g.state is GroupState.DEAD or (wanted and g.state.value.lower() != wanted):
                continue
            out.append(
                {
                    "group_id": g.group_id,
                    "state": g.state.value,
                    "protocol_type": g.protocol_type,
                    "generation": g.generation,
                    "members": g.members,
                    "protocol_name": g.protocol_name,
                    "static_members": g.static_members,
                    "state_since_ms": g.state_timestamp if g.state_timestamp >= 0 else None,
                    "log_partition": pid,
                    **upstream_side.flags(self.node, g.group_id),
                }
            )
        return sorted(out, key=lambda g: g["group_id"])

    def describe_group(self, group_id: str) -> dict[str, Any]:
        g = self._existing(group_id)
        proto = g.protocol_name
        protocol_type = g.protocol_type or None
        members = [
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "client_id": m.client_id,
                "client_host": m.client_host,
                "session_timeout_ms": m.session_timeout_ms,
                "rebalance_timeout_ms": m.rebalance_timeout_ms,
                "leader": m.is_leader,
                "subscription": subscription_view(protocol_type, m.subscription) if proto else None,
                "assignment": assignment_view(protocol_type, m.assignment),
            }
            for m in g.members
        ]
        return {
            "group_id": g.group_id,
            "state": g.state.value,
            "generation": g.generation,
            "registered_static_members": list(g.registered_static_members),
            "registered_ms": g.registered_ms if g.registered_static_members else None,
            "registration_deadline_ms": (
                g.registration_deadline_ms if g.registration_deadline_ms >= 0 else None
            ),
            "rebalance_reason": g.rebalance_reason,
            "protocol_type": g.protocol_type,
            "protocol_name": proto,
            "leader": g.leader_id,
            "members": members,
            "offsets": offsets_view(g.offsets),
            "lag": upstream_side.lag_view(self.node, g),
            "ownership": upstream_side.ownership_view(self.node, g),
            "upstream": upstream_side.upstream_view(self.node, g.group_id),
        }

    # -- moving a group in and out (gateway mode) ------------------------------------------

    async def import_group(self, group_id: str, dry_run: bool = False) -> dict[str, Any]:
        """The upstream's committed offsets become the group's positions where it has none."""
        self._serves(group_id)
        return await upstream_side.import_group(self.node, group_id, dry_run)

    async def export_group(self, group_id: str, dry_run: bool = False) -> dict[str, Any]:
        """The group's positions here, written to the upstream; only while Empty here."""
        self._serves(group_id)
        return await upstream_side.export_group(self.node, group_id, dry_run)

    async def upstream_groups(self) -> list[str]:
        return await upstream_side.upstream_group_ids(self.node)

    async def group_timeline(self, group_id: str) -> list[dict[str, Any]]:
        """The group's rebalance timeline from its records in the log and its history."""
        self._serves(group_id)
        pid = partition_for(group_id, self.node.log_partitions)
        rows = await self.node.log.key_history(pid, RecordType.GROUP_METADATA, group_key(group_id))
        if not rows:
            raise NotFound(f"group {group_id!r} has no records")
        decoded = []
        for offset, at_ms, value in rows:
            try:
                decoded.append(
                    (offset, at_ms, None if value is None else decode_group_value(value))
                )
            except Exception:  # a record this version cannot read: leave it out, not the page
                continue
        return [mark_view(m) for m in timeline(decoded)]

    def group_offsets(self, group_id: str) -> list[dict[str, Any]]:
        return offsets_view(self._existing(group_id).offsets)

    async def set_offsets(
        self, group_id: str, offsets: list[tuple[str, int, int]]
    ) -> list[dict[str, Any]]:
        """Like kafka-consumer-groups --reset-offsets: only while the group has no members."""
        g = self._view(group_id)
        if g is not None and g.state is not GroupState.EMPTY:
            raise Conflict(
                f"group {group_id!r} is {g.state.value}; offsets can be set only when Empty"
            )
        if not offsets:
            raise InvalidRequest("no offsets given")
        self._within_request_bound("offsets", len(offsets))
        topics = self.node.topics
        for topic, partition, offset in offsets:
            if topic not in topics or not 0 <= partition < topics[topic]:
                raise InvalidRequest(f"unknown topic partition {topic}-{partition}")
            if offset < 0:
                raise InvalidRequest(f"offset of {topic}-{partition} must be >= 0")
        req = OffsetCommitRequest(
            group_id=group_id,
            generation_id=-1,
            member_id="",
            group_instance_id=None,
            partitions=tuple(OffsetCommitPartition(t, p, o) for t, p, o in offsets),
        )
        response: OffsetCommitResponse = await self._write(
            "OffsetCommit", group_id, lambda core, h, now: core.offset_commit(h, req, now)
        )
        failed = [r for r in response.partitions if r.error is not Error.NONE]
        if failed:
            raise Conflict("; ".join(f"{r.topic}-{r.partition}: {r.error.name}" for r in failed))
        return self.group_offsets(group_id)

    async def delete_group(self, group_id: str) -> None:
        self._serves(group_id)
        result: DeleteGroupResult = await self._write(
            "DeleteGroups", group_id, lambda core, h, now: core.delete_group(h, group_id, now)
        )
        if result.error is Error.GROUP_ID_NOT_FOUND:
            raise NotFound(f"group {group_id!r} does not exist")
        if result.error is Error.NON_EMPTY_GROUP:
            raise Conflict(f"group {group_id!r} still has members")
        if result.error is not Error.NONE:
            raise Unavailable(f"could not delete group {group_id!r}: {result.error.name}")

    async def register_static_members(
        self, group_id: str, instance_ids: list[str], expansion_timeout_ms: int
    ) -> dict[str, Any]:
        self._within_request_bound("group_instance_ids", len(instance_ids))
        self._serves(group_id)
        result: AdminResult = await self._write(
            "RegisterStaticMembers",
            group_id,
            lambda core, h, now: core.register_static_members(
                h, group_id, instance_ids, expansion_timeout_ms, now
            ),
        )
        self._raise_for(result, group_id)
        return self.describe_group(group_id)

    async def force_rebalance(self, group_id: str, reason: str) -> dict[str, Any]:
        self._serves(group_id)
        result: AdminResult = await self._write(
            "ForceRebalance",
            group_id,
            lambda core, h, now: core.force_rebalance(h, group_id, reason, now),
        )
        self._raise_for(result, group_id)
        return {"group_id": group_id, "result": result.message}

    def _within_request_bound(self, what: str, count: int) -> None:
        """An admin request holds no more elements than a Kafka request may (the same work on
        the same loop): COORD_MAX_REQUEST_ELEMENTS."""
        bound = self.node.settings.max_request_elements
        if count > bound:
            raise TooLarge(
                f"{count} {what} in one request; at most {bound} (COORD_MAX_REQUEST_ELEMENTS)"
            )

    @staticmethod
    def _raise_for(result: AdminResult, group_id: str) -> None:
        if result.outcome is AdminOutcome.DONE:
            return
        if result.outcome is AdminOutcome.GROUP_EMPTY:
            raise Conflict(f"group {group_id!r} is Empty: there is nothing to rebalance")
        if result.outcome is AdminOutcome.NO_SUCH_GROUP:
            raise NotFound(f"group {group_id!r} does not exist")
        raise _OUTCOME_ERROR[result.outcome](result.message or result.error.name)

    async def remove_static_member(self, group_id: str, instance_id: str) -> None:
        g = self._existing(group_id)
        if instance_id in g.registered_static_members:
            result: AdminResult = await self._write(
                "UnregisterStaticMember",
                group_id,
                lambda core, h, now: core.unregister_static_member(h, group_id, instance_id, now),
            )
            self._raise_for(result, group_id)
            return
        req = LeaveGroupRequest(group_id, (LeaveMember("", instance_id, "removed by admin"),))
        response: LeaveGroupResponse = await self._write(
            "LeaveGroup", group_id, lambda core, h, now: core.leave_group(h, req, now)
        )
        error = response.members[0].error if response.members else response.error
        if error is Error.UNKNOWN_MEMBER_ID:
            raise NotFound(f"no static member {instance_id!r} in group {group_id!r}")
        if error is not Error.NONE:
            raise Unavailable(f"could not remove {instance_id!r}: {error.name}")

    def peer_admin_urls(self) -> list[str]:
        """The admin URLs of the other live nodes (each serves its own groups)."""
        node = self.node
        return [
            url
            for n, url in node.admin_urls.items()
            if n != node.node_id and n in node.live_brokers
        ]

    def readiness(self) -> dict[str, Any]:
        """Whether this node serves every log partition it owns, and what it is still loading
        or failed to load (a readiness probe's answer)."""
        node = self.node
        loading = sorted(pid for pid, p in node.partitions.items() if p.state.value != "active")
        failed = {
            str(pid): error
            for pid in range(-1, node.log_partitions)
            if (error := node.load_error(pid)) is not None
        }
        return {
            "ready": node.ready(),
            "owned": sorted(node.partitions),
            "loading": loading,
            "load_errors": failed,
            "storage_error": node.storage_error(),
            **({"upstream": self._upstream_status()} if node.upstream_status else {}),
        }

    def cluster_view(self) -> dict[str, Any]:
        node = self.node
        t = now_ms()
        partitions = []
        for pid in [METADATA_PARTITION, *range(node.log_partitions)]:
            row = node.leases.get(pid)
            mine = node.partitions.get(pid)
            expires = node.lease_expires_in_ms(pid, t)
            partitions.append(
                {
                    "partition": pid,
                    "owner": node.owner_of(pid),
                    "planned_owner": node.plan.get(pid),
                    "epoch": mine.epoch if mine else (row.epoch if row else None),
                    "lease_expires_in_ms": expires,
                    "state": mine.state.value if mine else None,
                    "records_loaded": mine.records_loaded if mine else None,
                    "compacted_at_ms": (mine.compacted_at_ms or None) if mine else None,
                    "load_ms": round(mine.load_ms, 1) if mine else None,
                    "load_error": node.load_error(pid),
                }
            )
        nodes = self.nodes()
        for n in nodes:
            n["partitions"] = sum(1 for p in partitions if p["owner"] == n["node_id"])
        return {
            "node_id": node.node_id,
            "ready": node.ready(),
            "nodes": nodes,
            "topics": node.topics,
            "partitions": partitions,
            **({"upstream": self._upstream_status()} if node.upstream_status else {}),
        }

    def _upstream_status(self) -> dict[str, Any]:
        assert self.node.upstream_status is not None
        out = self.node.upstream_status()
        up = upstream_side.groups_upstream(self.node)
        if up is not None:
            out["groups"] = up.status()
        return out

    def nodes(self) -> list[dict[str, Any]]:
        """The live nodes with the admin URL each registered (COORD_ADVERTISED_ADMIN_URL)."""
        node = self.node
        beats = node.node_heartbeats
        return [
            {
                "node_id": b.node_id,
                "host": b.host,
                "port": b.port,
                "admin_url": node.admin_urls.get(b.node_id),
                "heartbeat_ms": beats.get(b.node_id, (None, None))[0],
                "started_ms": beats.get(b.node_id, (None, None))[1],
            }
            for b in node.cluster().brokers
        ]

    # -- topics -------------------------------------------------------------------------------

    def topics(self) -> dict[str, int]:
        return dict(sorted(self.node.topics.items()))

    def _upstream_topics(self) -> None:
        if self.node.settings.gateway:
            raise Conflict(
                "in gateway mode the topics are the upstream's (COORD_UPSTREAM_BOOTSTRAP): "
                "create or grow them there, e.g. with kafka-topics through the gateway"
            )

    async def create_topic(self, name: str, partitions: int) -> dict[str, int]:
        self._upstream_topics()
        if name in self.node.topics:
            raise Conflict(f"topic {name!r} already exists")
        return await self._put_topic(name, partitions)

    async def grow_topic(self, name: str, partitions: int) -> dict[str, int]:
        self._upstream_topics()
        current = self.node.topics.get(name)
        if current is None:
            raise NotFound(f"topic {name!r} does not exist")
        if partitions < current:
            raise InvalidRequest(
                f"topic {name!r} has {current} partitions; partitions can only grow"
            )
        if partitions == current:
            return {name: current}
        return await self._put_topic(name, partitions)

    async def _put_topic(self, name: str, partitions: int) -> dict[str, int]:
        try:
            await self.node.put_topics({name: partitions})
        except CoordinatorError as e:
            owner = self.node.owner_of(-1)
            if owner is None:
                raise Unavailable(str(e)) from e
            raise NotCoordinator(owner, self.node.admin_urls.get(owner)) from e
        return {name: self.node.topics[name]}
