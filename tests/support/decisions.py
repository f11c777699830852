"""The real ACL Authorizer behind the interface the gateway asks of the node's SecurityManager
(app/gateway/authorize.py Decider), for tests that check relayed requests without a store."""

from __future__ import annotations

from collections.abc import Iterable

from app.security.acl import AclBinding, AclOperation, Authorizer, ResourceType


class Decisions:
    def __init__(self, bindings: Iterable[AclBinding], super_users: frozenset[str] = frozenset()):
        self.authorizer = Authorizer(bindings, super_users=super_users)

    def authorize(
        self,
        principal: str,
        host: str,
        op: AclOperation,
        rtype: ResourceType,
        name: str,
        *,
        log_denial: bool = True,
    ) -> bool:
        return self.authorizer.authorize(principal, host, op, rtype, name)

    def authorize_any(
        self, principal: str, host: str, op: AclOperation, rtype: ResourceType
    ) -> bool:
        return self.authorizer.authorize_any(principal, host, op, rtype)

    def authorized_operations(
        self, principal: str, host: str, rtype: ResourceType, name: str
    ) -> int:
        return self.authorizer.authorized_operations(principal, host, rtype, name)
