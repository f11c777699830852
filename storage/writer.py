"""Group commit in front of the event log (design.md §5.3: single-row commits cost ~1 ms, batches
cost microseconds per row).

`submit()` only queues. One background task appends everything queued while the previous
transaction was in flight as the next single transaction, so under load the number of commits
per second stays roughly constant while the records per commit grow. Submissions are written in
submission order, so offsets grow in that order per partition.

Failure isolation: if a transaction is rejected because one partition is fenced, the batches of
that (partition, epoch) fail with FencedError and the others are retried at once without them;
any other error fails every submission of the transaction. Submissions are independent: a failed
one does not fail later submissions of the same partition.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from storage import bounds
from storage.envelope import AppendBatch, EnvelopeLike
from storage.errors import FencedError, RecordTooLarge, StorageError, WriterBusy, WriterStopped

log = logging.getLogger(__name__)

DEFAULT_MAX_RECORDS_PER_TXN = bounds.MAX_RECORDS_PER_TXN
DEFAULT_MAX_RECORD_BYTES = bounds.MAX_RECORD_BYTES
DEFAULT_MAX_QUEUED_RECORDS = bounds.MAX_QUEUED_RECORDS


class Appender(Protocol):
    """What LogWriter needs from EventLog (tests may wrap it)."""

    def append(self, batches: Sequence[AppendBatch]) -> Awaitable[list[int]]: ...


@dataclass(slots=True, eq=False)
class _Submission:
    partition: int
    epoch: int
    records: Sequence[EnvelopeLike]
    future: asyncio.Future[int]


class LogWriter:
    def __init__(
        self,
        log: Appender,
        node_id: int,
        *,
        max_records_per_txn: int = DEFAULT_MAX_RECORDS_PER_TXN,
        max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
        max_queued_records: int = DEFAULT_MAX_QUEUED_RECORDS,
    ) -> None:
        if max_records_per_txn < 1:
            raise ValueError("max_records_per_txn must be >= 1")
        self._log = log
        self.node_id = node_id
        self.max_records_per_txn = max_records_per_txn
        self.max_record_bytes = max_record_bytes
        self.max_queued_records = max_queued_records
        self._queued_records = 0
        self._queue: collections.deque[_Submission] = collections.deque()
        self._inflight: list[_Submission] = []
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        # cached: on Python 3.11 each asyncio.get_running_loop() costs a getpid() syscall
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False
        # Counters for metrics and tests.
        self.transactions = 0  # append() calls that committed
        self.records_written = 0
        # called after each committed transaction with (records, seconds)
        self.on_commit: Callable[[int, float], None] | None = None
        # the store failing appends since the last one that committed: (what it said, first
        # and last failure, monotonic ms as the lease rounds' errors); e.g. a full disk, while
        # small lease updates still fit
        self.failing: tuple[str, int, int] | None = None

    @property
    def queued(self) -> int:
        """Submissions waiting for a transaction (not counting the one in flight)."""
        return len(self._queue)

    def start(self) -> None:
        if self._task is None and not self._closed:
            self._loop = asyncio.get_running_loop()
            self._task = self._loop.create_task(self._run(), name="log-writer")

    async def stop(self) -> None:
        """Refuse new submissions, write everything already submitted, then end the task."""
        self._closed = True
        self._wakeup.set()
        if self._task is None:  # never started: flush inline
            self._task = asyncio.get_running_loop().create_task(self._run(), name="log-writer")
        await self._task

    def submit(
        self, partition: int, epoch: int, records: Sequence[EnvelopeLike]
    ) -> asyncio.Future[int]:
        """Queue `records` for `partition`, claiming its lease at `epoch`. Never blocks.

        The future resolves to the offset of the last record once it is durable (for an empty
        list: the partition's current last offset, after a fence check), or fails with
        FencedError / StorageError. Cancelling the future does not withdraw the records.
        """
        fut: asyncio.Future[int] = (self._loop or asyncio.get_running_loop()).create_future()
        if self._closed:
            fut.set_exception(WriterStopped("log writer is stopped"))
            return fut
        for r in records:
            size = len(r.key) + len(r.value or b"")
            if size > self.max_record_bytes:
                fut.set_exception(
                    RecordTooLarge(f"a record of {size} bytes (at most {self.max_record_bytes})")
                )
                return fut
        if records and self._queued_records + len(records) > self.max_queued_records:
            fut.set_exception(WriterBusy(f"{self._queued_records} records queued for the log"))
            return fut
        self._queued_records += len(records)
        self._queue.append(_Submission(partition, epoch, records, fut))
        self._wakeup.set()
        return fut

    # --- the background task -------------------------------------------------------------------

    async def _run(self) -> None:
        try:
            while True:
                if not self._queue:
                    if self._closed:
                        return
                    self._wakeup.clear()
                    await self._wakeup.wait()
                    continue
                self._inflight = self._take()
                await self._commit(self._inflight)
                self._inflight = []
        finally:
            # Cancelled (or a bug): no caller may wait forever. The outcome of an in-flight
            # transaction is unknown here; its submissions fail too.
            self._closed = True
            stopped = WriterStopped("log writer stopped before the write completed")
            for s in (*self._inflight, *self._queue):
                _fail(s, stopped)
            self._inflight = []
            self._queue.clear()
            self._queued_records = 0

    def _take(self) -> list[_Submission]:
        """The oldest submissions, up to max_records_per_txn records (at least one)."""
        txn = [self._queue.popleft()]
        n = len(txn[0].records)
        while self._queue and n + len(self._queue[0].records) <= self.max_records_per_txn:
            s = self._queue.popleft()
            txn.append(s)
            n += len(s.records)
        self._queued_records -= n
        return txn

    async def _commit(self, txn: list[_Submission]) -> None:
        while txn:
            batches = [AppendBatch(s.partition, s.epoch, self.node_id, s.records) for s in txn]
            started = time.perf_counter()
            try:
                offsets = await self._log.append(batches)
            except FencedError as e:
                fenced = [
                    s
                    for s in txn
                    if s.partition == e.partition and (e.epoch is None or s.epoch == e.epoch)
                ]
                if not fenced:  # cannot attribute it: do not loop
                    fenced = txn
                for s in fenced:
                    _fail(s, e)
                txn = [s for s in txn if s not in fenced]
                continue
            except StorageError as e:
                log.warning("append of %d batches failed: %s", len(txn), e)
                t = time.monotonic_ns() // 1_000_000
                self.failing = (
                    f"{type(e).__name__}: {e}",
                    self.failing[1] if self.failing else t,
                    t,
                )
                for s in txn:
                    _fail(s, e)
                return
            except Exception as e:  # a bug below us: fail the callers, keep the writer alive
                log.exception("append raised an unexpected error")
                for s in txn:
                    _fail(s, e)
                return
            self.transactions += 1
            self.failing = None
            if self.on_commit is not None:
                self.on_commit(sum(len(s.records) for s in txn), time.perf_counter() - started)
            for s, offset in zip(txn, offsets, strict=True):
                self.records_written += len(s.records)
                if not s.future.done():
                    s.future.set_result(offset)
            return


def _fail(s: _Submission, exc: BaseException) -> None:
    if not s.future.done():
        s.future.set_exception(exc)
