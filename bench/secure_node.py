"""Figure 8's secured node and its clients: a SecureNode (tests/support/secure.py) on SQLite with
user `bench` and READ on every group and topic, KafkaTestClients over SASL_SSL, and a SCRAM
client that caches its salted password (see (c) in bench/security.py); the start barrier of
workers that authenticate before their window.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import hmac
import secrets
import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.kafka_client import AuthenticationError, KafkaTestClient

USER, PASSWORD = "bench", "bench-secret-1"
HB_MECHANISM = "SCRAM-SHA-256"  # members and committers over SASL_SSL
SCRAM_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
_SASL_HANDSHAKE, _SASL_AUTHENTICATE = 17, 36


@functools.lru_cache(maxsize=4)
def client_context(cafile: str) -> ssl.SSLContext:
    """The load generators' TLS context: verifies the node's certificate against the test CA."""
    return ssl.create_default_context(cafile=cafile)


async def connect(port: int, security: dict[str, str] | None, client_id: str) -> KafkaTestClient:
    """A KafkaTestClient over PLAINTEXT (security None) or SASL_SSL, authenticated."""
    if not security:
        return await KafkaTestClient.connect("127.0.0.1", port, client_id)
    return await KafkaTestClient.connect(
        "127.0.0.1",
        port,
        client_id,
        ssl=client_context(security["cafile"]),
        sasl=(security["mechanism"], security["user"], security["password"]),
    )


# (hash, user, password, salt, iterations) -> (client key, stored key, server key)
_SCRAM_KEYS: dict[tuple[str, str, str, bytes, int], tuple[bytes, bytes, bytes]] = {}


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


async def scram_authenticate(
    client: KafkaTestClient, mechanism: str, user: str, password: str
) -> None:
    """RFC 5802's client over SaslHandshake v1 + SaslAuthenticate v2, with the salted password
    cached per (salt, iterations) (see (c) in bench/security.py); checks the server's signature."""
    hf = SCRAM_HASHES[mechanism]
    shake = await client.request(client.build_request(_SASL_HANDSHAKE, 1, mechanism=mechanism))
    if shake.error_code != 0:
        raise AuthenticationError(f"SaslHandshake: {shake.error_code!r}")
    nonce = secrets.token_urlsafe(18)
    bare = f"n={user},r={nonce}"
    first = await client.request(
        client.build_request(_SASL_AUTHENTICATE, 2, auth_bytes=f"n,,{bare}".encode())
    )
    if first.error_code != 0:
        raise AuthenticationError(f"{first.error_code!r}: {first.error_message}")
    server_first = bytes(first.auth_bytes).decode()
    attrs = dict(kv.split("=", 1) for kv in server_first.split(","))
    combined, salt, iterations = attrs["r"], base64.b64decode(attrs["s"]), int(attrs["i"])
    if not combined.startswith(nonce):
        raise AuthenticationError("server nonce does not extend ours")
    key = (hf, user, password, salt, iterations)
    keys = _SCRAM_KEYS.get(key)
    if keys is None:
        salted = hashlib.pbkdf2_hmac(hf, password.encode(), salt, iterations)
        client_key = hmac.digest(salted, b"Client Key", hf)
        stored = hashlib.new(hf, client_key).digest()
        keys = _SCRAM_KEYS[key] = (client_key, stored, hmac.digest(salted, b"Server Key", hf))
    client_key, stored_key, server_key = keys
    without_proof = f"c=biws,r={combined}"
    message = f"{bare},{server_first},{without_proof}".encode()
    signature = hmac.digest(stored_key, message, hf)
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    final = await client.request(
        client.build_request(
            _SASL_AUTHENTICATE, 2, auth_bytes=f"{without_proof},p={_b64(proof)}".encode()
        )
    )
    if final.error_code != 0:
        raise AuthenticationError(f"{final.error_code!r}: {final.error_message}")
    if bytes(final.auth_bytes).decode() != "v=" + _b64(hmac.digest(server_key, message, hf)):
        raise AuthenticationError("wrong server signature")


# seconds from the barrier's setting to the workers' start: spawning, connecting and
# authenticating a worker's connections took more than 3 s on a busy machine
WORKER_BARRIER_S = 5.0


def too_late(what: str, results: list[dict[str, Any]], warmup: float) -> None:
    """A window whose workers began after it started measured the machine, not the node."""
    late = max(r["late"] for r in results)
    if late > warmup:
        raise RuntimeError(
            f"{what} workers began {late:.1f} s after the barrier, past the start of their "
            "window: the machine was too busy to measure"
        )


@dataclass
class Setup:
    node: Any  # tests.support.secure.SecureNode
    cafile: Path
    certfile: Path
    keyfile: Path

    @property
    def pid(self) -> int:
        assert self.node.proc is not None
        return int(self.node.proc.pid)

    def port(self, protocol: str) -> int:
        return int(self.node.ports[protocol])

    def security(self, mechanism: str = HB_MECHANISM) -> dict[str, str]:
        return {"cafile": str(self.cafile), "mechanism": mechanism, "user": USER,
                "password": PASSWORD}  # fmt: skip


@contextlib.contextmanager
def secure_bench_node(workdir: Path, **env: str) -> Iterator[Setup]:
    """SecureNode on SQLite with user `bench`, and READ on every group and topic for User:bench
    and User:ANONYMOUS (the PLAINTEXT principal)."""
    from tests.support.secure import SecureNode, add_acl, make_certificates, set_user

    workdir.mkdir(parents=True, exist_ok=True)
    db_url = f"sqlite+aiosqlite:///{workdir / 'coordinator.db'}"
    certs = make_certificates(workdir / "certs")
    set_user(db_url, USER, PASSWORD, *SCRAM_HASHES)
    for principal in (f"User:{USER}", "User:ANONYMOUS"):
        for rtype in ("GROUP", "TOPIC"):
            add_acl(db_url, f"--principal={principal}", "--operation=READ",
                    f"--resource-type={rtype}", "--resource-name=*")  # fmt: skip
    env.setdefault("COORD_LOG_LEVEL", "WARNING")
    node = SecureNode(db_url, workdir, certs, env)
    node.start()
    try:
        yield Setup(node, certs.cafile, certs.certfile, certs.keyfile)
    finally:
        node.stop()
