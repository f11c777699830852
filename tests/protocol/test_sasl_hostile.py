"""Hostile clients of the SASL listeners: requests before authentication, broken SCRAM
exchanges, replays, credential changes asking for absurd iteration counts, and a TLS port
spoken to in plaintext. Each fails cleanly for its own connection; the node serves on.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trustme
from scramp import ScramClient

from app.security.sasl import make_credential
from tests.protocol.secure_node import SecureNode, secure_node
from tests.support.kafka_client import (
    AuthenticationError,
    ConnectionClosed,
    KafkaTestClient,
)
from tests.support.ports import free_port

USER, PASSWORD = "alice", "alice-pw"
SCRAM = "SCRAM-SHA-256"
SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[SecureNode]:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    certfile, keyfile = tmp_path / "server.pem", tmp_path / "server-key.pem"
    cert.cert_chain_pems[0].write_to_path(str(certfile))
    cert.private_key_pem.write_to_path(str(keyfile))
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    listeners = (
        f"SASL_PLAINTEXT://127.0.0.1:{free_port()},SASL_SSL://127.0.0.1:{free_port()},"
        f"PLAINTEXT://127.0.0.1:{free_port()}"
    )
    async with secure_node(
        tmp_path,
        super_users=f"User:{USER}",
        listeners=listeners,
        ssl_certfile=str(certfile),
        ssl_keyfile=str(keyfile),
        ssl_cafile=str(tmp_path / "ca.pem"),
        sasl_enabled_mechanisms="PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
    ) as n:
        await n.log.upsert_scram_credentials(
            [make_credential(USER, m, PASSWORD) for m in (SCRAM, "SCRAM-SHA-512")]
        )
        await n.security.refresh(force=True)
        yield n


async def connect(node: SecureNode, listener: str = "SASL_PLAINTEXT") -> KafkaTestClient:
    return await KafkaTestClient.connect("127.0.0.1", node.port_of(listener))


async def assert_closed(client: KafkaTestClient) -> None:
    await client.wait_closed(5)
    assert client.is_closed


async def still_serving(node: SecureNode) -> None:
    """A fresh client authenticates and is served: nothing else was affected."""
    client = await KafkaTestClient.connect(
        "127.0.0.1", node.port_of("SASL_PLAINTEXT"), sasl=(SCRAM, USER, PASSWORD)
    )
    meta = await client.metadata(None)
    assert [t.name for t in meta.topics] == ["t1"]
    await client.close()


async def test_requests_before_authentication_close_the_connection(node: SecureNode) -> None:
    client = await connect(node)
    versions = await client.api_versions(version=3)  # allowed before authentication
    assert versions.error_code == 0
    with pytest.raises((ConnectionClosed, asyncio.TimeoutError)):
        await client.metadata(None)  # not allowed: Kafka closes the connection
    await assert_closed(client)
    await still_serving(node)


async def test_a_heartbeat_before_authentication_closes_the_connection(node: SecureNode) -> None:
    client = await connect(node)
    with pytest.raises((ConnectionClosed, asyncio.TimeoutError)):
        await client.heartbeat("g", 1, "member-of-someone-else")
    await assert_closed(client)


async def test_authenticate_without_handshake_is_an_illegal_state(node: SecureNode) -> None:
    client = await connect(node)
    reply = await client.request(client.build_request(SASL_AUTHENTICATE, 2, auth_bytes=b"x"))
    assert reply.error_code == 34  # ILLEGAL_SASL_STATE
    await assert_closed(client)


async def test_unknown_mechanism_is_refused_with_the_enabled_ones(node: SecureNode) -> None:
    client = await connect(node)
    reply = await client.request(client.build_request(SASL_HANDSHAKE, 1, mechanism="GSSAPI"))
    assert reply.error_code == 33  # UNSUPPORTED_SASL_MECHANISM
    assert set(reply.mechanisms) == {"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}
    await assert_closed(client)


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
async def test_each_mechanism_authenticates_and_a_wrong_password_does_not(
    node: SecureNode, mechanism: str
) -> None:
    ok = await KafkaTestClient.connect(
        "127.0.0.1", node.port_of("SASL_PLAINTEXT"), sasl=(mechanism, USER, PASSWORD)
    )
    assert (await ok.metadata(None)).topics
    await ok.close()
    bad = await connect(node)
    with pytest.raises(AuthenticationError, match="Authentication failed"):
        await bad.authenticate(mechanism, USER, "wrong")
    await assert_closed(bad)


async def _scram_first(client: KafkaTestClient) -> tuple[ScramClient, str]:
    await client.request(client.build_request(SASL_HANDSHAKE, 1, mechanism=SCRAM))
    scram = ScramClient([SCRAM], USER, PASSWORD)
    first = await client.request(
        client.build_request(SASL_AUTHENTICATE, 2, auth_bytes=scram.get_client_first().encode())
    )
    assert first.error_code == 0
    server_first = first.auth_bytes.decode()
    scram.set_server_first(server_first)
    return scram, server_first


async def test_scram_final_with_a_wrong_nonce_fails(node: SecureNode) -> None:
    client = await connect(node)
    scram, server_first = await _scram_first(client)
    final = scram.get_client_final()
    nonce = dict(kv.split("=", 1) for kv in server_first.split(","))["r"]
    forged = final.replace(f"r={nonce}", f"r={nonce}forged")
    reply = await client.request(
        client.build_request(SASL_AUTHENTICATE, 2, auth_bytes=forged.encode())
    )
    assert reply.error_code == 58  # SASL_AUTHENTICATION_FAILED
    assert reply.error_message
    await assert_closed(client)
    await still_serving(node)


async def test_a_replayed_final_message_fails(node: SecureNode) -> None:
    """The client-final of a successful exchange, sent again on a new connection (a fresh
    server nonce), and again on the same connection after it authenticated."""
    first = await connect(node)
    scram, _ = await _scram_first(first)
    final = scram.get_client_final().encode()
    ok = await first.request(first.build_request(SASL_AUTHENTICATE, 2, auth_bytes=final))
    assert ok.error_code == 0
    again = await first.request(first.build_request(SASL_AUTHENTICATE, 2, auth_bytes=final))
    assert again.error_code == 34  # ILLEGAL_SASL_STATE: the session is already authenticated

    other = await connect(node)
    await _scram_first(other)
    replay = await other.request(other.build_request(SASL_AUTHENTICATE, 2, auth_bytes=final))
    assert replay.error_code == 58
    await assert_closed(other)


async def test_garbage_tokens_fail_cleanly(node: SecureNode) -> None:
    for token in (b"", b"\xff\xfe not utf-8", b"n,,n=alice", b"x" * 20_000):
        client = await connect(node)
        await client.request(client.build_request(SASL_HANDSHAKE, 1, mechanism=SCRAM))
        reply = await client.request(client.build_request(SASL_AUTHENTICATE, 2, auth_bytes=token))
        assert reply.error_code == 58, token[:20]
        await assert_closed(client)
    await still_serving(node)


async def test_a_huge_frame_before_authentication_closes_the_connection(
    node: SecureNode,
) -> None:
    """Before authentication a frame may be 512 KiB at most (sasl.server.max.receive.size)."""
    client = await connect(node)
    await client.send_raw((1024 * 1024).to_bytes(4, "big") + b"\0" * 64)
    await assert_closed(client)


async def test_huge_iteration_counts_are_refused(node: SecureNode) -> None:
    """A credential change asking for 2^31-1 iterations would make every later login cost
    minutes of CPU: Kafka's bound (16384) refuses it, and nothing is stored."""
    client = await KafkaTestClient.connect(
        "127.0.0.1", node.port_of("SASL_PLAINTEXT"), sasl=(SCRAM, USER, PASSWORD)
    )
    reply = await client.request(
        client.build_request(
            51,
            0,
            deletions=[],
            upsertions=[
                {
                    "name": "mallory",
                    "mechanism": 1,
                    "iterations": 2**31 - 1,
                    "salt": b"salt",
                    "salted_password": b"x" * 32,
                }
            ],
        )
    )
    assert [r.error_code for r in reply.results] == [93]  # UNACCEPTABLE_CREDENTIAL
    assert node.security.credential("mallory", SCRAM) is None
    await client.close()


async def test_plaintext_spoken_to_the_tls_listener_closes_only_that_connection(
    node: SecureNode,
) -> None:
    client = await connect(node, "SASL_SSL")
    await client.send_raw(b"\x00\x00\x00\x10" + b"not a TLS record")
    await assert_closed(client)
    # while a real TLS client on the same listener authenticates and is served
    context = ssl.create_default_context(cafile=node.settings.ssl_cafile)
    tls = await KafkaTestClient.connect(
        "127.0.0.1", node.port_of("SASL_SSL"), ssl=context, sasl=(SCRAM, USER, PASSWORD)
    )
    assert [t.name for t in (await tls.metadata(None)).topics] == ["t1"]
    await tls.close()


async def test_a_connection_that_never_authenticates_is_closed(tmp_path: Path) -> None:
    """A SASL exchange must finish within COORD_FRAME_DEADLINE_MS: a client that connects and
    says nothing does not hold its connection slot for ever."""
    async with secure_node(
        tmp_path,
        listeners=f"SASL_PLAINTEXT://127.0.0.1:{free_port()}",
        frame_deadline_ms=500,
    ) as n:
        silent = await connect(n)
        await silent.wait_closed(5)  # the deadline sweep runs once a second
        assert silent.is_closed
