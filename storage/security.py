"""The security model's values as the store keeps them: ACL bindings and SCRAM credentials.

The codes are the wire's (AclOperation, ResourceType, PatternType, AclPermissionType), so a
stored binding is exactly what CreateAcls carried. A binding is (resource type, resource name,
pattern type) + (principal, host, operation, permission); a filter matches bindings as
DescribeAcls and DeleteAcls do. The authorizer that decides with them is app/security/acl.py,
the SCRAM exchange app/security/sasl.py.
"""

from __future__ import annotations

import enum
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
    # a transactional producer's id (the gateway checks it on relayed transaction requests)
    ResourceType.TRANSACTIONAL_ID: frozenset({Op.DESCRIBE, Op.WRITE}),
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
            kinds = ", ".join(t.name for t in SUPPORTED)
            return f"resource type {self.resource_type.name} is not one of {kinds}"
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
            if self.resource_name is not None and not name_matches(b, self.resource_name):
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


def name_matches(b: AclBinding, name: str) -> bool:
    if b.pattern_type == PatternType.LITERAL:
        return b.resource_name in (name, WILDCARD)
    return name.startswith(b.resource_name)


@dataclass(frozen=True, slots=True)
class ScramCredential:
    user: str
    mechanism: str  # "SCRAM-SHA-256" | "SCRAM-SHA-512"
    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes
