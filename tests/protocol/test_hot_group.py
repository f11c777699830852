"""The struct readers of JoinGroup and SyncGroup (app/kafka/hot_group.py) make the very internal
requests the generic path makes (bounds walk, kio, `decode_*`) for every version the node serves;
any frame outside the common shape, and any frame the generic path refuses, reads as None."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.group.messages import (
    Error,
    JoinGroupRequest,
    JoinGroupResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from app.kafka import group_apis as g
from app.kafka.apis import DecodeLimits, version_table
from app.kafka.codec import build, td
from app.kafka.group_apis import decode_join_group, decode_sync_group
from app.kafka.hot_group import read_join_group, read_sync_group
from membership.wire import encode_request
from tests.protocol.wire import ctx

LIMITS = DecodeLimits()
HOST = "/10.0.0.7"


def generic_join(frame: bytes, version: int, limits: DecodeLimits = LIMITS) -> Any:
    """What the generic path makes of the frame, or the exception it raises."""
    try:
        header, body = version_table()[(11, version)].decode(frame, limits)
        return decode_join_group(body, header.client_id or "", HOST)
    except Exception as exc:
        return exc


def generic_sync(frame: bytes, version: int, limits: DecodeLimits = LIMITS) -> Any:
    try:
        _header, body = version_table()[(14, version)].decode(frame, limits)
        return decode_sync_group(body)
    except Exception as exc:
        return exc


def hot_join(frame: bytes, version: int, limits: DecodeLimits = LIMITS) -> Any:
    return read_join_group(
        frame, version, limits.max_client_id_bytes, limits.max_request_elements, HOST
    )


def hot_sync(frame: bytes, version: int, limits: DecodeLimits = LIMITS) -> Any:
    return read_sync_group(frame, version, limits.max_client_id_bytes, limits.max_request_elements)


def join_frame(version: int, client_id: str | None, **values: Any) -> bytes:
    cls = version_table()[(11, version)].request_cls
    values["session_timeout"] = td(values.pop("session_timeout_ms"))
    values["rebalance_timeout"] = td(values.pop("rebalance_timeout_ms"))
    values["protocols"] = [{"name": n, "metadata": m} for n, m in values["protocols"]]
    return encode_request(build(cls, **values), 9, client_id)[4:]


def sync_frame(version: int, client_id: str | None, **values: Any) -> bytes:
    cls = version_table()[(14, version)].request_cls
    values["assignments"] = [{"member_id": m, "assignment": a} for m, a in values["assignments"]]
    return encode_request(build(cls, **values), 9, client_id)[4:]


_text = st.text(max_size=30) | st.text(min_size=127, max_size=200)  # 1- and 2-byte varints
_blob = st.binary(max_size=30) | st.binary(min_size=127, max_size=300)
_int32 = st.integers(-(2**31), 2**31 - 1)
_client_id = st.none() | st.text(max_size=20)

_join_values = st.fixed_dictionaries(
    {
        "group_id": _text,
        "session_timeout_ms": _int32,
        "rebalance_timeout_ms": _int32,
        "member_id": _text,
        "group_instance_id": st.none() | _text,
        "protocol_type": _text,
        "protocols": st.lists(st.tuples(_text, _blob), max_size=4),
        "reason": st.none() | _text,
    }
)
_sync_values = st.fixed_dictionaries(
    {
        "group_id": _text,
        "generation_id": _int32,
        "member_id": _text,
        "group_instance_id": st.none() | _text,
        "protocol_type": st.none() | _text,
        "protocol_name": st.none() | _text,
        "assignments": st.lists(st.tuples(_text, _blob), max_size=140),
    }
)


@settings(max_examples=200, deadline=None)
@given(values=_join_values, version=st.integers(0, 9), client_id=_client_id)
def test_join_group_reads_as_the_generic_path(
    values: dict[str, Any], version: int, client_id: str | None
) -> None:
    frame = join_frame(version, client_id, **values)
    expected = generic_join(frame, version)
    assert isinstance(expected, JoinGroupRequest)
    assert hot_join(frame, version) == expected


@settings(max_examples=200, deadline=None)
@given(values=_sync_values, version=st.integers(0, 5), client_id=_client_id)
def test_sync_group_reads_as_the_generic_path(
    values: dict[str, Any], version: int, client_id: str | None
) -> None:
    frame = sync_frame(version, client_id, **values)
    expected = generic_sync(frame, version)
    assert isinstance(expected, SyncGroupRequest)
    assert hot_sync(frame, version) == expected


@settings(max_examples=300, deadline=None)
@given(
    values=_join_values,
    version=st.integers(0, 9),
    cut=st.integers(0, 400),
    flip=st.tuples(st.integers(0, 400), st.integers(0, 255)),
)
def test_a_damaged_join_group_reads_as_the_generic_path_or_not_at_all(
    values: dict[str, Any], version: int, cut: int, flip: tuple[int, int]
) -> None:
    frame = bytearray(join_frame(version, "c", **values))
    at, byte = flip
    if at < len(frame):
        frame[at] = byte
    damaged = bytes(frame[: len(frame) - cut % (len(frame) + 1)])
    got = hot_join(damaged, version)
    if got is not None:
        assert got == generic_join(damaged, version)


@settings(max_examples=300, deadline=None)
@given(
    values=_sync_values,
    version=st.integers(0, 5),
    cut=st.integers(0, 400),
    flip=st.tuples(st.integers(0, 400), st.integers(0, 255)),
)
def test_a_damaged_sync_group_reads_as_the_generic_path_or_not_at_all(
    values: dict[str, Any], version: int, cut: int, flip: tuple[int, int]
) -> None:
    frame = bytearray(sync_frame(version, "c", **values))
    at, byte = flip
    if at < len(frame):
        frame[at] = byte
    damaged = bytes(frame[: len(frame) - cut % (len(frame) + 1)])
    got = hot_sync(damaged, version)
    if got is not None:
        assert got == generic_sync(damaged, version)


_JOIN = {
    "group_id": "g",
    "session_timeout_ms": 10_000,
    "rebalance_timeout_ms": 30_000,
    "member_id": "m-1",
    "group_instance_id": None,
    "protocol_type": "consumer",
    "protocols": [("range", b"meta")],
    "reason": None,
}
_SYNC = {
    "group_id": "g",
    "generation_id": 3,
    "member_id": "m-1",
    "group_instance_id": None,
    "protocol_type": "consumer",
    "protocol_name": "range",
    "assignments": [("m-1", b"a1"), ("m-2", b"a2")],
}


@pytest.mark.parametrize("version", [6, 9])
def test_join_group_outside_the_common_shape_goes_to_the_generic_reader(version: int) -> None:
    frame = join_frame(version, "c", **_JOIN)
    assert hot_join(frame, version) == generic_join(frame, version)
    for damaged in [
        frame[:-1] + b"\x01\x63\x02hi",  # a tagged field in the body
        frame + b"\x00",  # trailing bytes
        frame[:-3],  # truncated
    ]:
        assert hot_join(damaged, version) is None
    # bounds the generic path enforces are the hot reader's too
    small = DecodeLimits(max_client_id_bytes=0)  # "c" is one byte
    assert isinstance(generic_join(frame, version, small), Exception)
    assert hot_join(frame, version, small) is None
    two = join_frame(version, None, **{**_JOIN, "protocols": [("a", b""), ("b", b"")]})
    assert isinstance(generic_join(two, version, DecodeLimits(max_request_elements=1)), Exception)
    assert hot_join(two, version, DecodeLimits(max_request_elements=1)) is None


@pytest.mark.parametrize("version", [0, 3, 4, 5])
def test_sync_group_outside_the_common_shape_goes_to_the_generic_reader(version: int) -> None:
    frame = sync_frame(version, "c", **_SYNC)
    assert hot_sync(frame, version) == generic_sync(frame, version)
    tight = DecodeLimits(max_request_elements=1)
    assert isinstance(generic_sync(frame, version, tight), Exception)
    assert hot_sync(frame, version, tight) is None
    assert hot_sync(frame + b"\x00", version) is None
    assert hot_sync(frame[:-1], version) is None


class _Core:
    """Stands in for GroupCoordinator: keeps the internal request, answers a fixed reply."""

    def __init__(self) -> None:
        self.seen: list[Any] = []

    def join_group(self, handle: int, req: JoinGroupRequest, now: int) -> Any:
        self.seen.append(req)
        return JoinGroupResponse(Error.NONE, 4, "consumer", "range", "m-1", False, req.member_id)

    def sync_group(self, handle: int, req: SyncGroupRequest, now: int) -> Any:
        self.seen.append(req)
        return SyncGroupResponse(Error.NONE, "consumer", "range", b"a1")


class _Service:
    def __init__(self) -> None:
        self.core = _Core()

    async def schedule_write(self, name: str, group_id: str, op: Any, *args: Any, **kw: Any) -> Any:
        return op(self.core, 1, 0)


@pytest.mark.parametrize("version", [0, 5, 9])
async def test_the_handlers_serve_a_hot_read_request_as_kios(version: int) -> None:
    """handle_join_group / handle_sync_group take the internal request the hot readers make in
    place of kio's entity, and serve it alike (what server.py's hook would hand them)."""
    service = _Service()
    context = ctx(version, client_id="c", client_host=HOST)
    context.service = service  # type: ignore[assignment]
    frame = join_frame(version, "c", **_JOIN)
    _header, body = version_table()[(11, version)].decode(frame)
    from_kio = await g.handle_join_group(context, body)
    from_hot = await g.handle_join_group(context, hot_join(frame, version))
    assert from_hot == from_kio
    assert service.core.seen[0] == service.core.seen[1]
    sync_version = min(version, 5)
    context.api_version = sync_version
    frame = sync_frame(sync_version, "c", **_SYNC)
    _header, body = version_table()[(14, sync_version)].decode(frame)
    assert await g.handle_sync_group(context, body) == await g.handle_sync_group(
        context, hot_sync(frame, sync_version)
    )
    assert service.core.seen[2] == service.core.seen[3]


def test_long_varints_read_as_kio_reads_them() -> None:
    """A length written in more bytes than it needs (0x80 0x00 is 0: null) means the same."""
    frame = sync_frame(5, "c", **{**_SYNC, "protocol_type": None})
    at = frame.index(b"\x00\x06range")  # protocol_type null, then protocol_name
    padded = frame[:at] + b"\x80\x00" + frame[at + 1 :]
    assert hot_sync(padded, 5) == generic_sync(padded, 5) == generic_sync(frame, 5)
    name = frame[: at + 1] + b"\x86\x00" + frame[at + 2 :]  # "range" with a 2-byte length
    assert hot_sync(name, 5) == generic_sync(name, 5) == generic_sync(frame, 5)
