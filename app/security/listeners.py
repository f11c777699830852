"""Listeners as Kafka configures them: `PROTOCOL://host:port`, one per security protocol.

Kafka names listeners and maps names to protocols (listener.security.protocol.map); here the
protocol is the name, so a node has at most one listener of each protocol. Metadata and
FindCoordinator answer with the addresses of the listener a request came in on.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol


class Settings(Protocol):
    """The settings listeners are made of (app.config.Settings has them)."""

    @property
    def listeners(self) -> str: ...

    @property
    def advertised_listeners(self) -> str: ...

    @property
    def ssl_certfile(self) -> str: ...

    @property
    def ssl_keyfile(self) -> str: ...

    @property
    def ssl_cafile(self) -> str: ...

    @property
    def ssl_client_auth(self) -> str: ...

    @property
    def sasl_enabled_mechanisms(self) -> str: ...

    @property
    def super_users(self) -> str: ...

    @property
    def kafka_address(self) -> tuple[str, int]: ...

    @property
    def advertised_address(self) -> tuple[str, int]: ...


class SecurityProtocol(enum.StrEnum):
    PLAINTEXT = "PLAINTEXT"
    SSL = "SSL"
    SASL_PLAINTEXT = "SASL_PLAINTEXT"
    SASL_SSL = "SASL_SSL"

    @property
    def tls(self) -> bool:
        return self in (SecurityProtocol.SSL, SecurityProtocol.SASL_SSL)

    @property
    def sasl(self) -> bool:
        return self in (SecurityProtocol.SASL_PLAINTEXT, SecurityProtocol.SASL_SSL)


@dataclass(frozen=True, slots=True)
class Listener:
    protocol: SecurityProtocol
    host: str  # where to bind
    port: int
    advertised_host: str  # what clients are told
    advertised_port: int

    @property
    def name(self) -> str:
        return self.protocol.value


def _parse_one(item: str, setting: str) -> tuple[SecurityProtocol, str, int]:
    proto, sep, rest = item.strip().partition("://")
    if not sep:
        raise ValueError(f"{setting} entry {item!r} is not PROTOCOL://host:port")
    try:
        protocol = SecurityProtocol(proto.upper())
    except ValueError:
        known = ", ".join(p.value for p in SecurityProtocol)
        raise ValueError(f"{setting}: unknown security protocol {proto!r} ({known})") from None
    host, colon, port = rest.rpartition(":")
    if not colon or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"{setting} entry {item!r} has no valid port")
    return protocol, host.strip("[]"), int(port)


def parse_listeners(
    value: str, setting: str = "COORD_LISTENERS"
) -> list[tuple[SecurityProtocol, str, int]]:
    items = [i for i in value.split(",") if i.strip()]
    parsed = [_parse_one(i, setting) for i in items]
    protocols = [p for p, _, _ in parsed]
    if len(set(protocols)) != len(protocols):
        raise ValueError(f"{setting} names a security protocol twice")
    return parsed


def listeners_of(settings: Settings) -> list[Listener]:
    """The node's listeners; COORD_KAFKA_LISTEN is one PLAINTEXT listener when
    COORD_LISTENERS is unset (and COORD_ADVERTISED_LISTENER its advertised address)."""
    if not settings.listeners:
        host, port = settings.kafka_address
        adv_host, adv_port = settings.advertised_address
        return [Listener(SecurityProtocol.PLAINTEXT, host, port, adv_host, adv_port)]
    bound = parse_listeners(settings.listeners)
    advertised = {
        p: (h, port)
        for p, h, port in parse_listeners(
            settings.advertised_listeners, "COORD_ADVERTISED_LISTENERS"
        )
    }
    out = []
    for protocol, host, port in bound:
        adv_host, adv_port = advertised.get(protocol, (host, port))
        out.append(Listener(protocol, host or "0.0.0.0", port, adv_host or host, adv_port))
    return out


def check_listener_settings(settings: Settings) -> None:
    """Raise ValueError for listener and TLS settings that cannot work together."""
    listeners = listeners_of(settings)
    if settings.advertised_listeners:
        bound = {li.protocol for li in listeners}
        for protocol, _, _ in parse_listeners(
            settings.advertised_listeners, "COORD_ADVERTISED_LISTENERS"
        ):
            if protocol not in bound:
                raise ValueError(
                    f"COORD_ADVERTISED_LISTENERS names {protocol}, which COORD_LISTENERS lacks"
                )
    if any(li.protocol.tls for li in listeners) and not (
        settings.ssl_certfile and settings.ssl_keyfile
    ):
        raise ValueError(
            "an SSL or SASL_SSL listener needs COORD_SSL_CERTFILE and COORD_SSL_KEYFILE"
        )
    if settings.ssl_client_auth != "none" and not settings.ssl_cafile:
        raise ValueError(
            "COORD_SSL_CLIENT_AUTH needs COORD_SSL_CAFILE to verify client certificates"
        )
    from app.security.sasl import parse_mechanisms

    parse_mechanisms(settings.sasl_enabled_mechanisms)
    from app.security.principal import parse_super_users

    parse_super_users(settings.super_users)
