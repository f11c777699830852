"""/acls: list, create and delete ACL bindings, as DescribeAcls, CreateAcls and DeleteAcls do
(CLUSTER DESCRIBE to list, CLUSTER ALTER to change). The bindings live in the SQL database, so
every node applies a change within a second; this node at once."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, HTTPException, Query, Request

from api.deps import PROTECTED, AccessDep, security_of
from api.schemas import AclFilterIn, AclIn
from app.security.acl import (
    CLUSTER_NAME,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from app.security.manager import SecurityManager

router = APIRouter(prefix="/acls", tags=["acls"], dependencies=PROTECTED)

MAX_BINDINGS = 1000  # in one request


def security(request: Request) -> SecurityManager:
    manager = security_of(request)
    if manager is None:
        raise HTTPException(503, detail="this node runs without a security manager")
    return manager


SecurityDep = Annotated[SecurityManager, Depends(security)]


def view(b: AclBinding) -> dict[str, Any]:
    return {
        "resource_type": b.resource_type.name,
        "resource_name": b.resource_name,
        "pattern_type": b.pattern_type.name,
        "principal": b.principal,
        "host": b.host,
        "operation": b.operation.name,
        "permission": b.permission.name,
    }


def binding(a: AclIn) -> AclBinding:
    return AclBinding(
        ResourceType[a.resource_type],
        a.resource_name,
        PatternType[a.pattern_type],
        a.principal,
        a.host,
        AclOperation[a.operation],
        AclPermissionType[a.permission],
    )


def acl_filter(f: AclFilterIn) -> AclBindingFilter:
    out = AclBindingFilter(
        ResourceType[f.resource_type],
        f.resource_name,
        PatternType[f.pattern_type],
        f.principal,
        f.host,
        AclOperation[f.operation],
        AclPermissionType[f.permission],
    )
    problem = out.check()
    if problem:
        raise HTTPException(422, detail=f"invalid ACL filter: {problem}")
    return out


@router.get("")
async def list_acls(
    access: AccessDep, manager: SecurityDep, query: Annotated[AclFilterIn, Query()]
) -> list[dict[str, Any]]:
    """The stored bindings the filter matches (every one without a filter)."""
    access.require(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME)
    f = acl_filter(query)
    return [view(b) for b in await manager.store.acl_bindings() if f.matches(b)]


@router.post("", status_code=201)
async def create_acls(
    body: Annotated[list[AclIn], Body(min_length=1, max_length=MAX_BINDINGS)],
    access: AccessDep,
    manager: SecurityDep,
) -> list[dict[str, Any]]:
    """Store the bindings (all or none: one invalid binding refuses the request)."""
    access.require(AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME)
    bindings = [binding(a) for a in body]
    for i, b in enumerate(bindings):
        problem = b.check()
        if problem:
            raise HTTPException(422, detail=f"binding {i}: {problem}")
    views = [view(b) for b in bindings]
    access.note(resource="ACLS", acls=views)
    await manager.store.create_acls(bindings)
    await manager.refresh()
    return views


@router.delete("")
async def delete_acls(
    request: Request,
    access: AccessDep,
    manager: SecurityDep,
    query: Annotated[AclFilterIn, Query()],
    body: Annotated[
        list[AclFilterIn] | AclFilterIn | None, Body(description="one filter or a list")
    ] = None,
) -> list[dict[str, Any]]:
    """Delete what the filters match (a JSON body of one filter or a list, or the query);
    answers the deleted bindings. With neither, nothing is deleted: to delete every binding,
    say so with `?resource_type=ANY`."""
    access.require(AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME)
    if body is not None:
        given = body if isinstance(body, list) else [body]
        if not given or len(given) > MAX_BINDINGS:
            raise HTTPException(422, detail=f"give 1 to {MAX_BINDINGS} filters")
        filters = [acl_filter(f) for f in given]
    elif request.query_params:
        filters = [acl_filter(query)]
    else:
        raise HTTPException(
            422, detail="no filter: give one in the body or the query (?resource_type=ANY: all)"
        )
    deleted: dict[AclBinding, None] = {}
    for matched in await manager.store.delete_acls(filters):
        deleted.update(dict.fromkeys(matched))
    views = [view(b) for b in deleted]
    access.note(resource="ACLS", deleted=views)
    await manager.refresh()
    return views
