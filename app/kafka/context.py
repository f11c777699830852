"""What a request handler gets besides the decoded kio request."""

from __future__ import annotations

import asyncio
import enum
from dataclasses import dataclass
from typing import Any

from app.service import CoordinatorService


class NoResponse(enum.Enum):
    """Returned by a handler when the protocol wants no reply (Produce with acks=0)."""

    NO_RESPONSE = 0


NO_RESPONSE = NoResponse.NO_RESPONSE

# A handler returns a kio response object, pre-encoded body bytes (hot paths), or NO_RESPONSE.
HandlerResult = Any


@dataclass(slots=True)
class RequestContext:
    service: CoordinatorService
    api_version: int
    client_id: str
    client_host: str
    # Resolved when the connection goes away; long polls (Fetch) stop waiting on it.
    closed: asyncio.Future[None] | None = None
