"""ACL and SCRAM credential administration over the Kafka protocol, as Kafka answers them.

DescribeAcls (29), CreateAcls (30) and DeleteAcls (31) need CLUSTER DESCRIBE / ALTER (Kafka's
`AclApis`); without an authorizer (COORD_AUTHORIZER=none) they answer SECURITY_DISABLED.
DescribeUserScramCredentials (50) and AlterUserScramCredentials (51) need CLUSTER DESCRIBE /
ALTER and validate as Kafka's `ScramImage.describe` and `ScramControlManager.alterCredentials`
do. Reads go to the shared database (what every node enforces within a second); after a change
this node reloads its snapshot at once, so its next request already sees it. Every change is
one audit line (never a salt, key or password).
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Iterable, Sequence
from typing import Any, Final, TypeVar

from kio.schema.errors import ErrorCode

from app.group.messages import Error
from app.kafka.codec import build, error_code, response_class
from app.kafka.context import Api, HandlerResult, RequestContext
from app.security.acl import (
    CLUSTER_NAME,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from app.security.audit import audit
from app.security.manager import SecurityManager
from app.security.sasl import (
    MAX_ITERATIONS,
    MECHANISM_NAMES,
    MIN_ITERATIONS,
    CredentialRejected,
    ScramCredential,
    credential_from_salted_password,
)

log = logging.getLogger(__name__)

E = TypeVar("E", bound=enum.IntEnum)

DESCRIBE_ACLS: Final = 29
CREATE_ACLS: Final = 30
DELETE_ACLS: Final = 31
DESCRIBE_USER_SCRAM_CREDENTIALS: Final = 50
ALTER_USER_SCRAM_CREDENTIALS: Final = 51

# Kafka's messages (AclApis, Errors, ScramImage, ScramControlManager)
NO_AUTHORIZER: Final = "No Authorizer is configured on the broker"
CLUSTER_DENIED: Final = "Cluster authorization failed."
NO_SECURITY: Final = "Security features are disabled."
DESCRIBE_DUPLICATE_USER: Final = (
    "Cannot describe SCRAM credentials for the same user twice in a single request: "
)
DESCRIBE_UNKNOWN_USER: Final = "Attempt to describe a user credential that does not exist: "
ALTER_TWICE: Final = "A user credential cannot be altered twice in the same request"
DELETE_UNKNOWN: Final = "Attempt to delete a user credential that does not exist"
EMPTY_USER: Final = "Username must not be empty"
UNKNOWN_MECHANISM: Final = "Unknown SCRAM mechanism"
TOO_FEW_ITERATIONS: Final = f"Too few iterations (at least {MIN_ITERATIONS})"
TOO_MANY_ITERATIONS: Final = f"Too many iterations (at most {MAX_ITERATIONS})"

# (error code, message): one result's outcome
Outcome = tuple[int, str | None]
OK: Final[Outcome] = (Error.NONE, None)


def _enum(cls: type[E], code: int) -> E:
    """A wire code as the enum; codes it does not know are UNKNOWN (0), as Kafka's fromCode."""
    try:
        return cls(code)
    except ValueError:
        return cls(0)


def _acl_manager(ctx: RequestContext) -> SecurityManager | None:
    """The manager when the ACL authorizer is on; None: Kafka's "no authorizer configured"."""
    security = ctx.security
    return security if security is not None and security.acl_enabled else None


def _name(code: int) -> str:
    """An error code's name for the audit trail (INVALID_REQUEST)."""
    return error_code(code).name.upper()


def _resource(b: AclBinding) -> str:
    return f"{b.resource_type.name}:{b.pattern_type.name}:{b.resource_name}"


def _audit_acl(ctx: RequestContext, action: str, b: AclBinding, outcome: str, **more: Any) -> None:
    audit(
        action,
        outcome,
        principal=ctx.principal,
        source=ctx.client_ip,
        resource=_resource(b),
        acl_principal=b.principal,
        acl_host=b.host,
        operation=b.operation.name,
        permission=b.permission.name,
        **more,
    )


# --- DescribeAcls (29) -----------------------------------------------------------------------


def _describe_acls_reply(
    ctx: RequestContext, outcome: Outcome, bindings: Iterable[AclBinding] = ()
) -> HandlerResult:
    # as Kafka's DescribeAclsResponse.aclsResources: one entry per resource pattern
    by_resource: dict[tuple[int, str, int], list[AclBinding]] = {}
    for b in bindings:
        key = (int(b.resource_type), b.resource_name, int(b.pattern_type))
        by_resource.setdefault(key, []).append(b)
    code, message = outcome
    return build(
        response_class(DESCRIBE_ACLS, ctx.api_version),
        error_code=code,
        error_message=message,
        resources=[
            {
                "resource_type": rtype,
                "resource_name": name,
                "pattern_type": ptype,
                "acls": [
                    {
                        "principal": b.principal,
                        "host": b.host,
                        "operation": int(b.operation),
                        "permission_type": int(b.permission),
                    }
                    for b in found
                ],
            }
            for (rtype, name, ptype), found in sorted(by_resource.items())
        ],
    )


def _filter(req: Any) -> AclBindingFilter:
    """DescribeAcls' request and DeleteAcls' filters have the same fields."""
    return AclBindingFilter(
        resource_type=_enum(ResourceType, req.resource_type_filter),
        resource_name=req.resource_name_filter,
        pattern_type=_enum(PatternType, req.pattern_type_filter),
        principal=req.principal_filter,
        host=req.host_filter,
        operation=_enum(AclOperation, req.operation),
        permission=_enum(AclPermissionType, req.permission_type),
    )


async def handle_describe_acls(ctx: RequestContext, req: Any) -> HandlerResult:
    if not ctx.allowed(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        return _describe_acls_reply(ctx, (Error.CLUSTER_AUTHORIZATION_FAILED, CLUSTER_DENIED))
    security = _acl_manager(ctx)
    if security is None:
        return _describe_acls_reply(ctx, (Error.SECURITY_DISABLED, NO_AUTHORIZER))
    acl_filter = _filter(req)
    problem = acl_filter.check()
    if problem is not None:
        return _describe_acls_reply(ctx, (Error.INVALID_REQUEST, problem))
    stored = await security.store.acl_bindings()
    return _describe_acls_reply(ctx, OK, (b for b in stored if acl_filter.matches(b)))


def describe_acls_error(ctx: RequestContext, req: Any, error: Error) -> HandlerResult:
    return _describe_acls_reply(ctx, (error, None))


# --- CreateAcls (30) -------------------------------------------------------------------------


def _create_acls_reply(ctx: RequestContext, outcomes: Sequence[Outcome]) -> HandlerResult:
    return build(
        response_class(CREATE_ACLS, ctx.api_version),
        results=[{"error_code": code, "error_message": message} for code, message in outcomes],
    )


def _binding(creation: Any) -> AclBinding:
    return AclBinding(
        resource_type=_enum(ResourceType, creation.resource_type),
        resource_name=creation.resource_name,
        pattern_type=_enum(PatternType, creation.resource_pattern_type),
        principal=creation.principal,
        host=creation.host,
        operation=_enum(AclOperation, creation.operation),
        permission=_enum(AclPermissionType, creation.permission_type),
    )


async def handle_create_acls(ctx: RequestContext, req: Any) -> HandlerResult:
    creations = req.creations
    if not ctx.allowed(AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
        denied = (Error.CLUSTER_AUTHORIZATION_FAILED, CLUSTER_DENIED)
        return _create_acls_reply(ctx, [denied] * len(creations))
    security = _acl_manager(ctx)
    if security is None:
        return _create_acls_reply(ctx, [(Error.SECURITY_DISABLED, NO_AUTHORIZER)] * len(creations))
    outcomes: list[Outcome] = []
    valid: list[AclBinding] = []
    for creation in creations:
        b = _binding(creation)
        problem = b.check()
        if problem is None:
            valid.append(b)
            outcomes.append(OK)
        else:
            outcomes.append((Error.INVALID_REQUEST, problem))
            _audit_acl(ctx, "CreateAcls", b, "failure", error="INVALID_REQUEST", reason=problem)
    if valid:
        try:
            await security.store.create_acls(valid)
        except Exception:
            for b in dict.fromkeys(valid):
                _audit_acl(ctx, "CreateAcls", b, "failure", error="UNKNOWN_SERVER_ERROR")
            raise  # every result becomes UNKNOWN_SERVER_ERROR (create_acls_error)
        for b in dict.fromkeys(valid):
            _audit_acl(ctx, "CreateAcls", b, "success")
        await _refresh(security)
    return _create_acls_reply(ctx, outcomes)


def create_acls_error(ctx: RequestContext, req: Any, error: Error) -> HandlerResult:
    return _create_acls_reply(ctx, [(error, None)] * len(req.creations))


# --- DeleteAcls (31) -------------------------------------------------------------------------


def _matching(b: AclBinding) -> dict[str, Any]:
    return {
        "error_code": Error.NONE,
        "error_message": None,
        "resource_type": int(b.resource_type),
        "resource_name": b.resource_name,
        "pattern_type": int(b.pattern_type),
        "principal": b.principal,
        "host": b.host,
        "operation": int(b.operation),
        "permission_type": int(b.permission),
    }


def _delete_acls_reply(
    ctx: RequestContext, results: Sequence[tuple[Outcome, Sequence[AclBinding]]]
) -> HandlerResult:
    return build(
        response_class(DELETE_ACLS, ctx.api_version),
        filter_results=[
            {
                "error_code": code,
                "error_message": message,
                "matching_acls": [_matching(b) for b in deleted],
            }
            for (code, message), deleted in results
        ],
    )


async def handle_delete_acls(ctx: RequestContext, req: Any) -> HandlerResult:
    filters = req.filters
    if not ctx.allowed(AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
        denied = (Error.CLUSTER_AUTHORIZATION_FAILED, CLUSTER_DENIED)
        return _delete_acls_reply(ctx, [(denied, ())] * len(filters))
    security = _acl_manager(ctx)
    if security is None:
        disabled = (Error.SECURITY_DISABLED, NO_AUTHORIZER)
        return _delete_acls_reply(ctx, [(disabled, ())] * len(filters))
    results: list[tuple[Outcome, Sequence[AclBinding]]] = []
    valid: list[tuple[int, AclBindingFilter]] = []
    for f in filters:
        acl_filter = _filter(f)
        problem = acl_filter.check()
        if problem is None:
            valid.append((len(results), acl_filter))
            results.append((OK, ()))
        else:
            results.append(((Error.INVALID_REQUEST, problem), ()))
    if valid:
        deleted = await security.store.delete_acls([f for _, f in valid])
        gone: dict[AclBinding, None] = {}
        for (index, _), found in zip(valid, deleted, strict=True):
            results[index] = (OK, found)
            gone.update(dict.fromkeys(found))
        for b in gone:
            _audit_acl(ctx, "DeleteAcls", b, "success")
        if gone:
            await _refresh(security)
    return _delete_acls_reply(ctx, results)


def delete_acls_error(ctx: RequestContext, req: Any, error: Error) -> HandlerResult:
    return _delete_acls_reply(ctx, [((error, None), ())] * len(req.filters))


# --- DescribeUserScramCredentials (50) -------------------------------------------------------


def _describe_scram_reply(
    top: Outcome, results: Sequence[tuple[str, Outcome, Sequence[ScramCredential]]]
) -> HandlerResult:
    code, message = top
    return build(
        response_class(DESCRIBE_USER_SCRAM_CREDENTIALS, 0),
        error_code=code,
        error_message=message,
        results=[
            {
                "user": user,
                "error_code": user_code,
                "error_message": user_message,
                # the mechanism and iteration count; salts and keys never leave the node
                "credential_infos": [
                    {"mechanism": _mechanism_code(c.mechanism), "iterations": c.iterations}
                    for c in credentials
                ],
            }
            for user, (user_code, user_message), credentials in results
        ],
    )


def _mechanism_code(name: str) -> int:
    return next((code for code, n in MECHANISM_NAMES.items() if n == name), 0)


def _requested_users(req: Any) -> list[str]:
    return [u.name for u in req.users or ()]


async def handle_describe_user_scram_credentials(ctx: RequestContext, req: Any) -> HandlerResult:
    names = _requested_users(req)
    if not ctx.allowed(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        return describe_user_scram_credentials_error(ctx, req, Error.CLUSTER_AUTHORIZATION_FAILED)
    security = ctx.security
    if security is None:
        return describe_user_scram_credentials_error(ctx, req, Error.SECURITY_DISABLED)
    by_user: dict[str, list[ScramCredential]] = {}
    for c in await security.store.scram_credentials():
        by_user.setdefault(c.user, []).append(c)
    for found in by_user.values():
        found.sort(key=lambda c: _mechanism_code(c.mechanism))
    results: list[tuple[str, Outcome, Sequence[ScramCredential]]] = []
    if not names:  # null or empty: every user that has a credential
        results = [(user, OK, by_user[user]) for user in sorted(by_user)]
        return _describe_scram_reply(OK, results)
    counts: dict[str, int] = {}
    for name in names:
        counts[name] = counts.get(name, 0) + 1
    for name, count in counts.items():  # one result per user, in the order first named
        if count > 1:
            results.append(
                (name, (ErrorCode.duplicate_resource, DESCRIBE_DUPLICATE_USER + name), ())
            )
        elif name in by_user:
            results.append((name, OK, by_user[name]))
        else:
            results.append((name, (ErrorCode.resource_not_found, DESCRIBE_UNKNOWN_USER + name), ()))
    return _describe_scram_reply(OK, results)


def describe_user_scram_credentials_error(
    ctx: RequestContext, req: Any, error: Error
) -> HandlerResult:
    # Kafka's getErrorResponse: the error at the top and on one result per user named
    message = {
        Error.CLUSTER_AUTHORIZATION_FAILED: CLUSTER_DENIED,
        Error.SECURITY_DISABLED: NO_SECURITY,
    }.get(error)
    outcome: Outcome = (error, message)
    return _describe_scram_reply(outcome, [(name, outcome, ()) for name in _requested_users(req)])


# --- AlterUserScramCredentials (51) ----------------------------------------------------------


def _alter_scram_reply(results: Sequence[tuple[str, Outcome]]) -> HandlerResult:
    return build(
        response_class(ALTER_USER_SCRAM_CREDENTIALS, 0),
        results=[
            {"user": user, "error_code": code, "error_message": message}
            for user, (code, message) in results
        ],
    )


def _check_name_and_mechanism(name: str, mechanism: int) -> Outcome | None:
    if not name:
        return (ErrorCode.unacceptable_credential, EMPTY_USER)
    if mechanism not in MECHANISM_NAMES:
        return (Error.UNSUPPORTED_SASL_MECHANISM, UNKNOWN_MECHANISM)
    return None


def _check_upsertion(upsertion: Any) -> Outcome | None:
    problem = _check_name_and_mechanism(upsertion.name, upsertion.mechanism)
    if problem is not None:
        return problem
    if upsertion.iterations < MIN_ITERATIONS:
        return (ErrorCode.unacceptable_credential, TOO_FEW_ITERATIONS)
    if upsertion.iterations > MAX_ITERATIONS:
        return (ErrorCode.unacceptable_credential, TOO_MANY_ITERATIONS)
    return None


def _credentials(upsertions: Sequence[Any]) -> list[ScramCredential | str]:
    """Each upsertion's stored form (RFC 5802 stored and server keys), or why it is refused.
    HMACs only, but a request may carry thousands: run off the loop."""
    out: list[ScramCredential | str] = []
    for u in upsertions:
        try:
            out.append(
                credential_from_salted_password(
                    u.name, MECHANISM_NAMES[u.mechanism], u.salt, u.salted_password, u.iterations
                )
            )
        except CredentialRejected as e:
            out.append(str(e))
    return out


async def handle_alter_user_scram_credentials(ctx: RequestContext, req: Any) -> HandlerResult:
    if not ctx.allowed(AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
        return alter_user_scram_credentials_error(ctx, req, Error.CLUSTER_AUTHORIZATION_FAILED)
    security = ctx.security
    if security is None:
        return alter_user_scram_credentials_error(ctx, req, Error.SECURITY_DISABLED)
    stored: set[tuple[str, str]] = set()
    if req.deletions:  # deleting a credential that does not exist is refused
        stored = {(c.user, c.mechanism) for c in await security.store.scram_credentials()}

    # ScramControlManager.alterCredentials: a user is altered at most once per request
    deletions: dict[str, Any] = {}
    upsertions: dict[str, Any] = {}
    errors: dict[str, Outcome] = {}
    for d in req.deletions:
        if d.name in errors:
            continue
        if deletions.pop(d.name, None) is not None:
            errors[d.name] = (ErrorCode.duplicate_resource, ALTER_TWICE)
            continue
        problem = _check_name_and_mechanism(d.name, d.mechanism)
        if problem is None and (d.name, MECHANISM_NAMES[d.mechanism]) not in stored:
            problem = (ErrorCode.resource_not_found, DELETE_UNKNOWN)
        if problem is None:
            deletions[d.name] = d
        else:
            errors[d.name] = problem
    for u in req.upsertions:
        if u.name in errors:
            continue
        if deletions.pop(u.name, None) is not None or upsertions.pop(u.name, None) is not None:
            errors[u.name] = (ErrorCode.duplicate_resource, ALTER_TWICE)
            continue
        problem = _check_upsertion(u)
        if problem is None:
            upsertions[u.name] = u
        else:
            errors[u.name] = problem

    credentials: list[ScramCredential] = []
    made = await security.offload(_credentials, list(upsertions.values()))
    for name, credential in zip(list(upsertions), made, strict=True):
        if isinstance(credential, str):
            del upsertions[name]
            errors[name] = (ErrorCode.unacceptable_credential, credential)
        else:
            credentials.append(credential)
    keys = [(d.name, MECHANISM_NAMES[d.mechanism]) for d in deletions.values()]

    changes = [("DeleteScramCredential", user, mech) for user, mech in keys]
    changes += [("UpsertScramCredential", c.user, c.mechanism) for c in credentials]
    try:
        if keys:
            await security.store.delete_scram_credentials(keys)
        if credentials:
            await security.store.upsert_scram_credentials(credentials)
    except Exception:
        for action, user, mech in changes:
            _audit_scram(ctx, action, user, mech, "failure", error="UNKNOWN_SERVER_ERROR")
        raise  # every user's result becomes UNKNOWN_SERVER_ERROR
    iterations = {c.user: c.iterations for c in credentials}
    for action, user, mech in changes:
        _audit_scram(ctx, action, user, mech, "success", iterations=iterations.get(user))
    for name, (code, message) in errors.items():
        _audit_scram(
            ctx,
            "AlterUserScramCredentials",
            name,
            None,
            "failure",
            error=_name(code),
            reason=message,
        )
    if changes:
        await _refresh(security)
    # Kafka's order: the deletions, the upsertions, then the refused users
    results = [(name, OK) for name in deletions]
    results += [(name, OK) for name in upsertions]
    results += list(errors.items())
    return _alter_scram_reply(results)


def _audit_scram(
    ctx: RequestContext,
    action: str,
    user: str,
    mechanism: str | None,
    outcome: str,
    **more: Any,
) -> None:
    detail = {k: v for k, v in more.items() if v is not None}
    if mechanism is not None:
        detail["mechanism"] = mechanism
    audit(
        action,
        outcome,
        principal=ctx.principal,
        source=ctx.client_ip,
        resource=f"USER:{user}",
        **detail,
    )


def alter_user_scram_credentials_error(
    ctx: RequestContext, req: Any, error: Error
) -> HandlerResult:
    # Kafka's getErrorResponse: one result per user named, sorted
    message = {
        Error.CLUSTER_AUTHORIZATION_FAILED: CLUSTER_DENIED,
        Error.SECURITY_DISABLED: NO_SECURITY,
    }.get(error)
    users = sorted({d.name for d in req.deletions} | {u.name for u in req.upsertions})
    return _alter_scram_reply([(user, (error, message)) for user in users])


# --- shared ------------------------------------------------------------------------------------


async def _refresh(security: SecurityManager) -> None:
    """This node sees the change at once; the others within a second by polling. The change is
    stored already: a failed reload is left to the poll, not reported as a failed change."""
    try:
        await security.refresh()
    except Exception as e:
        log.warning("cannot reload credentials and ACLs after a change: %s", e)


APIS: Final[tuple[Api, ...]] = (
    Api(DESCRIBE_ACLS, "DescribeAcls", 1, 3, handle_describe_acls, describe_acls_error),
    Api(CREATE_ACLS, "CreateAcls", 1, 3, handle_create_acls, create_acls_error),
    Api(DELETE_ACLS, "DeleteAcls", 1, 3, handle_delete_acls, delete_acls_error),
    Api(
        DESCRIBE_USER_SCRAM_CREDENTIALS,
        "DescribeUserScramCredentials",
        0,
        0,
        handle_describe_user_scram_credentials,
        describe_user_scram_credentials_error,
    ),
    Api(
        ALTER_USER_SCRAM_CREDENTIALS,
        "AlterUserScramCredentials",
        0,
        0,
        handle_alter_user_scram_credentials,
        alter_user_scram_credentials_error,
    ),
)
