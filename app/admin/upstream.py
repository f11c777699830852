"""What the admin service says and does about a group's upstream side: its lag, its unowned
and doubly owned partitions, live members on the upstream's own coordinator, and moving it in
(import) and out (export). Without the gateway there is no upstream: lag reads as unknown,
never as a number, and ownership is checked against the topic registry alone."""

from __future__ import annotations

from typing import Any

from app.admin.errors import Conflict, NotFound, Unavailable
from app.group.consumer_protocol import assigned_partitions
from app.group.ownership import ownership
from app.group.view import GroupView
from app.runtime.node import CoordinatorNode
from app.service import CoordinatorError
from app.upstream.client import UpstreamUnavailable
from app.upstream.service import GroupsUpstream

NO_UPSTREAM = (
    "no upstream cluster (COORD_UPSTREAM_BOOTSTRAP unset): this node stores no records and "
    "knows no log-end offset, so lag is unknown"
)


def groups_upstream(node: CoordinatorNode) -> GroupsUpstream | None:
    up = node.upstream
    return up if isinstance(up, GroupsUpstream) else None


def lag_view(node: CoordinatorNode, g: GroupView) -> dict[str, Any]:
    up = groups_upstream(node)
    if up is None:
        return {
            "known": False,
            "problem": NO_UPSTREAM,
            "total": None,
            "max": None,
            "partitions": [
                {
                    "topic": o.topic,
                    "partition": o.partition,
                    "committed_offset": o.offset,
                    "log_end_offset": None,
                    "lag": None,
                    "since_commit_ms": None,
                }
                for o in g.offsets
            ],
            "history": [],
        }
    assigned = assigned_partitions(g.protocol_type, (m.assignment for m in g.members))
    return up.lag.group_lag(g.group_id, g.offsets, assigned)


def ownership_view(node: CoordinatorNode, g: GroupView) -> dict[str, Any] | None:
    found = ownership(g, node.topics)
    if found is None:
        return None
    return {
        "generation": found.generation,
        "unowned": [{"topic": t, "partition": p} for t, p in found.unowned],
        "doubly_owned": [{"topic": t, "partition": p} for t, p in found.doubly_owned],
        "unknown_topics": list(found.unknown_topics),
    }


def upstream_view(node: CoordinatorNode, group_id: str) -> dict[str, Any] | None:
    up = groups_upstream(node)
    return None if up is None else up.mover.flag_of(group_id)


def flags(node: CoordinatorNode, group_id: str) -> dict[str, Any]:
    """The groups page's per-group flags, from the periodic checks (no work per listing)."""
    found = node.ownership.of(group_id)
    up = groups_upstream(node)
    totals = up.lag.totals.get(group_id) if up is not None else None
    split = up.mover.upstream_members.get(group_id) if up is not None else None
    return {
        "unowned_partitions": len(found.unowned) if found else 0,
        "doubly_owned_partitions": len(found.doubly_owned) if found else 0,
        "upstream_members": len(split.members) if split else 0,
        "lag": totals[0] if totals else None,
    }


def _mover(node: CoordinatorNode) -> GroupsUpstream:
    up = groups_upstream(node)
    if up is None:
        raise Conflict("this node has no upstream cluster: import and export need gateway mode")
    return up


async def import_group(node: CoordinatorNode, group_id: str, dry_run: bool) -> dict[str, Any]:
    up = _mover(node)
    try:
        report = await up.mover.import_group(group_id, dry_run=dry_run)
    except UpstreamUnavailable as e:
        raise Unavailable(f"the upstream cannot be asked: {e}") from e
    except CoordinatorError as e:
        raise Unavailable(f"this node does not serve the group right now ({e})") from e
    if report["refused"] and not dry_run:
        raise Conflict(f"not importing group {group_id!r}: {report['refused']}")
    return report


async def export_group(node: CoordinatorNode, group_id: str, dry_run: bool) -> dict[str, Any]:
    up = _mover(node)
    try:
        return await up.mover.export_group(group_id, dry_run=dry_run)
    except LookupError as e:
        raise NotFound(str(e)) from e
    except ValueError as e:
        raise Conflict(str(e)) from e
    except UpstreamUnavailable as e:
        raise Unavailable(str(e)) from e
    except CoordinatorError as e:
        raise Unavailable(f"this node does not serve the group right now ({e})") from e


async def upstream_group_ids(node: CoordinatorNode) -> list[str]:
    """Every group the upstream's coordinators know (import --all)."""
    up = _mover(node)
    try:
        return await up.admin.list_groups()
    except UpstreamUnavailable as e:
        raise Unavailable(f"the upstream cannot be asked: {e}") from e
