"""A node's security state: who may authenticate, and who may do what.

The credentials and ACLs live in the SQL database (shared by every node, so they survive any
node and a change made on one is seen by all). Each node keeps a snapshot in memory and polls
a change counter every REFRESH_S, so a change takes effect everywhere within a second and no
request waits on the database to be authorized. Anything that hashes or shakes hands runs on
`offload`'s threads, never on the event loop.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

from app.config import DEFAULTS
from app.security.acl import (
    AclOperation,
    Authorizer,
    ResourceType,
    all_operations,
)
from app.security.audit import audit
from app.security.principal import parse_super_users
from app.security.sasl import (
    PLAIN,
    SCRAM_MECHANISMS,
    ScramCredential,
    parse_mechanisms,
    verify_any,
)
from app.security.throttle import FailedLogins
from storage.ports import SecurityStore

log = logging.getLogger(__name__)

T = TypeVar("T")

REFRESH_S: Final = 0.5
# handshakes and hashing share these threads; each waiting connection has at most one job
# queued, so the queue is bounded by COORD_MAX_CONNECTIONS
OFFLOAD_THREADS: Final = 2
_DENIAL_LOG_EVERY_S: Final = 1.0


@dataclass(slots=True)
class Snapshot:
    version: int = -1
    credentials: dict[tuple[str, str], ScramCredential] = field(default_factory=dict)
    authorizer: Authorizer | None = None


class SecurityManager:
    def __init__(
        self,
        store: SecurityStore,
        *,
        mechanisms: str = DEFAULTS.sasl_enabled_mechanisms,
        authorizer: str = DEFAULTS.authorizer,
        super_users: str = DEFAULTS.super_users,
        allow_everyone_if_no_acl_found: bool = DEFAULTS.allow_everyone_if_no_acl_found,
        failed_authentication_delay_ms: int = DEFAULTS.failed_authentication_delay_ms,
    ) -> None:
        self.store = store
        self.mechanisms = parse_mechanisms(mechanisms)
        self.acl_enabled = authorizer == "acl"
        self.super_users = parse_super_users(super_users)
        self.allow_if_no_acl = allow_everyone_if_no_acl_found
        self.snapshot = Snapshot()
        self._pool = ThreadPoolExecutor(OFFLOAD_THREADS, thread_name_prefix="security")
        self._task: asyncio.Task[None] | None = None
        self._denials: dict[tuple[str, str, str], float] = {}
        self.refresh_error: str | None = None
        self.logins = FailedLogins(failed_authentication_delay_ms / 1000)

    @classmethod
    def from_settings(cls, store: SecurityStore, settings: Any) -> SecurityManager:
        return cls(
            store,
            mechanisms=settings.sasl_enabled_mechanisms,
            authorizer=settings.authorizer,
            super_users=settings.super_users,
            allow_everyone_if_no_acl_found=settings.allow_everyone_if_no_acl_found,
            failed_authentication_delay_ms=settings.failed_authentication_delay_ms,
        )

    # --- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        await self.refresh(force=True)
        self._task = asyncio.create_task(self._poll(), name="security-refresh")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None
        self._pool.shutdown(wait=False, cancel_futures=True)

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(REFRESH_S)
            try:
                await self.refresh()
                self.refresh_error = None
            except Exception as e:  # the database is away: keep the last snapshot
                if self.refresh_error is None:
                    log.warning("cannot refresh credentials and ACLs: %s", e)
                self.refresh_error = f"{type(e).__name__}: {e}"

    async def refresh(self, force: bool = False) -> None:
        """Reload the snapshot when the stored change counter moved."""
        version = await self.store.security_version()
        if not force and version == self.snapshot.version:
            return
        credentials = await self.store.scram_credentials()
        bindings = await self.store.acl_bindings()
        self.snapshot = Snapshot(
            version,
            {(c.user, c.mechanism): c for c in credentials},
            Authorizer(bindings, self.super_users, self.allow_if_no_acl)
            if self.acl_enabled
            else None,
        )
        self._denials.clear()

    # --- authentication ------------------------------------------------------------------------

    def credential(self, name: str, mechanism: str) -> ScramCredential | None:
        return self.snapshot.credentials.get((name, mechanism))

    async def offload(self, fn: Callable[..., T], *args: Any) -> T:
        """Run `fn` (a handshake step, a hash) on the security threads."""
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    async def verify_password(self, name: str, password: str) -> bool:
        """HTTP Basic and PLAIN: the password against the user's stored SCRAM keys."""
        return await self.offload(verify_any, self.credential, name, password)

    def fingerprint(self, name: str) -> bytes | None:
        """What the user's stored credentials are now (None: the user has none): a session
        opened with them ends when this changes (a new password, a deleted user)."""
        found = [c for m in SCRAM_MECHANISMS if (c := self.snapshot.credentials.get((name, m)))]
        if not found:
            return None
        digest = hashlib.sha256()
        for c in found:
            digest.update(c.mechanism.encode() + c.salt + c.stored_key + c.server_key)
        return digest.digest()

    @property
    def plain_enabled(self) -> bool:
        return PLAIN in self.mechanisms

    # --- authorization ---------------------------------------------------------------------------

    def authorize(
        self,
        principal: str,
        host: str,
        op: AclOperation,
        rtype: ResourceType,
        name: str,
        *,
        log_denial: bool = True,
    ) -> bool:
        authorizer = self.snapshot.authorizer
        if authorizer is None:
            return True  # no authorizer: everything is allowed, as in Kafka
        if authorizer.authorize(principal, host, op, rtype, name):
            return True
        if log_denial:
            self._log_denial(principal, host, op, rtype, name)
        return False

    def authorize_any(
        self, principal: str, host: str, op: AclOperation, rtype: ResourceType
    ) -> bool:
        authorizer = self.snapshot.authorizer
        return authorizer is None or authorizer.authorize_any(principal, host, op, rtype)

    def authorized_operations(
        self, principal: str, host: str, rtype: ResourceType, name: str
    ) -> int:
        authorizer = self.snapshot.authorizer
        if authorizer is None:
            return all_operations(rtype)
        return authorizer.authorized_operations(principal, host, rtype, name)

    def _log_denial(
        self, principal: str, host: str, op: AclOperation, rtype: ResourceType, name: str
    ) -> None:
        # a clumsy client repeating a denied request logs one line a second, not one each
        key = (principal, op.name, f"{rtype.name}:{name}")
        now = time.monotonic()
        if now - self._denials.get(key, 0.0) < _DENIAL_LOG_EVERY_S:
            return
        if len(self._denials) > 10_000:
            self._denials.clear()
        self._denials[key] = now
        audit(
            op.name,
            "denied",
            principal=principal,
            source=host,
            resource=f"{rtype.name}:{name}",
        )
