"""The credential one node shows another when it asks for that node's groups on a caller's
behalf (GET /groups fans out to every live node): never the node's token, never the caller's
password, but a claim of who asked and from where, good for listing groups only and for
PEER_TTL_MS, signed with the key every node of the store shares (cluster_meta, made on first
use). Whoever captures one can list, for half a minute, the groups that caller could list.

The receiving node holds the caller to its own ACLs (the caller's principal, from the caller's
address) and answers only its own groups, so a claim never fans out again.

`Peers` is that fan-out: httpx to each other live node's registered admin URL, https or
loopback unless COORD_ADMIN_PEER_PLAINTEXT says plain http may cross the network.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import logging
import ssl
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import urlsplit

import httpx

from app.admin import AdminService
from app.config import is_loopback
from app.runtime.runtime import now_ms

SCHEME: Final = "coordinator-peer"
LIST_GROUPS: Final = "list_groups"  # the one route a claim authenticates (its route name)
PEER_TTL_MS: Final = 30_000
_MAX_BYTES: Final = 8192
# says "answer your own groups only": what a node sends another, so no request fans out twice
LOCAL_HEADER: Final = "X-Coordinator-Local"

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Claim:
    principal: str
    source: str
    full: bool


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _sign(key: bytes, payload: str) -> str:
    return _b64(hmac.digest(key, payload.encode(), hashlib.sha256))


def mint(key: bytes, claim: Claim, now_ms: int) -> str:
    """The Authorization header's value for a call to another node."""
    body = {
        "p": claim.principal,
        "s": claim.source,
        "f": claim.full,
        "x": now_ms + PEER_TTL_MS,
        "r": LIST_GROUPS,
    }
    payload = _b64(json.dumps(body, separators=(",", ":")).encode())
    return f"{SCHEME} {payload}.{_sign(key, payload)}"


def verify(key: bytes, value: str, now_ms: int) -> Claim | None:
    """The claim of a credential minted with `key` that has not expired; None otherwise."""
    if len(value) > _MAX_BYTES:
        return None
    payload, _, signature = value.partition(".")
    if not hmac.compare_digest(signature.encode(), _sign(key, payload).encode()):
        return None
    try:
        body = json.loads(_unb64(payload))
        principal, source, full, expires = body["p"], body["s"], body["f"], body["x"]
        route = body["r"]
    except (binascii.Error, ValueError, KeyError, TypeError):
        return None
    if route != LIST_GROUPS or not isinstance(expires, int) or not isinstance(full, bool):
        return None
    if not now_ms <= expires <= now_ms + PEER_TTL_MS:
        return None
    return Claim(str(principal), str(source), full)


class Peers:
    """What this node asks the other nodes' admin APIs for, on a caller's behalf."""

    def __init__(self, admin: AdminService) -> None:
        self.admin = admin
        self._warned: set[str] = set()  # plain-http peers left out, logged once each

    async def list_groups(self, claim: Claim, state: str | None = None) -> list[dict[str, Any]]:
        """Groups of the whole cluster: this node's, plus every other live node's, asked with
        a node credential of `claim`: never this node's token, never the caller's password."""
        groups = self.admin.list_groups(state)
        others = [url for url in self.admin.peer_admin_urls() if self._may_ask(url)]
        if others:
            key = await self.admin.peer_key()
            sent = {"Authorization": mint(key, claim, now_ms()), LOCAL_HEADER: "1"}
            params = {"state": state} if state else {}
            # https admin URLs of the other nodes: trusted through COORD_SSL_CAFILE if set
            cafile = self.admin.node.settings.ssl_cafile
            verify: Any = ssl.create_default_context(cafile=cafile) if cafile else True
            async with httpx.AsyncClient(timeout=5, verify=verify) as client:
                for url in others:
                    try:
                        r = await client.get(
                            url.rstrip("/") + "/groups", params=params, headers=sent
                        )
                        if r.status_code == 200:
                            groups.extend(r.json())
                    except httpx.HTTPError:
                        continue  # a node that is going away: its groups move soon
        return sorted({g["group_id"]: g for g in groups}.values(), key=lambda g: g["group_id"])

    def _may_ask(self, url: str) -> bool:
        """https, or http to a loopback address, or COORD_ADMIN_PEER_PLAINTEXT: a caller's
        credential crosses no network in the clear unless the operator said so."""
        parts = urlsplit(url)
        if parts.scheme == "https" or self.admin.node.settings.admin_peer_plaintext:
            return True
        loopback = is_loopback(parts.hostname or "")
        if not loopback and url not in self._warned:
            self._warned.add(url)
            log.warning(
                "not listing the groups of %s: it is plain http to another machine "
                "(COORD_ADMIN_PEER_PLAINTEXT=true allows it; https is better)",
                url,
            )
        return loopback
