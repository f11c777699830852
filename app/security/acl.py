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

import enum
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermissionType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


WILDCARD: Final = "*"
WILDCARD_PRINCIPAL: Final = "User:*"
CLUSTER_NAME: Final = "kafka-cluster"  # the one CLUSTER resource's name

# The members every group request's check names: Python 3.11's EnumType.__getattr__ makes
# each `AclOperation.READ` a slow lookup (see app/group/state.py).
OP_READ: Final = AclOperation.READ
RESOURCE_GROUP: Final = ResourceType.GROUP
RESOURCE_TOPIC: Final = ResourceType.TOPIC

Op = AclOperation

# What each resource type supports (authorized_operations reports a subset of these)
SUPPORTED: Final[dict[ResourceType, frozenset[AclOperation]]] = {
    ResourceType.GROUP: frozenset({Op.READ, Op.DESCRIBE, Op.DELETE}),
    ResourceType.TOPIC: frozenset(
        {
            Op.READ,
            Op.WRITE,
            Op.CREATE,
            Op.DESCRIBE,
            Op.DELETE,
            Op.ALTER,
            Op.DESCRIBE_CONFIGS,
            Op.ALTER_CONFIGS,
        }
    ),
    ResourceType.CLUSTER: frozenset(
        {
            Op.CREATE,
            Op.CLUSTER_ACTION,
            Op.DESCRIBE_CONFIGS,
            Op.ALTER_CONFIGS,
            Op.IDEMPOTENT_WRITE,
            Op.ALTER,
            Op.DESCRIBE,
        }
    ),
}

# an ALLOW of the key also allows these (Kafka: "implied" operations)
_IMPLIED_BY_ALLOW: Final = {
    Op.DESCRIBE: (Op.DESCRIBE, Op.READ, Op.WRITE, Op.DELETE, Op.ALTER),
    Op.DESCRIBE_CONFIGS: (Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS),
}


@dataclass(frozen=True, slots=True)
class AclBinding:
    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission: AclPermissionType

    def check(self) -> str | None:
        """Why the binding cannot be stored (Kafka's InvalidRequest), None when it can."""
        if self.resource_type not in SUPPORTED:
            return f"resource type {self.resource_type.name} is not one of GROUP, TOPIC, CLUSTER"
        if self.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            return "pattern type must be LITERAL or PREFIXED"
        if self.operation in (Op.ANY, Op.UNKNOWN) or (
            self.operation != Op.ALL and self.operation not in SUPPORTED[self.resource_type]
        ):
            return f"operation {self.operation.name} does not apply to {self.resource_type.name}"
        if self.permission not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
            return "permission must be ALLOW or DENY"
        if not self.resource_name:
            return "the resource name is empty"
        if self.resource_type == ResourceType.CLUSTER and self.resource_name != CLUSTER_NAME:
            return f"the CLUSTER resource is named {CLUSTER_NAME!r}"
        kind, sep, name = self.principal.partition(":")
        if not sep or not kind or not name:
            return f"principal {self.principal!r} is not Type:name (User:alice)"
        if not self.host:
            return "the host is empty (use * for every host)"
        return None


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """What DescribeAcls and DeleteAcls match: None (or ANY) matches every value."""

    resource_type: ResourceType = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission: AclPermissionType = AclPermissionType.ANY

    def matches(self, b: AclBinding) -> bool:
        if self.resource_type != ResourceType.ANY and b.resource_type != self.resource_type:
            return False
        if self.pattern_type == PatternType.MATCH:
            # MATCH: the bindings that would apply to the resource named by the filter
            if self.resource_name is not None and not _name_matches(b, self.resource_name):
                return False
        else:
            if self.pattern_type != PatternType.ANY and b.pattern_type != self.pattern_type:
                return False
            if self.resource_name is not None and b.resource_name != self.resource_name:
                return False
        if self.principal is not None and b.principal != self.principal:
            return False
        if self.host is not None and b.host != self.host:
            return False
        if self.operation != AclOperation.ANY and b.operation != self.operation:
            return False
        return self.permission == AclPermissionType.ANY or b.permission == self.permission

    def check(self) -> str | None:
        if AclOperation.UNKNOWN in (self.operation,) or self.resource_type == ResourceType.UNKNOWN:
            return "the filter has an UNKNOWN value"
        if self.pattern_type == PatternType.UNKNOWN or self.permission == AclPermissionType.UNKNOWN:
            return "the filter has an UNKNOWN value"
        return None


def _name_matches(b: AclBinding, name: str) -> bool:
    if b.pattern_type == PatternType.LITERAL:
        return b.resource_name in (name, WILDCARD)
    return name.startswith(b.resource_name)


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
        on_resource = [b for b in self._by_type.get(rtype, ()) if _name_matches(b, name)]
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

    def authorized_operations(
        self, principal: str, host: str, rtype: ResourceType, name: str
    ) -> int:
        """The 32-bit field of DescribeGroups v3+ and Metadata: bit `op` set when allowed."""
        bits = 0
        for op in SUPPORTED.get(rtype, ()):
            if self.authorize(principal, host, op, rtype, name):
                bits |= 1 << op
        return bits


def all_operations(rtype: ResourceType) -> int:
    """authorized_operations without an authorizer: everything the resource supports."""
    bits = 0
    for op in SUPPORTED.get(rtype, ()):
        bits |= 1 << op
    return bits
