"""asyncio TCP server speaking the Kafka wire protocol.

One `KafkaConnection` (an `asyncio.Protocol`, cheaper than streams) per client: 4-byte size
framing, many requests in flight, replies written strictly in request order. A bad frame closes
only its own connection; an exception in a handler becomes an error reply where the API has a
shape for one. The event loop is whoever started it (uvloop if they installed it).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import ssl
import struct
import time
from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any, Final, cast

from app.group.messages import Error, JoinGroupRequest, SyncGroupRequest
from app.kafka.apis import (
    API_VERSIONS,
    ApiVersionEntry,
    api_name,
    unsupported_api_versions_frame,
    version_table,
)
from app.kafka.context import (
    NO_RESPONSE,
    AsyncHandler,
    DirectReply,
    HandlerResult,
    RequestContext,
    WriteCall,
    WriteStarter,
    reply_error_code,
    resume,
)
from app.kafka.group_apis import HEARTBEAT, HEARTBEAT_MAX_VERSION, JOIN_GROUP, SYNC_GROUP
from app.kafka.hot import HeartbeatFields, HeartbeatReader, heartbeat_answer
from app.kafka.hot_group import (
    OffsetCommitWire,
    read_join_group,
    read_offset_commit,
    read_sync_group,
)
from app.kafka.limits import (
    EARLY_WRITE_BYTES,
    HEAVY_FRAME_BYTES,
    SHED_CHECK_S,
    SHED_LAG_S,
    TURN_SHARE_S,
    ServerLimits,
)
from app.kafka.offset_apis import OFFSET_COMMIT
from app.kafka.sasl_apis import PRE_AUTH_APIS, PRE_AUTH_MAX_FRAME
from app.security.acl import AclOperation, ResourceType
from app.security.listeners import Listener, SecurityProtocol
from app.security.manager import SecurityManager
from app.security.principal import ANONYMOUS, certificate_principal
from app.security.session import AuthSession
from app.security.tls import TlsLayer
from app.service import CoordinatorError, CoordinatorService

log = logging.getLogger(__name__)


_SIZE: Final = struct.Struct(">i")
_unpack_size: Final = _SIZE.unpack_from
_REQUEST_PREFIX: Final = struct.Struct(">hhi")  # api_key, api_version, correlation_id


class _Slot:
    """A reply position in the connection's output order; `data` None until it is ready."""

    __slots__ = ("data",)

    def __init__(self, data: bytes | None = None) -> None:
        self.data = data


class _ParkedReply(DirectReply):
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


class KafkaConnection(asyncio.Protocol):
    def __init__(self, server: KafkaServer, listener: Listener) -> None:
        self._server = server
        self._service = server.service
        self._security = server.security
        # fixed for the node's life (COORD_AUTHORIZER): without ACLs a heartbeat asks no one
        self._acl_enabled = server.security is not None and server.security.acl_enabled
        self.listener = listener.name
        # who is asking: ANONYMOUS until a certificate or SASL says otherwise (Kafka's rule)
        self.principal = ANONYMOUS
        self._session: AuthSession | None = None
        self.authenticated = not listener.protocol.tls and not listener.protocol.sasl
        self._max_frame = server.limits.max_frame_bytes
        if listener.protocol.sasl:
            assert server.security is not None
            self._session = AuthSession(server.security)
            self._max_frame = min(PRE_AUTH_MAX_FRAME, self._max_frame)
        self._connected_at = 0.0
        self._decode_limits = server.limits.decode
        self._heartbeats = HeartbeatReader(self._decode_limits.max_client_id_bytes)
        self._table = version_table()
        # the service's request counter, if it keeps one: (api name, version, error code)
        self._request_counts: dict[tuple[str, int, int], int] | None = getattr(
            self._service, "request_counts", None
        )
        self._buf = bytearray()  # an incomplete frame carried over to the next read
        self._frame_started = 0.0  # loop time the incomplete frame in `_buf` began
        self.last_active = 0.0  # loop time of the last byte read or reply written
        self._need = 4  # bytes `_buf` must hold before the next frame can be complete
        self._slots: deque[_Slot | _ParkedReply] = deque()
        self._queued_bytes = 0  # reply bytes ready in `_slots`, waiting behind an earlier one
        self._max_inflight = server.limits.max_inflight_requests
        self._max_queued_bytes = server.limits.max_queued_reply_bytes
        self._transport: asyncio.Transport | None = None
        self._closed: asyncio.Future[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._peer = "?"
        self._host = ""
        self.ip = "?"
        self._closing = False
        self._reading_paused = False
        self._heavy_wait = False  # a large frame waits for the server's turn (see KafkaServer)
        self._yielding = False  # served its share of this loop turn; the rest waits for the next
        self._shed = server.shedding  # the whole node sheds load (see KafkaServer._watch_lag)
        self._write_paused = False
        # replies ready in one loop iteration leave in one write (one syscall, not one each);
        # a Heartbeat reply is three pieces here (size, correlation id, rest)
        self._out: list[bytes] = []
        self._write_scheduled = False
        self._clock = (0, 0)  # (wall ms, monotonic ms) read once per batch of frames

    # --- asyncio.Protocol --------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        self._loop = asyncio.get_running_loop()
        self._closed = self._loop.create_future()
        self.last_active = self._connected_at = self._loop.time()
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple) and len(peer) >= 2:
            # Kafka records clientAddress.toString(): "/127.0.0.1" (DescribeGroups ClientHost)
            self._host = f"/{peer[0]}"
            self._peer = f"{peer[0]}:{peer[1]}"
            self.ip = str(peer[0])
        refused = self._server.admit(self)
        if refused:
            self.abort(refused)
        elif self._shed:
            # the node sheds load: a new connection waits like the others (attackers that
            # open a connection per request would otherwise be the only ones served)
            self._update_reading()

    def tls_established(self, peercert: dict[str, Any] | None) -> None:
        """The TLS handshake is done (TlsLayer). Without SASL, the client certificate's
        subject is the principal (Kafka's default mapping), or ANONYMOUS without one."""
        if self._session is None:
            self.principal = certificate_principal(peercert) if peercert else ANONYMOUS
            self.authenticated = True

    def _authenticated_by_sasl(self, session: AuthSession) -> None:
        self.principal = session.principal
        self.authenticated = True
        self._max_frame = self._server.limits.max_frame_bytes

    def data_received(self, data: bytes) -> None:
        if self._closing:
            return
        assert self._loop is not None
        self.last_active = now = self._loop.time()
        buf = self._buf
        if not buf:
            self._frame_started = now
        else:
            # A frame is partly buffered: only join once it can be complete (a large frame
            # arriving in many chunks is then copied once, not once per chunk).
            buf += data
            if len(buf) < self._need or self._reading_paused:
                return
            data = bytes(buf)
            buf.clear()
        self._consume(data)

    def _consume(self, data: bytes) -> None:
        """Serve the complete frames of `data` and keep the rest. One read may hold thousands
        of small frames: serving stops as soon as the connection must stop reading (too many
        requests or reply bytes in flight), and the rest waits in `_buf` until it resumes."""
        pos = 0
        available = len(data)
        perf_counter = time.perf_counter
        started = perf_counter()
        # One reading of both clocks serves the heartbeats of this read: it stops after
        # TURN_SHARE_S, so the reading is at most that old, far inside a lease's safety margin.
        self._clock = (time.time_ns() // 1_000_000, time.monotonic_ns() // 1_000_000)
        on_frame = self._on_frame
        memo = self._heartbeats.memo
        while True:
            if available - pos < 4:
                self._need = 4
                break
            (size,) = _unpack_size(data, pos)
            if size < 0 or size > self._max_frame:
                self.abort(f"frame size {size} outside [0, {self._max_frame}]")
                return
            end = pos + 4 + size
            if end > available:
                self._need = end - pos
                break
            if size >= HEAVY_FRAME_BYTES and not self._server.take_heavy_turn():
                # another large frame was served in this turn of the loop: wait for the next,
                # so small requests of every connection (heartbeats) go first
                self._heavy_wait = True
                self._need = 4
                self._server.wait_heavy_turn(self)
                self._update_reading()
                break
            # A Heartbeat with the bytes of one this connection read before (but for its
            # correlation id) is served straight from `data`: no copy of the frame, no read.
            seen = (
                memo.get(data[pos + 12 : end])
                if size >= 8
                and data[pos + 5] == HEARTBEAT
                and not data[pos + 4]
                and self.authenticated
                else None
            )
            if seen is not None and not data[pos + 6] and seen[0] == data[pos + 7]:
                self._heartbeat(seen[1], seen[0], data[pos + 8 : pos + 12])
            else:
                on_frame(data[pos + 4 : end])
            pos = end
            if self._closing:
                return
            if self._reading_paused:
                self._need = 4
                break
            if pos < available and perf_counter() - started > TURN_SHARE_S:
                # one read can hold thousands of frames: after its share of the loop's turn,
                # this connection lets the others go first and serves the rest next turn
                self._yielding = True
                self._need = 4
                self._update_reading()
                assert self._loop is not None
                self._loop.call_soon(self._end_yield)
                break
        if pos < available:
            self._buf += memoryview(data)[pos:]

    @property
    def closing(self) -> bool:
        return self._closing

    def shed(self, on: bool) -> None:
        self._shed = on
        self._update_reading()

    def heavy_turn(self) -> None:
        """The server's turn for a large frame came: serve what waited."""
        self._heavy_wait = False
        self._update_reading()
        self._resume_buffered()

    def _end_yield(self) -> None:
        self._yielding = False
        self._update_reading()

    def _resume_buffered(self) -> None:
        """Reading resumed: serve the frames that arrived while it was paused."""
        if self._buf and not self._reading_paused and not self._closing:
            data = bytes(self._buf)
            self._buf.clear()
            if self._loop is not None:
                self._frame_started = self._loop.time()
            self._consume(data)

    def eof_received(self) -> bool | None:
        self._write_out()  # the replies already made go out before the transport closes
        if self._buf:
            self.abort(f"truncated frame: connection ended {len(self._buf)} bytes into a frame")
        return None  # let the transport close

    def connection_lost(self, exc: Exception | None) -> None:
        self._closing = True
        self._slots.clear()
        if self._closed is not None and not self._closed.done():
            self._closed.set_result(None)
        self._server.forget(self)

    def check_deadlines(self, now: float, limits: ServerLimits) -> None:
        """Called about once a second: slow senders and idle connections are closed."""
        if self._closing:
            return
        if (
            self._buf
            and not self._reading_paused  # paused by us: complete frames may wait here
            and now - self._frame_started > limits.frame_deadline_ms / 1000
        ):
            self.abort(
                f"a frame begun {now - self._frame_started:.0f} s ago is still incomplete "
                f"({len(self._buf)} bytes of {self._need})"
            )
        elif not self.authenticated and now - self._connected_at > limits.frame_deadline_ms / 1000:
            # a TLS handshake or SASL exchange must not hold a connection slot for ever
            self.abort(f"not authenticated within {limits.frame_deadline_ms} ms")
        elif not self._slots and now - self.last_active > limits.connections_max_idle_ms / 1000:
            log.info("closing idle Kafka connection from %s", self._peer)
            self.close()

    def pause_writing(self) -> None:
        self._write_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        self._update_reading()

    # --- requests ----------------------------------------------------------------------------

    def _on_frame(self, frame: bytes) -> None:
        if len(frame) < _REQUEST_PREFIX.size:
            self.abort(f"frame of {len(frame)} bytes is shorter than a request header")
            return
        if not self.authenticated and not self._before_authentication(frame):
            return
        api_key, version, correlation_id = _REQUEST_PREFIX.unpack_from(frame, 0)
        if api_key == HEARTBEAT and 0 <= version <= HEARTBEAT_MAX_VERSION:
            fields = self._heartbeats.read(frame, version)
            if fields is not None:
                self._heartbeat(fields, version, frame[4:8])
                return
        entry = self._table.get((api_key, version))
        if entry is None:
            if api_key == API_VERSIONS:
                self._emit(unsupported_api_versions_frame(correlation_id))
                return
            self.abort(f"unsupported request {api_name(api_key)} (key {api_key}) v{version}")
            return
        hot = self._read_hot(api_key, version, frame)
        # Any: the hot reader's request, or kio's entity of this API (never narrowed: the
        # compiled build checks a typed variable on every assignment)
        body: Any = hot
        if hot is not None and not self._acl_enabled:
            start = entry.api.start
            if start is not None:  # every hot-read API has one (tests/protocol/test_server.py)
                self._start(start, entry, hot, correlation_id)
                return
        if hot is not None:
            client_id = hot.client_id if isinstance(hot, JoinGroupRequest) else ""
        else:
            try:
                header, body = entry.decode(frame, self._decode_limits)
            except Exception as exc:
                self.abort(f"undecodable {entry.api.name} v{version} request: {exc!r}")
                return
            client_id = header.client_id or ""
        ctx = self._context(version, client_id)
        api = entry.api
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

    def _start(
        self, start: WriteStarter, entry: ApiVersionEntry, body: Any, correlation_id: int
    ) -> None:
        """A hot-read group write when no ACLs apply: the API's WriteCall, with a callback on
        its future in place of a parked handler coroutine (app/kafka/context.py)."""
        reply = _ParkedReply(entry, body, correlation_id)
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
        assert isinstance(reply, _ParkedReply)  # the only kind `_start` registers this on
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

    def _heartbeat(self, fields: HeartbeatFields, version: int, correlation: bytes) -> None:
        """The hot path of a Heartbeat read by app/kafka/hot.py: what `handle_heartbeat` and
        `_error_result` do, without a request context or kio, written out here (a call per
        step was a third of a heartbeat's cost). `correlation`: the request's correlation id bytes,
        which the reply repeats."""
        group_id, generation_id, member_id, instance_id = fields
        security = self._security
        if (
            self._acl_enabled
            and security is not None
            and not security.authorize(
                self.principal, self.ip, AclOperation.READ, ResourceType.GROUP, group_id
            )
        ):
            error = Error.GROUP_AUTHORIZATION_FAILED
        else:
            try:
                error = self._service.heartbeat(
                    group_id, generation_id, member_id, instance_id, self._clock
                )
            except CoordinatorError as exc:
                error = exc.error
            except Exception:
                log.exception("Heartbeat v%d from %s failed", version, self._peer)
                error = Error.UNKNOWN_SERVER_ERROR
        answer = heartbeat_answer(version, error)
        counts = self._request_counts
        if counts is not None:
            key = answer.metric_key
            counts[key] = counts.get(key, 0) + 1
        if self._slots:
            # behind a reply still being computed
            self._emit(answer.size + correlation + answer.tail)
            return
        out = self._out  # `_write`, inlined; `_write_out` joins the pieces
        out.append(answer.size)
        out.append(correlation)
        out.append(answer.tail)
        if not self._write_scheduled:
            self._write_scheduled = True
            assert self._loop is not None
            self._loop.call_soon(self._write_out)

    def _read_hot(
        self, api_key: int, version: int, frame: bytes
    ) -> JoinGroupRequest | SyncGroupRequest | OffsetCommitWire | None:
        """A rebalance's JoinGroup or SyncGroup, or an OffsetCommit, read by
        app/kafka/hot_group.py straight into what its handler takes; None: kio's generic
        reader decides."""
        limits = self._decode_limits
        if api_key == JOIN_GROUP:
            return read_join_group(
                frame,
                version,
                limits.max_client_id_bytes,
                limits.max_request_elements,
                self._host,
            )
        if api_key == SYNC_GROUP:
            return read_sync_group(
                frame, version, limits.max_client_id_bytes, limits.max_request_elements
            )
        if api_key == OFFSET_COMMIT:
            return read_offset_commit(
                frame, version, limits.max_client_id_bytes, limits.max_request_elements
            )
        return None

    def _before_authentication(self, frame: bytes) -> bool:
        """Kafka's rule for a SASL listener: before authentication only ApiVersions and the
        SASL requests are served; anything else closes the connection. True: serve `frame`."""
        session = self._session
        if session is None:
            self.abort("request before the TLS handshake completed")
            return False
        if session.authenticated:
            self._authenticated_by_sasl(session)
            return True
        if session.raw_tokens and session.server is not None:
            self._raw_token(session, frame)  # after SaslHandshake v0: the frame is the token
            return False
        (api_key,) = struct.unpack_from(">h", frame, 0)
        if api_key not in PRE_AUTH_APIS:
            self.abort(f"{api_name(api_key)} request before SASL authentication")
            return False
        return True

    def _raw_token(self, session: AuthSession, token: bytes) -> None:
        slot = _Slot()
        self._slots.append(slot)
        assert self._loop is not None
        task = self._loop.create_task(session.step(token, self.ip), name="sasl-token")

        def done(task: asyncio.Task[bytes]) -> None:
            if self._closing:
                return
            if task.cancelled() or task.exception() is not None:
                self.abort(f"SASL authentication failed: {task.exception()}")
                return
            reply = task.result()
            slot.data = _SIZE.pack(len(reply)) + reply
            self._queued_bytes += len(slot.data)
            self._flush()

        task.add_done_callback(done)
        self._update_reading()

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
        slot = _Slot()
        self._slots.append(slot)
        resume(coro, step, functools.partial(self._on_done, slot, entry, ctx, body, correlation_id))
        self._update_reading()

    def _on_done(
        self,
        slot: _Slot | _ParkedReply,
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
        slot.data = data
        self._queued_bytes += len(data)
        self._flush()

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

    def _emit(self, data: bytes) -> None:
        """Queue a ready reply behind the ones still being computed (order = request order)."""
        if not self._slots:
            self._write(data)
        else:
            self._slots.append(_Slot(data))
            self._queued_bytes += len(data)
            self._update_reading()

    def _flush(self) -> None:
        slots = self._slots
        while slots and slots[0].data is not None:
            data = slots.popleft().data
            if data:
                self._queued_bytes -= len(data)
                self._write(data)
        self._update_reading()

    def _write(self, data: bytes) -> None:
        self._out.append(data)
        if len(data) >= EARLY_WRITE_BYTES:
            # a large reply leaves now, with what queued before it: one more syscall is little
            # beside its bytes, and its client starts on it sooner (the leader's JoinGroup
            # reply: it assigns while the node answers the other members); a write already
            # scheduled for this turn takes what comes after
            self._send()
            return
        if not self._write_scheduled:
            self._write_scheduled = True
            assert self._loop is not None
            self._loop.call_soon(self._write_out)

    def _write_out(self) -> None:
        self._write_scheduled = False
        self._send()

    def _send(self) -> None:
        """Write what `_out` holds, in one write."""
        out = self._out
        if not out:
            return
        data = out[0] if len(out) == 1 else b"".join(out)
        out.clear()
        if self._transport is not None and not self._closing:
            self._transport.write(data)
            if self._loop is not None:
                self.last_active = self._loop.time()
            if self._session is not None and self._session.failed and self._loop is not None:
                # a failed authentication is answered, then the connection ends, a moment
                # later so the client reads the answer first (Kafka's
                # connection.failed.authentication.delay.ms)
                self._closing = True
                self._transport.pause_reading()
                delay = self._session.security.logins.delay_s
                self._loop.call_later(delay, self._transport.close)

    def _update_reading(self) -> None:
        transport = self._transport
        if transport is None or self._closing:
            return
        if self._reading_paused:
            if (
                not self._heavy_wait
                and not self._yielding
                and not self._shed
                and not self._write_paused
                and len(self._slots) < self._max_inflight // 2
                and self._queued_bytes < self._max_queued_bytes // 2
            ):
                self._reading_paused = False
                transport.resume_reading()
                if self._buf and self._loop is not None:
                    self._loop.call_soon(self._resume_buffered)
        elif (
            self._heavy_wait
            or self._yielding
            or self._shed
            or self._write_paused
            or len(self._slots) >= self._max_inflight
            or self._queued_bytes >= self._max_queued_bytes
        ):
            self._reading_paused = True
            transport.pause_reading()

    # --- closing -----------------------------------------------------------------------------

    def abort(self, reason: str) -> None:
        """Close this connection because of what the peer sent; nothing else is affected."""
        if self._closing:
            return
        log.warning("closing Kafka connection from %s: %s", self._peer, reason)
        self.close()

    def close(self) -> None:
        self._closing = True
        self._slots.clear()
        self._out.clear()
        if self._transport is not None:
            self._transport.close()


class KafkaServer(asyncio.AbstractServer):
    """The listening socket plus its connections; `close()` also drops open connections."""

    def __init__(
        self,
        service: CoordinatorService,
        host: str,
        port: int,
        limits: ServerLimits,
        *,
        listeners: list[Listener] | None = None,
        security: SecurityManager | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.service = service
        self.host = host
        self.requested_port = port
        self.limits = limits
        self.listeners = listeners or [Listener(SecurityProtocol.PLAINTEXT, host, port, host, port)]
        self.security = security
        self.tls = tls
        for listener in self.listeners:
            if listener.protocol.sasl and security is None:
                raise ValueError(f"a {listener.name} listener needs the security manager")
            if listener.protocol.tls and (tls is None or security is None):
                raise ValueError(f"a {listener.name} listener needs a TLS context")
        self._servers: dict[str, asyncio.Server] = {}
        self.connections: set[KafkaConnection] = set()
        self._per_ip: dict[str, int] = {}
        self._server: asyncio.Server | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self._heavy_taken = False
        self._heavy_waiting: deque[KafkaConnection] = deque()
        self.shedding = False
        self._watchdog: asyncio.Task[None] | None = None

    async def start(self) -> KafkaServer:
        version_table()  # load every kio class before the first client arrives
        loop = asyncio.get_running_loop()
        for listener in self.listeners:
            self._servers[listener.name] = await loop.create_server(
                functools.partial(self._protocol, listener), listener.host, listener.port
            )
        self._server = self._servers[self.listeners[0].name]
        self._sweeper = loop.create_task(self._sweep(), name="kafka-connection-deadlines")
        self._watchdog = loop.create_task(self._watch_lag(), name="kafka-load-shedding")
        return self

    async def _watch_lag(self) -> None:
        """When the loop falls behind (a flood of requests, however valid each is), every
        connection stops reading until it catches up: lease renewals and timers, which wait
        for turns of the same loop, must not starve, or the node would lose its leases."""
        loop = asyncio.get_running_loop()
        # optional metrics hook of the service: each reading, in seconds
        observe: Callable[[float], None] | None = getattr(self.service, "observe_loop_lag", None)
        while True:
            started = loop.time()
            await asyncio.sleep(SHED_CHECK_S)
            lag = max(loop.time() - started - SHED_CHECK_S, 0.0)
            if observe is not None:
                observe(lag)
            if lag > SHED_LAG_S and not self.shedding:
                self._shed_all(True)
            elif lag < SHED_LAG_S / 4 and self.shedding:
                self._shed_all(False)

    def _shed_all(self, on: bool) -> None:
        self.shedding = on
        for conn in list(self.connections):
            conn.shed(on)

    def _protocol(self, listener: Listener) -> asyncio.Protocol:
        conn = KafkaConnection(self, listener)
        if not listener.protocol.tls:
            return conn
        assert self.tls is not None and self.security is not None
        return TlsLayer(conn, self.tls, self.security.offload)

    def port_of(self, listener: str) -> int:
        return int(self._servers[listener].sockets[0].getsockname()[1])

    def admit(self, conn: KafkaConnection) -> str | None:
        """Count a new connection in; the reason to refuse it when over a limit."""
        limits = self.limits
        if len(self.connections) >= limits.max_connections:
            return f"{len(self.connections)} connections open (COORD_MAX_CONNECTIONS)"
        n = self._per_ip.get(conn.ip, 0)
        if n >= limits.max_connections_per_ip:
            return f"{n} connections open from {conn.ip} (COORD_MAX_CONNECTIONS_PER_IP)"
        self.connections.add(conn)
        self._per_ip[conn.ip] = n + 1
        return None

    def take_heavy_turn(self) -> bool:
        """Whether a large frame may be served now (one per turn of the loop)."""
        if self._heavy_taken:
            return False
        self._heavy_taken = True
        asyncio.get_running_loop().call_soon(self._next_heavy_turn)
        return True

    def wait_heavy_turn(self, conn: KafkaConnection) -> None:
        self._heavy_waiting.append(conn)

    def _next_heavy_turn(self) -> None:
        self._heavy_taken = False
        while self._heavy_waiting:
            conn = self._heavy_waiting.popleft()
            if not conn.closing:
                conn.heavy_turn()
                return

    def forget(self, conn: KafkaConnection) -> None:
        if conn in self.connections:
            self.connections.discard(conn)
            n = self._per_ip.get(conn.ip, 1) - 1
            if n > 0:
                self._per_ip[conn.ip] = n
            else:
                self._per_ip.pop(conn.ip, None)

    async def _sweep(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(1)
            now = loop.time()
            for conn in list(self.connections):
                conn.check_deadlines(now, self.limits)

    @property
    def server(self) -> asyncio.Server:
        if self._server is None:
            raise RuntimeError("KafkaServer not started")
        return self._server

    @property
    def sockets(self) -> tuple[Any, ...]:
        return tuple(self.server.sockets)

    @property
    def port(self) -> int:
        """The bound port (useful with port 0)."""
        return int(self.server.sockets[0].getsockname()[1])

    def close(self) -> None:
        for server in self._servers.values():
            server.close()
        for task in (self._sweeper, self._watchdog):
            if task is not None:
                task.cancel()
        self._sweeper = self._watchdog = None
        for conn in list(self.connections):
            conn.close()

    async def wait_closed(self) -> None:
        for server in self._servers.values():
            await server.wait_closed()

    async def stop(self) -> None:
        self.close()
        await self.wait_closed()

    def get_loop(self) -> asyncio.AbstractEventLoop:
        return self.server.get_loop()

    def is_serving(self) -> bool:
        return self._server is not None and self._server.is_serving()

    async def start_serving(self) -> None:
        await self.server.start_serving()

    async def serve_forever(self) -> None:
        await self.server.serve_forever()


async def start_kafka_server(
    service: CoordinatorService,
    host: str,
    port: int,
    limits: ServerLimits | None = None,
    *,
    listeners: list[Listener] | None = None,
    security: SecurityManager | None = None,
    tls: ssl.SSLContext | None = None,
) -> KafkaServer:
    """Listen on host:port (one PLAINTEXT listener), or on `listeners`; returns a started
    `KafkaServer` (an `asyncio.AbstractServer`)."""
    server = KafkaServer(
        service,
        host,
        port,
        limits or ServerLimits(),
        listeners=listeners,
        security=security,
        tls=tls,
    )
    return await server.start()
