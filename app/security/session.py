"""One connection's authentication state on a SASL listener (SaslServerAuthenticator's)."""

from __future__ import annotations

from app.security.audit import audit
from app.security.manager import SecurityManager
from app.security.principal import ANONYMOUS, user
from app.security.sasl import AuthenticationFailed, SaslServer


class AuthSession:
    """One connection's authentication state (a SASL listener's; others need none)."""

    __slots__ = ("authenticated", "failed", "principal", "raw_tokens", "security", "server")

    def __init__(self, security: SecurityManager) -> None:
        self.security = security
        self.server: SaslServer | None = None
        self.principal = ANONYMOUS
        self.authenticated = False
        self.failed = False  # the reply goes out, then the connection closes
        self.raw_tokens = False

    async def step(self, token: bytes, source: str) -> bytes:
        """One SASL token; AuthenticationFailed ends the session."""
        server = self.server
        if server is None or self.authenticated or self.failed:
            self.failed = True
            raise AuthenticationFailed("unexpected SASL token: no authentication in progress")
        logins = self.security.logins
        name = server.checks_password(token)
        try:
            if name is None:
                reply, principal = await self.security.offload(server.step, token)
            else:
                async with logins.attempt((user(name), source)):
                    reply, principal = await self.security.offload(server.step, token)
        except AuthenticationFailed as e:
            self.failed = True
            tried = user(server.user) if server.user else None
            if name is not None:
                logins.failed((tried, source))
            audit(
                "authenticate",
                "failure",
                principal=tried,
                source=source,
                mechanism=server.mechanism,
                reason=str(e),
            )
            raise
        if principal is not None:
            self.principal = principal
            self.authenticated = True
            logins.succeeded((principal, source))
            audit(
                "authenticate",
                "success",
                principal=principal,
                source=source,
                mechanism=server.mechanism,
            )
        return reply
