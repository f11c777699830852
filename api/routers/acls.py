"""/acls: list, create and delete ACL bindings, as DescribeAcls, CreateAcls and DeleteAcls do
(CLUSTER DESCRIBE to list, CLUSTER ALTER to change), through the admin service's SecurityAdmin.
The bindings live in the SQL database, so every node applies a change within a second; this
node at once."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Query, Request

from api.deps import PROTECTED, AccessDep, SecurityAdminDep
from api.schemas import AclFilterIn, AclIn
from app.admin import InvalidRequest
from app.security.acl import (
    CLUSTER_NAME,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)

router = APIRouter(prefix="/acls", tags=["acls"], dependencies=PROTECTED)

MAX_BINDINGS = 1000  # in one request


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
    return AclBindingFilter(
        ResourceType[f.resource_type],
        f.resource_name,
        PatternType[f.pattern_type],
        f.principal,
        f.host,
        AclOperation[f.operation],
        AclPermissionType[f.permission],
    )


@router.get("")
async def list_acls(
    access: AccessDep, acls: SecurityAdminDep, query: Annotated[AclFilterIn, Query()]
) -> list[dict[str, Any]]:
    """The stored bindings the filter matches (every one without a filter)."""
    access.require(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME)
    return await acls.list_acls(acl_filter(query))


@router.post("", status_code=201)
async def create_acls(
    body: Annotated[list[AclIn], Body(min_length=1, max_length=MAX_BINDINGS)],
    access: AccessDep,
    acls: SecurityAdminDep,
) -> list[dict[str, Any]]:
    """Store the bindings (all or none: one invalid binding refuses the request)."""
    access.require(AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME)
    views = await acls.create_acls([binding(a) for a in body])
    access.note(resource="ACLS", acls=views)
    return views


@router.delete("")
async def delete_acls(
    request: Request,
    access: AccessDep,
    acls: SecurityAdminDep,
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
            raise InvalidRequest(f"give 1 to {MAX_BINDINGS} filters")
        filters = [acl_filter(f) for f in given]
    elif request.query_params:
        filters = [acl_filter(query)]
    else:
        raise InvalidRequest(
            "no filter: give one in the body or the query (?resource_type=ANY: all)"
        )
    views = await acls.delete_acls(filters)
    access.note(resource="ACLS", deleted=views)
    return views
