"""/topics: the topic registry clients see in Metadata.

As Kafka: listing shows the topics the caller may DESCRIBE; creating one needs CLUSTER CREATE
or TOPIC CREATE on its name; adding partitions needs TOPIC ALTER (CreatePartitions)."""

from __future__ import annotations

from urllib.parse import unquote

from fastapi import APIRouter

from api.deps import PROTECTED, AccessDep, AdminDep
from api.schemas import TopicIn, TopicPatch
from app.security.acl import CLUSTER_NAME, AclOperation, ResourceType

router = APIRouter(prefix="/topics", tags=["topics"], dependencies=PROTECTED)


@router.get("")
async def list_topics(admin: AdminDep, access: AccessDep) -> dict[str, int]:
    return {
        name: n
        for name, n in admin.topics().items()
        if access.allowed(AclOperation.DESCRIBE, ResourceType.TOPIC, name)
    }


@router.post("", status_code=201)
async def create_topic(body: TopicIn, admin: AdminDep, access: AccessDep) -> dict[str, int]:
    if access.allowed(AclOperation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME):
        access.note(resource=f"TOPIC:{body.name}")
    else:
        access.require(AclOperation.CREATE, ResourceType.TOPIC, body.name)
    access.note(partitions=body.partitions)
    return await admin.create_topic(body.name, body.partitions)


@router.patch("/{name}")
async def grow_topic(
    name: str, body: TopicPatch, admin: AdminDep, access: AccessDep
) -> dict[str, int]:
    topic = unquote(name)
    access.require(AclOperation.ALTER, ResourceType.TOPIC, topic)
    access.note(partitions=body.partitions)
    return await admin.grow_topic(topic, body.partitions)
