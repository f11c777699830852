"""ACLs and the authorizer, as Kafka's `StandardAuthorizer` decides.

A binding is (resource type, resource name, pattern type) + (principal, host, operation,
permission). A request by `principal` from `host` for `operation` on a resource is allowed
when the principal is a super user, or when no DENY binding matches and an ALLOW binding
matches (DENY wins). A matching binding: LITERAL name equal or "*", PREFIXED name a prefix;
principal equal or "User:*"; host equal or "*"; operation equal or ALL, and an ALLOW of READ,
WRITE, DELETE or ALTER also allows DESCRIBE (ALTER_CONFIGS allows DESCRIBE_CONFIGS). A
resource no binding names is allowed only with allow.everyone.if.no.acl.found.
The codes are the wire's (AclOperation, ResourceType, PatternType, AclPermissionType).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from storage.security import (
    CLUSTER_NAME,
    SUPPORTED,
    WILDCARD,
    WILDCARD_PRINCIPAL,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    Op,
    PatternType,
    ResourceType,
    name_matches,
)

__all__ = [
    "CLUSTER_NAME",
    "OP_READ",
    "RESOURCE_GROUP",
    "RESOURCE_TOPIC",
    "SUPPORTED",
    "WILDCARD",
    "WILDCARD_PRINCIPAL",
    "AclBinding",
    "AclBindingFilter",
    "AclOperation",
    "AclPermissionType",
    "Authorizer",
    "PatternType",
    "ResourceType",
    "all_operations",
]

# The members every group request's check names: Python 3.11's EnumType.__getattr__ makes
# each `AclOperation.READ` a slow lookup (see app/group/state.py).
OP_READ: Final = AclOperation.READ
RESOURCE_GROUP: Final = ResourceType.GROUP
RESOURCE_TOPIC: Final = ResourceType.TOPIC

# an ALLOW of the key also allows these (Kafka: "implied" operations)
_IMPLIED_BY_ALLOW: Final = {
    Op.DESCRIBE: (Op.DESCRIBE, Op.READ, Op.WRITE, Op.DELETE, Op.ALTER),
    Op.DESCRIBE_CONFIGS: (Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS),
}


class Authorizer:
    """An immutable snapshot of the bindings; `authorize` answers from memory. A new snapshot
    replaces it when the stored ACLs change (SecurityManager), so a decision never mixes two."""

    def __init__(
        self,
        bindings: Iterable[AclBinding],
        super_users: frozenset[str] = frozenset(),
        allow_if_no_acl: bool = False,
    ) -> None:
        self.bindings = tuple(bindings)
        self.super_users = super_users
        self.allow_if_no_acl = allow_if_no_acl
        self._by_type: dict[ResourceType, list[AclBinding]] = {}
        for b in self.bindings:
            self._by_type.setdefault(b.resource_type, []).append(b)
        # decisions repeat (every Heartbeat of a member asks the same): remember them
        self._memo: dict[tuple[str, str, AclOperation, ResourceType, str], bool] = {}

    def authorize(
        self, principal: str, host: str, op: AclOperation, rtype: ResourceType, name: str
    ) -> bool:
        key = (principal, host, op, rtype, name)
        found = self._memo.get(key)
        if found is None:
            found = self._decide(principal, host, op, rtype, name)
            if len(self._memo) >= 100_000:  # bounded: a client naming many resources
                self._memo.clear()
            self._memo[key] = found
        return found

    def _decide(
        self, principal: str, host: str, op: AclOperation, rtype: ResourceType, name: str
    ) -> bool:
        if principal in self.super_users:
            return True
        on_resource = [b for b in self._by_type.get(rtype, ()) if name_matches(b, name)]
        if not on_resource:
            # as Kafka: "no ACL found" means for the resource, whoever the bindings name
            return self.allow_if_no_acl
        matching = [
            b
            for b in on_resource
            if b.principal in (principal, WILDCARD_PRINCIPAL) and b.host in (host, WILDCARD)
        ]
        for b in matching:
            if b.permission == AclPermissionType.DENY and b.operation in (op, Op.ALL):
                return False
        allowing = _IMPLIED_BY_ALLOW.get(op, (op,))
        return any(
            b.permission == AclPermissionType.ALLOW
            and (b.operation == Op.ALL or b.operation in allowing)
            for b in matching
        )

    def authorize_any(
        self, principal: str, host: str, op: AclOperation, rtype: ResourceType
    ) -> bool:
        """Kafka's `authorizeByResourceType`: may the principal do `op` on some resource of
        `rtype`? Yes when an ALLOW binding names one that no DENY binding covers (a DENY of
        "*", of a prefix of it, or of the same literal name)."""
        if principal in self.super_users:
            return True
        bindings = self._by_type.get(rtype, [])
        if not bindings:
            return self.allow_if_no_acl
        mine = [
            b
            for b in bindings
            if b.principal in (principal, WILDCARD_PRINCIPAL) and b.host in (host, WILDCARD)
        ]
        denies = [
            b
            for b in mine
            if b.permission == AclPermissionType.DENY and b.operation in (op, Op.ALL)
        ]
        allowing = _IMPLIED_BY_ALLOW.get(op, (op,))
        for b in mine:
            if b.permission != AclPermissionType.ALLOW:
                continue
            if not (b.operation == Op.ALL or b.operation in allowing):
                continue
            if not any(_covers(d, b) for d in denies):
                return True
        return False

    def authorized_operations(
        self, principal: str, host: str, rtype: ResourceType, name: str
    ) -> int:
        """The 32-bit field of DescribeGroups v3+ and Metadata: bit `op` set when allowed."""
        bits = 0
        for op in SUPPORTED.get(rtype, ()):
            if self.authorize(principal, host, op, rtype, name):
                bits |= 1 << op
        return bits


def _covers(deny: AclBinding, allow: AclBinding) -> bool:
    """Does `deny` cover every resource `allow` names?"""
    if deny.pattern_type == PatternType.LITERAL:
        return deny.resource_name == WILDCARD or (
            allow.pattern_type == PatternType.LITERAL and deny.resource_name == allow.resource_name
        )
    return allow.resource_name.startswith(deny.resource_name)


def all_operations(rtype: ResourceType) -> int:
    """authorized_operations without an authorizer: everything the resource supports."""
    bits = 0
    for op in SUPPORTED.get(rtype, ()):
        bits |= 1 << op
    return bits
