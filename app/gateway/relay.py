"""The gateway's client connection: group APIs answered here, the rest relayed upstream.

`GatewayConnection` is the dispatching connection (app/kafka/dispatch.py) with one more route.
A request the coordinator answers goes through the table as on any node; a relayed one takes its
place in the output order (`reserve`), goes to the port's broker over this connection's own
upstream link (app/gateway/upstream.py), and its reply fills that place, so replies leave in
request order whichever side made them. A Produce with acks=0 takes no place: the broker sends
no reply. The link is opened at the first relayed request and authenticated as the gateway;
until it is up, requests wait in order (bounded like replies).

Backpressure both ways: the link stops reading from the broker while this client's replies
wait unsent (its socket is full, or an earlier reply is not made yet) beyond
COORD_MAX_QUEUED_REPLY_BYTES; this connection stops reading from its client while the link's
socket is full or requests wait for it beyond the same bound. A lost link closes the client's
connection (its client reconnects, asks for Metadata and follows the leader: the usual path).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Protocol

from app.gateway import authorize, rewrite
from app.gateway.routes import (
    PRODUCE,
    Malformed,
    Route,
    api_name,
    find_coordinator_key_type,
    produce_acks,
    route,
)
from app.gateway.upstream import UpstreamLink, open_link
from app.kafka.apis import unsupported_api_versions_frame
from app.kafka.connection import SIZE, ReplySlot
from app.kafka.dispatch import KafkaConnection, Listening
from app.kafka.gate import REQUEST_PREFIX
from app.security.listeners import Listener
from membership.wire import AuthenticationFailed, ConnectionLost

if TYPE_CHECKING:
    from collections.abc import Callable

    from app.gateway.cluster import UpstreamCluster
    from app.gateway.metrics import GatewayMetrics
    from app.gateway.upstream import UpstreamConfig

log = logging.getLogger("app.gateway")
_unpack_prefix: Final = REQUEST_PREFIX.unpack_from
_CORRELATION: Final = SIZE.unpack_from


class Hub(Protocol):
    """What every relaying connection shares (app/gateway/gateway.py Gateway)."""

    config: UpstreamConfig
    cluster: UpstreamCluster
    metrics: GatewayMetrics

    def upstream_address(self, broker_id: int | None) -> tuple[str, int] | None: ...

    def addresses(
        self, listener: Listener
    ) -> tuple[Callable[[int], tuple[str, int] | None], list[tuple[int, str, int]]]: ...

    def api_versions(self, version: int, request: Any, authorized: bool) -> Any: ...

    def advertised_ranges(self, authorized: bool) -> dict[int, tuple[int, int]]: ...


class GatewayListening(Listening, Protocol):
    """The listener a relaying connection belongs to (GatewayServer)."""

    @property
    def gateway(self) -> Hub: ...


@dataclass(slots=True)
class Relayed:
    """A relayed request whose reply the link will bring."""

    slot: ReplySlot
    api_key: int
    version: int
    correlation_id: int
    route: Route
    edit: authorize.Edit | None = None  # the denied resources' answers, joined to the reply


class GatewayConnection(KafkaConnection):
    def __init__(self, server: GatewayListening, listener: Listener, broker_id: int | None) -> None:
        super().__init__(server, listener)
        self._gateway = server.gateway
        self._client_listener = listener
        self.broker_id = broker_id  # None: the bootstrap port, any broker
        self._link: UpstreamLink | None = None
        self._opening: asyncio.Task[None] | None = None
        self._unsent: list[tuple[bytes, bytes]] = []  # (size, frame) until the link is up
        self._unsent_bytes = 0
        self._relayed: deque[Relayed] = deque()
        self._link_full = False  # the link's socket cannot take more

    # --- routing -----------------------------------------------------------------------------

    def on_request(self, frame: bytes) -> None:
        api_key, version, correlation_id = _unpack_prefix(frame, 0)
        how = route(api_key)
        try:
            if how is Route.LOCAL:
                super().on_request(frame)
            elif how is Route.API_VERSIONS:
                self._api_versions(frame, version, correlation_id)
            elif how is Route.FIND_COORDINATOR and find_coordinator_key_type(frame, version) == 0:
                super().on_request(frame)  # a group's coordinator: ours
            elif how is None or (
                self._authorizer is not None and api_key not in authorize.AUTHORIZED
            ):
                self.abort(f"{api_name(api_key)} (key {api_key}) is not served through the gateway")
            else:
                self._relay(frame, api_key, version, correlation_id, how)
        except Malformed as e:
            self.abort(f"malformed {api_name(api_key)} v{version} request: {e}")

    def _api_versions(self, frame: bytes, version: int, correlation_id: int) -> None:
        entry = self._table.get((18, version))
        if entry is None:  # a version we do not know: KIP-511's v0 answer, with what we
            # advertise (the table alone would hide every relayed API from such a client)
            ranges = self._gateway.advertised_ranges(self._authorizer is not None)
            self._emit(unsupported_api_versions_frame(correlation_id, ranges))
            return
        try:
            _, body = entry.decode(frame, self._decode_limits)
        except Exception as exc:
            self.abort(f"undecodable ApiVersions v{version} request: {exc!r}")
            return
        answer = self._gateway.api_versions(version, body, self._authorizer is not None)
        self._emit(entry.frame(correlation_id, answer))

    # --- relaying ----------------------------------------------------------------------------

    def _relay(
        self, frame: bytes, api_key: int, version: int, correlation_id: int, how: Route
    ) -> None:
        edit = None
        if self._authorizer is not None:
            verdict = self._authorize(frame, api_key, version)
            if verdict is not None:
                if verdict.frame is None:  # nothing of it may go upstream
                    self._gateway.metrics.refused(api_key)
                    if verdict.reply is not None:
                        self._emit(verdict.reply)
                    return
                frame, edit = verdict.frame, verdict.edit
        if api_key != PRODUCE or produce_acks(frame, version) != 0:
            slot = self.reserve()
            self._relayed.append(Relayed(slot, api_key, version, correlation_id, how, edit))
        self._gateway.metrics.relayed(api_key, len(frame) + 4)
        size = SIZE.pack(len(frame))
        link = self._link
        if link is not None:
            link.send(size, frame)
            return
        self._unsent.append((size, frame))
        self._unsent_bytes += len(frame)
        self._flow()
        if self._opening is None:
            self._opening = self._loop_or_raise().create_task(self._open(), name="upstream-link")

    def _authorize(self, frame: bytes, api_key: int, version: int) -> authorize.Verdict | None:
        assert self._authorizer is not None
        caller = authorize.Caller(
            self._authorizer,
            self.principal,
            self.ip,
            self._gateway.cluster.topic_names,
            self._decode_limits,
        )
        try:
            return authorize.check(frame, api_key, version, caller)
        except Malformed:
            raise
        except Exception as e:  # a request kio reads but no check expected: refused, not relayed
            log.exception("checking a %s v%d request failed", api_name(api_key), version)
            raise Malformed(f"the request could not be checked ({e!r})") from None

    def _loop_or_raise(self) -> asyncio.AbstractEventLoop:
        assert self._loop is not None
        return self._loop

    async def _open(self) -> None:
        gateway = self._gateway
        address = gateway.upstream_address(self.broker_id)
        if address is None:
            gateway.cluster.request_refresh()
            self._upstream_failed(f"upstream broker {self.broker_id} is not known to the gateway")
            return
        try:
            link = await open_link(gateway.config, address, gateway.cluster.context)
        except (ConnectionLost, AuthenticationFailed) as e:
            gateway.cluster.request_refresh()
            self._upstream_failed(str(e))
            return
        if self._closing:
            link.close()
            return
        if link.closed:  # lost between its connect and now
            self._upstream_failed(f"connection to upstream broker {address[0]}:{address[1]} lost")
            return
        link.owner = self
        self._link = link
        for size, frame in self._unsent:
            link.send(size, frame)
        self._unsent.clear()
        self._unsent_bytes = 0
        self._flow()

    def _upstream_failed(self, reason: str) -> None:
        self._gateway.metrics.upstream_error()
        self.abort(reason)

    # --- the link's side (LinkOwner) ---------------------------------------------------------

    def upstream_frame(self, frame: bytes) -> None:
        if self._closing:
            return
        if not self._relayed:
            self.abort("the upstream broker sent a reply to no request")
            return
        relayed = self._relayed.popleft()
        (correlation_id,) = _CORRELATION(frame, 4)
        if correlation_id != relayed.correlation_id:
            self.abort(
                f"upstream reply {correlation_id} where {relayed.correlation_id} was expected"
            )
            return
        if relayed.route is not Route.RELAY or relayed.edit is not None:
            try:
                frame = self._rewrite(frame, relayed)
            except Exception:
                log.exception(
                    "rewriting a %s v%d reply failed", api_name(relayed.api_key), relayed.version
                )
                self.abort(f"{api_name(relayed.api_key)} reply could not be rewritten")
                return
        self._gateway.metrics.replied(relayed.api_key, len(frame))
        self.fill(relayed.slot, frame)
        self._flow()

    def _rewrite(self, frame: bytes, relayed: Relayed) -> bytes:
        """The reply with the brokers it names at their gateway addresses, and the answers of
        what our ACLs kept from the upstream (app/gateway/authorize.py)."""
        correlation_id, flexible, body = rewrite.decode(frame, relayed.api_key, relayed.version)
        how = relayed.route
        if how is Route.METADATA:
            self._gateway.cluster.learn(body)  # every topic, before the principal's filter
        if relayed.edit is not None:
            body = relayed.edit(body)
        if how is not Route.RELAY:
            place, coordinators = self._gateway.addresses(self._client_listener)
            if how is Route.FIND_COORDINATOR:
                body = rewrite.find_coordinator(body, relayed.version, place)
            else:
                body = rewrite.brokers(body, place, coordinators)
        return rewrite.encode(correlation_id, flexible, body)

    def upstream_writable(self, writable: bool) -> None:
        self._link_full = not writable
        self._flow()

    def upstream_lost(self, reason: str) -> None:
        self._link = None
        self._upstream_failed(reason)

    # --- backpressure ------------------------------------------------------------------------

    def _flow(self) -> None:
        bound = self._max_queued_bytes
        link = self._link
        if link is not None:
            if self._write_paused or self._queued_bytes >= bound:
                link.pause_reading()
            elif self._queued_bytes < bound // 2:
                link.resume_reading()
        held = self._link_full or self._unsent_bytes >= bound
        if held != self._held:
            self._held = held
            self._update_reading()

    def pause_writing(self) -> None:
        super().pause_writing()
        self._flow()

    def resume_writing(self) -> None:
        super().resume_writing()
        self._flow()

    def _flush(self) -> None:
        super()._flush()
        if self._link is not None:
            self._flow()

    # --- closing -----------------------------------------------------------------------------

    def close(self) -> None:
        super().close()
        self._drop_link()

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        self._drop_link()

    def _drop_link(self) -> None:
        link, self._link = self._link, None
        if link is not None:
            link.close()
        if self._opening is not None and not self._opening.done():
            self._opening.cancel()
        self._unsent.clear()
        self._relayed.clear()
