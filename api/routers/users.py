"""/users: SCRAM credentials, as DescribeUserScramCredentials (CLUSTER DESCRIBE) and
AlterUserScramCredentials (CLUSTER ALTER) manage them, through the admin service's
SecurityAdmin. A password only passes through: only its salted keys are stored, and no
password is logged or answered."""

from __future__ import annotations

from typing import Annotated, Any, Literal
from urllib.parse import unquote

from fastapi import APIRouter, Query

from api.deps import PROTECTED, AccessDep, SecurityAdminDep
from api.schemas import UserCredentialIn
from app.security.acl import CLUSTER_NAME, AclOperation, ResourceType

router = APIRouter(prefix="/users", tags=["users"], dependencies=PROTECTED)


@router.get("")
async def list_users(access: AccessDep, users: SecurityAdminDep) -> list[dict[str, Any]]:
    access.require(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME)
    return await users.list_users()


@router.put("/{name}")
async def set_user(
    name: str, body: UserCredentialIn, access: AccessDep, users: SecurityAdminDep
) -> dict[str, Any]:
    """Create or replace the user's credential for one mechanism."""
    user = unquote(name)
    access.require(AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME)
    access.note(resource=f"USER:{user}", mechanism=body.mechanism, iterations=body.iterations)
    password = body.password.get_secret_value()
    return await users.set_user(user, body.mechanism, password, body.iterations)


@router.delete("/{name}", status_code=204)
async def delete_user(
    name: str,
    access: AccessDep,
    users: SecurityAdminDep,
    mechanism: Annotated[
        Literal["SCRAM-SHA-256", "SCRAM-SHA-512"] | None,
        Query(description="only this mechanism's credential (default: both)"),
    ] = None,
) -> None:
    user = unquote(name)
    access.require(AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME)
    access.note(resource=f"USER:{user}", mechanism=mechanism or "all")
    await users.delete_user(user, mechanism)
