"""SaslHandshake (17) and SaslAuthenticate (36): authentication on SASL listeners (KIP-43,
KIP-152), as Kafka's `SaslServerAuthenticator` runs it.

Before a connection of a SASL listener is authenticated it may only send ApiVersions and these
two (the server closes it otherwise). Handshake v1 is followed by SaslAuthenticate requests;
handshake v0 by raw size-prefixed tokens (the pre-KIP-152 format, `raw_tokens`). A failure is
answered SASL_AUTHENTICATION_FAILED with a message, and the connection is then closed.
"""

from __future__ import annotations

from typing import Any, Final

from app.group.messages import Error
from app.kafka.codec import build, response_class
from app.kafka.context import Api, HandlerResult, RequestContext
from app.security.audit import audit
from app.security.sasl import AuthenticationFailed, SaslServer

SASL_HANDSHAKE: Final = 17
SASL_AUTHENTICATE: Final = 36


def handle_sasl_handshake(ctx: RequestContext, req: Any) -> HandlerResult:
    cls = response_class(SASL_HANDSHAKE, ctx.api_version)
    session = ctx.session
    if session is None or session.authenticated or session.server is not None:
        # not a SASL listener, or a second handshake: Kafka's KafkaApis answers this
        return build(cls, error_code=Error.ILLEGAL_SASL_STATE, mechanisms=[])
    mechanisms = list(session.security.mechanisms)
    if req.mechanism not in mechanisms:
        session.failed = True
        audit(
            "authenticate",
            "failure",
            principal=None,
            source=ctx.client_ip,
            mechanism=req.mechanism,
            reason="mechanism not enabled",
        )
        return build(cls, error_code=Error.UNSUPPORTED_SASL_MECHANISM, mechanisms=mechanisms)
    session.server = SaslServer(req.mechanism, session.security.credential)
    session.raw_tokens = ctx.api_version == 0
    return build(cls, error_code=Error.NONE, mechanisms=mechanisms)


def sasl_handshake_error(ctx: RequestContext, req: Any, error: Error) -> HandlerResult:
    return build(response_class(SASL_HANDSHAKE, ctx.api_version), error_code=error, mechanisms=[])


async def handle_sasl_authenticate(ctx: RequestContext, req: Any) -> HandlerResult:
    session = ctx.session
    if session is None or session.authenticated:
        return _authenticate_reply(ctx, Error.ILLEGAL_SASL_STATE, "already authenticated")
    if session.server is None:
        session.failed = True  # Kafka: IllegalSaslStateException, the connection is closed
        return _authenticate_reply(ctx, Error.ILLEGAL_SASL_STATE, "SaslHandshake comes first")
    try:
        reply = await session.step(req.auth_bytes, ctx.client_ip)
    except AuthenticationFailed as e:
        return _authenticate_reply(ctx, Error.SASL_AUTHENTICATION_FAILED, str(e))
    return _authenticate_reply(ctx, Error.NONE, None, reply)


def _authenticate_reply(
    ctx: RequestContext, error: Error, message: str | None, auth_bytes: bytes = b""
) -> HandlerResult:
    return build(
        response_class(SASL_AUTHENTICATE, ctx.api_version),
        error_code=error,
        error_message=message,
        auth_bytes=auth_bytes,
        # no re-authentication (KIP-368): the session lasts as long as the connection
        session_lifetime=0,
    )


def sasl_authenticate_error(ctx: RequestContext, req: Any, error: Error) -> HandlerResult:
    if ctx.session is not None:
        ctx.session.failed = True
    return _authenticate_reply(ctx, error, error.name)


APIS: Final[tuple[Api, ...]] = (
    Api(
        SASL_HANDSHAKE,
        "SaslHandshake",
        0,
        1,
        handle_sasl_handshake,
        sasl_handshake_error,
        before_authentication=True,
    ),
    Api(
        SASL_AUTHENTICATE,
        "SaslAuthenticate",
        0,
        2,
        handle_sasl_authenticate,
        sasl_authenticate_error,
        before_authentication=True,
    ),
)
