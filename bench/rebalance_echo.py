"""The echo floor of figure 2 (bench/rebalance.py): a server that answers JoinGroup and SyncGroup
frames with the node's own replies, doing no group work.

It runs in its own process on the event loop the node uses (uvloop when installed), parses the
4-byte size framing like the node's server, and answers each request frame with the next reply
of its API queued on that connection, the request's correlation id written over the recorded
one; the replies to one read leave in one write, as the node gathers the replies ready in one
loop iteration. The replies are the very frames the node sent for the same requests in the
rebalance just before (so their sizes are the node's real sizes, and the leader's JoinGroup reply
carries the real member list the load generator decodes and assigns from).

The queues arrive over the connection itself, outside any timed window: a frame whose api key is
-1 carries `int32 count, count x (int16 api_key, int32 size, bytes)` and is answered with an
empty frame (its correlation id only).
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections import deque
from collections.abc import Iterator, Sequence

from bench.common import run_async, server_process

CONTROL = -1
_SIZE = struct.Struct(">i")
_I16 = struct.Struct(">h")
_HEAD = struct.Struct(">hhi")  # api key, api version, correlation id
_ENTRY = struct.Struct(">hi")


def control_frame(corr: int, replies: Sequence[tuple[int, bytes]]) -> bytes:
    """The frame that queues `replies` ((api key, reply frame without its size prefix), in the
    order the requests will arrive) on a connection of the echo server."""
    parts = [_HEAD.pack(CONTROL, 0, corr), _SIZE.pack(len(replies))]
    for api_key, reply in replies:
        parts.append(_ENTRY.pack(api_key, len(reply)))
        parts.append(reply)
    payload = b"".join(parts)
    return _SIZE.pack(len(payload)) + payload


class _Echo(asyncio.Protocol):
    def __init__(self) -> None:
        self.buf = bytearray()
        self.queues: dict[int, deque[tuple[bytes, bytes]]] = {}
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def _load(self, frame: bytes) -> None:
        (count,) = _SIZE.unpack_from(frame, 8)
        pos = 12
        for _ in range(count):
            api_key, size = _ENTRY.unpack_from(frame, pos)
            pos += _ENTRY.size
            reply = frame[pos : pos + size]
            pos += size
            # (size prefix, everything after the correlation id)
            self.queues.setdefault(api_key, deque()).append((_SIZE.pack(size), reply[4:]))

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        if buf:
            buf += data
            data = bytes(buf)
            buf.clear()
        queues = self.queues
        out = []
        pos, n = 0, len(data)
        while n - pos >= 4:
            (size,) = _SIZE.unpack_from(data, pos)
            end = pos + 4 + size
            if end > n:
                break
            (api_key,) = _I16.unpack_from(data, pos + 4)
            if api_key == CONTROL:
                self._load(data[pos + 4 : end])
                out.append(_SIZE.pack(4) + data[pos + 8 : pos + 12])
            else:
                head, tail = queues[api_key].popleft()
                out.append(head + data[pos + 8 : pos + 12] + tail)
            pos = end
        if out:
            self.transport.write(b"".join(out))  # type: ignore[union-attr]
        if pos < n:
            buf += data[pos:]


def serve(port: int) -> None:
    """Run the echo floor on 127.0.0.1:port until killed; prints 'ready' once listening."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(_Echo, "127.0.0.1", port)
        print("ready", flush=True)
        await server.serve_forever()

    run_async(main())


@contextlib.contextmanager
def echo_server() -> Iterator[tuple[int, int]]:
    """(port, pid) of a `serve` process, killed on exit."""
    with server_process(
        "from bench.rebalance_echo import serve; serve({port})", "echo server"
    ) as server:
        yield server
