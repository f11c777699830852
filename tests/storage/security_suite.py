"""The storage suite's part for security (the SecurityStore port): SCRAM credentials, ACLs, the
change counter, the nodes' listeners. Mixed into StoreSuite, so it runs on every backend.
"""

from __future__ import annotations

from storage.ports import Store
from storage.security import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    ScramCredential,
)

T0 = 1_700_000_000_000

ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
GROUP, TOPIC = ResourceType.GROUP, ResourceType.TOPIC
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED
READ, DESCRIBE = AclOperation.READ, AclOperation.DESCRIBE


def cred(user: str, mechanism: str = "SCRAM-SHA-256", n: int = 1) -> ScramCredential:
    """A credential with recognisable bytes (storage does not care how they were made)."""
    return ScramCredential(
        user,
        mechanism,
        salt=bytes([n]) * 16,
        iterations=4096 + n,
        stored_key=bytes([n + 1]) * 32,
        server_key=bytes([n + 2]) * 32 + b"\x00\xff",
    )


def acl(
    name: str,
    principal: str = "User:alice",
    op: AclOperation = READ,
    rtype: ResourceType = GROUP,
    pattern: PatternType = LITERAL,
    permission: AclPermissionType = ALLOW,
    host: str = "*",
) -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, host, op, permission)


class SecuritySuite:
    async def test_scram_credentials_round_trip_and_upsert_replaces(
        self, log: Store, log2: Store
    ) -> None:
        assert await log.scram_credentials() == []
        alice256, alice512, bob = (
            cred("alice"),
            cred("alice", "SCRAM-SHA-512", 2),
            cred("bob", n=3),
        )
        await log.upsert_scram_credentials([bob, alice512, alice256])
        # another node reads what this one stored, bytes and all, ordered by user and mechanism
        assert await log2.scram_credentials() == [alice256, alice512, bob]
        stored = await log2.scram_credentials()
        assert all(type(c.salt) is bytes and type(c.stored_key) is bytes for c in stored)

        new_alice = cred("alice", n=7)
        # the same key twice in one call: the last one wins, no error
        await log.upsert_scram_credentials([cred("alice", n=5), new_alice])
        assert await log2.scram_credentials() == [new_alice, alice512, bob]
        await log.upsert_scram_credentials([])

    async def test_deleting_credentials_counts_what_existed(self, log: Store) -> None:
        await log.upsert_scram_credentials(
            [cred("alice"), cred("alice", "SCRAM-SHA-512", 2), cred("bob", n=3)]
        )
        assert await log.delete_scram_credentials([("nobody", "SCRAM-SHA-256")]) == 0
        assert (
            await log.delete_scram_credentials(
                [("alice", "SCRAM-SHA-256"), ("alice", "SCRAM-SHA-256"), ("bob", "SCRAM-SHA-512")]
            )
            == 1
        )
        assert [(c.user, c.mechanism) for c in await log.scram_credentials()] == [
            ("alice", "SCRAM-SHA-512"),
            ("bob", "SCRAM-SHA-256"),
        ]
        assert await log.delete_scram_credentials([]) == 0

    async def test_the_security_version_moves_with_every_change_and_only_then(
        self, log: Store, log2: Store
    ) -> None:
        assert await log.security_version() == 0
        versions = [0]

        async def changed(moved: bool) -> None:
            v = await log2.security_version()
            assert (v > versions[-1]) if moved else (v == versions[-1]), (moved, v, versions)
            versions.append(v)

        await log.upsert_scram_credentials([cred("alice")])
        await changed(True)
        await log.upsert_scram_credentials([cred("alice", n=2)])  # a replacement is a change
        await changed(True)
        await log.scram_credentials()
        await log.acl_bindings()
        await changed(False)
        await log.create_acls([acl("g1")])
        await changed(True)
        await log.create_acls([acl("g1")])  # already there: nothing changed
        await changed(False)
        await log.create_acls([acl("g1"), acl("g2")])
        await changed(True)
        assert await log.delete_acls([AclBindingFilter(resource_name="none")]) == [[]]
        await changed(False)
        await log.delete_acls([AclBindingFilter(resource_name="g2")])
        await changed(True)
        assert await log.delete_scram_credentials([("bob", "SCRAM-SHA-256")]) == 0
        await changed(False)
        await log.delete_scram_credentials([("alice", "SCRAM-SHA-256")])
        await changed(True)
        # log_partitions shares cluster_meta and leaves the counter alone
        await log.ensure_log_partitions(4)
        await changed(False)

    async def test_a_binding_with_a_long_name_is_stored(self, log: Store) -> None:
        # a group id may be 4 kB (a PostgreSQL index over the name itself would refuse it)
        import secrets

        long = acl(secrets.token_hex(2048))
        await log.create_acls([long])
        await log.create_acls([long])
        assert await log.acl_bindings() == [long]

    async def test_deleting_acls_by_filter_returns_what_each_filter_deleted(
        self, log: Store
    ) -> None:
        a_read = acl("billing")
        a_desc = acl("billing", op=DESCRIBE)
        b_read = acl("billing", principal="User:bob")
        prefixed = acl("bill", pattern=PREFIXED, principal="User:bob")
        topic = acl("billing", rtype=TOPIC)
        await log.create_acls([a_read, a_desc, b_read, prefixed, topic])

        result = await log.delete_acls(
            [
                AclBindingFilter(resource_type=GROUP, principal="User:alice"),
                AclBindingFilter(operation=AclOperation.WRITE),  # matches nothing
                AclBindingFilter(principal="User:alice", operation=DESCRIBE),  # overlaps #1
            ]
        )
        assert [sorted(r, key=repr) for r in result] == [
            sorted([a_read, a_desc], key=repr),
            [],
            [a_desc],
        ]
        assert sorted(await log.acl_bindings(), key=repr) == sorted(
            [b_read, prefixed, topic], key=repr
        )
        # MATCH: what applies to group "billing" (the literal and the prefixed binding)
        (matched,) = await log.delete_acls(
            [
                AclBindingFilter(
                    resource_type=GROUP, pattern_type=PatternType.MATCH, resource_name="billing"
                )
            ]
        )
        assert sorted(matched, key=repr) == sorted([b_read, prefixed], key=repr)
        assert await log.acl_bindings() == [topic]
        assert await log.delete_acls([]) == []
        assert await log.delete_acls([AclBindingFilter()]) == [[topic]]
        assert await log.acl_bindings() == []

    async def test_node_listeners_round_trip(self, log: Store, log2: Store) -> None:
        listeners = {"SASL_SSL": ("node1", 9093), "PLAINTEXT": ("127.0.0.1", 9092)}
        await log.register_node(1, "127.0.0.1", 9092, None, T0, listeners=listeners)
        await log.register_node(2, "10.0.0.2", 9092, None, T0)  # none: an empty dict
        await log.register_node(3, "::1", 9092, None, T0, listeners={"SSL": ("::1", 9094)})
        live = await log2.live_nodes(T0, ttl_ms=3000)
        assert [(n.node_id, n.listeners) for n in live] == [
            (1, listeners),
            (2, {}),
            (3, {"SSL": ("::1", 9094)}),
        ]
        # a re-registration replaces them
        await log.register_node(1, "127.0.0.1", 9092, None, T0 + 1, listeners={})
        assert (await log2.live_nodes(T0 + 1, ttl_ms=3000))[0].listeners == {}
