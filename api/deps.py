"""Who is calling and what they may do.

Authentication: the bearer token (COORD_ADMIN_TOKEN, full rights, principal "admin-token"),
or HTTP Basic with a SCRAM user's name and password (principal `User:<name>`), authorized by
the same ACLs as the Kafka port with the client's address as the host. Without a token and
without Basic credentials the API is open (the node refuses that on a non-loopback address
unless COORD_ADMIN_ALLOW_INSECURE=true: cli/serve.py).

Every mutation with a body must say `Content-Type: application/json`, which a cross-site form
or a no-CORS fetch cannot send: a browser holding Basic credentials cannot be made to change
anything from another site (a body-less DELETE needs no type: no form or no-CORS fetch can send
a DELETE at all). Every 401 and 403 writes one audit line here; every mutation
writes one in `api.app.AuditMutations`.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hmac
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Any, Final

from fastapi import Depends, HTTPException, Request, Security, status
from fastapi.openapi.models import HTTPBase as HTTPBaseModel
from fastapi.openapi.models import HTTPBearer as HTTPBearerModel
from fastapi.security.base import SecurityBase

from api import peers
from api.sessions import ConsoleSessions
from app.admin import AdminService, SecurityAdmin
from app.runtime.runtime import now_ms
from app.security.acl import AclOperation, ResourceType
from app.security.audit import audit
from app.security.manager import SecurityManager
from app.security.principal import user
from app.security.throttle import FailedLogins

MUTATIONS: Final = frozenset({"POST", "PUT", "PATCH", "DELETE"})
TOKEN_PRINCIPAL: Final = "admin-token"
# the console's session (api/ui): a random id this node maps to the caller who logged in
SESSION_COOKIE: Final = "coordinator_session"
ANONYMOUS: Final = "anonymous"  # no token configured, no credentials sent: today's open API
# one Basic check at a time hashes (PBKDF2): a flood of wrong passwords on the admin port
# must not take both security threads from the Kafka port's SASL handshakes
_BASIC_CHECKS: Final = 1


@dataclass(frozen=True, slots=True)
class Caller:
    principal: str
    source: str  # the client's address (the ACL host)
    full: bool  # the bearer token, or an API without one: every right
    peer: bool = False  # another node asking on this caller's behalf (api/peers.py)


def admin_service(request: Request) -> AdminService:
    service: AdminService = request.app.state.admin
    return service


def security_of(request: Request) -> SecurityManager | None:
    security: SecurityManager | None = request.app.state.security
    return security


def client_host(request: Request) -> str:
    return request.client.host if request.client else "unknown"


def _what(request: Request) -> str:
    return f"{request.method} {request.url.path}"


def _challenge(request: Request) -> str:
    if security_of(request) is None:
        return "Bearer"
    return 'Bearer, Basic realm="coordinator", charset="UTF-8"'


def _unauthorized(request: Request, reason: str, principal: str | None = None) -> HTTPException:
    audit(
        "authenticate",
        "failure",
        principal=principal,
        source=client_host(request),
        resource=_what(request),
        api="admin",
        reason=reason,
    )
    request.state.audited = True
    how = "a bearer token (COORD_ADMIN_TOKEN)"
    if security_of(request) is not None:
        how += " or HTTP Basic with a SCRAM user's name and password"
    return HTTPException(
        status.HTTP_401_UNAUTHORIZED,
        detail=f"{reason}: this API needs {how}",
        headers={"WWW-Authenticate": _challenge(request)},
    )


def _basic(value: str) -> tuple[str, str] | None:
    try:
        decoded = base64.b64decode(value, validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    name, sep, password = decoded.partition(":")
    if not sep or not name:
        return None
    return name, password


def _limiter(request: Request) -> asyncio.Semaphore:
    sem: asyncio.Semaphore | None = getattr(request.app.state, "basic_checks", None)
    if sem is None:
        sem = request.app.state.basic_checks = asyncio.Semaphore(_BASIC_CHECKS)
    return sem


class _Scheme(SecurityBase):
    """Names a scheme in the OpenAPI document (either one will do); `authenticate` reads the
    header itself, so a malformed one still gets its audit line and the same 401."""

    def __init__(self, model: HTTPBaseModel, name: str) -> None:
        self.model = model
        self.scheme_name = name

    async def __call__(self) -> None:
        return None


_BEARER_DOC = _Scheme(HTTPBearerModel(description="COORD_ADMIN_TOKEN: every right"), "HTTPBearer")
_BASIC_DOC = _Scheme(
    HTTPBaseModel(scheme="basic", description="a SCRAM user, held to the ACLs"), "HTTPBasic"
)


async def authenticate(
    request: Request,
    _bearer_scheme: Annotated[None, Security(_BEARER_DOC)],
    _basic_scheme: Annotated[None, Security(_BASIC_DOC)],
) -> Caller:
    """The caller of this request, or 401 (with one audit line)."""
    known: Caller | None = getattr(request.state, "caller", None)
    if known is not None:
        return known
    route = request.scope.get("route")
    request.state.action = getattr(route, "name", None)
    token: str | None = request.app.state.token
    security = security_of(request)
    scheme, _, value = request.headers.get("authorization", "").strip().partition(" ")
    scheme, value = scheme.lower(), value.strip()
    source = client_host(request)
    caller: Caller | None = None
    session = _session(request) if not scheme else None
    if session is not None:
        caller = Caller(session.principal, source, full=session.full)
    elif scheme == "basic":
        if security is None:
            raise _unauthorized(request, "HTTP Basic is not enabled on this node")
        pair = _basic(value)
        if pair is None:
            raise _unauthorized(request, "malformed Basic credentials")
        name, password = pair
        await login(request, user(name), password_matches(security, name, password))
        caller = Caller(user(name), source, full=False)
    elif scheme == peers.SCHEME:
        claim = peers.verify(await admin_service(request).peer_key(), value, now_ms())
        if claim is None or request.state.action != peers.LIST_GROUPS:
            raise _unauthorized(request, "invalid, expired or misused node credential")
        caller = Caller(claim.principal, claim.source, full=claim.full, peer=True)
    elif token:
        given = value if scheme == "bearer" else ""
        if not given:  # no guess: nothing to count against the source
            raise _unauthorized(request, "missing or wrong bearer token")
        check = token_matches(token, given)
        await login(request, TOKEN_PRINCIPAL, check, "missing or wrong bearer token")
        caller = Caller(TOKEN_PRINCIPAL, source, full=True)
    else:
        caller = Caller(ANONYMOUS, source, full=True)
    request.state.caller = caller
    return caller


async def cluster_groups(
    request: Request, caller: Caller, state: str | None
) -> list[dict[str, Any]]:
    """The groups of every live node, the others asked on `caller`'s behalf (api/peers.py)."""
    fan_out: peers.Peers = request.app.state.peers
    claim = peers.Claim(caller.principal, caller.source, caller.full)
    return await fan_out.list_groups(claim, state)


def token_matches(token: str, given: str) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return hmac.compare_digest(given.encode(), token.encode())  # constant time

    return check


def password_matches(
    security: SecurityManager, name: str, password: str
) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return await security.verify_password(name, password)

    return check


def logins_of(request: Request) -> FailedLogins:
    logins: FailedLogins = request.app.state.logins
    return logins


async def login(
    request: Request,
    principal: str,
    check: Callable[[], Awaitable[bool]],
    reason: str = "wrong user name or password",
) -> None:
    """One authentication of `principal` from this request's address, as the Kafka port
    runs them: after that pair's failed-login wait and one at a time (app/security/throttle),
    the hashing one request at a time, a failure answered late
    (COORD_FAILED_AUTHENTICATION_DELAY_MS) and audited with the principal it tried (401)."""
    key = (principal, client_host(request))
    logins = logins_of(request)
    async with logins.attempt(key), _limiter(request):
        ok = await check()
    if ok:
        logins.succeeded(key)
        return
    delay = logins.failed(key)
    error = _unauthorized(request, reason, principal=principal)
    await asyncio.sleep(delay)
    raise error


def _session(request: Request) -> Caller | None:
    """The console session named by the request's cookie, while it lasts."""
    sid = request.cookies.get(SESSION_COOKIE)
    sessions: ConsoleSessions[Caller] | None = getattr(request.app.state, "ui_sessions", None)
    if not sid or sessions is None:
        return None
    return sessions.get(sid, security_of(request), client_host(request))


def has_body(request: Request) -> bool:
    """Whether the request carries a body: a chunked one, or a Content-Length other than 0."""
    headers = request.headers
    if "transfer-encoding" in headers:
        return True
    return headers.get("content-length", "0").strip() != "0"


def json_only(request: Request) -> None:
    """415 for a mutation that is not `application/json` (cross-site requests cannot be).

    A DELETE without a body passes: no form can send a DELETE, and a cross-site fetch of one
    needs a preflight the Origin check refuses (api/guards.py), so `curl -X DELETE` works as
    an operator expects. A DELETE with a body still needs JSON."""
    if request.method not in MUTATIONS:
        return
    if request.method == "DELETE" and not has_body(request):
        return
    media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if media != "application/json":
        raise HTTPException(
            status.HTTP_415_UNSUPPORTED_MEDIA_TYPE,
            detail=f"{request.method} needs Content-Type: application/json "
            f"(got {media or 'none'}); cross-site requests are refused",
        )


CallerDep = Annotated[Caller, Depends(authenticate)]


class Access:
    """The ACL checks of one request: `require` answers 403 (and audits it) when denied."""

    def __init__(self, request: Request, caller: Caller) -> None:
        self.request = request
        self.caller = caller
        self.security = security_of(request)

    def allowed(self, op: AclOperation, rtype: ResourceType, name: str) -> bool:
        if self.caller.full or self.security is None:
            return True
        return self.security.authorize(
            self.caller.principal, self.caller.source, op, rtype, name, log_denial=False
        )

    def require(self, op: AclOperation, rtype: ResourceType, name: str) -> None:
        resource = f"{rtype.name}:{name}"
        if getattr(self.request.state, "resource", None) is None:
            self.request.state.resource = resource  # the mutation's audit line names it
        if self.allowed(op, rtype, name):
            return
        audit(
            op.name,
            "denied",
            principal=self.caller.principal,
            source=self.caller.source,
            resource=resource,
            api="admin",
            request=_what(self.request),
        )
        self.request.state.audited = True
        raise HTTPException(
            status.HTTP_403_FORBIDDEN,
            detail=f"{self.caller.principal} is not authorized to {op.name} {rtype.name} {name!r}",
        )

    def note(self, resource: str | None = None, **detail: Any) -> None:
        """What the mutation's audit line adds (never a password)."""
        if resource is not None:
            self.request.state.resource = resource
        current: dict[str, Any] = getattr(self.request.state, "detail", None) or {}
        current.update(detail)
        self.request.state.detail = current


def access(request: Request, caller: CallerDep) -> Access:
    return Access(request, caller)


def security_admin(request: Request) -> SecurityAdmin:
    """ACLs and users (a 503 before anything else when the node runs without them)."""
    return admin_service(request).security_admin()


AdminDep = Annotated[AdminService, Depends(admin_service)]
SecurityAdminDep = Annotated[SecurityAdmin, Depends(security_admin)]
AccessDep = Annotated[Access, Depends(access)]
# every route but the probes: who is calling, and mutations in JSON only
AdminAuth = Depends(authenticate)
JsonOnly = Depends(json_only)
PROTECTED = [AdminAuth, JsonOnly]
