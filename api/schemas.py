"""Request bodies of the admin API (responses are plain JSON documents)."""

from __future__ import annotations

from pydantic import BaseModel, Field


class StaticMembersIn(BaseModel):
    group_instance_ids: list[str] = Field(
        description="group.instance.id of each static member expected to join", max_length=10_000
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
    offsets: list[OffsetIn] = Field(min_length=1, max_length=100_000)


class TopicIn(BaseModel):
    name: str = Field(min_length=1, max_length=249, pattern=r"^[a-zA-Z0-9._-]+$")
    partitions: int = Field(ge=1, le=100_000)


class TopicPatch(BaseModel):
    partitions: int = Field(ge=1, le=100_000)
