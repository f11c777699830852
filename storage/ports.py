"""What storage's callers use, named after their use: the ports a backend implements.

Like Kafka's `PartitionWriter` / `CoordinatorLoader` and pyeventsourcing's recorders: the
runtime, the loader and the lease round depend on these Protocols, never on a backend class.
`storage.sql` implements every one of them on SQLite and PostgreSQL; a backend that implements
`Store` passes the storage suite (tests/storage/suite.py) by adding one test file.

The rules each port keeps (one writer per partition, fenced by epoch: design.md §6; the event
log: design.md §8): an append is fenced in its own transaction, offsets are dense and become
visible in order per partition, compaction keeps the newest record per key and the last row.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from storage.envelope import AppendBatch, LatestRecords, StoredRecord
from storage.security import AclBinding, AclBindingFilter, ScramCredential

__all__ = [
    "ClusterMeta",
    "CompactionStats",
    "Compactor",
    "LeaseRow",
    "LeaseTable",
    "NodeRegistry",
    "NodeRow",
    "RecordLog",
    "SecurityStore",
    "Store",
]


@dataclass(frozen=True, slots=True)
class LeaseRow:
    partition: int
    owner_node_id: int | None  # None = released
    epoch: int
    expires_at_ms: int


@dataclass(frozen=True, slots=True)
class NodeRow:
    node_id: int
    kafka_host: str
    kafka_port: int
    admin_url: str | None
    heartbeat_ms: int
    started_ms: int
    # listener name -> advertised (host, port); empty for a node that registered none
    listeners: dict[str, tuple[str, int]] = field(default_factory=dict)


@dataclass(slots=True)
class CompactionStats:
    partition: int
    scanned: int = 0  # offsets covered
    removed: int = 0
    archived: int = 0
    history_removed: int = 0  # archived rows older than the history retention, deleted


class RecordLog(Protocol):
    """The partitioned log of envelopes: what the writer appends and a load replays."""

    async def append(
        self, batches: Sequence[AppendBatch], *, now_ms: int | None = None
    ) -> list[int]:
        """All batches in one transaction, fenced on each batch's lease and epoch (FencedError,
        nothing written); the last offset written per batch."""
        ...

    def read(
        self,
        partition: int,
        from_offset: int = 0,
        batch_size: int = 10000,
        *,
        until_offset: int | None = None,
        snapshot: bool = False,
    ) -> AsyncGenerator[list[StoredRecord], None]:
        """[from_offset, until_offset) of `partition` in offset order, in bounded batches."""
        ...

    async def read_latest(self, partition: int, page_size: int = 20_000) -> LatestRecords:
        """The newest record of every key of `partition`, as of one snapshot."""
        ...

    async def end_offset(self, partition: int) -> int:
        """The next offset to be written to `partition` (0 when empty)."""
        ...

    async def newest_offset_of(
        self, partition: int, record_type: int, key: bytes
    ) -> int | None: ...

    async def key_history(
        self, partition: int, record_type: int, key: bytes, limit: int = 2_000
    ) -> list[tuple[int, int, bytes | None]]:
        """(offset, append time ms, value) of one key's newest records, archived ones too."""
        ...


class LeaseTable(Protocol):
    """Who may write each partition, at which epoch (design.md §6.2)."""

    async def clock_ms(self) -> int:
        """The store's clock, which every node judges lease and node expiry by."""
        ...

    async def acquire_lease(
        self, partition: int, node_id: int, ttl_ms: int, now_ms: int, *, bump_own: bool = False
    ) -> int | None: ...

    async def acquire_leases(
        self,
        partitions: Sequence[int],
        node_id: int,
        ttl_ms: int,
        now_ms: int,
        *,
        bump_own: bool = False,
    ) -> dict[int, int]:
        """{partition: epoch} of the free, expired or own leases taken (a new epoch unless a
        live one of ours is extended without `bump_own`)."""
        ...

    async def renew_leases(
        self, node_id: int, partitions_with_epochs: dict[int, int], ttl_ms: int, now_ms: int
    ) -> set[int]: ...

    async def release_lease(
        self, partition: int, node_id: int, epoch: int, now_ms: int = 0
    ) -> bool: ...

    async def leases(self) -> list[LeaseRow]: ...


class NodeRegistry(Protocol):
    """The live nodes, by heartbeat, that placement divides the partitions among."""

    async def register_node(
        self,
        node_id: int,
        kafka_host: str,
        kafka_port: int,
        admin_url: str | None,
        now_ms: int,
        *,
        listeners: dict[str, tuple[str, int]] | None = None,
    ) -> None: ...

    async def heartbeat_node(self, node_id: int, now_ms: int) -> bool:
        """False when the node is not registered."""
        ...

    async def deregister_node(self, node_id: int) -> None: ...

    async def live_nodes(self, now_ms: int, ttl_ms: int) -> list[NodeRow]: ...


class ClusterMeta(Protocol):
    """Values every node of the store shares, made by the first that asks."""

    async def ensure_log_partitions(self, n: int) -> int:
        """ConfigMismatch when the store was created with another number."""
        ...

    async def log_partitions(self) -> int | None: ...

    async def ensure_cluster_id(self) -> str: ...

    async def ensure_peer_key(self) -> bytes: ...


class Compactor(Protocol):
    """Compaction of one partition by its lease holder (design.md §8.4)."""

    async def compact(
        self,
        partition: int,
        node_id: int,
        epoch: int,
        *,
        tombstone_cutoff_ms: int,
        archive: bool = True,
        chunk_offsets: int = 5000,
        now_ms: int | None = None,
        history_cutoff_ms: int | None = None,
    ) -> CompactionStats: ...


class SecurityStore(Protocol):
    """Credentials and ACLs shared by every node, with a counter every change moves."""

    async def security_version(self) -> int: ...

    async def scram_credentials(self) -> list[ScramCredential]: ...

    async def upsert_scram_credentials(self, credentials: Sequence[ScramCredential]) -> None: ...

    async def delete_scram_credentials(self, keys: Sequence[tuple[str, str]]) -> int: ...

    async def acl_bindings(self) -> list[AclBinding]: ...

    async def create_acls(self, bindings: Sequence[AclBinding]) -> None: ...

    async def delete_acls(self, filters: Sequence[AclBindingFilter]) -> list[list[AclBinding]]:
        """Per filter, in order, the bindings it matched (all of them deleted)."""
        ...


class Store(RecordLog, LeaseTable, NodeRegistry, ClusterMeta, Compactor, SecurityStore, Protocol):
    """Everything a node needs of its store, opened once per process."""

    async def close(self) -> None: ...
