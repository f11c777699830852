"""An ACL made through one node takes effect on another within a bound: each node polls the
shared store's change counter. A module of its own, in the timed phase (tests/conftest.py
TIMED): the bound is in seconds, which a machine saturated by the parallel phase stretches."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.test_security import BOB, PARTITIONS, TOPIC, Setup, assert_round
from tests.support.secure import ADMIN, SecureNode, add_acl, make_certificates, set_user
from tests.support.secure_clients import confluent_config, round_trip

pytestmark = [pytest.mark.integration, pytest.mark.filterwarnings("ignore::DeprecationWarning")]


def test_acls_created_through_one_node_take_effect_on_another(tmp_path: Path) -> None:
    """AdminClient.create_acls through node 2; node 1 enforces the binding within a second
    (each node polls the shared store's change counter)."""
    import asyncio
    import ssl
    import time

    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        AdminClient,
        ResourcePatternType,
        ResourceType,
    )

    from tests.support.kafka_client import KafkaTestClient

    db_url = f"sqlite+aiosqlite:///{tmp_path / 'coordinator.db'}"
    certs = make_certificates(tmp_path / "certs")
    set_user(db_url, *ADMIN)
    set_user(db_url, *BOB)
    add_acl(
        db_url,
        f"--principal=User:{BOB[0]}",
        "--operation=READ",
        "--resource-type=TOPIC",
        f"--resource-name={TOPIC}",
    )
    env = {"COORD_TOPICS": f"{TOPIC}:{PARTITIONS}"}
    nodes = [SecureNode(db_url, tmp_path, certs, env, node_id=i) for i in (1, 2)]
    context = ssl.create_default_context(cafile=str(certs.cafile))

    async def find_coordinator_on(node: int) -> int:
        port = nodes[node].ports["SASL_SSL"]
        client = await KafkaTestClient.connect(
            "127.0.0.1", port, ssl=context, sasl=("SCRAM-SHA-256", *BOB)
        )
        try:
            return int((await client.find_coordinator("bob-group")).error_code)
        finally:
            await client.close()

    try:
        for n in nodes:
            n.start()
        assert asyncio.run(find_coordinator_on(0)) == 30  # GROUP_AUTHORIZATION_FAILED
        admin = AdminClient(
            confluent_config(
                nodes[1].bootstrap_of("SASL_SSL"), Setup.sasl_of(certs, ADMIN, "SCRAM-SHA-512")
            )
        )
        binding = AclBinding(
            ResourceType.GROUP,
            "bob-",
            ResourcePatternType.PREFIXED,
            f"User:{BOB[0]}",
            "*",
            AclOperation.READ,
            AclPermissionType.ALLOW,
        )
        for future in admin.create_acls([binding], request_timeout=15).values():
            assert future.result(15) is None
        created = time.monotonic()
        # librdkafka sends CreateAcls to any broker it knows, and the consumer below its
        # FindCoordinator too: the node that made the change enforces it at once, the other
        # once its poll of the store sees it. Both must, within the bound.
        for node in (0, 1):
            while asyncio.run(find_coordinator_on(node)) != 0:
                assert time.monotonic() - created < 3, f"node {node + 1} did not see the ACL"
                time.sleep(0.1)
        # and bob's consumer, bootstrapped at node 1, now forms its group
        assert_round(
            round_trip(
                "confluent",
                nodes[0].bootstrap_of("SASL_SSL"),
                "bob-group",
                TOPIC,
                Setup.sasl_of(certs, BOB, "SCRAM-SHA-256"),
            )
        )
    finally:
        for n in nodes:
            n.stop()
