"""The operator console at /ui: server-rendered pages over the same read model as the REST API
(AdminService), behind the same authentication, refreshing themselves every two seconds.

Pages: /ui/groups (filter by state, search by id), /ui/groups/{id} (members with decoded
subscriptions and assignments, registrations, offsets, actions, the rebalance timeline),
/ui/cluster (nodes, log partitions). Actions call the REST API from the page with
`Content-Type: application/json`, after a confirmation step.

Browsers cannot send a bearer token on a page load, so /ui/login exchanges the token (or a SCRAM
user's name and password) for a session cookie: random, HttpOnly, SameSite=Strict, kept in this
node's memory for COOKIE_TTL_S. The cookie authenticates like the credentials it replaced (same
principal, same ACLs), on this node only. Static assets are in api/ui/static, shipped with the
package; nothing is fetched from elsewhere at run time.
"""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from jinja2 import Environment, FileSystemLoader, select_autoescape
from pydantic import BaseModel, Field

from api.deps import (
    SESSION_COOKIE,
    TOKEN_PRINCIPAL,
    Access,
    Caller,
    authenticate,
    client_host,
    cluster_groups,
    login,
    password_matches,
    security_of,
    token_matches,
)
from api.errors import status_of
from api.sessions import ConsoleSessions
from api.ui import views
from app.admin import AdminError, AdminService, NotFound
from app.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from app.security.audit import audit
from app.security.principal import user

HERE = Path(__file__).parent
COOKIE_TTL_S = 8 * 3600
REFRESH_MS = 2000
STATES = ("Stable", "PreparingRebalance", "CompletingRebalance", "Empty")
MAX_ROWS = 500  # groups listed on one page; the search box finds the others

templates = Environment(
    loader=FileSystemLoader(HERE / "templates"), autoescape=select_autoescape(["html"])
)
router = APIRouter(prefix="/ui", include_in_schema=False)
static = StaticFiles(directory=HERE / "static")


def _ago(ms: int | None) -> str:
    if not ms or ms < 0:
        return "—"
    return f"{views.duration(time.time() * 1000 - ms)} ago"


def _when(ms: int | None) -> str:
    if not ms or ms < 0:
        return "—"
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _partitions(view: dict[str, Any] | None, key: str = "partitions") -> str:
    if not view or key not in view:
        return "—" if not view else f"{view.get('size', 0)} bytes"
    parts = [f"{t['topic']}: {', '.join(map(str, t['partitions']))}" for t in view[key]]
    return "; ".join(parts) or "none"


def _segment(value: str) -> str:
    """A group id as one path segment: "/" and "%" escaped too."""
    return quote(value, safe="")


templates.filters.update(ago=_ago, when=_when, partitions=_partitions, quote=_segment,
                         amount=views.amount, source=views.offset_source)  # fmt: skip


def page(request: Request, name: str, status: int = 200, **context: Any) -> Response:
    """The whole page, or only its <main> for the page's own refresh (X-UI-Fragment)."""
    fragment = request.headers.get("x-ui-fragment") == "1"
    context.update(fragment=fragment, refresh_ms=REFRESH_MS, path=request.url.path)
    html = templates.get_template(name).render(**context)
    return HTMLResponse(html, status_code=status)


async def caller_or_login(request: Request) -> Caller | Response:
    try:
        return await authenticate(request, None, None)
    except HTTPException as e:
        if e.status_code != 401:
            raise
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return RedirectResponse(f"/ui/login?next={quote(target)}", status_code=303)


def admin_of(request: Request) -> AdminService:
    service: AdminService = request.app.state.admin
    return service


def error_page(request: Request, status: int, title: str, message: str) -> Response:
    return page(request, "error.html", status=status, title=title, message=message)


@router.get("", include_in_schema=False)
async def home() -> Response:
    return RedirectResponse("/ui/groups", status_code=303)


@router.get("/login", response_class=HTMLResponse)
async def login_page(request: Request, next: str = "/ui/groups") -> Response:
    return page(
        request,
        "login.html",
        next=next if next.startswith("/ui") else "/ui/groups",
        basic=security_of(request) is not None,
        token=request.app.state.token is not None,
    )


class SessionIn(BaseModel):
    token: str | None = Field(default=None, max_length=4096)
    user: str | None = Field(default=None, max_length=256)
    password: str | None = Field(default=None, max_length=4096)


@router.post("/session", status_code=204)
async def open_session(body: SessionIn, request: Request) -> Response:
    """Exchange the token or a user's password for a session cookie (JSON only, as every
    mutation: a cross-site form cannot log a browser in). Checked, throttled and audited as
    every other login (api.deps.login)."""
    source = client_host(request)
    token: str | None = request.app.state.token
    security = security_of(request)
    caller: Caller | None = None
    name: str | None = None
    if body.user is not None and security is not None:
        await login(
            request, user(body.user), password_matches(security, body.user, body.password or "")
        )
        caller, name = Caller(user(body.user), source, full=False), body.user
    elif body.token is not None and token is not None:
        await login(request, TOKEN_PRINCIPAL, token_matches(token, body.token), "wrong token")
        caller = Caller(TOKEN_PRINCIPAL, source, full=True)
    if caller is None:
        raise HTTPException(401, detail="wrong token, user name or password")
    sessions: ConsoleSessions[Caller] = request.app.state.ui_sessions
    sid = sessions.open(caller, name, security)
    audit("authenticate", "success", principal=caller.principal, source=source, api="admin",
          resource=f"{request.method} {request.url.path}", mechanism="console session")  # fmt: skip
    request.state.audited = True
    response = Response(status_code=204)
    response.set_cookie(
        SESSION_COOKIE, sid, max_age=COOKIE_TTL_S, httponly=True, samesite="strict",
        secure=request.url.scheme == "https", path="/",
    )  # fmt: skip
    return response


@router.post("/logout", status_code=204)
async def close_session(request: Request) -> Response:
    request.app.state.ui_sessions.close(request.cookies.get(SESSION_COOKIE, ""))
    response = Response(status_code=204)
    response.delete_cookie(SESSION_COOKIE, path="/")
    return response


@router.get("/groups", response_class=HTMLResponse)
async def groups_page(request: Request, state: str = "", q: str = "") -> Response:
    caller = await caller_or_login(request)
    if isinstance(caller, Response):
        return caller
    access = Access(request, caller)
    wanted = state if state in STATES else None
    groups = await cluster_groups(request, caller, wanted)
    if not access.allowed(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        groups = [
            g for g in groups
            if access.allowed(AclOperation.DESCRIBE, ResourceType.GROUP, g["group_id"])
        ]  # fmt: skip
    # the banner counts every group the caller may see, whatever the search hides
    split = views.split_groups(groups)
    if q:
        groups = [g for g in groups if q.lower() in g["group_id"].lower()]
    # one page is bounded whatever the cluster holds: the in-memory summaries, no per-group read
    shown = groups[:MAX_ROWS]
    return page(request, "groups.html", groups=shown, total=len(groups), state=state, q=q,
                states=STATES, caller=caller, max_rows=MAX_ROWS, split=split)  # fmt: skip


async def _timeline_or_empty(admin: AdminService, group_id: str) -> list[dict[str, Any]]:
    try:
        return await admin.group_timeline(group_id)
    except AdminError:
        return []


@router.get("/groups/{group_id}", response_class=HTMLResponse)
async def group_page(request: Request, group_id: str) -> Response:
    caller = await caller_or_login(request)
    if isinstance(caller, Response):
        return caller
    group_id = unquote(group_id)  # a segment as api.app.RoutedOnRawPath routes it
    access = Access(request, caller)
    if not access.allowed(AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
        return error_page(request, 403, "Not authorized",
                          f"{caller.principal} may not DESCRIBE group {group_id}.")  # fmt: skip
    admin = admin_of(request)
    try:
        g = admin.describe_group(group_id)
    except AdminError as e:
        title = "Unknown group" if isinstance(e, NotFound) else "Group unavailable"
        return error_page(request, status_of(e), title, e.message)
    if not access.caller.full:
        views.restrict(
            g, lambda topic: access.allowed(AclOperation.DESCRIBE, ResourceType.TOPIC, topic)
        )
    marks = await _timeline_or_empty(admin, group_id)
    return page(request, "group.html", **group_context(g, marks), caller=caller)


def group_context(g: dict[str, Any], marks: list[dict[str, Any]]) -> dict[str, Any]:
    """What group.html renders of a described group (AdminService.describe_group) and its
    timeline marks."""
    lag = g.get("lag") or {}
    return {
        "g": g, "marks": marks[-200:], "plot": _plot(marks[-60:]), "lag": lag,
        "lag_rows": views.lag_rows(g), "spark": views.sparkline(lag.get("history") or []),
    }  # fmt: skip


def _plot(marks: list[dict[str, Any]]) -> dict[str, Any]:
    """An SVG bar per mark: height = rebalance duration (or a small tick for marks without one),
    colour by kind."""
    width, height, pad = 720, 140, 24
    if not marks:
        return {"bars": [], "width": width, "height": height, "max_ms": 0}
    longest = max((m["duration_ms"] or 0) for m in marks) or 1
    step = (width - 2 * pad) / max(len(marks), 1)
    bars = []
    for i, m in enumerate(marks):
        d = m["duration_ms"] or 0
        h = max(4.0, (height - 2 * pad) * d / longest)
        bars.append({
            "x": pad + i * step + 1, "y": height - pad - h, "w": max(step - 2, 2), "h": h,
            "kind": m["kind"], "label": f"gen {m['generation']}: {m['kind']} — {m['reason']}"
            + (f" ({d} ms)" if m["duration_ms"] is not None else ""),
        })  # fmt: skip
    return {"bars": bars, "width": width, "height": height, "max_ms": longest}


@router.get("/cluster", response_class=HTMLResponse)
async def cluster_page(request: Request) -> Response:
    caller = await caller_or_login(request)
    if isinstance(caller, Response):
        return caller
    access = Access(request, caller)
    if not access.allowed(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        return error_page(request, 403, "Not authorized",
                          f"{caller.principal} may not DESCRIBE the cluster.")  # fmt: skip
    return page(request, "cluster.html", c=admin_of(request).cluster_view(), caller=caller)
