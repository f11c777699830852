"""A failed SASL login names the user it tried, whether or not that user exists, and the same
user from the same address is slowed, never refused, by its failures."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from app.security import sasl
from tests.protocol.secure_node import SecureNode
from tests.protocol.test_sasl_hostile import PASSWORD, USER, assert_closed, connect, node
from tests.support.kafka_client import AuthenticationError, KafkaTestClient

__all__ = ["node"]


def failures(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "coordinator.audit"]
    return [x for x in lines if x["action"] == "authenticate" and x["outcome"] == "failure"]


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256"])
async def test_a_failed_login_is_audited_with_the_user_it_tried(
    node: SecureNode, caplog: pytest.LogCaptureFixture, mechanism: str
) -> None:
    caplog.set_level(logging.INFO, logger="coordinator.audit")
    for name in (USER, "nobody"):
        client = await connect(node)
        with pytest.raises(AuthenticationError):
            await client.authenticate(mechanism, name, "wrong")
        await assert_closed(client)
    assert [(x["principal"], x["mechanism"]) for x in failures(caplog)] == [
        (f"User:{USER}", mechanism),
        ("User:nobody", mechanism),
    ]


async def test_failures_delay_the_next_plain_attempt_but_a_right_password_still_works(
    node: SecureNode,
) -> None:
    key = (f"User:{USER}", "127.0.0.1")
    for _ in range(3):
        client = await connect(node)
        with pytest.raises(AuthenticationError):
            await client.authenticate("PLAIN", USER, "wrong")
        await assert_closed(client)
    assert node.security.logins.failures(key) == 3
    ok = await KafkaTestClient.connect(
        "127.0.0.1", node.port_of("SASL_PLAINTEXT"), sasl=("PLAIN", USER, PASSWORD)
    )
    assert (await ok.metadata(None)).topics
    await ok.close()
    assert node.security.logins.failures(key) == 0


def test_an_unknown_users_password_is_hashed_like_a_known_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What tells user names apart by timing is whether PBKDF2 ran: it runs for both."""
    known = sasl.make_credential("alice", "SCRAM-SHA-512", "pw")
    hashed: list[int] = []
    verify = sasl.verify_password

    def counted(credential: sasl.ScramCredential, password: str) -> bool:
        hashed.append(credential.iterations)
        return verify(credential, password)

    monkeypatch.setattr(sasl, "verify_password", counted)

    def lookup(name: str, mechanism: str) -> sasl.ScramCredential | None:
        return known if (name, mechanism) == ("alice", "SCRAM-SHA-512") else None

    assert sasl.verify_any(lookup, "alice", "pw")
    assert not sasl.verify_any(lookup, "alice", "wrong")
    assert not sasl.verify_any(lookup, "mallory", "pw")
    assert hashed == [known.iterations] * 3
