"""Credentials and ACLs in the shared database: the SecurityStore port (storage/ports.py).

Every change bumps the cluster_meta row `security_version` in its own transaction, so a node
that polls the counter and sees it unchanged knows its snapshot is current, and one that
sees it moved reloads a state that includes the change.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any, Final, cast

from sqlalchemy import BigInteger, Text, select
from sqlalchemy import cast as sql_cast
from sqlalchemy.ext.asyncio import AsyncConnection

from storage.security import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    ScramCredential,
)
from storage.sql.database import Database
from storage.sql.statements import Rows
from storage.sql.tables import acls, cluster_meta, scram_credentials

SECURITY_VERSION: Final = "security_version"

_ACL_COLUMNS: Final = (
    acls.c.resource_type,
    acls.c.resource_name,
    acls.c.pattern_type,
    acls.c.principal,
    acls.c.host,
    acls.c.operation,
    acls.c.permission,
)


def binding_key(b: AclBinding) -> bytes:
    """The acls primary key: SHA-256 of the binding's seven fields (wire codes for enums)."""
    fields = [
        int(b.resource_type),
        b.resource_name,
        int(b.pattern_type),
        b.principal,
        b.host,
        int(b.operation),
        int(b.permission),
    ]
    return hashlib.sha256(json.dumps(fields, separators=(",", ":")).encode()).digest()


def _binding(row: Sequence[Any]) -> AclBinding:
    rt, name, pt, principal, host, op, perm = row
    return AclBinding(
        ResourceType(rt),
        name,
        PatternType(pt),
        principal,
        host,
        AclOperation(op),
        AclPermissionType(perm),
    )


def _acl_values(b: AclBinding) -> dict[str, Any]:
    return {
        "binding_key": binding_key(b),
        "resource_type": int(b.resource_type),
        "resource_name": b.resource_name,
        "pattern_type": int(b.pattern_type),
        "principal": b.principal,
        "host": b.host,
        "operation": int(b.operation),
        "permission": int(b.permission),
    }


class Security:
    """EventLog's credential and ACL operations."""

    _db: Database

    # --- the change counter ------------------------------------------------------------------

    async def security_version(self) -> int:
        """How many credential or ACL changes were stored (0 before the first)."""
        async with self._db.read() as conn:
            v = (
                await conn.execute(
                    select(cluster_meta.c.value).where(cluster_meta.c.name == SECURITY_VERSION)
                )
            ).scalar()
        return 0 if v is None else int(v)

    async def _bump(self, conn: AsyncConnection) -> None:
        """+1 on the counter, atomically (PostgreSQL re-reads a concurrently updated row in ON
        CONFLICT DO UPDATE; SQLite's write transaction holds the whole database)."""
        stmt = self._db.insert(cluster_meta).values(name=SECURITY_VERSION, value="1")
        await conn.execute(
            stmt.on_conflict_do_update(
                index_elements=["name"],
                set_={"value": sql_cast(sql_cast(cluster_meta.c.value, BigInteger) + 1, Text)},
            )
        )

    # --- SCRAM credentials ---------------------------------------------------------------------

    async def scram_credentials(self) -> list[ScramCredential]:
        S = scram_credentials.c
        async with self._db.read() as conn:
            rows = await conn.execute(
                select(
                    S.user_name, S.mechanism, S.salt, S.iterations, S.stored_key, S.server_key
                ).order_by(S.user_name, S.mechanism)
            )
            return [
                ScramCredential(u, m, bytes(salt), i, bytes(sk), bytes(vk))
                for u, m, salt, i, sk, vk in cast(Rows, rows.all())
            ]

    async def upsert_scram_credentials(self, credentials: Sequence[ScramCredential]) -> None:
        """Insert each credential or replace the user's one of that mechanism."""
        if not credentials:
            return
        # one row per key (the last given wins): an upsert may not touch a row twice
        by_key = {(c.user, c.mechanism): c for c in credentials}
        rows = [
            {
                "user_name": c.user,
                "mechanism": c.mechanism,
                "salt": c.salt,
                "iterations": c.iterations,
                "stored_key": c.stored_key,
                "server_key": c.server_key,
            }
            for c in by_key.values()
        ]
        stmt = self._db.insert(scram_credentials)
        stmt = stmt.on_conflict_do_update(
            index_elements=["user_name", "mechanism"],
            set_={
                name: stmt.excluded[name]
                for name in ("salt", "iterations", "stored_key", "server_key")
            },
        )
        async with self._db.write() as conn:
            await conn.execute(stmt, rows)
            await self._bump(conn)

    async def delete_scram_credentials(self, keys: Sequence[tuple[str, str]]) -> int:
        """Delete the (user, mechanism) credentials; how many existed."""
        S = scram_credentials.c
        deleted = 0
        async with self._db.write() as conn:
            for name, mechanism in dict.fromkeys(keys):
                res = await conn.execute(
                    scram_credentials.delete().where(S.user_name == name, S.mechanism == mechanism)
                )
                deleted += res.rowcount
            if deleted:
                await self._bump(conn)
        return deleted

    # --- ACLs -------------------------------------------------------------------------------

    async def acl_bindings(self) -> list[AclBinding]:
        async with self._db.read() as conn:
            rows = await conn.execute(select(*_ACL_COLUMNS).order_by(*_ACL_COLUMNS))
            return [_binding(r) for r in cast(Rows, rows.all())]

    async def create_acls(self, bindings: Sequence[AclBinding]) -> None:
        """Store each binding; one already stored is neither an error nor duplicated. The
        caller validates them (AclBinding.check)."""
        created = 0
        async with self._db.write() as conn:
            for b in dict.fromkeys(bindings):
                res = await conn.execute(
                    self._db.insert(acls)
                    .values(**_acl_values(b))
                    .on_conflict_do_nothing(index_elements=["binding_key"])
                )
                created += res.rowcount
            if created:
                await self._bump(conn)

    async def delete_acls(self, filters: Sequence[AclBindingFilter]) -> list[list[AclBinding]]:
        """Delete every binding any filter matches. Per filter, in order, the bindings it
        matched (as Kafka answers DeleteAcls, a binding two filters match is in both lists)."""
        async with self._db.write() as conn:
            # the rows are read inside the write transaction: SQLite holds the write lock
            # already; PostgreSQL locks them, so a concurrent create or delete waits
            query = self._db.dialect.for_lock(select(*_ACL_COLUMNS).order_by(*_ACL_COLUMNS))
            stored = [_binding(r) for r in cast(Rows, (await conn.execute(query)).all())]
            matched = [[b for b in stored if f.matches(b)] for f in filters]
            doomed = {binding_key(b) for found in matched for b in found}
            for key in doomed:
                await conn.execute(acls.delete().where(acls.c.binding_key == key))
            if doomed:
                await self._bump(conn)
        return matched
