"""Node settings: `COORD_*` environment variables, overridable by the same-named CLI flags.

`Settings` is the one list of settings and their defaults. The core's, the edge's and the
CLI's configuration objects are derived from it (`core_config`, `ServerLimits.from_settings`,
`DEFAULTS`, `read_setting`); only the core's group.* and offsets.* defaults are written in
the core (app/group/config.py), which is pure and also runs without a node, and taken here.
"""

from __future__ import annotations

import ipaddress
from typing import Any, Final, Literal
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, create_model, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from app.group.config import CoreConfig
from app.security.listeners import check_listener_settings
from storage import bounds

_CORE: Final = CoreConfig()


def parse_hostport(value: str, default_port: int) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep:
        return value, default_port
    if not port.isdigit():
        raise ValueError(f"invalid port in {value!r}")
    return host.strip("[]") or "0.0.0.0", int(port)


def upstream_addresses(value: str) -> tuple[tuple[str, int], ...]:
    """COORD_UPSTREAM_BOOTSTRAP 'host:port,…' (port 9092 when left out)."""
    out = []
    for item in value.split(","):
        item = item.strip()
        if item:
            host, port = parse_hostport(item, 9092)
            if not host or host == "0.0.0.0" or not 0 < port < 65536:
                raise ValueError(f"COORD_UPSTREAM_BOOTSTRAP entry {item!r} is not host:port")
            out.append((host, port))
    if not out:
        raise ValueError("COORD_UPSTREAM_BOOTSTRAP names no broker")
    return tuple(out)


def parse_topics(value: str) -> dict[str, int]:
    """'name:partitions,…' → {name: partitions}."""
    topics: dict[str, int] = {}
    for item in value.split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, count = item.rpartition(":")
        if not sep or not name or not count.isdigit() or int(count) < 1:
            raise ValueError(f"COORD_TOPICS entry {item!r} is not 'name:partitions'")
        topics[name] = int(count)
    return topics


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="COORD_", extra="ignore")

    database_url: str = "sqlite+aiosqlite:///./data/coordinator.db"
    node_id: int = Field(default=1, ge=0)
    kafka_listen: str = "127.0.0.1:9092"
    advertised_listener: str = ""  # empty = kafka_listen
    admin_listen: str = "127.0.0.1:8080"
    initial_rebalance_delay_ms: int = Field(default=_CORE.initial_rebalance_delay_ms, ge=0)
    min_session_timeout_ms: int = Field(default=_CORE.min_session_timeout_ms, ge=1)
    max_session_timeout_ms: int = Field(default=_CORE.max_session_timeout_ms, ge=1)
    group_max_size: int = Field(default=_CORE.group_max_size, ge=1)
    max_groups: int = Field(default=250_000, ge=1)
    max_group_id_length: int = Field(default=4096, ge=16)
    max_pending_members: int = Field(default=_CORE.max_pending_members, ge=1)
    topics: str = ""
    log_partitions: int = Field(default=16, ge=1, le=10_000)
    offsets_retention_ms: int = Field(default=_CORE.offsets_retention_ms, ge=1)
    offsets_retention_check_interval_ms: int = Field(
        default=_CORE.offsets_retention_check_interval_ms, ge=1000
    )
    # what one client can make the Kafka listener hold (README: Limits and hostile clients)
    max_frame_bytes: int = Field(default=16 * 1024 * 1024, ge=1024)
    max_connections: int = Field(default=10_000, ge=1)
    max_connections_per_ip: int = Field(default=1_000, ge=1)
    connections_max_idle_ms: int = Field(default=600_000, ge=1000)
    frame_deadline_ms: int = Field(default=30_000, ge=100)
    max_inflight_requests: int = Field(default=1024, ge=2)
    max_queued_reply_bytes: int = Field(default=8 * 1024 * 1024, ge=1024)
    max_client_id_bytes: int = Field(default=4096, ge=16, le=32767)
    max_request_elements: int = Field(default=10_000, ge=100)
    max_record_bytes: int = Field(default=bounds.MAX_RECORD_BYTES, ge=1024)
    max_queued_records: int = Field(default=bounds.MAX_QUEUED_RECORDS, ge=100)
    lease_ttl_ms: int = Field(default=5000, ge=500)
    tombstone_retention_ms: int = Field(default=24 * 3600 * 1000, ge=0)
    archive_history: bool = True
    # how long log_history keeps what compaction archived; -1 keeps it for ever
    history_retention_ms: int = Field(default=7 * 24 * 3600 * 1000, ge=-1)
    compaction_interval_ms: int = Field(default=60_000, ge=100)
    concurrent_loads: int = Field(default=4, ge=1, le=64)
    log_level: str = "INFO"
    admin_token: str = ""  # when set, the admin API requires "Authorization: Bearer <token>"
    # --- security (README: Security); each has a Kafka broker equivalent ---
    listeners: str = ""  # PROTOCOL://host:port,… (listeners); empty = PLAINTEXT://kafka_listen
    advertised_listeners: str = ""  # same shape and order (advertised.listeners)
    ssl_certfile: str = ""  # ssl.keystore.location
    ssl_keyfile: str = ""
    ssl_cafile: str = ""  # ssl.truststore.location
    ssl_client_auth: Literal["none", "requested", "required"] = "none"  # ssl.client.auth
    sasl_enabled_mechanisms: str = "SCRAM-SHA-256,SCRAM-SHA-512"  # sasl.enabled.mechanisms
    authorizer: Literal["none", "acl"] = "none"  # authorizer.class.name
    super_users: str = ""  # super.users: User:admin;User:ops
    allow_everyone_if_no_acl_found: bool = False  # allow.everyone.if.no.acl.found
    admin_allow_insecure: bool = False  # a non-loopback admin listener without a token
    admin_ssl_certfile: str = ""
    admin_ssl_keyfile: str = ""
    advertised_admin_url: str = ""  # what other nodes and the CLI are sent to
    admin_cors_origins: str = ""  # comma list; empty = no cross-origin requests at all
    # X-Forwarded-For/-Proto are read only from these (comma list of addresses or networks)
    admin_trusted_proxies: str = ""
    admin_allowed_hosts: str = ""  # Host names served beside the node's own (api/guards.py)
    admin_max_body_bytes: int = Field(default=1024 * 1024, ge=1024)
    admin_max_connections: int = Field(default=1000, ge=1)  # then 503 (uvicorn's bound)
    # the fan-out of GET /groups to other nodes over http:// to a non-loopback address
    admin_peer_plaintext: bool = False
    # connection.failed.authentication.delay.ms: a failed login is answered this much later,
    # and the same principal from the same source waits longer after each failure
    failed_authentication_delay_ms: int = Field(default=100, ge=0, le=60_000)
    # --- gateway mode (docs/gateway.md): set, the node fronts an existing Kafka cluster ---
    upstream_bootstrap: str = ""  # host:port,… of the upstream brokers
    # the gateway's own connection to the upstream, in a Kafka client's words
    upstream_security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = (
        "PLAINTEXT"
    )
    upstream_sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] = "PLAIN"
    upstream_sasl_username: str = ""
    upstream_sasl_password: SecretStr = SecretStr("")  # environment only, never a flag
    upstream_ssl_cafile: str = ""
    upstream_ssl_certfile: str = ""
    upstream_ssl_keyfile: str = ""
    upstream_metadata_refresh_ms: int = Field(default=30_000, ge=100)
    upstream_timeout_ms: int = Field(default=10_000, ge=100)
    # a port per upstream broker id in [base, base + ports), after each listener's port
    gateway_broker_id_base: int = Field(default=0, ge=0)
    gateway_broker_ports: int = Field(default=16, ge=1, le=4096)
    # the coordinator's node ids in FindCoordinator: this + COORD_NODE_ID, above every broker's
    gateway_coordinator_id_base: int = Field(default=1_000_000_000, ge=1)
    # gateway mode: a group first seen here takes the upstream's committed offsets (import);
    # mirror also writes every commit back to the upstream's __consumer_offsets; off: neither
    upstream_offsets: Literal["import", "mirror", "off"] = "import"
    upstream_mirror_interval_ms: int = Field(default=1_000, ge=50)  # a commit upstream within
    upstream_lag_refresh_ms: int = Field(default=5_000, ge=100)  # log-end offsets this often
    upstream_check_interval_ms: int = Field(default=30_000, ge=100)  # live members upstream?
    # the partitions whose log-end offsets are kept (lag); beyond, lag reads as unknown
    lag_max_partitions: int = Field(default=100_000, ge=1)
    # per-group series in /metrics (lag, unowned, doubly owned, upstream members): the worst
    # this many groups of each, so a fleet of groups cannot grow the scrape without bound
    group_metrics_max_groups: int = Field(default=100, ge=0)
    ownership_check_interval_ms: int = Field(default=10_000, ge=100)  # unowned partitions

    @field_validator("topics")
    @classmethod
    def _check_topics(cls, v: str) -> str:
        parse_topics(v)
        return v

    @model_validator(mode="after")
    def _check(self) -> Settings:
        if self.min_session_timeout_ms > self.max_session_timeout_ms:
            raise ValueError("COORD_MIN_SESSION_TIMEOUT_MS exceeds COORD_MAX_SESSION_TIMEOUT_MS")
        parse_hostport(self.kafka_listen, 9092)
        parse_hostport(self.admin_listen, 8080)
        if self.advertised_listener:
            parse_hostport(self.advertised_listener, 9092)
        check_listener_settings(self)
        if self.upstream_bootstrap:
            upstream_addresses(self.upstream_bootstrap)
            if self.upstream_security_protocol.startswith("SASL") and not (
                self.upstream_sasl_username
            ):
                raise ValueError(
                    f"COORD_UPSTREAM_SECURITY_PROTOCOL={self.upstream_security_protocol} needs "
                    "COORD_UPSTREAM_SASL_USERNAME and COORD_UPSTREAM_SASL_PASSWORD"
                )
        return self

    @property
    def gateway(self) -> bool:
        """Gateway mode: the node fronts the upstream cluster COORD_UPSTREAM_BOOTSTRAP names."""
        return bool(self.upstream_bootstrap)

    @property
    def kafka_address(self) -> tuple[str, int]:
        return parse_hostport(self.kafka_listen, 9092)

    @property
    def advertised_address(self) -> tuple[str, int]:
        return parse_hostport(self.advertised_listener or self.kafka_listen, 9092)

    @property
    def admin_address(self) -> tuple[str, int]:
        return parse_hostport(self.admin_listen, 8080)

    @property
    def topic_map(self) -> dict[str, int]:
        return parse_topics(self.topics)


# every setting's default, no environment read: what the edge's objects default to
DEFAULTS: Final = Settings.model_construct()


def core_config(settings: Settings) -> CoreConfig:
    """The core's tunables from a node's settings."""
    return CoreConfig(
        min_session_timeout_ms=settings.min_session_timeout_ms,
        max_session_timeout_ms=settings.max_session_timeout_ms,
        initial_rebalance_delay_ms=settings.initial_rebalance_delay_ms,
        group_max_size=settings.group_max_size,
        max_pending_members=settings.max_pending_members,
        offsets_retention_ms=settings.offsets_retention_ms,
        offsets_retention_check_interval_ms=settings.offsets_retention_check_interval_ms,
    )


class _Environment(BaseSettings):
    model_config = Settings.model_config


def read_setting(name: str) -> Any:
    """One setting read as Settings reads it (its COORD_* variable, else its default) and
    checked by its own field, the others unread: a command that needs only this one is not
    stopped by a bad other (the node's business). A ValueError when it is invalid."""
    field = Settings.model_fields[name]
    definition: dict[str, Any] = {name: (field.annotation, field)}
    one = create_model(f"Setting_{name}", __base__=_Environment, **definition)
    return getattr(one(), name)


_WILDCARDS = ("", "0.0.0.0", "::")


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 or localhost: reachable from this machine only."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def advertised_admin_url(settings: Settings) -> str | None:
    """The admin URL a node registers, where other nodes redirect and the CLI follows:
    COORD_ADVERTISED_ADMIN_URL, else COORD_ADMIN_LISTEN when its host is a concrete address
    (https with COORD_ADMIN_SSL_CERTFILE), else None: a wildcard such as 0.0.0.0 names no host,
    and a redirect to it would send the caller (and its credentials) anywhere."""
    if settings.advertised_admin_url:
        url = settings.advertised_admin_url.strip().rstrip("/")
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.path:
            raise ValueError(
                f"COORD_ADVERTISED_ADMIN_URL {url!r} is not http(s)://host[:port] (no path)"
            )
        if parts.username or parts.password or parts.query or parts.fragment:
            raise ValueError(f"COORD_ADVERTISED_ADMIN_URL {url!r} may hold no credentials")
        return url
    host, port = settings.admin_address
    if host in _WILDCARDS:
        return None
    try:
        if ipaddress.ip_address(host).is_unspecified:
            return None
        if ipaddress.ip_address(host).version == 6:
            host = f"[{host}]"
    except ValueError:
        pass  # a host name
    scheme = "https" if settings.admin_ssl_certfile else "http"
    return f"{scheme}://{host}:{port}"


def shown_database_url(url: str) -> str:
    """The database URL for a log line: its password masked."""
    try:
        # here, not at the top: the admin commands import this module, and SQLAlchemy would
        # add about 0.3 s to each of them
        from sqlalchemy.engine import make_url

        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # not a URL SQLAlchemy parses: say nothing of it
        return "<unparseable database URL>"
