"""Dependencies shared by the routers: the admin facade and the bearer-token check."""

from __future__ import annotations

import hmac
from typing import Annotated

from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from app.admin import AdminService

_bearer = HTTPBearer(auto_error=False)


def admin_service(request: Request) -> AdminService:
    service: AdminService = request.app.state.admin
    return service


def require_token(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> None:
    """With COORD_ADMIN_TOKEN set, every call needs `Authorization: Bearer <token>`."""
    token: str | None = request.app.state.token
    if not token:
        return
    given = credentials.credentials if credentials is not None else ""
    if not hmac.compare_digest(given.encode(), token.encode()):  # constant time
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            detail="missing or wrong bearer token (COORD_ADMIN_TOKEN)",
            headers={"WWW-Authenticate": "Bearer"},
        )


AdminDep = Annotated[AdminService, Depends(admin_service)]
AdminAuth = Depends(require_token)
