"""The topic registry: topic names and partition counts, kept in the metadata log partition.

Every node tails the partition; only its lease holder writes (one fenced writer, so the
registry's records commit in order). Metadata and OffsetCommit/OffsetFetch validation read
`topics` (protocol.md §8.2).
"""

from __future__ import annotations

import contextlib

from app.group.messages import Error
from app.group.records import (
    RecordType,
    TopicValue,
    decode_topic_key,
    decode_topic_value,
    topic_record,
)
from app.runtime.runtime import METADATA_PARTITION, CoordinatorRuntime
from app.service import CoordinatorError
from storage.ports import RecordLog


class TopicRegistry:
    def __init__(self, runtime: CoordinatorRuntime, event_log: RecordLog) -> None:
        self.runtime = runtime
        self.log = event_log
        self.topics: dict[str, int] = {}  # name -> partitions
        self._next_offset = 0

    async def refresh(self) -> None:
        """Read what was appended since the last refresh."""
        async with contextlib.aclosing(
            self.log.read(METADATA_PARTITION, self._next_offset)
        ) as batches:
            async for batch in batches:
                for stored in batch:
                    self._next_offset = stored.offset + 1
                    if stored.type != RecordType.TOPIC:
                        continue
                    name = decode_topic_key(stored.key)
                    if stored.value is None:
                        self.topics.pop(name, None)
                    else:
                        self.topics[name] = decode_topic_value(stored.value).partitions

    async def ensure(self, wanted: dict[str, int]) -> None:
        """Create missing topics and grow smaller ones; never shrink (Kafka cannot either)."""
        changes = {name: n for name, n in wanted.items() if self.topics.get(name, 0) < n}
        if changes:
            await self.put(changes)

    async def put(self, topics: dict[str, int]) -> None:
        """Write topic registry records; only the metadata partition's owner may."""
        p = self.runtime.partitions.get(METADATA_PARTITION)
        if p is None:
            raise CoordinatorError(
                Error.NOT_COORDINATOR,
                f"node {self.runtime.node_id} does not own the topic registry (partition -1)",
            )
        records = [topic_record(name, TopicValue(n)) for name, n in topics.items()]
        await self.runtime.writer.submit(METADATA_PARTITION, p.epoch, records)
        await self.refresh()
