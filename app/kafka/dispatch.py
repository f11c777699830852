"""The dispatch room of the wire edge: a request through the API table to its handler.

`KafkaConnection` is the gated connection (app/kafka/gate.py) that serves requests from the
table of app/kafka/apis.py. Everything API-specific is on the API's row: its handler and error
shape, its WriteCall (`start`), its fast path (`hot`: a `struct` reader, and for a request
answered from memory its answer and fixed-layout encoder). This module names no API.

A handler runs eagerly up to its first suspension, so a request answered from memory never
creates a task; one that must wait keeps its reply's place in the output order. A request that
the row's hot reader read and whose row has a WriteCall skips even that when no ACLs apply: the
call makes the handler's checks and schedules the write, and the connection registers a
callback where the handler would await. An exception in a handler becomes an error reply in the
API's shape where it has one (protocol.md §11.3).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Coroutine
from typing import Any, Final, Protocol, cast

from app.group.messages import Error
from app.kafka.apis import (
    BEFORE_AUTHENTICATION,
    ApiVersionEntry,
    api_name,
    unsupported_version_reply,
    version_table,
)
from app.kafka.connection import ConnectionOwner, ReplySlot, Slot, log
from app.kafka.context import (
    NO_RESPONSE,
    AsyncHandler,
    DirectReply,
    HandlerResult,
    HotPath,
    MemoReader,
    RequestContext,
    WriteCall,
    WriteStarter,
    reply_error_code,
    resume,
)
from app.kafka.gate import REQUEST_PREFIX, GatedConnection
from app.security.listeners import Listener
from app.security.manager import SecurityManager
from app.service import CoordinatorError, CoordinatorService

_unpack_prefix: Final = REQUEST_PREFIX.unpack_from
# a memoizing hot path on a connection: its reader's memo, the path, the API's name, the reader
_Memo = tuple[dict[bytes, tuple[int, Any]], HotPath, str, MemoReader]


class Listening(ConnectionOwner, Protocol):
    """The listener a dispatching connection belongs to (app/kafka/server.py KafkaServer)."""

    service: CoordinatorService
    security: SecurityManager | None


class ParkedReply(DirectReply):
    """A lane request waiting for the core or its write: the DirectReply the runtime delivers
    into and the slot its bytes take in the output order, one object (with what its reply
    needs) where a slot, a DirectReply and a partial for the callback were three."""

    __slots__ = ("body", "call", "correlation_id", "data", "entry")

    def __init__(self, entry: ApiVersionEntry, body: Any, correlation_id: int) -> None:
        super().__init__()
        self.entry = entry
        self.body = body
        self.correlation_id = correlation_id
        self.call: WriteCall | None = None
        self.data: bytes | None = None


class KafkaConnection(GatedConnection):
    def __init__(self, server: Listening, listener: Listener) -> None:
        super().__init__(server, listener, server.security, BEFORE_AUTHENTICATION, api_name)
        self._service = server.service
        self._security = server.security
        # fixed for the node's life (COORD_AUTHORIZER): without ACLs a heartbeat asks no one
        self._acl_enabled = server.security is not None and server.security.acl_enabled
        self._authorizer = server.security if self._acl_enabled else None
        self._decode_limits = server.limits.decode
        self._table = version_table()
        # api key -> (its reader's memo, the row's hot path, the API's name, the reader), for
        # the rows whose hot path memoizes requests
        self._memos: dict[int, _Memo] = {}
        for key, (hot, name) in _memoized().items():
            reader = hot.memo_reader(self._decode_limits.max_client_id_bytes)
            assert reader is not None
            self._memos[key] = (reader.memo, hot, name, reader)
        # the service's request counter, if it keeps one: (api name, version, error code)
        self._request_counts: dict[tuple[str, int, int], int] | None = getattr(
            self._service, "request_counts", None
        )

    def frame_at(self, data: bytes, start: int, end: int) -> None:
        # A request with the bytes of one this connection read before (but for its correlation
        # id), of an API whose row memoizes them, is served straight from `data`: no copy of
        # the frame, no read.
        if end - start >= 8 and not data[start] and self.authenticated:
            memo = self._memos.get(data[start + 1])
            if memo is not None:
                seen = memo[0].get(data[start + 8 : end])
                if seen is not None and not data[start + 2] and seen[0] == data[start + 3]:
                    self._answer(memo[1], memo[2], seen[1], seen[0], data[start + 4 : start + 8])
                    return
        self.on_frame(data[start:end])

    def on_request(self, frame: bytes) -> None:
        api_key, version, correlation_id = _unpack_prefix(frame, 0)
        entry = self._table.get((api_key, version))
        if entry is None:
            reply = unsupported_version_reply(api_key, correlation_id)
            if reply is not None:
                self._emit(reply)
                return
            self.abort(f"unsupported request {api_name(api_key)} (key {api_key}) v{version}")
            return
        api = entry.api
        hot_path = api.hot
        # Any: the hot reader's request, or kio's entity of this API (never narrowed: the
        # compiled build checks a typed variable on every assignment)
        hot: Any = None
        if hot_path is not None:
            memo = self._memos.get(api_key)
            if memo is not None:
                hot = memo[3].read(frame, version)
            else:
                limits = self._decode_limits
                hot = hot_path.read(
                    frame,
                    version,
                    limits.max_client_id_bytes,
                    limits.max_request_elements,
                    self._host,
                )
            if hot is not None:
                if hot_path.answers:
                    self._answer(hot_path, api.name, hot, version, frame[4:8])
                    return
                if not self._acl_enabled and api.start is not None:
                    self._start(api.start, entry, hot, correlation_id)
                    return
        body: Any = hot
        if hot is not None:
            # a hot request that carries the client id (JoinGroup's) gives it to the context
            client_id = getattr(hot, "client_id", "")
        else:
            try:
                header, body = entry.decode(frame, self._decode_limits)
            except Exception as exc:
                self.abort(f"undecodable {api.name} v{version} request: {exc!r}")
                return
            client_id = header.client_id or ""
        ctx = self._context(version, client_id)
        try:
            if not api.is_async:
                result = api.handler(ctx, body)
            else:
                # Run the handler now, up to its first suspension: most requests (a Heartbeat,
                # a lookup, an answer from memory) never suspend and then need no Task at all.
                coro = cast("AsyncHandler", api.handler)(ctx, body)  # string: no typing cost
                try:
                    step = coro.send(None)
                except StopIteration as done:
                    result = done.value
                else:
                    self._park(coro, step, entry, ctx, body, correlation_id)
                    return
        except Exception as exc:
            result = self._error_result(entry, ctx, body, exc)
        data = self._encode(entry, ctx, body, correlation_id, result)
        if data:
            self._emit(data)

    def _context(self, version: int, client_id: str) -> RequestContext:
        return RequestContext(
            service=self._service,
            api_version=version,
            client_id=client_id,
            client_host=self._host,
            closed=self._closed,
            principal=self.principal,
            client_ip=self.ip,
            listener=self.listener,
            security=self._security,
            session=self._session,
        )

    def _answer(
        self, hot: HotPath, name: str, request: Any, version: int, correlation: bytes
    ) -> None:
        """A request answered from memory by its row's hot path, without a request context
        or kio (a call per step was a third of a heartbeat's cost). `correlation`: the
        request's correlation id bytes, which the reply repeats."""
        try:
            error = hot.answer(
                self._service, self._authorizer, self.principal, self.ip, request, self.clock
            )
        except CoordinatorError as exc:
            error = exc.error
        except Exception:
            log.exception("%s v%d from %s failed", name, version, self._peer)
            error = Error.UNKNOWN_SERVER_ERROR
        reply = hot.encode(version, error)
        counts = self._request_counts
        if counts is not None:
            key = reply.metric_key
            counts[key] = counts.get(key, 0) + 1
        self._write_pieces(reply.size, correlation, reply.tail)

    def _start(
        self, start: WriteStarter, entry: ApiVersionEntry, body: Any, correlation_id: int
    ) -> None:
        """A hot-read group write when no ACLs apply: the API's WriteCall, with a callback on
        its future in place of a parked handler coroutine (app/kafka/context.py)."""
        reply = ParkedReply(entry, body, correlation_id)
        try:
            call = start(self._service, body, entry.version, reply)
            fut = call.future
            if fut is None or fut.done():
                # answered at the edge, or by the core at once (a join that completes the
                # rebalance): inline, as a handler's await of a done future does not suspend
                if fut is not None:
                    call.settle(fut)
                    fut = None
                result = call.reply(entry.version)
            elif fut is not reply:  # a bug: nothing would fill the slot
                raise RuntimeError(f"{entry.api.name}'s write did not deliver into its reply")
        except (Exception, asyncio.CancelledError) as exc:  # a cancelled future's too
            fut, result = None, self._error_result(entry, None, body, exc)
        if fut is not None:  # waits for the core or its write, in its place in the output
            reply.call = call  # until settled: the call holds the reply as its future
            self._slots.append(reply)
            # called back from the runtime's delivery, another request's processing included
            # (the JoinGroup that completes a rebalance answers every member)
            reply.add_done_callback(self._settled)
            if len(self._slots) >= self._max_inflight:  # nothing else here can pause reading
                self._update_reading()
            return
        data = self._encode(entry, None, body, correlation_id, result)
        if data:
            self._emit(data)

    def _settled(self, reply: DirectReply) -> None:
        assert isinstance(reply, ParkedReply)  # the only kind `_start` registers this on
        entry, call = reply.entry, reply.call
        assert call is not None
        reply.call = None  # no cycle left for the collector
        error: BaseException | None = None
        try:
            call.settle(reply)
            result = call.reply(entry.version)
        except (Exception, asyncio.CancelledError) as exc:  # as a parked handler's outcome
            result, error = None, exc
        try:
            self._on_done(reply, entry, None, reply.body, reply.correlation_id, result, error)
        except Exception:
            # a reply that cannot be placed would hold every later one on this connection:
            # close it (only it; the runtime goes on delivering to the others)
            log.exception("%s v%d reply for %s failed", entry.api.name, entry.version, self._peer)
            self.abort(f"{entry.api.name} v{entry.version} reply failed")

    def _park(
        self,
        coro: Coroutine[Any, Any, HandlerResult],
        step: Any,
        entry: ApiVersionEntry,
        ctx: RequestContext,
        body: Any,
        correlation_id: int,
    ) -> None:
        """A handler that must wait: its reply keeps its place in the output order."""
        slot = self.reserve()
        resume(coro, step, functools.partial(self._on_done, slot, entry, ctx, body, correlation_id))

    def _on_done(
        self,
        slot: Slot,
        entry: ApiVersionEntry,
        ctx: RequestContext | None,
        body: Any,
        correlation_id: int,
        result: HandlerResult,
        exc: BaseException | None,
    ) -> None:
        """A parked request's outcome into its slot: the handler's result, or the exception it
        raised (its cancellation included), answered in the API's error shape."""
        if exc is not None:
            result = self._error_result(entry, ctx, body, exc)
        if self._closing:
            return
        data = self._encode(entry, ctx, body, correlation_id, result)
        if data is None:
            return  # abort() already closed the connection
        self.fill(slot, data)

    def _error_result(
        self,
        entry: ApiVersionEntry,
        ctx: RequestContext | None,
        body: Any,
        exc: BaseException | None,
    ) -> Any:
        """The reply for a handler that raised, in the API's own shape (None when it has
        none): the one place exceptions become Kafka errors. `CoordinatorError` carries the
        error to answer (a group not served here); anything else is UNKNOWN_SERVER_ERROR, logged
        unless it is a cancellation. `ctx` None: a request served without one (`_start`); one
        is made here."""
        if isinstance(exc, CoordinatorError):
            error = exc.error
        else:
            error = Error.UNKNOWN_SERVER_ERROR
            if exc is not None and not isinstance(exc, asyncio.CancelledError):
                log.error(
                    "%s v%d from %s failed",
                    entry.api.name,
                    entry.version,
                    self._peer,
                    exc_info=exc,
                )
        if entry.api.on_error is None:
            return None
        try:
            return entry.api.on_error(ctx or self._context(entry.version, ""), body, error)
        except Exception:
            log.exception(
                "building the error reply for %s v%d failed", entry.api.name, entry.version
            )
            return None

    def _encode(
        self,
        entry: ApiVersionEntry,
        ctx: RequestContext | None,
        body: Any,
        correlation_id: int,
        result: HandlerResult,
    ) -> bytes | None:
        """Reply bytes (b"" for no reply); None after closing the connection."""
        if result is NO_RESPONSE:
            return b""
        counts = self._request_counts
        if counts is not None and result is not None:
            api = entry.api
            key = (api.name, entry.version, reply_error_code(api.key, entry.version, result))
            counts[key] = counts.get(key, 0) + 1
        if result is not None:
            try:
                return entry.frame(correlation_id, result)
            except Exception:
                log.exception(
                    "encoding %s v%d reply for %s failed", entry.api.name, entry.version, self._peer
                )
                result = self._error_result(entry, ctx, body, None)
                if result is not None:
                    try:
                        return entry.frame(correlation_id, result)
                    except Exception:
                        log.exception("encoding the error reply failed too")
        self.abort(f"{entry.api.name} v{entry.version} failed and has no error reply shape")
        return None


@functools.cache
def _memoized() -> dict[int, tuple[HotPath, str]]:
    """(hot path, API name) of the table's rows that memoize their requests, by API key
    (under 256: the connection checks the key's high byte is zero before it looks)."""
    out: dict[int, tuple[HotPath, str]] = {}
    for (key, _), entry in version_table().items():
        hot = entry.api.hot
        if hot is not None and hot.memo_reader(0) is not None and 0 <= key < 256:
            out[key] = (hot, entry.api.name)
    return out


__all__ = ["KafkaConnection", "ParkedReply", "ReplySlot"]
