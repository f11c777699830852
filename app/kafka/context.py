"""What a request handler gets besides the decoded kio request."""

from __future__ import annotations

import asyncio
import contextlib
import enum
import inspect
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, NamedTuple, Protocol, cast

from app.group.messages import Error
from app.security.acl import AclOperation, ResourceType
from app.security.principal import ANONYMOUS
from app.service import CoordinatorService

if TYPE_CHECKING:
    from app.security.manager import SecurityManager
    from app.security.session import AuthSession

log = logging.getLogger(__name__)


class NoResponse(enum.Enum):
    """Returned by a handler when the protocol wants no reply (Produce with acks=0)."""

    NO_RESPONSE = 0


NO_RESPONSE = NoResponse.NO_RESPONSE

# A handler returns a kio response object, pre-encoded body bytes (hot paths), or NO_RESPONSE.
HandlerResult = Any


@dataclass(slots=True)
class RequestContext:
    service: CoordinatorService
    api_version: int
    client_id: str
    client_host: str
    # Resolved when the connection goes away; long polls (Fetch) stop waiting on it.
    closed: asyncio.Future[None] | None = None
    principal: str = ANONYMOUS  # User:<name> once authenticated (SASL or certificate)
    client_ip: str = ""  # what ACL host fields match
    listener: str = "PLAINTEXT"  # the listener's name: Metadata answers with its addresses
    security: SecurityManager | None = None  # None: no authorizer, everything allowed
    session: AuthSession | None = None  # the connection's SASL state (SASL listeners only)

    def allowed(
        self, op: AclOperation, rtype: ResourceType, name: str, *, log_denial: bool = True
    ) -> bool:
        """Kafka's `authHelper.authorize`: may this request's principal do `op` on it?
        A denial is audited unless `log_denial` is False (a filter, not a refusal)."""
        security = self.security
        return security is None or security.authorize(
            self.principal, self.client_ip, op, rtype, name, log_denial=log_denial
        )

    def operations(self, rtype: ResourceType, name: str) -> int:
        """The authorized_operations bit field of `name` for this principal."""
        from app.security.acl import all_operations

        if self.security is None:
            return all_operations(rtype)
        return self.security.authorized_operations(self.principal, self.client_ip, rtype, name)


SyncHandler = Callable[[RequestContext, Any], HandlerResult]
AsyncHandler = Callable[[RequestContext, Any], Coroutine[Any, Any, HandlerResult]]
ErrorBuilder = Callable[[RequestContext, Any, Error], HandlerResult]


class Pending(Protocol):
    """What a WriteCall waits on: the asyncio future a handler awaits, or the lane's
    DirectReply."""

    def done(self) -> bool: ...

    def cancelled(self) -> bool: ...

    def result(self) -> Any: ...

    def exception(self) -> BaseException | None: ...

    def add_done_callback(self, fn: Callable[[Any], object], /) -> None: ...


class DirectReply:
    """Where the runtime delivers the reply of a write the connection's lane scheduled
    (app/service.py ReplyWaiter): the callback runs at once, inside `set_result`, where an
    asyncio future would schedule it for the loop's next turn (a handle, a context copy and a
    turn of the loop: ~0.8 us of each JoinGroup, SyncGroup and commit). The runtime neither
    fails nor cancels a reply. A callback that raises is logged and goes no further: the
    runtime is handing other requests their replies in the same call."""

    __slots__ = ("_callback", "_done", "_result")

    def __init__(self) -> None:
        self._done = False
        self._result: Any = None
        self._callback: Callable[[DirectReply], object] | None = None

    def done(self) -> bool:
        return self._done

    def cancelled(self) -> bool:
        return False

    def result(self) -> Any:
        if not self._done:
            raise asyncio.InvalidStateError("the reply has not been delivered")
        return self._result

    def exception(self) -> BaseException | None:
        if not self._done:
            raise asyncio.InvalidStateError("the reply has not been delivered")
        return None

    def set_result(self, result: Any, /) -> None:
        if self._done:
            raise asyncio.InvalidStateError("the reply was delivered already")
        self._done, self._result = True, result
        callback, self._callback = self._callback, None
        if callback is not None:
            try:
                callback(self)
            except Exception:
                log.exception("handing on a delivered reply failed")

    def add_done_callback(self, fn: Callable[[DirectReply], object], /) -> None:
        """Call `fn` when the reply is delivered (now, if it is): one callback only."""
        if self._callback is not None:
            raise RuntimeError("a DirectReply takes one callback")
        if self._done:
            fn(self)
        else:
            self._callback = fn


class WriteCall(Protocol):
    """A group write served without a context or handler coroutine: the rebalance's JoinGroup
    and SyncGroup and OffsetCommit, read by app/kafka/hot_group.py, when no ACLs apply (the
    connection's `_start`). Constructing it makes the handler's checks and schedules the write
    (raising as the handler would), its reply delivered into `into` (the lane's DirectReply)
    or, when that is None, into an asyncio future the handler awaits; the connection registers
    a callback on `future` where the handler would await it. A context, a coroutine and its
    resumption per parked request were about a tenth of a commit's CPU."""

    future: Pending | None  # None: answered without a write

    def settle(self, fut: Pending) -> None:
        """Take `future`'s outcome, or raise the error to answer in the API's shape."""

    def reply(self, version: int) -> HandlerResult:
        """The reply, as the handler returns it."""


# (service, the hot reader's body, version, where the reply goes) -> the call
WriteStarter = Callable[[CoordinatorService, Any, int, DirectReply | None], WriteCall]


async def serve_call(call: WriteCall, version: int) -> HandlerResult:
    """A WriteCall served by its handler (when ACLs apply, or kio read the request): the same
    outcome as the connection's lane gives it, the future's taken by `settle`."""
    fut = call.future
    if fut is not None:
        assert isinstance(fut, asyncio.Future)  # a handler's call is made with no DirectReply
        with contextlib.suppress(Exception):
            await fut  # its outcome is for `settle`; a cancellation goes on up
        call.settle(fut)
    return call.reply(version)


class FixedReply(NamedTuple):
    """A reply frame of a fixed layout in the pieces written around the request's correlation
    id bytes (its size prefix, what follows the id) and its request metric's key: no packing
    and no copy of a whole frame per reply."""

    size: bytes
    tail: bytes
    metric_key: tuple[str, int, Error]


class MemoReader(Protocol):
    """A connection's reader of an API whose request is its bytes after the correlation id
    (a member resends the same Heartbeat until its generation changes): `memo` maps those
    bytes to (version, request), and the connection looks frames up there before it even cuts
    them out of a read."""

    memo: dict[bytes, tuple[int, Any]]

    def read(self, frame: bytes, version: int) -> Any: ...


class HotPath:
    """An API's fast path, declared on its row beside the kio reader and encoder. `read`: a
    reader with `struct` from the frame (header included) straight to the internal request,
    None for any frame outside the common shape (kio's reader then answers or rejects it as
    before). A path that `answers` serves a request from memory (Heartbeat): `answer` gives
    the error code (raising CoordinatorError as the handler would), `encode` the reply; no
    context, no kio. Otherwise the request is a group write: the row's `start` serves it when
    no ACLs apply, its handler otherwise. Methods of a class, not functions in fields: the
    compiled connection calls them without packing arguments."""

    def __init__(self, answers: bool = False) -> None:
        self.answers = answers

    def read(
        self, frame: bytes, version: int, max_client_id: int, max_elements: int, client_host: str
    ) -> Any:
        raise NotImplementedError

    def memo_reader(self, max_client_id: int) -> MemoReader | None:
        """The connection's memoizing reader, for requests that repeat byte for byte."""
        return None

    def answer(
        self,
        service: CoordinatorService,
        security: SecurityManager | None,  # None: no ACLs apply
        principal: str,
        ip: str,
        request: Any,
        clock: tuple[int, int],
    ) -> Error:
        raise NotImplementedError

    def encode(self, version: int, error: Error) -> FixedReply:
        raise NotImplementedError


@dataclass(frozen=True, slots=True)
class Api:
    """One row of the API table: each edge module lists the rows of the APIs it serves."""

    key: int
    name: str
    min_version: int
    max_version: int
    handler: SyncHandler | AsyncHandler
    # Builds the reply carrying an error when the handler raised; None: no such shape exists,
    # the connection is closed instead.
    on_error: ErrorBuilder | None
    # the same API as a WriteCall (service, the hot reader's body, version), for the
    # connection's path without a context; None: always through `handler`
    start: WriteStarter | None = None
    hot: HotPath | None = None
    # served before a SASL listener's connection is authenticated (Kafka: ApiVersions and the
    # SASL requests); anything else then closes it
    before_authentication: bool = False
    is_async: bool = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "is_async", inspect.iscoroutinefunction(self.handler))


def resume(
    coro: Coroutine[Any, Any, HandlerResult],
    step: Any,
    finish: Callable[[HandlerResult, BaseException | None], None],
) -> None:
    """Drive, as a Task would but with callbacks, a handler coroutine that was started eagerly
    and suspended yielding `step`: the future it awaits, or None for a bare yield
    (asyncio.sleep(0)). Each time that is done the coroutine is sent on (an awaited future
    hands it its result, its exception or its cancellation at the await); `finish(result,
    None)` or `finish(None, exc)` once it returns or raises. A Task per parked request (every
    JoinGroup of a rebalance) cost about a fifth of a rebalance's CPU."""
    _Resumption(coro, finish, asyncio.get_running_loop()).wait(step)


class _Resumption:
    """`resume`'s state. An object, not two closures that call each other: those closures
    made a reference cycle per parked request (with the coroutine, its context and the reply
    slot), left to the cyclic collector: during a commit load, 13% of the loop's time."""

    __slots__ = ("_coro", "_finish", "_loop")

    def __init__(
        self,
        coro: Coroutine[Any, Any, HandlerResult],
        finish: Callable[[HandlerResult, BaseException | None], None],
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self._coro = coro
        self._finish = finish
        self._loop = loop

    def advance(self, _: object = None) -> None:
        try:
            nxt = self._coro.send(None)
        except StopIteration as done:
            self._finish(cast(HandlerResult, done.value), None)
            return
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:  # CancelledError included: the handler's outcome
            self._finish(None, exc)
            return
        self.wait(nxt)

    def wait(self, nxt: Any) -> None:
        if nxt is None:
            self._loop.call_soon(self.advance)
        else:
            # the coroutine's own await marked the future as being waited on; we take over
            # that wait (Task.__step clears the flag the same way)
            nxt._asyncio_future_blocking = False
            nxt.add_done_callback(self.advance)


# APIs whose replies carry errors per partition only (OffsetCommit): 0 in the metrics
_NO_TOP_LEVEL_ERROR: Final = frozenset({8})


def reply_error_code(api_key: int, version: int, result: HandlerResult) -> int:
    """The reply's top-level error code for metrics (0 when the reply has none)."""
    if isinstance(result, bytes):
        if api_key in _NO_TOP_LEVEL_ERROR:
            return 0
        # a hand-packed Heartbeat, JoinGroup or SyncGroup body: [throttle_time_ms] error_code
        offset = 0 if version == 0 else 4
        return int.from_bytes(result[offset : offset + 2], "big", signed=True)
    code = getattr(result, "error_code", 0)
    return int(code)
