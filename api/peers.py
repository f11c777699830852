"""The credential one node shows another when it asks for that node's groups on a caller's
behalf (GET /groups fans out to every live node): never the node's token, never the caller's
password, but a claim of who asked and from where, good for listing groups only and for
PEER_TTL_MS, signed with the key every node of the store shares (cluster_meta, made on first
use). Whoever captures one can list, for half a minute, the groups that caller could list.

The receiving node holds the caller to its own ACLs (the caller's principal, from the caller's
address) and answers only its own groups, so a claim never fans out again.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from dataclasses import dataclass
from typing import Final

SCHEME: Final = "coordinator-peer"
LIST_GROUPS: Final = "list_groups"  # the one route a claim authenticates (its route name)
PEER_TTL_MS: Final = 30_000
_MAX_BYTES: Final = 8192


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
