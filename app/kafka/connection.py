"""The connection room of the wire edge: frames in, replies out in request order.

`FramedConnection` (an `asyncio.Protocol`, cheaper than streams) knows 4-byte size framing,
the bounds of one client (frame size, slow senders, idle connections, requests and reply bytes
in flight), backpressure both ways, and the order of replies; nothing of what a frame means. A
subclass serves each complete frame (`on_frame`, or `frame_at` to look at it in the read
before it is cut out) and answers it with `emit` (a reply ready now) or `reserve` then `fill`
(a reply made later, which keeps its place: replies leave strictly in request order). The
dispatching connection (app/kafka/dispatch.py) is one such subclass; a relaying one is another.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from collections import deque
from typing import Final, Protocol, cast

from app.kafka.limits import EARLY_WRITE_BYTES, HEAVY_FRAME_BYTES, TURN_SHARE_S, ServerLimits

# the listener's log, one name for every room of the edge (operators filter on it)
log = logging.getLogger("app.kafka.server")

SIZE: Final = struct.Struct(">i")
_unpack_size: Final = SIZE.unpack_from


class ReplySlot:
    """A reply position in the connection's output order; `data` None until it is ready."""

    __slots__ = ("data",)

    def __init__(self, data: bytes | None = None) -> None:
        self.data = data


class Slot(Protocol):
    """What holds a place in the output order: a ReplySlot, or a reply object that is its own
    slot (app/kafka/dispatch.py ParkedReply)."""

    data: bytes | None


class ConnectionOwner(Protocol):
    """The listener a connection belongs to: admission, the loop's turns for large frames,
    the node's load shedding."""

    limits: ServerLimits
    shedding: bool

    def admit(self, conn: FramedConnection) -> str | None: ...

    def forget(self, conn: FramedConnection) -> None: ...

    def take_heavy_turn(self) -> bool: ...

    def wait_heavy_turn(self, conn: FramedConnection) -> None: ...


class FramedConnection(asyncio.Protocol):
    def __init__(self, owner: ConnectionOwner) -> None:
        self._server = owner
        limits = owner.limits
        self._max_frame = limits.max_frame_bytes
        # False until a gate (app/kafka/gate.py) says the peer may be served; such a
        # connection must get there within the frame deadline
        self.authenticated = True
        self._connected_at = 0.0
        self._buf = bytearray()  # an incomplete frame carried over to the next read
        self._frame_started = 0.0  # loop time the incomplete frame in `_buf` began
        self.last_active = 0.0  # loop time of the last byte read or reply written
        self._need = 4  # bytes `_buf` must hold before the next frame can be complete
        self._slots: deque[Slot] = deque()
        self._queued_bytes = 0  # reply bytes ready in `_slots`, waiting behind an earlier one
        self._max_inflight = limits.max_inflight_requests
        self._max_queued_bytes = limits.max_queued_reply_bytes
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
        self._shed = owner.shedding  # the whole node sheds load (see KafkaServer._watch_lag)
        self._write_paused = False
        # the other side of a relay asks this connection to stop reading (app/gateway/relay.py)
        self._held = False
        # replies ready in one loop iteration leave in one write (one syscall, not one each);
        # a fixed-layout reply is three pieces here (size, correlation id, rest)
        self._out: list[bytes] = []
        self._write_scheduled = False
        self.clock = (0, 0)  # (wall ms, monotonic ms) read once per batch of frames

    # --- what a subclass serves ----------------------------------------------------------------

    def on_frame(self, frame: bytes) -> None:
        """Serve one complete frame (no size prefix)."""
        raise NotImplementedError

    def frame_at(self, data: bytes, start: int, end: int) -> None:
        """Serve the frame `data[start:end]`; a subclass may answer some frames from `data`
        itself, without the copy."""
        self.on_frame(data[start:end])

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
        # One reading of both clocks serves the frames of this read: it stops after
        # TURN_SHARE_S, so the reading is at most that old, far inside a lease's safety margin.
        self.clock = (time.time_ns() // 1_000_000, time.monotonic_ns() // 1_000_000)
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
            self.frame_at(data, pos + 4, end)  # a method call the compiled build makes in C
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

    # --- replies, in request order -------------------------------------------------------------

    def reserve(self) -> ReplySlot:
        """A place in the output order for a reply made later (`fill`)."""
        slot = ReplySlot()
        self._slots.append(slot)
        self._update_reading()
        return slot

    def fill(self, slot: Slot, data: bytes) -> None:
        """`slot`'s reply is `data` (b"": none): it leaves once every earlier one has."""
        slot.data = data
        self._queued_bytes += len(data)
        self._flush()

    def _emit(self, data: bytes) -> None:
        """Queue a ready reply behind the ones still being computed (order = request order)."""
        if not self._slots:
            self._write(data)
        else:
            self._slots.append(ReplySlot(data))
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

    def _write_pieces(self, size: bytes, correlation: bytes, tail: bytes) -> None:
        """A small reply in three pieces (`_write` of their join, without the join)."""
        if self._slots:
            # behind a reply still being computed
            self._emit(size + correlation + tail)
            return
        out = self._out
        out.append(size)
        out.append(correlation)
        out.append(tail)
        if not self._write_scheduled:
            self._write_scheduled = True
            assert self._loop is not None
            self._loop.call_soon(self._write_out)

    def _write_out(self) -> None:
        self._write_scheduled = False
        self._send()

    def _send(self) -> bool:
        """Write what `_out` holds, in one write; whether anything was written."""
        out = self._out
        if not out:
            return False
        data = out[0] if len(out) == 1 else b"".join(out)
        out.clear()
        if self._transport is None or self._closing:
            return False
        self._transport.write(data)
        if self._loop is not None:
            self.last_active = self._loop.time()
        return True

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
                and not self._held
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
            or self._held
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
