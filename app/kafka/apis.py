"""The advertised API table, ApiVersions, and request decoding.

The table is the rows each edge module lists beside its handlers (`cluster_apis.APIS`,
`group_apis.APIS`): adding an API is a handler and a row there. Every (api_key, version) this
node answers is in it; ApiVersions advertises exactly this
table, and the server refuses anything outside it (protocol.md §11.1, clients.md §1.1, §2.1).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from kio.serial import entity_reader

from app.config import DEFAULTS
from app.group.messages import NO_ERROR, Error
from app.kafka import cluster_apis as cl
from app.kafka import group_apis as gr
from app.kafka import offset_apis as of
from app.kafka import sasl_apis as sa
from app.kafka import security_apis as sec
from app.kafka.bounded import check_client_id, check_request, has_arrays
from app.kafka.codec import (
    build,
    encode_body,
    frame_response,
    request_class,
    response_class,
    response_header_flexible,
)
from app.kafka.context import Api, HandlerResult, RequestContext
from app.kafka.tagged import strip_unknown_tags

API_VERSIONS: Final = 18


@dataclass(frozen=True, slots=True)
class DecodeLimits:
    """Bounds on what decoding one request may cost (README: Limits and hostile clients)."""

    max_client_id_bytes: int = DEFAULTS.max_client_id_bytes
    max_request_elements: int = DEFAULTS.max_request_elements


DEFAULT_DECODE_LIMITS: Final = DecodeLimits()


@dataclass(frozen=True, slots=True)
class ApiVersionEntry:
    """One (api_key, version) with its kio classes and readers resolved once."""

    api: Api
    version: int
    request_cls: type[Any]
    response_cls: type[Any]
    read_header: Callable[[bytes, int], tuple[Any, int]]
    read_body: Callable[[bytes, int], tuple[Any, int]]
    flexible_response_header: bool
    walk: bool  # the schema holds arrays: walk the frame before kio reads it

    def decode(self, frame: bytes, limits: DecodeLimits = DEFAULT_DECODE_LIMITS) -> tuple[Any, Any]:
        """(header, body) of a request frame (no size prefix); FrameRejected when it breaks a
        bound (app/kafka/bounded.py): nothing reaches kio's native reader unchecked.

        kio rejects unknown tagged fields (KeyError); the protocol says to skip them, so the
        frame is rewritten without them first (the walk tells; array-free schemas learn it
        from kio's KeyError).
        """
        if self.walk:
            if check_request(
                self.request_cls,
                frame,
                max_elements=limits.max_request_elements,
                max_client_id=limits.max_client_id_bytes,
            ):
                frame = strip_unknown_tags(self.request_cls, frame)
        else:
            check_client_id(frame, limits.max_client_id_bytes)
        try:
            header, offset = self.read_header(frame, 0)
            body, _ = self.read_body(frame, offset)
        except KeyError:
            frame = strip_unknown_tags(self.request_cls, frame)
            header, offset = self.read_header(frame, 0)
            body, _ = self.read_body(frame, offset)
        return header, body

    def frame(self, correlation_id: int, result: Any) -> bytes:
        body = result if isinstance(result, bytes) else encode_body(result)
        return frame_response(correlation_id, self.flexible_response_header, body)


# --- ApiVersions (18) ------------------------------------------------------------------------

# protocol.md §11.4: ClientSoftwareName/Version (v3+) must match this, else INVALID_REQUEST
_SOFTWARE_RE: Final = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")


@functools.cache
def local_ranges() -> dict[int, tuple[int, int]]:
    """api key -> (min, max) version of every API in the table."""
    return {a.key: (a.min_version, a.max_version) for a in APIS}


def _api_keys(ranges: Mapping[int, tuple[int, int]]) -> list[dict[str, int]]:
    return [
        {"api_key": key, "min_version": lo, "max_version": hi} for key, (lo, hi) in ranges.items()
    ]


def api_versions_answer(version: int, req: Any, ranges: Mapping[int, tuple[int, int]]) -> Any:
    """ApiVersions' reply advertising `ranges` (a gateway advertises more than the table)."""
    cls = response_class(API_VERSIONS, version)
    if version >= 3 and not (
        _SOFTWARE_RE.fullmatch(req.client_software_name)
        and _SOFTWARE_RE.fullmatch(req.client_software_version)
    ):
        return build(cls, error_code=Error.INVALID_REQUEST, api_keys=[])
    return build(cls, error_code=NO_ERROR, api_keys=_api_keys(ranges))


def handle_api_versions(ctx: RequestContext, req: Any) -> HandlerResult:
    return api_versions_answer(ctx.api_version, req, local_ranges())


def api_versions_error(ctx: RequestContext, req: Any, error: Error) -> HandlerResult:
    return build(response_class(API_VERSIONS, ctx.api_version), error_code=error, api_keys=[])


def _unsupported_body(ranges: Mapping[int, tuple[int, int]]) -> bytes:
    # KIP-511: a client newer than us learns our range from a v0-format reply
    return encode_body(
        build(
            response_class(API_VERSIONS, 0),
            error_code=Error.UNSUPPORTED_VERSION,
            api_keys=_api_keys(ranges),
        )
    )


@functools.cache
def _unsupported_api_versions_body() -> bytes:
    return _unsupported_body(local_ranges())


def unsupported_api_versions_frame(
    correlation_id: int, ranges: Mapping[int, tuple[int, int]] | None = None
) -> bytes:
    """Reply to ApiVersions at a version we do not know: v0 layout, header v0, listing
    `ranges` (a gateway's, which a client such as franz-go takes as the whole table rather
    than retry) or the table's."""
    body = _unsupported_api_versions_body() if ranges is None else _unsupported_body(ranges)
    return frame_response(correlation_id, False, body)


def unsupported_version_reply(api_key: int, correlation_id: int) -> bytes | None:
    """The reply to a request at a version outside the table, or None: the connection is
    closed (only ApiVersions answers one, KIP-511)."""
    return unsupported_api_versions_frame(correlation_id) if api_key == API_VERSIONS else None


# --- the table -------------------------------------------------------------------------------

APIS: Final[tuple[Api, ...]] = tuple(
    sorted(
        (
            *cl.APIS,
            *gr.APIS,
            *of.APIS,
            *sa.APIS,
            *sec.APIS,
            Api(
                API_VERSIONS,
                "ApiVersions",
                0,
                4,
                handle_api_versions,
                api_versions_error,
                before_authentication=True,
            ),
        ),
        key=lambda api: api.key,
    )
)


@functools.cache
def version_table() -> dict[tuple[int, int], ApiVersionEntry]:
    """(api_key, version) -> entry, for every advertised version. Loads the kio classes once."""
    table: dict[tuple[int, int], ApiVersionEntry] = {}
    for api in APIS:
        for version in range(api.min_version, api.max_version + 1):
            req_cls = request_class(api.key, version)
            resp_cls = response_class(api.key, version)
            table[(api.key, version)] = ApiVersionEntry(
                api=api,
                version=version,
                request_cls=req_cls,
                response_cls=resp_cls,
                read_header=entity_reader(req_cls.__header_schema__),
                read_body=entity_reader(req_cls),
                flexible_response_header=response_header_flexible(resp_cls),
                walk=has_arrays(req_cls) or has_arrays(req_cls.__header_schema__),
            )
    return table


def api_name(api_key: int) -> str:
    return next((a.name for a in APIS if a.key == api_key), f"api#{api_key}")


# what a SASL listener's connection may send before it is authenticated (the rows say)
BEFORE_AUTHENTICATION: Final = frozenset(a.key for a in APIS if a.before_authentication)
