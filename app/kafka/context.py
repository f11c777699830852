"""What a request handler gets besides the decoded kio request."""

from __future__ import annotations

import asyncio
import enum
import inspect
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from app.group.messages import Error
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


SyncHandler = Callable[[RequestContext, Any], HandlerResult]
AsyncHandler = Callable[[RequestContext, Any], Coroutine[Any, Any, HandlerResult]]
ErrorBuilder = Callable[[RequestContext, Any, Error], HandlerResult]


@dataclass(frozen=True, slots=True)
class Api:
    """One row of the API table: each edge module lists the rows of the APIs it serves."""

    key: int
    name: str
    min_version: int
    max_version: int
    handler: SyncHandler | AsyncHandler
    # Builds the reply carrying an error when the handler raised; None: no such shape exists,
    # the connection is closed instead.
    on_error: ErrorBuilder | None
    is_async: bool = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "is_async", inspect.iscoroutinefunction(self.handler))
