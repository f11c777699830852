"""A small asyncio Kafka protocol client for tests and benchmarks.

It speaks raw frames with kio objects: `await client.request(kio_request)` returns the decoded
kio response; many requests may be in flight (replies are matched by correlation id). The
convenience wrappers build the right kio class for `version=` from plain arguments.

    client = await KafkaTestClient.connect("127.0.0.1", port, client_id="bench-1")
    resp = await client.join_group("g1", protocols=[("range", b"meta")], version=9)
"""

from __future__ import annotations

import asyncio
import itertools
import struct
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader

from app.kafka.codec import build

# the SDK's wire helpers, shared: frames and SASL tokens are built one way in this repository
from membership.wire import encode_request, sasl_client_tokens

_SIZE = struct.Struct(">i")


class ConnectionClosed(ConnectionError):
    pass


class AuthenticationError(Exception):
    pass


class _ClientProtocol(asyncio.Protocol):
    def __init__(self, client: KafkaTestClient) -> None:
        self.client = client
        self.buf = bytearray()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.client._transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        pos = 0
        while len(buf) - pos >= 4:
            (size,) = _SIZE.unpack_from(buf, pos)
            end = pos + 4 + size
            if end > len(buf):
                break
            self.client._on_frame(bytes(buf[pos + 4 : end]))
            pos = end
        del buf[:pos]

    def connection_lost(self, exc: Exception | None) -> None:
        self.client._on_lost(exc)


class KafkaTestClient:
    def __init__(self, client_id: str) -> None:
        self.client_id = client_id
        self._transport: asyncio.Transport | None = None
        self._pending: dict[int, tuple[asyncio.Future[Any], type[Any] | None]] = {}
        self._correlation = itertools.count(1)
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.received: list[int] = []  # correlation ids in arrival order
        self.unexpected: list[int] = []  # replies nobody asked for (a server bug)

    @classmethod
    async def connect(
        cls,
        host: str,
        port: int,
        client_id: str = "kafka-test-client",
        *,
        ssl: Any = None,
        sasl: tuple[str, str, str] | None = None,
    ) -> KafkaTestClient:
        """Connect (over TLS with an `ssl.SSLContext`), and authenticate when `sasl` is
        (mechanism, user, password): SaslHandshake v1, then SaslAuthenticate v2."""
        client = cls(client_id)
        loop = asyncio.get_running_loop()
        await loop.create_connection(
            lambda: _ClientProtocol(client),
            host,
            port,
            ssl=ssl,
            server_hostname=host if ssl is not None else None,
        )
        if sasl is not None:
            await client.authenticate(*sasl)
        return client

    async def authenticate(self, mechanism: str, user: str, password: str) -> None:
        """Kafka's SASL exchange; AuthenticationError with the server's message on failure."""
        handshake = await self.request(self.build_request(17, 1, mechanism=mechanism))
        if handshake.error_code != 0:
            raise AuthenticationError(f"SaslHandshake: {handshake.error_code!r}")
        for token in sasl_client_tokens(mechanism, user, password):
            reply = await self.request(self.build_request(36, 2, auth_bytes=token.send))
            if reply.error_code != 0:
                raise AuthenticationError(f"{reply.error_code!r}: {reply.error_message}")
            token.received(reply.auth_bytes)

    # --- core --------------------------------------------------------------------------------

    def encode(self, request: Any, correlation_id: int) -> bytes:
        return encode_request(request, correlation_id, self.client_id)

    def send(self, request: Any, *, expect_response: bool | None = None) -> asyncio.Future[Any]:
        """Write one request now (pipelining: call many times, await later); the future
        resolves to the decoded kio response, or None for Produce with acks=0, which
        gets no reply. The version is the kio class's."""
        if expect_response is None:
            expect_response = not (request.__api_key__ == 0 and request.acks == 0)
        correlation_id = next(self._correlation)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if expect_response:
            response_cls = load_response_schema(request.__api_key__, request.__version__)
            self._pending[correlation_id] = (fut, response_cls)
        else:
            fut.set_result(None)
        self._write(self.encode(request, correlation_id))
        return fut

    async def request(self, request: Any, *, timeout: float = 30.0) -> Any:
        """Send and await the decoded reply (a parked JoinGroup may take a while)."""
        return await asyncio.wait_for(self.send(request), timeout)

    async def request_raw(
        self,
        api_key: int,
        api_version: int,
        body: bytes,
        response_cls: type[Any] | None,
        *,
        flexible_header: bool = False,
        correlation_id: int | None = None,
        timeout: float = 30.0,
    ) -> Any:
        """Send a hand-made body under a request header; decode the reply as `response_cls`
        (None: return the raw reply frame after the correlation id)."""
        corr = next(self._correlation) if correlation_id is None else correlation_id
        client_id = self.client_id.encode()
        header = struct.pack(">hhih", api_key, api_version, corr, len(client_id)) + client_id
        if flexible_header:
            header += b"\x00"
        frame = header + body
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[corr] = (fut, response_cls)
        self._write(_SIZE.pack(len(frame)) + frame)
        return await asyncio.wait_for(fut, timeout)

    def expect(self, correlation_id: int, response_cls: type[Any] | None) -> asyncio.Future[Any]:
        """Register interest in a reply to a frame written with `send_raw`."""
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[correlation_id] = (fut, response_cls)
        return fut

    async def send_raw(self, data: bytes) -> None:
        """Write arbitrary bytes (malformed-input tests)."""
        self._write(data)
        await asyncio.sleep(0)

    async def wait_closed(self, timeout: float = 5.0) -> None:
        await asyncio.wait_for(asyncio.shield(self.closed), timeout)

    @property
    def is_closed(self) -> bool:
        return self.closed.done()

    async def close(self) -> None:
        if self._transport is not None:
            self._transport.close()
        if not self.closed.done():
            await self.wait_closed()

    def _write(self, data: bytes) -> None:
        if self._transport is None or self.closed.done():
            raise ConnectionClosed("connection closed")
        self._transport.write(data)

    def _on_frame(self, frame: bytes) -> None:
        (corr,) = _SIZE.unpack_from(frame, 0)
        self.received.append(corr)
        entry = self._pending.pop(corr, None)
        if entry is None:
            self.unexpected.append(corr)
            return
        fut, response_cls = entry
        if fut.done():
            return
        if response_cls is None:
            fut.set_result(frame[4:])
            return
        try:
            _, offset = entity_reader(response_cls.__header_schema__)(frame, 0)
            body, _ = entity_reader(response_cls)(frame, offset)
        except Exception as exc:
            fut.set_exception(exc)
        else:
            fut.set_result(body)

    def _on_lost(self, exc: Exception | None) -> None:
        for fut, _ in self._pending.values():
            if not fut.done():
                fut.set_exception(ConnectionClosed("connection closed by peer"))
        self._pending.clear()
        if not self.closed.done():
            self.closed.set_result(None)

    # --- convenience wrappers ----------------------------------------------------------------

    @staticmethod
    def build_request(api_key: int, version: int, **values: Any) -> Any:
        return build(load_request_schema(api_key, version), **values)

    async def api_versions(
        self,
        version: int = 3,
        software_name: str = "kafka-test-client",
        software_version: str = "1.0",
    ) -> Any:
        return await self.request(
            self.build_request(
                18,
                version,
                client_software_name=software_name,
                client_software_version=software_version,
            )
        )

    async def metadata(self, topics: Sequence[str] | None = None, version: int = 12) -> Any:
        return await self.request(
            self.build_request(
                3,
                version,
                topics=None if topics is None else [{"name": t} for t in topics],
                allow_auto_topic_creation=False,
            )
        )

    async def find_coordinator(self, key: str, key_type: int = 0, version: int = 3) -> Any:
        return await self.request(
            self.build_request(10, version, key=key, key_type=key_type, coordinator_keys=[key])
        )

    def join_group_request(
        self,
        group_id: str,
        member_id: str = "",
        *,
        protocols: Iterable[tuple[str, bytes]] = (("range", b""),),
        session_timeout_ms: int = 10_000,
        rebalance_timeout_ms: int = 30_000,
        group_instance_id: str | None = None,
        protocol_type: str = "consumer",
        reason: str | None = None,
        version: int = 9,
    ) -> Any:
        return self.build_request(
            11,
            version,
            group_id=group_id,
            session_timeout=session_timeout_ms,
            rebalance_timeout=rebalance_timeout_ms,
            member_id=member_id,
            group_instance_id=group_instance_id,
            protocol_type=protocol_type,
            protocols=[{"name": n, "metadata": m} for n, m in protocols],
            reason=reason,
        )

    async def join_group(
        self, group_id: str, member_id: str = "", *, version: int = 9, **kwargs: Any
    ) -> Any:
        return await self.request(
            self.join_group_request(group_id, member_id, version=version, **kwargs)
        )

    def sync_group_request(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        *,
        assignments: Mapping[str, bytes] | None = None,
        group_instance_id: str | None = None,
        protocol_type: str | None = "consumer",
        protocol_name: str | None = "range",
        version: int = 5,
    ) -> Any:
        return self.build_request(
            14,
            version,
            group_id=group_id,
            generation_id=generation_id,
            member_id=member_id,
            group_instance_id=group_instance_id,
            protocol_type=protocol_type,
            protocol_name=protocol_name,
            assignments=[{"member_id": m, "assignment": a} for m, a in (assignments or {}).items()],
        )

    async def sync_group(
        self, group_id: str, generation_id: int, member_id: str, *, version: int = 5, **kwargs: Any
    ) -> Any:
        return await self.request(
            self.sync_group_request(group_id, generation_id, member_id, version=version, **kwargs)
        )

    def heartbeat_request(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        *,
        group_instance_id: str | None = None,
        version: int = 4,
    ) -> Any:
        return self.build_request(
            12,
            version,
            group_id=group_id,
            generation_id=generation_id,
            member_id=member_id,
            group_instance_id=group_instance_id,
        )

    async def heartbeat(
        self, group_id: str, generation_id: int, member_id: str, *, version: int = 4, **kwargs: Any
    ) -> Any:
        return await self.request(
            self.heartbeat_request(group_id, generation_id, member_id, version=version, **kwargs)
        )

    async def leave_group(
        self,
        group_id: str,
        member_id: str = "",
        *,
        members: Sequence[tuple[str, str | None]] | None = None,
        reason: str | None = None,
        version: int = 5,
    ) -> Any:
        """v0-2: `member_id`; v3+: `members` [(member_id, group_instance_id)] (default: the
        single `member_id`)."""
        batch = members if members is not None else [(member_id, None)]
        return await self.request(
            self.build_request(
                13,
                version,
                group_id=group_id,
                member_id=member_id,
                members=[
                    {"member_id": m, "group_instance_id": i, "reason": reason} for m, i in batch
                ],
            )
        )

    def offset_commit_request(
        self,
        group_id: str,
        offsets: Mapping[tuple[str, int], int],
        *,
        generation_id: int = -1,
        member_id: str = "",
        group_instance_id: str | None = None,
        metadata: str | None = "",
        leader_epoch: int = -1,
        retention_time_ms: int = -1,
        version: int = 8,
    ) -> Any:
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for (topic, partition), offset in offsets.items():
            by_topic.setdefault(topic, []).append(
                {
                    "partition_index": partition,
                    "committed_offset": offset,
                    "committed_leader_epoch": leader_epoch,
                    "committed_metadata": metadata,
                }
            )
        return self.build_request(
            8,
            version,
            group_id=group_id,
            generation_id_or_member_epoch=generation_id,
            member_id=member_id,
            group_instance_id=group_instance_id,
            retention_time=retention_time_ms,
            topics=[{"name": t, "partitions": ps} for t, ps in by_topic.items()],
        )

    async def offset_commit(
        self, group_id: str, offsets: Mapping[tuple[str, int], int], **kwargs: Any
    ) -> Any:
        return await self.request(self.offset_commit_request(group_id, offsets, **kwargs))

    async def offset_fetch(
        self,
        group_id: str,
        partitions: Sequence[tuple[str, int]] | None = None,
        *,
        require_stable: bool = False,
        version: int = 8,
        groups: Mapping[str, Sequence[tuple[str, int]] | None] | None = None,
    ) -> Any:
        """`partitions` None = all committed (v2+). v8+ may ask several `groups` at once."""

        def topics(parts: Sequence[tuple[str, int]] | None) -> list[dict[str, Any]] | None:
            if parts is None:
                return None
            by_topic: dict[str, list[int]] = {}
            for t, p in parts:
                by_topic.setdefault(t, []).append(p)
            return [{"name": t, "partition_indexes": ps} for t, ps in by_topic.items()]

        wanted = dict(groups) if groups is not None else {group_id: partitions}
        return await self.request(
            self.build_request(
                9,
                version,
                group_id=group_id,
                topics=topics(partitions),
                require_stable=require_stable,
                groups=[{"group_id": g, "topics": topics(ps)} for g, ps in wanted.items()],
            )
        )
