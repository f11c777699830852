"""The contract between the edges (the Kafka listener in app/kafka, the admin API) and the
runtime that implements it (app/runtime/node.py), as Kafka's `GroupCoordinatorService` is.

A request reaches a group's core through one generic call: `schedule_write` for anything that
may append records or park, `schedule_read` for answers from memory. The edge passes the core
method to run; the runtime routes by group id and raises `CoordinatorError` when the group is
not served here now. So adding an API is one handler at the edge and one in the core.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, overload

from app.group.messages import Error

if TYPE_CHECKING:
    from app.group.coordinator import GroupCoordinator
    from app.group.results import Result

T = TypeVar("T")


class ReplyWaiter(Protocol):
    """Where a scheduled write's reply is delivered: an asyncio future, or what an edge makes
    to be called back at once (app/kafka/context.py DirectReply)."""

    def done(self) -> bool: ...

    def set_result(self, result: Any, /) -> None: ...


W = TypeVar("W", bound=ReplyWaiter)
# A write: (core, request handle, now ms) -> Result; its reply is delivered for the handle.
GroupWrite = Callable[["GroupCoordinator", int, int], "Result"]
# A read: (core, now ms) -> the answer. It may move timers (a heartbeat), never the log.
GroupRead = Callable[["GroupCoordinator", int], T]


class CoordinatorError(Exception):
    """The request cannot be served here now; answer `error` (Kafka's ApiException).

    Heartbeat's answer while its partition loads is NONE (protocol.md §10.4): an error code
    that says "not served by the core" need not be a failure."""

    def __init__(self, error: Error, message: str = "") -> None:
        # an Error member, whatever int it was given: the compiled edge checks the type where
        # it reads it (app/compiled.py), inside its own error handling
        self.error = Error(error)
        super().__init__(message or self.error.name)
        self.message = message


@dataclass(frozen=True, slots=True)
class Broker:
    node_id: int
    host: str
    port: int
    # (listener name, host, port) of each advertised listener; empty: one PLAINTEXT listener
    # at host:port (a node that registered no listeners)
    endpoints: tuple[tuple[str, str, int], ...] = ()

    def on(self, listener: str) -> Broker | None:
        """This broker as a client of `listener` must reach it (Kafka answers Metadata and
        FindCoordinator per listener name); None when it has no such listener."""
        if not self.endpoints:
            return self if listener == "PLAINTEXT" else None
        for name, host, port in self.endpoints:
            if name == listener:
                return (
                    self
                    if (host, port) == (self.host, self.port)
                    else Broker(self.node_id, host, port, self.endpoints)
                )
        return None


@dataclass(frozen=True, slots=True)
class ClusterView:
    """What Metadata answers: live nodes and the topic registry."""

    cluster_id: str
    controller_id: int
    brokers: tuple[Broker, ...]
    topics: dict[str, int]  # topic name -> partition count


@dataclass(frozen=True, slots=True)
class CoordinatorLookup:
    error: Error
    broker: Broker | None = None
    message: str | None = None


class UpstreamOffsets(Protocol):
    """Gateway mode's import (app/upstream): asked before a group's OffsetFetch is answered."""

    async def before_offset_fetch(self, group_id: str) -> Error | None:
        """None: answer from here; an error: answer the group with it (its import waits)."""
        ...


class CoordinatorService(Protocol):
    """One node's view of the group coordinator."""

    node_id: int
    upstream: UpstreamOffsets | None  # gateway mode with COORD_UPSTREAM_OFFSETS=import|mirror

    def cluster(self) -> ClusterView: ...

    @property
    def topics(self) -> Mapping[str, int]:
        """The live topic registry (name -> partitions), not a copy: for a request's checks,
        read within one turn of the loop (`cluster()` copies it, with the brokers)."""
        ...

    def find_coordinator(self, key: str, key_type: int) -> CoordinatorLookup: ...

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
        """The one way from an edge into a group's core for anything that may append records
        or park: the reply is delivered into `into` (returned), or into a new asyncio future
        when `into` is None (what a handler awaits)."""
        ...

    def schedule_read(
        self,
        group_id: str,
        op: GroupRead[T],
        loading_error: Error = Error.COORDINATOR_LOAD_IN_PROGRESS,
    ) -> T: ...

    def heartbeat(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        clock: tuple[int, int] | None = None,
    ) -> Error:
        """A Heartbeat's answer: `schedule_read` of the core's heartbeat, flattened (the
        busiest request of a Stable fleet). `clock`: (wall ms, monotonic ms) if the caller
        read them already (once for many requests); else they are read here."""
        ...

    def read_all(self, op: Callable[[GroupCoordinator], list[T]]) -> tuple[list[T], bool]: ...
