"""/groups: describe, pre-register static members, force a rebalance, remove, offsets.

The ACL checks are Kafka's for the same acts: describing a group (and its offsets) needs GROUP
DESCRIBE, acting as or on its members (rebalance, remove, pre-register, reset offsets) GROUP
READ, plus TOPIC READ on each topic whose offsets are set; deleting it GROUP DELETE. Offsets
of topics the caller may not DESCRIBE are left out, as OffsetFetch leaves them out. Checks
come before the redirect to the owning node: a denied caller learns nothing about ownership.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

from fastapi import APIRouter, Header, Query, Request

from api.deps import PROTECTED, Access, AccessDep, AdminDep, cluster_groups
from api.peers import LOCAL_HEADER
from api.schemas import OffsetsIn, RebalanceIn, StaticMembersIn
from app.security.acl import CLUSTER_NAME, AclOperation, ResourceType

router = APIRouter(prefix="/groups", tags=["groups"], dependencies=PROTECTED)

GROUP, TOPIC = ResourceType.GROUP, ResourceType.TOPIC
DESCRIBE, READ, DELETE = AclOperation.DESCRIBE, AclOperation.READ, AclOperation.DELETE


def param(value: str) -> str:
    """A path segment as routed by `api.app.RoutedOnRawPath` (only "%" and "/" escaped)."""
    return unquote(value)


def visible_offsets(access: Access, offsets: list[dict[str, Any]]) -> list[dict[str, Any]]:
    if access.caller.full:
        return offsets
    return [o for o in offsets if access.allowed(DESCRIBE, TOPIC, o["topic"])]


def visible_group(access: Access, g: dict[str, Any]) -> dict[str, Any]:
    """A described group with only the topics the caller may DESCRIBE: its offsets, its lag
    rows (the totals recomputed from those) and its ownership findings."""
    g["offsets"] = visible_offsets(access, g["offsets"])
    if access.caller.full:
        return g
    lag = g.get("lag")
    if lag:
        rows = visible_offsets(access, lag["partitions"])
        if len(rows) != len(lag["partitions"]):
            lags = [r["lag"] for r in rows if r["lag"] is not None]
            lag.update(
                partitions=rows,
                total=sum(lags) if lags else None,
                max=max(lags) if lags else None,
                history=[],  # the series sums every partition
            )
    owned = g.get("ownership")
    if owned:
        for key in ("unowned", "doubly_owned"):
            owned[key] = visible_offsets(access, owned[key])
        owned["unknown_topics"] = [
            t for t in owned["unknown_topics"] if access.allowed(DESCRIBE, TOPIC, t)
        ]
    return g


STATES = "^(?i:empty|preparingrebalance|completingrebalance|stable|dead)$"


@router.get("")
async def list_groups(
    request: Request,
    admin: AdminDep,
    access: AccessDep,
    state: str | None = Query(default=None, pattern=STATES),
    local: str | None = Header(default=None, alias=LOCAL_HEADER),
) -> list[dict[str, Any]]:
    """Every group of the cluster (each node adds the groups of the partitions it owns), as
    ListGroups: only those the caller may DESCRIBE, unless it may DESCRIBE the cluster."""
    if local or access.caller.peer:
        groups = admin.list_groups(state)
    else:
        groups = await cluster_groups(request, access.caller, state)
    if access.allowed(DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        return groups
    return [g for g in groups if access.allowed(DESCRIBE, GROUP, g["group_id"])]


@router.get("/{group_id}")
async def describe_group(group_id: str, admin: AdminDep, access: AccessDep) -> dict[str, Any]:
    gid = param(group_id)
    access.require(DESCRIBE, GROUP, gid)
    return visible_group(access, admin.describe_group(gid))


@router.delete("/{group_id}", status_code=204)
async def delete_group(group_id: str, admin: AdminDep, access: AccessDep) -> None:
    gid = param(group_id)
    access.require(DELETE, GROUP, gid)
    await admin.delete_group(gid)


@router.post("/{group_id}/static-members")
async def register_static_members(
    group_id: str, body: StaticMembersIn, admin: AdminDep, access: AccessDep
) -> dict[str, Any]:
    gid = param(group_id)
    access.require(READ, GROUP, gid)
    access.note(group_instance_ids=len(body.group_instance_ids))
    g = await admin.register_static_members(gid, body.group_instance_ids, body.expansion_timeout_ms)
    return visible_group(access, g)


@router.delete("/{group_id}/static-members/{group_instance_id}", status_code=204)
async def remove_static_member(
    group_id: str, group_instance_id: str, admin: AdminDep, access: AccessDep
) -> None:
    gid, instance = param(group_id), param(group_instance_id)
    access.require(READ, GROUP, gid)
    access.note(group_instance_id=instance)
    await admin.remove_static_member(gid, instance)


@router.post("/{group_id}/rebalance")
async def force_rebalance(
    group_id: str, admin: AdminDep, access: AccessDep, body: RebalanceIn | None = None
) -> dict[str, Any]:
    """Stable/CompletingRebalance → PreparingRebalance; the body (and its reason) is optional."""
    gid = param(group_id)
    access.require(READ, GROUP, gid)
    reason = (body or RebalanceIn()).reason
    access.note(reason=reason)
    return await admin.force_rebalance(gid, reason)


@router.get("/{group_id}/timeline")
async def group_timeline(group_id: str, admin: AdminDep, access: AccessDep) -> list[dict[str, Any]]:
    """One mark per rebalance, static restart, SkipAssignment rejoin, emptying or deletion,
    from the group's records in the log and its history (oldest first)."""
    gid = param(group_id)
    access.require(DESCRIBE, GROUP, gid)
    return await admin.group_timeline(gid)


@router.get("/{group_id}/offsets")
async def group_offsets(group_id: str, admin: AdminDep, access: AccessDep) -> list[dict[str, Any]]:
    gid = param(group_id)
    access.require(DESCRIBE, GROUP, gid)
    return visible_offsets(access, admin.group_offsets(gid))


@router.post("/{group_id}/offsets")
async def set_offsets(
    group_id: str, body: OffsetsIn, admin: AdminDep, access: AccessDep
) -> list[dict[str, Any]]:
    gid = param(group_id)
    access.require(READ, GROUP, gid)
    for topic in sorted({o.topic for o in body.offsets}):
        access.require(READ, TOPIC, topic)
    access.note(partitions=len(body.offsets))
    done = await admin.set_offsets(gid, [(o.topic, o.partition, o.offset) for o in body.offsets])
    return visible_offsets(access, done)


@router.post("/{group_id}/import")
async def import_group(
    group_id: str, admin: AdminDep, access: AccessDep, dry_run: bool = False
) -> dict[str, Any]:
    """Gateway mode: take the group's committed offsets from the upstream where it has none
    here (409 while it has live members upstream); `dry_run` shows what it would take."""
    gid = param(group_id)
    access.require(READ, GROUP, gid)
    access.note(dry_run=dry_run)
    report = await admin.import_group(gid, dry_run)
    report["offsets"] = visible_offsets(access, report["offsets"])
    return report


@router.post("/{group_id}/export")
async def export_group(
    group_id: str, admin: AdminDep, access: AccessDep, dry_run: bool = False
) -> dict[str, Any]:
    """Gateway mode: write the group's positions to the upstream (409 while it has members)."""
    gid = param(group_id)
    access.require(READ, GROUP, gid)
    # what an OffsetCommit of these offsets needs: READ on each of their topics
    for topic in sorted({o["topic"] for o in admin.group_offsets(gid)}):
        access.require(READ, TOPIC, topic)
    access.note(dry_run=dry_run)
    return await admin.export_group(gid, dry_run)
