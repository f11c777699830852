"""Loading a log partition: replay its newest record per key into a fresh core (design.md §7.2).

A load reads one snapshot (a compaction meanwhile cannot hide a tombstone from it), replays in
slices that yield to the loop (leases, requests and other loads go on), and hands the core to
the runtime only if the partition is still this node's when it ends.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
import uuid
from collections.abc import Callable

from app.group.config import CoreConfig
from app.group.coordinator import GroupCoordinator
from app.group.records import Record, RecordType
from app.runtime.runtime import CoordinatorRuntime, Partition
from storage.ports import RecordLog

log = logging.getLogger(__name__)

# A replay yields to the loop after this much CPU time: a load must not starve lease renewals
# (nor delay a PostgreSQL transaction of the lease round past its idle timeout).
REPLAY_SLICE_S = 0.005
_RECORD_TYPES = {t.value: t for t in RecordType}  # the log stores a record type as its number


class _GcPause:
    """Loads pause the cyclic garbage collector. A load allocates millions of long-lived
    objects and frees almost none; the collector would walk them over and over (replay of an
    all-live log measured 1.8x slower with it on), and once enabled again it would walk them
    all once more as they age through its generations (a third of a 100k-group load, in
    py-spy). So when the last load in progress ends, everything alive is frozen (gc.freeze:
    never walked again; reference counting still frees a group when it is deleted or its
    partition unloaded, as the core's state holds no reference cycles) and the collector is
    enabled again. Process-wide, like the collector."""

    holders = 0
    was_enabled = True

    def __enter__(self) -> None:
        if _GcPause.holders == 0:
            _GcPause.was_enabled = gc.isenabled()
            gc.disable()
        _GcPause.holders += 1

    def __exit__(self, *exc: object) -> None:
        _GcPause.holders -= 1
        if _GcPause.holders == 0 and _GcPause.was_enabled:
            gc.freeze()
            gc.enable()


class LoadFailure(Exception):
    """A record of the partition cannot be replayed: the load fails, naming its offset."""

    def __init__(self, partition: int, offset: int | None, reason: str) -> None:
        super().__init__(f"partition {partition}: record at offset {offset}: {reason}")
        self.partition = partition
        self.offset = offset
        self.reason = reason


def new_member_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4()}"


class Loader:
    def __init__(
        self,
        runtime: CoordinatorRuntime,
        event_log: RecordLog,
        core_config: CoreConfig,
        concurrent_loads: int,
        on_loaded: Callable[[float], None],
    ) -> None:
        self.runtime = runtime
        self.log = event_log
        self.core_config = core_config
        # each load holds a database connection for its snapshot
        self._slots = asyncio.Semaphore(concurrent_loads)
        self._on_loaded = on_loaded  # load seconds, for the metrics

    async def load(self, p: Partition) -> None:
        started = time.perf_counter()
        core = GroupCoordinator(self.core_config, new_member_id)
        with _GcPause():
            async with self._slots:
                n, records = await self.log.read_latest(p.id)
            clock = time.perf_counter
            resume = clock() + REPLAY_SLICE_S
            for i, (t, key, value) in enumerate(records):
                try:
                    core.replay(Record(_RECORD_TYPES[t], key, value))
                except Exception as e:  # an unknown type, a value that does not decode
                    offset = await self.log.newest_offset_of(p.id, t, key)
                    raise LoadFailure(p.id, offset, f"{type(e).__name__}: {e}") from e
                if i & 63 == 0 and clock() > resume:
                    await asyncio.sleep(0)  # let leases, requests and other loads progress
                    resume = clock() + REPLAY_SLICE_S
            if self.runtime.partitions.get(p.id) is not p:
                return  # lost while loading
            p.records_loaded = n
            p.load_ms = (time.perf_counter() - started) * 1000
            self._on_loaded(p.load_ms / 1000)
            log.info(
                "partition %d loaded: %d records, %d groups in %.0f ms",
                p.id,
                n,
                len(core.groups),
                p.load_ms,
            )
            self.runtime.activate(p, core)
