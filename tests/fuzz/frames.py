"""A structure-aware fuzzer of the decoding edge: valid request frames for every API and
version the node advertises, built from kio's schemas, then mutated in their length and count
fields, truncated, extended and given random tagged fields, and decoded exactly as the server
does: Heartbeat, JoinGroup, SyncGroup and OffsetCommit by their struct readers first
(app/kafka/hot.py, hot_group.py; the server calls them outside any `try`, so they may not raise),
then `ApiVersionEntry.decode` with the default limits. Relayed requests (gateway mode) are
fuzzed as the gateway reads them: the peeks of the relay (app/gateway/routes.py: Produce's acks
and topics, FindCoordinator's key type) and the ACL check (app/gateway/authorize.py, with a
principal allowed some topics and not others, so both the pass-through and the rewrite paths
run); those may raise only `Malformed` (the connection is closed), anything else is a finding.

Run as a child process (`python -m tests.fuzz.frames --seconds N`) under an address-space
limit, so a native abort or an allocation beyond the limit ends the child, not the test run:
the input being decoded is written to `--current` first, and the parent keeps it as a
regression input in tests/fuzz/corpus/. Every corpus file is replayed before fuzzing.
A decode may raise (the server then closes that connection); it may not crash.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import resource
import struct
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from app.gateway import authorize
from app.gateway.routes import Malformed, find_coordinator_key_type, produce_acks, produce_topics
from app.kafka.apis import DEFAULT_DECODE_LIMITS, version_table
from app.kafka.bounded import _K_BYTES, _K_ENTITY, _K_FIXED, _Field, _schema
from app.kafka.codec import request_class
from app.kafka.hot import read_heartbeat
from app.kafka.hot_group import read_join_group, read_offset_commit, read_sync_group
from app.kafka.tagged import uvarint
from app.security.acl import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from tests.support.decisions import Decisions

CORPUS = Path(__file__).parent / "corpus"


class _Gen:
    """Writes a valid frame and remembers where its length/count fields are."""

    def __init__(self, rnd: random.Random) -> None:
        self.rnd = rnd
        self.out = bytearray()
        self.lengths: list[tuple[int, int, str]] = []  # (offset, size, "varint"|"i16"|"i32")

    def length(self, n: int, flexible: bool, legacy: bool, wide: bool) -> None:
        if flexible and not legacy:
            enc = uvarint(n + 1)
            self.lengths.append((len(self.out), len(enc), "varint"))
            self.out += enc
        elif wide:
            self.lengths.append((len(self.out), 4, "i32"))
            self.out += struct.pack(">i", n)
        else:
            self.lengths.append((len(self.out), 2, "i16"))
            self.out += struct.pack(">h", n)

    def value(self, f: _Field, flexible: bool, in_array: bool = False) -> None:
        rnd = self.rnd
        if f.kind == _K_FIXED:
            self.out += rnd.randbytes(f.fixed)
        elif f.kind == _K_ENTITY:
            assert f.entity is not None
            if f.optional and not in_array:
                self.out += b"\x01"
            self.entity(f.entity, False)
        else:
            n = rnd.choice((0, 1, 3, 8, 40))
            self.length(n, flexible, f.legacy, wide=f.kind == _K_BYTES)
            self.out += bytes(rnd.choice(b"abcxyz-_.") for _ in range(n))

    def field(self, f: _Field, flexible: bool) -> None:
        if not f.array:
            self.value(f, flexible)
            return
        count = self.rnd.choice((0, 1, 2, 3))
        self.length(count, flexible, False, wide=True)
        for _ in range(count):
            self.value(f, flexible, in_array=True)

    def entity(self, cls: type[Any], is_header: bool) -> None:
        s = _schema(cls, is_header)
        for f in s.plain:
            self.field(f, s.flexible)
        if s.flexible:
            n_unknown = self.rnd.choice((0, 0, 0, 1, 2))
            self.lengths.append((len(self.out), 1, "varint"))
            self.out += uvarint(n_unknown)
            for i in range(n_unknown):
                body = self.rnd.randbytes(self.rnd.choice((0, 1, 5)))
                self.out += uvarint(1000 + i) + uvarint(len(body)) + body


def valid_frame(rnd: random.Random, api_key: int, version: int) -> tuple[bytes, list[Any]]:
    entry = version_table().get((api_key, version))
    cls = entry.request_cls if entry is not None else request_class(api_key, version)
    g = _Gen(rnd)
    g.out += struct.pack(">hhi", api_key, version, rnd.randrange(1 << 31))
    hdr = _schema(cls.__header_schema__, True)
    # api_key, api_version and correlation_id are written above; then client id and tags
    for f in hdr.plain[3:]:
        g.field(f, hdr.flexible)
    if hdr.flexible:
        g.out += b"\x00"
    g.entity(cls, False)
    return bytes(g.out), g.lengths


_HUGE = {
    "varint": (b"\xff\xff\xff\xff\x7f", b"\xff\xff\xff\xff\x0f", b"\x80\x80\x80\x80\x08"),
    "i16": (b"\x7f\xff", b"\xff\xfe", b"\x80\x00"),
    "i32": (b"\x7f\xff\xff\xff", b"\xff\xff\xff\xfe", b"\x80\x00\x00\x00", b"\x00\x10\x00\x00"),
}


def mutate(rnd: random.Random, frame: bytes, lengths: list[Any]) -> bytes:
    data = bytearray(frame)
    for _ in range(rnd.choice((1, 1, 2, 3))):
        op = rnd.random()
        if op < 0.6 and lengths:
            off, size, kind = rnd.choice(lengths)
            repl = rnd.choice(_HUGE[kind]) if rnd.random() < 0.7 else rnd.randbytes(size)
            data[off : off + size] = repl
        elif op < 0.75 and len(data) > 8:
            del data[rnd.randrange(8, len(data)) :]
        elif op < 0.9:
            data += rnd.randbytes(rnd.choice((1, 4, 64)))
        elif len(data) > 8:
            data[rnd.randrange(8, len(data))] = rnd.randrange(256)
    return bytes(data)


_LIMITS = DEFAULT_DECODE_LIMITS
# the struct readers, as the connection (app/kafka/dispatch.py) calls them
# (None: the generic path decides)
_HOT: dict[int, Callable[[bytes, int], object]] = {
    12: lambda f, v: read_heartbeat(f, v, _LIMITS.max_client_id_bytes),
    11: lambda f, v: read_join_group(
        f, v, _LIMITS.max_client_id_bytes, _LIMITS.max_request_elements, "/127.0.0.1"
    ),
    14: lambda f, v: read_sync_group(
        f, v, _LIMITS.max_client_id_bytes, _LIMITS.max_request_elements
    ),
    8: lambda f, v: read_offset_commit(
        f, v, _LIMITS.max_client_id_bytes, _LIMITS.max_request_elements
    ),
}


def decode_once(frame: bytes) -> None:
    """What the server does with one frame: a struct reader may not raise; any Exception from
    the generic decode closes that connection."""
    if len(frame) < 8:
        return
    api_key, version = struct.unpack_from(">hh", frame, 0)
    entry = version_table().get((api_key, version))
    if entry is None:
        return
    hot = _HOT.get(api_key)
    if hot is not None and hot(frame, version) is not None:
        return
    with contextlib.suppress(Exception):
        entry.decode(frame)


def _relayed_versions() -> list[tuple[int, int]]:
    """(api, version) of every request the gateway checks, at the versions kio knows."""
    out = []
    for api_key in sorted(authorize.CHECKS):
        for version in range(0, 20):
            try:
                request_class(api_key, version)
            except Exception:
                continue
            if api_key != 0 or version >= 3:  # Produce below v3: no broker takes it
                out.append((api_key, version))
    return out


_TOPIC, _ALLOW = ResourceType.TOPIC, AclPermissionType.ALLOW
# topics whose names start with "a" may be used, the others not: every check meets both
_CALLER = authorize.Caller(
    Decisions(
        [
            AclBinding(_TOPIC, "a", PatternType.PREFIXED, "User:*", "*", op, _ALLOW)
            for op in (AclOperation.ALL,)
        ]
    ),
    "User:fuzz",
    "127.0.0.1",
    {},
)


def relay_once(frame: bytes, api_key: int, version: int) -> None:
    """What a gateway connection does with a relayed frame before it goes upstream: may raise
    only Malformed."""
    try:
        if api_key == 0:
            produce_acks(frame, version)
            produce_topics(frame, version)
        elif api_key == 10:
            find_coordinator_key_type(frame, version)
        authorize.check(frame, api_key, version, _CALLER)
    except Malformed:
        pass


def run(seconds: float, seed: int, current: Path, max_address_space: int) -> int:
    resource.setrlimit(resource.RLIMIT_AS, (max_address_space, max_address_space))
    table = sorted(version_table())
    relayed = _relayed_versions()
    for path in sorted(CORPUS.glob("*.bin")):
        current.write_bytes(path.read_bytes())
        decode_once(path.read_bytes())
    rnd = random.Random(seed)
    n = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for key in table:
            frame, lengths = valid_frame(rnd, *key)
            candidate = mutate(rnd, frame, lengths)
            current.write_bytes(candidate)
            decode_once(candidate)
            n += 1
        for key in relayed:
            frame, lengths = valid_frame(rnd, *key)
            candidate = mutate(rnd, frame, lengths) if rnd.random() < 0.8 else frame
            current.write_bytes(candidate)
            relay_once(candidate, *key)
            n += 1
    current.unlink(missing_ok=True)
    print(
        f"fuzzed {n} frames over {len(table)} (api, version) pairs and {len(relayed)} relayed "
        f"ones, seed {seed}"
    )
    return 0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--seed", type=int, default=random.randrange(1 << 30))
    ap.add_argument("--current", type=Path, required=True)
    ap.add_argument("--max-address-space", type=int, default=3 << 30)
    a = ap.parse_args()
    sys.exit(run(a.seconds, a.seed, a.current, a.max_address_space))


if __name__ == "__main__":
    main()
