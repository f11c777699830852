"""Request bodies of the admin API (responses are plain JSON documents)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, SecretStr, field_validator

from app.security.sasl import MAX_ITERATIONS, MIN_ITERATIONS


class StaticMembersIn(BaseModel):
    group_instance_ids: list[str] = Field(
        description="group.instance.id of each static member expected to join (at most "
        "COORD_MAX_REQUEST_ELEMENTS, 10,000 by default)"
    )
    expansion_timeout_ms: int = Field(
        default=60_000,
        gt=0,
        le=3_600_000,
        description="how long, from the first registered JoinGroup, the join phase waits for "
        "the rest of the batch",
    )


class RebalanceIn(BaseModel):
    reason: str = Field(default="requested by operator", max_length=255)


class OffsetIn(BaseModel):
    topic: str = Field(min_length=1, max_length=249)
    partition: int = Field(ge=0, le=1_000_000)
    offset: int = Field(ge=0, le=2**63 - 1)


class OffsetsIn(BaseModel):
    offsets: list[OffsetIn] = Field(
        min_length=1, description="at most COORD_MAX_REQUEST_ELEMENTS (10,000 by default)"
    )


class TopicIn(BaseModel):
    name: str = Field(min_length=1, max_length=249, pattern=r"^[a-zA-Z0-9._-]+$")
    partitions: int = Field(ge=1, le=100_000)


class TopicPatch(BaseModel):
    partitions: int = Field(ge=1, le=100_000)


# ==== ACLs (Kafka's AclBinding and AclBindingFilter, by name) =================================

ResourceTypeName = Literal["GROUP", "TOPIC", "CLUSTER", "TRANSACTIONAL_ID"]
PatternTypeName = Literal["LITERAL", "PREFIXED"]
OperationName = Literal[
    "ALL",
    "READ",
    "WRITE",
    "CREATE",
    "DELETE",
    "ALTER",
    "DESCRIBE",
    "CLUSTER_ACTION",
    "DESCRIBE_CONFIGS",
    "ALTER_CONFIGS",
    "IDEMPOTENT_WRITE",
]
PermissionName = Literal["ALLOW", "DENY"]


def _upper(value: Any) -> Any:
    return value.strip().upper() if isinstance(value, str) else value


class AclIn(BaseModel):
    """One ACL binding: `principal` may (ALLOW) or may not (DENY) do `operation` from `host`
    on the resources `resource_name` names (LITERAL: that name or "*"; PREFIXED: a prefix)."""

    resource_type: ResourceTypeName
    resource_name: str = Field(min_length=1, max_length=1024, examples=["team-"])
    pattern_type: PatternTypeName = "LITERAL"
    principal: str = Field(min_length=3, max_length=1024, examples=["User:alice"])
    host: str = Field(default="*", min_length=1, max_length=255)
    operation: OperationName
    permission: PermissionName = "ALLOW"

    _names = field_validator(
        "resource_type", "pattern_type", "operation", "permission", mode="before"
    )(_upper)


class AclFilterIn(BaseModel):
    """Which bindings to list or delete: every field left out (or ANY) matches every value;
    pattern_type MATCH finds the bindings that apply to `resource_name`."""

    resource_type: Literal["ANY", "GROUP", "TOPIC", "CLUSTER", "TRANSACTIONAL_ID"] = "ANY"
    resource_name: str | None = Field(default=None, max_length=1024)
    pattern_type: Literal["ANY", "MATCH", "LITERAL", "PREFIXED"] = "ANY"
    principal: str | None = Field(default=None, max_length=1024)
    host: str | None = Field(default=None, max_length=255)
    operation: Literal["ANY", OperationName] = "ANY"
    permission: Literal["ANY", "ALLOW", "DENY"] = "ANY"

    _names = field_validator(
        "resource_type", "pattern_type", "operation", "permission", mode="before"
    )(_upper)


# ==== SCRAM users ================================================================================


class UserCredentialIn(BaseModel):
    """A SCRAM credential made from a password; only the salted keys are stored."""

    mechanism: Literal["SCRAM-SHA-256", "SCRAM-SHA-512"] = "SCRAM-SHA-512"
    password: SecretStr = Field(min_length=1, max_length=1024)
    iterations: int = Field(default=MIN_ITERATIONS, ge=MIN_ITERATIONS, le=MAX_ITERATIONS)

    _mechanism = field_validator("mechanism", mode="before")(_upper)
