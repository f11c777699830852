"""/groups: describe, pre-register static members, force a rebalance, remove, offsets."""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

from fastapi import APIRouter, Header, Query

from api.deps import AdminAuth, AdminDep
from api.schemas import OffsetsIn, RebalanceIn, StaticMembersIn

router = APIRouter(prefix="/groups", tags=["groups"], dependencies=[AdminAuth])


def param(value: str) -> str:
    """A path segment as routed by `api.app.RoutedOnRawPath` (only "%" and "/" escaped)."""
    return unquote(value)


STATES = "^(?i:empty|preparingrebalance|completingrebalance|stable|dead)$"


@router.get("")
async def list_groups(
    admin: AdminDep,
    state: str | None = Query(default=None, pattern=STATES),
    local: str | None = Header(default=None, alias="X-Coordinator-Local"),
) -> list[dict[str, Any]]:
    """Every group of the cluster (each node adds the groups of the partitions it owns)."""
    if local:
        return admin.list_groups(state)
    return await admin.list_all_groups(state)


@router.get("/{group_id}")
async def describe_group(group_id: str, admin: AdminDep) -> dict[str, Any]:
    return admin.describe_group(param(group_id))


@router.delete("/{group_id}", status_code=204)
async def delete_group(group_id: str, admin: AdminDep) -> None:
    await admin.delete_group(param(group_id))


@router.post("/{group_id}/static-members")
async def register_static_members(
    group_id: str, body: StaticMembersIn, admin: AdminDep
) -> dict[str, Any]:
    return await admin.register_static_members(
        param(group_id), body.group_instance_ids, body.expansion_timeout_ms
    )


@router.delete("/{group_id}/static-members/{group_instance_id}", status_code=204)
async def remove_static_member(group_id: str, group_instance_id: str, admin: AdminDep) -> None:
    await admin.remove_static_member(param(group_id), param(group_instance_id))


@router.post("/{group_id}/rebalance")
async def force_rebalance(
    group_id: str, admin: AdminDep, body: RebalanceIn | None = None
) -> dict[str, Any]:
    """Stable/CompletingRebalance → PreparingRebalance; the body (and its reason) is optional."""
    return await admin.force_rebalance(param(group_id), (body or RebalanceIn()).reason)


@router.get("/{group_id}/offsets")
async def group_offsets(group_id: str, admin: AdminDep) -> list[dict[str, Any]]:
    return admin.group_offsets(param(group_id))


@router.post("/{group_id}/offsets")
async def set_offsets(group_id: str, body: OffsetsIn, admin: AdminDep) -> list[dict[str, Any]]:
    return await admin.set_offsets(
        param(group_id), [(o.topic, o.partition, o.offset) for o in body.offsets]
    )
