"""The one place an outcome becomes an HTTP answer.

The admin service raises typed outcomes in Kafka's terms (app/admin/errors.py); here each
class gets its status, NotCoordinator its redirect, and a request FastAPI cannot validate its
422 without echoing the input.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any, Final
from urllib.parse import quote

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, RedirectResponse, Response

from app.admin.errors import (
    AdminError,
    Conflict,
    InvalidGroupId,
    InvalidRequest,
    NotCoordinator,
    NotFound,
    TooLarge,
    Unavailable,
)

STATUS: Final[dict[type[AdminError], int]] = {
    InvalidGroupId: 400,
    InvalidRequest: 422,
    NotFound: 404,
    Conflict: 409,
    TooLarge: 413,
    Unavailable: 503,
}


def status_of(error: AdminError) -> int:
    """The status of the most specific class of `error` the table names."""
    for cls in type(error).__mro__:
        if cls in STATUS:
            return STATUS[cls]
    return 500


def raw_path(scope: MutableMapping[str, Any]) -> str:
    raw = scope.get("raw_path")
    return raw.decode("latin-1") if raw else quote(scope["path"])


async def admin_error(_: Request, exc: AdminError) -> JSONResponse:
    return JSONResponse({"detail": exc.message}, status_code=status_of(exc))


async def not_coordinator(request: Request, exc: NotCoordinator) -> Response:
    """307 to the owner (the method and body kept): exc.admin_url is what the owner registered
    (COORD_ADVERTISED_ADMIN_URL or a concrete listen address), never anything the request
    said."""
    if not exc.admin_url:
        return JSONResponse(
            {"detail": f"owned by node {exc.node_id}, whose admin URL is unknown"},
            status_code=503,
        )
    # the path exactly as the client sent it: decoding it here and again on the next node
    # would turn group "a%61" into "aa"
    target = exc.admin_url.rstrip("/") + raw_path(request.scope)
    if request.url.query:
        target += "?" + request.url.query
    request.state.detail = {"location": target}
    return RedirectResponse(target, status_code=307)


async def invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
    # loc and msg only: the input (a password, say) is never echoed
    problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
    return JSONResponse({"detail": problems or "invalid request"}, status_code=422)


def install(app: FastAPI) -> None:
    app.add_exception_handler(AdminError, admin_error)  # type: ignore[arg-type]
    app.add_exception_handler(NotCoordinator, not_coordinator)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, invalid)  # type: ignore[arg-type]
