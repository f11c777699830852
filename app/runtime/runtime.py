"""The coordinator runtime: the partitions this node serves, and the one way requests reach
their cores, as Kafka's `CoordinatorRuntime.scheduleWriteOperation/scheduleReadOperation`.

Every partition's core is called synchronously on the event loop, so calls run to completion
one at a time: the loop is the serial executor of every partition and the core needs no locks.
What a write has to wait for (a parked join, a durable append) is a future keyed by the
request's handle, resolved when the core emits a reply for that handle (design.md §5.1).

Routing failures become one exception, `app.service.CoordinatorError(error)`, raised before
the core is touched; the Kafka edge turns it into the API's error reply, the admin API into an
HTTP status.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final, TypeVar, overload

from app.config import DEFAULTS
from app.group.coordinator import GroupCoordinator
from app.group.messages import NO_ERROR, Error
from app.group.results import AppendFailure, Continuation, OffsetsDone, Reply, Result
from app.runtime.placement import CACHED_ID_LENGTH, cached_partition_for, partition_for
from app.service import CoordinatorError, GroupRead, GroupWrite, ReplyWaiter, W
from storage.errors import FencedError, RecordTooLarge, StorageError, WriterBusy
from storage.writer import LogWriter

log = logging.getLogger(__name__)

T = TypeVar("T")
METADATA_PARTITION = -1  # the topic registry's own log partition


def now_ms() -> int:
    """Wall-clock ms: what the core sees as time (timestamps in records, session deadlines)."""
    return time.time_ns() // 1_000_000


def monotonic_ms() -> int:
    """Lease validity is judged on this clock: a step of the wall clock (NTP, an operator)
    must not make a node believe it still holds a partition another node took."""
    return time.monotonic_ns() // 1_000_000


def append_failure(exc: BaseException) -> AppendFailure:
    """The one mapping from a storage exception to what the core is told of a failed append."""
    if isinstance(exc, FencedError):
        return AppendFailure.NOT_OWNER
    if isinstance(exc, RecordTooLarge):
        return AppendFailure.TOO_LARGE
    if isinstance(exc, TimeoutError | WriterBusy):
        return AppendFailure.TIMEOUT
    return AppendFailure.STORAGE


class PartitionState(StrEnum):
    LOADING = "loading"
    ACTIVE = "active"
    UNLOADED = "unloaded"


ACTIVE: Final = PartitionState.ACTIVE  # not through 3.11's slow enum hook (app/group/state.py)


@dataclass(eq=False)
class Partition:
    id: int
    epoch: int
    state: PartitionState = PartitionState.LOADING
    core: GroupCoordinator | None = None
    records_loaded: int = 0
    load_ms: float = 0.0
    timer: asyncio.TimerHandle | None = None
    armed_deadline: int | None = None
    load_task: asyncio.Task[None] | None = field(default=None, repr=False)
    # serve only while the lease is surely ours (zombie safety), on the monotonic clock
    valid_until: int = 0
    appended_since_compaction: int = 1  # a freshly loaded partition gets one round
    compacted_at_ms: int = 0
    # appends not yet durable, and the continuation each completes: answered at `drop` when the
    # store cannot say (cut off, a lapsed lease), never left waiting on it
    writes: dict[asyncio.Future[int], Continuation] = field(default_factory=dict, repr=False)


class CoordinatorRuntime:
    """The partitions of one node and the plumbing between their cores and the loop."""

    def __init__(
        self,
        node_id: int,
        log_partitions: int,
        writer: LogWriter,
        op_seconds: dict[str, Any] | None = None,
        max_groups: int = DEFAULTS.max_groups,
        max_group_id_length: int = DEFAULTS.max_group_id_length,
    ) -> None:
        self.node_id = node_id
        self.log_partitions = log_partitions
        self.writer = writer
        self.partitions: dict[int, Partition] = {}
        self._handles = itertools.count(1)
        # cached: on Python 3.11 each asyncio.get_running_loop() costs a getpid() syscall
        self._loop: asyncio.AbstractEventLoop | None = None
        # handle -> (where the waiting request's reply goes, its operation's histogram, start)
        self._waiting: dict[int, tuple[ReplyWaiter, Any, float]] = {}
        self._op_seconds = op_seconds or {}  # operation name -> latency histogram
        self.retired_rebalances: dict[str, int] = {}  # counts of unloaded partitions
        self.lease_changes = 0
        self.max_groups = max_groups
        self.max_group_id_length = max_group_id_length
        # told the group of every durable offset commit (gateway mode's mirror), or None
        self.committed: Callable[[str], None] | None = None

    def group_count(self) -> int:
        return sum(len(p.core.groups) for p in self.partitions.values() if p.core is not None)

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    # ==== scheduling ============================================================================

    def route(self, group_id: str, loading_error: Error) -> Partition:
        """The active partition serving `group_id`; else CoordinatorError (protocol.md §3.3)."""
        if len(group_id) > self.max_group_id_length:
            # a group id is hashed, kept and logged: a megabyte of it would cost all three
            raise CoordinatorError(
                Error.INVALID_GROUP_ID,
                f"group id of {len(group_id)} characters (COORD_MAX_GROUP_ID_LENGTH)",
            )
        p = self.partitions.get(partition_for(group_id, self.log_partitions))
        if p is None or p.state is PartitionState.UNLOADED:
            raise CoordinatorError(Error.NOT_COORDINATOR)
        if monotonic_ms() >= p.valid_until:
            # the lease could not be renewed in time: another node may own it by now
            raise CoordinatorError(Error.NOT_COORDINATOR)
        if p.state is PartitionState.LOADING:
            raise CoordinatorError(loading_error)
        if p.core is None:  # the topic registry's partition serves no group
            raise CoordinatorError(Error.NOT_COORDINATOR)
        return p

    @overload
    def schedule_write(
        self,
        name: str,
        group_id: str,
        op: GroupWrite,
        loading_error: Error = ...,
        creates_group: bool = ...,
        into: None = None,
    ) -> asyncio.Future[Any]: ...

    @overload
    def schedule_write(
        self,
        name: str,
        group_id: str,
        op: GroupWrite,
        loading_error: Error = ...,
        creates_group: bool = ...,
        *,
        into: W,
    ) -> W: ...

    def schedule_write(
        self,
        name: str,
        group_id: str,
        op: GroupWrite,
        loading_error: Error = Error.COORDINATOR_LOAD_IN_PROGRESS,
        creates_group: bool = False,
        into: ReplyWaiter | None = None,
    ) -> ReplyWaiter:
        """Run `op` on the group's core now; the reply it (or its write) releases is delivered
        into `into` (its `set_result`, possibly before this returns: the core may answer at
        once), or into a new future when `into` is None; returned for the caller to await.
        Route errors raise here. A plain function, not a coroutine: a second coroutine level
        under every parked request (each commit, each JoinGroup and SyncGroup) cost ~0.7 us.
        `creates_group`: the operation makes an unknown group, which the node's bound on groups
        may refuse (COORD_MAX_GROUPS)."""
        p = self.route(group_id, loading_error)
        core = p.core
        assert core is not None
        if creates_group and group_id not in core.groups:
            held = self.group_count()
            if held >= self.max_groups:
                raise CoordinatorError(
                    Error.COORDINATOR_NOT_AVAILABLE,
                    f"this node holds {held} groups (COORD_MAX_GROUPS)",
                )
        if into is None:
            into = (self._loop or asyncio.get_running_loop()).create_future()
        handle = next(self._handles)
        self._waiting[handle] = (into, self._op_seconds.get(name), time.perf_counter())
        try:
            self.apply(p, op(core, handle, now_ms()))
        except BaseException:
            self._waiting.pop(handle, None)
            raise
        return into

    def schedule_read(
        self,
        group_id: str,
        op: GroupRead[T],
        loading_error: Error = Error.COORDINATOR_LOAD_IN_PROGRESS,
    ) -> T:
        """Answer from the group's core now; timers it moved are re-armed."""
        p = self.route(group_id, loading_error)
        assert p.core is not None
        answer = op(p.core, now_ms())
        self.arm(p)
        return answer

    def heartbeat(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        clock: tuple[int, int] | None = None,
    ) -> Error:
        """`schedule_read(core.heartbeat)` for the wire's hot path: same answers and errors
        (CoordinatorError when the group is not served here; NONE while loading,
        protocol.md §10.4), without the request and reply objects. `clock` is (wall ms,
        monotonic ms) read once for a batch of requests (see KafkaConnection._consume)."""
        now, mono = clock if clock is not None else (now_ms(), monotonic_ms())
        # `route`'s checks in the order of the common case; any doubt asks `route` itself,
        # which raises the precise error
        p = (
            self.partitions.get(cached_partition_for(group_id, self.log_partitions))
            if 0 < len(group_id) <= CACHED_ID_LENGTH
            else None
        )
        if p is None or p.state is not ACTIVE or mono >= p.valid_until:
            if not group_id:
                raise CoordinatorError(Error.INVALID_GROUP_ID)
            p = self.route(group_id, NO_ERROR)
        core = p.core
        if core is None:
            raise CoordinatorError(Error.NOT_COORDINATOR)
        error = core.heartbeat_error(group_id, generation_id, member_id, group_instance_id, now)
        # a heartbeat moves its member's deadline later: re-arming is rarely needed
        armed = p.armed_deadline
        heap = core.heap
        if armed is None or (heap and heap[0][0] < armed):
            self.arm(p)
        return error

    def read_all(self, op: Callable[[GroupCoordinator], list[T]]) -> tuple[list[T], bool]:
        """`op` over every loaded partition, and whether some partition is still loading."""
        out: list[T] = []
        loading = False
        for p in self.partitions.values():
            if p.state is PartitionState.LOADING:
                loading = True
            elif p.core is not None:
                out.extend(op(p.core))
        return out, loading

    # ==== plumbing between the cores and the loop ===============================================

    def apply(self, p: Partition, result: Result) -> None:
        self._deliver(result.replies)
        for write in result.writes:
            p.appended_since_compaction += len(write.records)
            fut = self.writer.submit(p.id, p.epoch, write.records)
            p.writes[fut] = write.continuation
            fut.add_done_callback(functools.partial(self._written, p, p.core, write.continuation))
        # as in `heartbeat`: the heap's top is a lower bound of the next deadline, so a timer
        # armed no later than it stands (most results move no timer earlier than the armed one)
        armed = p.armed_deadline
        core = p.core
        if armed is None or core is None or ((heap := core.heap) and heap[0][0] < armed):
            self.arm(p)

    def _written(
        self,
        p: Partition,
        core: GroupCoordinator | None,
        cont: Continuation,
        fut: asyncio.Future[int],
    ) -> None:
        exc = fut.exception() if not fut.cancelled() else StorageError("write cancelled")
        failure = None if exc is None else append_failure(exc)
        if core is None or p.writes.pop(fut, None) is None:
            return  # no core to tell, or answered when the partition was dropped
        if exc is not None:
            log.warning("partition %d: append failed: %s", p.id, exc)
        result = core.on_write_complete(cont, failure, now_ms())
        if failure is None and self.committed is not None and type(cont) is OffsetsDone:
            self.committed(cont.group_id)  # gateway mode's mirror (app/upstream/mirror.py)
        if p.core is not core:
            # unloaded meanwhile: answer the waiters (durable or not), change nothing else
            self._deliver(result.replies)
            return
        self.apply(p, result)
        if (
            failure is not None
            and failure is AppendFailure.NOT_OWNER
            and self.partitions.get(p.id) is p
        ):
            self.drop(p, "fenced by a newer lease epoch")

    def _deliver(self, replies: list[tuple[int, Reply]]) -> None:
        for handle, response in replies:
            waiting = self._waiting.pop(handle, None)
            if waiting is not None:
                into, histogram, started = waiting
                # the operation's latency: scheduled -> answered, read before handing the reply
                # on (a DirectReply encodes and queues it, and the next ones wait for that)
                if histogram is not None:
                    histogram.observe(time.perf_counter() - started)
                if not into.done():  # a future cancelled meanwhile takes nothing
                    into.set_result(response)

    def arm(self, p: Partition) -> None:
        if p.core is None:
            return
        deadline = p.core.next_deadline()
        if deadline is None or (p.armed_deadline is not None and p.armed_deadline <= deadline):
            return
        if p.timer is not None:
            p.timer.cancel()
        delay = max(deadline - now_ms(), 0) / 1000
        p.armed_deadline = deadline
        p.timer = (self._loop or asyncio.get_running_loop()).call_later(delay, self._on_timer, p)

    def _on_timer(self, p: Partition) -> None:
        p.timer = None
        p.armed_deadline = None
        if p.core is None:
            return
        if monotonic_ms() >= p.valid_until:
            # not surely ours (e.g. just resumed from a pause): expire nobody until renewed
            p.timer = asyncio.get_running_loop().call_later(0.1, self._on_timer, p)
            return
        self.apply(p, p.core.poll_timers(now_ms()))

    # ==== taking and dropping partitions ========================================================

    def add(self, pid: int, epoch: int, valid_until: int) -> Partition:
        log.info("node %d took partition %d at epoch %d", self.node_id, pid, epoch)
        p = Partition(pid, epoch, valid_until=valid_until)
        self.partitions[pid] = p
        self.lease_changes += 1
        return p

    def activate(self, p: Partition, core: GroupCoordinator) -> None:
        """A load finished: serve `p` from `core` (protocol.md §10.3)."""
        p.core = core
        p.state = ACTIVE
        self.apply(p, core.on_loaded(now_ms()))

    def drop(self, p: Partition, why: str, *, unheard: bool = False) -> None:
        """Stop serving `p` now: parked requests get NOT_COORDINATOR (protocol.md §10.5), those
        whose append is in flight its outcome once the store says it. `unheard`: the store may
        not say for long (cut off, the lease lapsed), so they get NOT_COORDINATOR now too; the
        append may still land or be fenced, and whoever loads `p` next replays what landed."""
        if p.state is PartitionState.UNLOADED:
            return
        log.info("node %d unloads partition %d: %s", self.node_id, p.id, why)
        if self.partitions.get(p.id) is p:
            del self.partitions[p.id]
        task = p.load_task
        if task is not None and not task.done() and task is not asyncio.current_task():
            task.cancel()
        if p.timer is not None:
            p.timer.cancel()
            p.timer = None
        p.state = PartitionState.UNLOADED
        if p.core is not None:
            if unheard:
                writes, p.writes = p.writes, {}
                for cont in writes.values():  # the core is discarded: its state may move
                    failed = p.core.on_write_complete(cont, AppendFailure.NOT_OWNER, now_ms())
                    self._deliver(failed.replies)
            for reason, n in p.core.rebalances.items():
                self.retired_rebalances[reason] = self.retired_rebalances.get(reason, 0) + n
            self._deliver(p.core.unload(now_ms()).replies)
        p.core = None
        self.lease_changes += 1

    def rebalance_counts(self) -> dict[str, int]:
        counts = dict(self.retired_rebalances)
        for p in self.partitions.values():
            if p.core is not None:
                for reason, n in p.core.rebalances.items():
                    counts[reason] = counts.get(reason, 0) + n
        return counts
