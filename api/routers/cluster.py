"""/cluster, /cluster/nodes, and the probes /healthz, /readyz, /metrics (no authentication:
they hold no secrets, and probes and scrapers carry no credentials)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from api.deps import PROTECTED, AccessDep, AdminDep
from app.security.acl import CLUSTER_NAME, AclOperation, ResourceType

router = APIRouter(tags=["cluster"])


@router.get("/healthz")
async def healthz(request: Request) -> dict[str, Any]:
    return {"status": "ok", "node_id": request.app.state.admin.node.node_id}


@router.get("/readyz")
async def readyz(admin: AdminDep) -> JSONResponse:
    body = admin.readiness()
    return JSONResponse(body, status_code=200 if body["ready"] else 503)


@router.get("/metrics")
async def metrics(admin: AdminDep) -> Response:
    return Response(generate_latest(admin.node.metrics.registry), media_type=CONTENT_TYPE_LATEST)


@router.get("/cluster", dependencies=PROTECTED)
async def cluster(admin: AdminDep, access: AccessDep) -> dict[str, Any]:
    access.require(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME)
    return admin.cluster_view()


@router.get("/cluster/nodes", dependencies=PROTECTED)
async def cluster_nodes(admin: AdminDep) -> list[dict[str, Any]]:
    """The live nodes and their registered admin URLs, to any authenticated caller (as Kafka's
    Metadata lists the brokers): the CLI sends its credentials only to these."""
    return admin.nodes()


@router.get("/cluster/upstream-groups", dependencies=PROTECTED)
async def upstream_groups(admin: AdminDep, access: AccessDep) -> list[str]:
    """Gateway mode: every group id the upstream's own coordinators know (import --all)."""
    access.require(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME)
    return await admin.upstream_groups()
