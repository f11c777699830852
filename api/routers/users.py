"""/users: SCRAM credentials, as DescribeUserScramCredentials (CLUSTER DESCRIBE) and
AlterUserScramCredentials (CLUSTER ALTER) manage them. A password only passes through: the
salted keys are made on the security threads (PBKDF2 never runs on the event loop) and only
they are stored; no password is logged or answered."""

from __future__ import annotations

from typing import Annotated, Any, Literal
from urllib.parse import unquote

from fastapi import APIRouter, HTTPException, Query
from scramp import ScramException

from api.deps import PROTECTED, AccessDep
from api.routers.acls import SecurityDep
from api.schemas import UserCredentialIn
from app.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from app.security.sasl import SCRAM_MECHANISMS, CredentialRejected, make_credential

router = APIRouter(prefix="/users", tags=["users"], dependencies=PROTECTED)


@router.get("")
async def list_users(access: AccessDep, manager: SecurityDep) -> list[dict[str, Any]]:
    access.require(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME)
    return [
        {"name": c.user, "mechanism": c.mechanism, "iterations": c.iterations}
        for c in sorted(
            await manager.store.scram_credentials(), key=lambda c: (c.user, c.mechanism)
        )
    ]


@router.put("/{name}")
async def set_user(
    name: str, body: UserCredentialIn, access: AccessDep, manager: SecurityDep
) -> dict[str, Any]:
    """Create or replace the user's credential for one mechanism."""
    user = unquote(name)
    access.require(AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME)
    access.note(resource=f"USER:{user}", mechanism=body.mechanism, iterations=body.iterations)
    try:
        credential = await manager.offload(
            make_credential, user, body.mechanism, body.password.get_secret_value(), body.iterations
        )
    except CredentialRejected as e:
        raise HTTPException(422, detail=str(e)) from e
    except ScramException as e:  # SASLprep (RFC 4013) refuses the password's characters
        raise HTTPException(422, detail=f"unacceptable password: {e}") from e
    await manager.store.upsert_scram_credentials([credential])
    await manager.refresh()
    return {"name": user, "mechanism": credential.mechanism, "iterations": credential.iterations}


@router.delete("/{name}", status_code=204)
async def delete_user(
    name: str,
    access: AccessDep,
    manager: SecurityDep,
    mechanism: Annotated[
        Literal["SCRAM-SHA-256", "SCRAM-SHA-512"] | None,
        Query(description="only this mechanism's credential (default: both)"),
    ] = None,
) -> None:
    user = unquote(name)
    access.require(AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME)
    access.note(resource=f"USER:{user}", mechanism=mechanism or "all")
    mechanisms = [mechanism] if mechanism else list(SCRAM_MECHANISMS)
    removed = await manager.store.delete_scram_credentials([(user, m) for m in mechanisms])
    if not removed:
        raise HTTPException(404, detail=f"user {user!r} has no {mechanism or 'SCRAM'} credential")
    await manager.refresh()
