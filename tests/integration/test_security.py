"""Real clients over SASL_SSL (SCRAM-SHA-256, SCRAM-SHA-512, PLAIN), SSL with a client
certificate and SASL_PLAINTEXT, against a `coordinator serve` process with the ACL authorizer.

The users are made with the real `coordinator users set` (password on stdin), the ACLs with
`coordinator acls add`, the certificates by trustme: nothing is mocked.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiokafka  # noqa: F401  - a missing client library must fail the suite, not skip it
import confluent_kafka
import kafka  # noqa: F401
import pytest

from tests.support.secure import (
    ADMIN,
    Certificates,
    SecureNode,
    add_acl,
    make_certificates,
    set_user,
)
from tests.support.secure_clients import (
    COMMITTED,
    ClientError,
    Security,
    round_trip,
)

pytestmark = [pytest.mark.integration, pytest.mark.filterwarnings("ignore::DeprecationWarning")]

TOPIC = "sec"
PARTITIONS = 3
CLIENTS = ["confluent", "kafka-python", "aiokafka"]
MECHANISMS = ["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"]
ALICE = ("alice", "alice-pw-1")  # a team user: groups team-*, topic sec
BOB = ("bob", "bob-pw-1")  # may read the topic, and no group
CAROL = "carol"  # a client certificate's CN


def grant_team(db_url: str, principal: str) -> None:
    add_acl(
        db_url,
        f"--principal={principal}",
        "--operation=READ",
        "--resource-type=GROUP",
        "--resource-name=team-",
        "--pattern=PREFIXED",
    )
    add_acl(
        db_url,
        f"--principal={principal}",
        "--operation=READ",
        "--resource-type=TOPIC",
        f"--resource-name={TOPIC}",
    )


class Setup:
    def __init__(self, tmp: Path) -> None:
        self.db_url = f"sqlite+aiosqlite:///{tmp / 'coordinator.db'}"
        self.certs: Certificates = make_certificates(tmp / "certs")
        self.carol_cert, self.carol_key = self.certs.client(CAROL)
        set_user(self.db_url, *ADMIN)
        set_user(self.db_url, *ALICE)
        set_user(self.db_url, *BOB)
        grant_team(self.db_url, f"User:{ALICE[0]}")
        grant_team(self.db_url, f"User:CN={CAROL},OU=clients,O=coordinator")
        add_acl(
            self.db_url,
            f"--principal=User:{BOB[0]}",
            "--operation=READ",
            "--resource-type=TOPIC",
            f"--resource-name={TOPIC}",
        )
        self.node = SecureNode(
            self.db_url, tmp, self.certs, {"COORD_TOPICS": f"{TOPIC}:{PARTITIONS}"}
        )

    def sasl(self, user: tuple[str, str], mechanism: str, protocol: str = "SASL_SSL") -> Security:
        return self.sasl_of(self.certs, user, mechanism, protocol)

    @staticmethod
    def sasl_of(
        certs: Certificates, user: tuple[str, str], mechanism: str, protocol: str = "SASL_SSL"
    ) -> Security:
        return Security(
            protocol,
            cafile=str(certs.cafile) if protocol == "SASL_SSL" else None,
            mechanism=mechanism,
            username=user[0],
            password=user[1],
        )


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    s = Setup(tmp_path_factory.mktemp("secure"))
    s.node.start()
    try:
        yield s
    finally:
        s.node.stop()


def assert_round(result: tuple[set[int], dict[int, int | None]]) -> None:
    assigned, back = result
    assert assigned == set(range(PARTITIONS))
    assert back == {p: COMMITTED for p in assigned}


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("client", CLIENTS)
def test_sasl_ssl_group_forms_commits_and_reads_back(
    setup: Setup, client: str, mechanism: str
) -> None:
    group = f"team-{client}-{mechanism}"
    result = round_trip(
        client, setup.node.bootstrap_of("SASL_SSL"), group, TOPIC, setup.sasl(ALICE, mechanism)
    )
    assert_round(result)


@pytest.mark.parametrize("client", CLIENTS)
def test_ssl_client_certificate_is_the_principal(setup: Setup, client: str) -> None:
    """User:CN=carol,OU=clients,O=coordinator has the team's ACLs: its certificate is all
    it shows (Kafka's default mapping of the subject, most specific attribute first)."""
    security = Security(
        "SSL",
        cafile=str(setup.certs.cafile),
        certfile=str(setup.carol_cert),
        keyfile=str(setup.carol_key),
    )
    result = round_trip(
        client, setup.node.bootstrap_of("SSL"), f"team-ssl-{client}", TOPIC, security
    )
    assert_round(result)


def test_sasl_plaintext_listener(setup: Setup) -> None:
    security = setup.sasl(ALICE, "SCRAM-SHA-256", "SASL_PLAINTEXT")
    result = round_trip(
        "confluent", setup.node.bootstrap_of("SASL_PLAINTEXT"), "team-plain", TOPIC, security
    )
    assert_round(result)


@pytest.mark.parametrize("client", CLIENTS)
def test_wrong_password_fails_at_authentication(
    setup: Setup, client: str, caplog: pytest.LogCaptureFixture
) -> None:
    security = setup.sasl((ALICE[0], "not-the-password"), "SCRAM-SHA-512")
    with pytest.raises(Exception) as failed:
        round_trip(client, setup.node.bootstrap_of("SASL_SSL"), "team-wrong", TOPIC, security)
    # confluent raises the authentication error; the Python clients log it and give up
    # bootstrapping, so their log says why
    said = f"{type(failed.value).__name__} {failed.value} {caplog.text}"
    assert "SaslAuthenticationFailed" in said or "Authentication failed" in said, said
    # and the node says why, on the audit trail
    assert '"action":"authenticate","outcome":"failure"' in setup.node.log_text()


@pytest.mark.parametrize("client", CLIENTS)
def test_no_group_read_is_the_clients_group_authorization_error(setup: Setup, client: str) -> None:
    security = setup.sasl(BOB, "SCRAM-SHA-256")
    with pytest.raises(Exception) as failed:
        round_trip(client, setup.node.bootstrap_of("SASL_SSL"), "team-bob", TOPIC, security)
    err = failed.value
    if isinstance(err, ClientError) and err.code is not None:
        assert err.code == confluent_kafka.KafkaError.GROUP_AUTHORIZATION_FAILED
    else:
        assert "GroupAuthorizationFailed" in type(err).__name__, repr(err)
    assert '"outcome":"denied","principal":"User:bob"' in setup.node.log_text()


def audit_lines(log_text: str) -> list[dict[str, Any]]:
    """The `coordinator.audit` lines of a node's log, decoded."""
    marker = " coordinator.audit: "
    return [
        json.loads(line.split(marker, 1)[1]) for line in log_text.splitlines() if marker in line
    ]


def test_anonymous_plaintext_is_denied_by_the_authorizer(setup: Setup) -> None:
    logged = len(setup.node.log_text())
    with pytest.raises(ClientError) as failed:
        round_trip("confluent", setup.node.bootstrap, "team-anon", TOPIC, Security("PLAINTEXT"))
    # no ACL names User:ANONYMOUS: the group is refused, or the topic not even described to it
    # (then the consumer has nothing assigned), and the node's audit trail says which
    group_refused = failed.value.code == confluent_kafka.KafkaError.GROUP_AUTHORIZATION_FAILED
    assert (
        group_refused
        or failed.value.code == confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED
        or "no assignment" in str(failed.value)
    ), failed.value
    denied = {
        line["resource"]
        for line in audit_lines(setup.node.log_text()[logged:])
        if (line["outcome"], line["principal"]) == ("denied", "User:ANONYMOUS")
    }
    assert ("GROUP:team-anon" if group_refused else f"TOPIC:{TOPIC}") in denied, denied
