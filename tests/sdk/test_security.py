"""The SDK on a SASL listener with the ACL authorizer: SCRAM credentials, the group READ ACL it
needs, and the clear errors when either is missing."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from app.security.acl import AclBinding, AclOperation, AclPermissionType, PatternType, ResourceType
from app.security.sasl import make_credential
from membership import MembershipError, WorkDistributor
from tests.protocol.secure_node import secure_node
from tests.support.ports import free_port


async def test_sdk_over_sasl_scram_with_acls(tmp_path: Path) -> None:
    port = free_port()
    async with secure_node(
        tmp_path, super_users="User:admin", listeners=f"SASL_PLAINTEXT://127.0.0.1:{port}"
    ) as n:
        await n.log.upsert_scram_credentials(
            [make_credential(u, "SCRAM-SHA-512", "pw") for u in ("worker", "stranger")]
        )
        await n.log.create_acls(
            [AclBinding(ResourceType.GROUP, "jobs-", PatternType.PREFIXED, "User:worker", "*",
                        AclOperation.READ, AclPermissionType.ALLOW)]
        )  # fmt: skip
        await n.security.refresh(force=True)
        bootstrap = f"127.0.0.1:{port}"

        work = WorkDistributor(bootstrap, "jobs-a", ["x", "y"],
                               sasl=("SCRAM-SHA-512", "worker", "pw"))  # fmt: skip
        async with work:
            await work.member.wait_assigned(20)
            assert work.items == {"x", "y"}

        for sasl, message in (
            (("SCRAM-SHA-512", "worker", "wrong"), "authentication failed"),
            (("SCRAM-SHA-512", "stranger", "pw"), "not authorized to join this group"),
        ):
            denied = WorkDistributor(bootstrap, "jobs-b", ["x"], sasl=sasl)
            await denied.start()
            with pytest.raises(MembershipError, match=message):
                await asyncio.wait_for(denied.member.wait(), 20)
            await denied.close()
