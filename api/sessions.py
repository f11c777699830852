"""The console's sessions on this node: a random id (the cookie) -> who logged in.

A session opened with a SCRAM user's password lasts while that user's stored credentials stay
what they were at login: a new password or a deleted user ends it on the next request, on
whichever node it was opened (each node's credentials snapshot follows the shared store within
a poll, app/security/manager.py). At most MAX_SESSIONS are kept; the oldest go first.
"""

from __future__ import annotations

import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Generic, Protocol, TypeVar

from app.security.audit import audit

MAX_SESSIONS: Final = 10_000


class Credentials(Protocol):
    def fingerprint(self, name: str) -> bytes | None: ...


C = TypeVar("C")


@dataclass(frozen=True, slots=True)
class _Session(Generic[C]):
    caller: C
    expires: float
    user: str | None  # the SCRAM user it was opened with; None for the token
    fingerprint: bytes | None


class ConsoleSessions(Generic[C]):
    def __init__(
        self,
        ttl_s: float,
        *,
        max_sessions: int = MAX_SESSIONS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ttl_s = ttl_s
        self.max_sessions = max_sessions
        self._clock = clock
        self._sessions: OrderedDict[str, _Session[C]] = OrderedDict()

    def open(self, caller: C, user: str | None, credentials: Credentials | None) -> str:
        now = self._clock()
        for sid in [s for s, v in self._sessions.items() if v.expires < now]:
            del self._sessions[sid]
        while len(self._sessions) >= self.max_sessions:
            self._sessions.popitem(last=False)
        fingerprint = credentials.fingerprint(user) if user and credentials else None
        sid = secrets.token_urlsafe(32)
        self._sessions[sid] = _Session(caller, now + self.ttl_s, user, fingerprint)
        return sid

    def get(self, sid: str, credentials: Credentials | None, source: str) -> C | None:
        session = self._sessions.get(sid)
        if session is None:
            return None
        if session.expires < self._clock():
            del self._sessions[sid]
            return None
        if session.user is not None and credentials is not None:
            now = credentials.fingerprint(session.user)
            if now is None or now != session.fingerprint:
                del self._sessions[sid]
                audit(
                    "session",
                    "ended",
                    principal=getattr(session.caller, "principal", None),
                    source=source,
                    api="admin",
                    reason="the user's credentials changed",
                )
                return None
        return session.caller

    def close(self, sid: str) -> None:
        self._sessions.pop(sid, None)

    def __len__(self) -> int:
        return len(self._sessions)
