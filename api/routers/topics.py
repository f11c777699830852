"""/topics: the topic registry clients see in Metadata."""

from __future__ import annotations

from fastapi import APIRouter

from api.deps import AdminAuth, AdminDep
from api.schemas import TopicIn, TopicPatch

router = APIRouter(prefix="/topics", tags=["topics"], dependencies=[AdminAuth])


@router.get("")
async def list_topics(admin: AdminDep) -> dict[str, int]:
    return admin.topics()


@router.post("", status_code=201)
async def create_topic(body: TopicIn, admin: AdminDep) -> dict[str, int]:
    return await admin.create_topic(body.name, body.partitions)


@router.patch("/{name}")
async def grow_topic(name: str, body: TopicPatch, admin: AdminDep) -> dict[str, int]:
    return await admin.grow_topic(name, body.partitions)
