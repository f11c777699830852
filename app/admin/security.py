"""ACLs and SCRAM users, as the admin API manages them: DescribeAcls, CreateAcls and DeleteAcls;
DescribeUserScramCredentials and AlterUserScramCredentials.

Through the node's SecurityManager: the store holds the bindings and credentials (every node
applies a change within a second, this node at once: `refresh`), and a password is made into
salted keys on the security threads (PBKDF2 never runs on the event loop). Only the keys are
stored; no password is logged or answered.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from scramp import ScramException

from app.admin.errors import InvalidRequest, NotFound
from app.security.acl import AclBinding, AclBindingFilter
from app.security.manager import SecurityManager
from app.security.sasl import SCRAM_MECHANISMS, CredentialRejected, make_credential


def acl_view(b: AclBinding) -> dict[str, Any]:
    return {
        "resource_type": b.resource_type.name,
        "resource_name": b.resource_name,
        "pattern_type": b.pattern_type.name,
        "principal": b.principal,
        "host": b.host,
        "operation": b.operation.name,
        "permission": b.permission.name,
    }


def checked_filter(f: AclBindingFilter) -> AclBindingFilter:
    """The filter, or InvalidRequest if it cannot match as asked."""
    problem = f.check()
    if problem:
        raise InvalidRequest(f"invalid ACL filter: {problem}")
    return f


class SecurityAdmin:
    def __init__(self, manager: SecurityManager) -> None:
        self.manager = manager

    async def list_acls(self, f: AclBindingFilter) -> list[dict[str, Any]]:
        """The stored bindings the filter matches."""
        checked_filter(f)
        return [acl_view(b) for b in await self.manager.store.acl_bindings() if f.matches(b)]

    async def create_acls(self, bindings: Sequence[AclBinding]) -> list[dict[str, Any]]:
        """Store the bindings, all or none: one invalid binding refuses the request."""
        for i, b in enumerate(bindings):
            problem = b.check()
            if problem:
                raise InvalidRequest(f"binding {i}: {problem}")
        await self.manager.store.create_acls(list(bindings))
        await self.manager.refresh()
        return [acl_view(b) for b in bindings]

    async def delete_acls(self, filters: Sequence[AclBindingFilter]) -> list[dict[str, Any]]:
        """Delete what the filters match; the deleted bindings, each once."""
        for f in filters:
            checked_filter(f)
        deleted: dict[AclBinding, None] = {}
        for matched in await self.manager.store.delete_acls(list(filters)):
            deleted.update(dict.fromkeys(matched))
        await self.manager.refresh()
        return [acl_view(b) for b in deleted]

    async def list_users(self) -> list[dict[str, Any]]:
        credentials = await self.manager.store.scram_credentials()
        return [
            {"name": c.user, "mechanism": c.mechanism, "iterations": c.iterations}
            for c in sorted(credentials, key=lambda c: (c.user, c.mechanism))
        ]

    async def set_user(
        self, name: str, mechanism: str, password: str, iterations: int
    ) -> dict[str, Any]:
        """Create or replace the user's credential for one mechanism."""
        try:
            credential = await self.manager.offload(
                make_credential, name, mechanism, password, iterations
            )
        except CredentialRejected as e:
            raise InvalidRequest(str(e)) from e
        except ScramException as e:  # SASLprep (RFC 4013) refuses the password's characters
            raise InvalidRequest(f"unacceptable password: {e}") from e
        await self.manager.store.upsert_scram_credentials([credential])
        await self.manager.refresh()
        return {
            "name": name,
            "mechanism": credential.mechanism,
            "iterations": credential.iterations,
        }

    async def delete_user(self, name: str, mechanism: str | None = None) -> None:
        """Delete the user's credential for `mechanism` (None: every SCRAM mechanism)."""
        mechanisms = [mechanism] if mechanism else list(SCRAM_MECHANISMS)
        removed = await self.manager.store.delete_scram_credentials([(name, m) for m in mechanisms])
        if not removed:
            raise NotFound(f"user {name!r} has no {mechanism or 'SCRAM'} credential")
        await self.manager.refresh()
