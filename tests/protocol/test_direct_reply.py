"""DirectReply: the connection's lane is called back from the runtime's delivery itself."""

from __future__ import annotations

import asyncio
import logging

import pytest

from app.kafka.context import DirectReply


def test_the_callback_runs_inside_set_result() -> None:
    reply, seen = DirectReply(), []
    reply.add_done_callback(lambda r: seen.append(r.result()))
    assert not reply.done() and seen == []
    reply.set_result("joined")
    assert seen == ["joined"]  # no loop turn in between
    assert reply.done() and not reply.cancelled() and reply.exception() is None


def test_a_reply_delivered_before_the_callback_is_handed_on_when_it_is_added() -> None:
    """The core may answer while the call that scheduled the write is still being made."""
    reply, seen = DirectReply(), []
    reply.set_result("at once")
    reply.add_done_callback(lambda r: seen.append(r.result()))
    assert seen == ["at once"]


def test_no_outcome_before_delivery_and_one_delivery_and_callback_only() -> None:
    reply = DirectReply()
    with pytest.raises(asyncio.InvalidStateError):
        reply.result()
    with pytest.raises(asyncio.InvalidStateError):
        reply.exception()
    reply.add_done_callback(lambda r: None)
    with pytest.raises(RuntimeError, match="one callback"):
        reply.add_done_callback(lambda r: None)
    reply.set_result(1)
    with pytest.raises(asyncio.InvalidStateError):
        reply.set_result(2)
    assert reply.result() == 1


def test_a_failing_callback_is_logged_and_the_delivery_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The runtime delivers a whole rebalance's replies in one loop: one connection's bug
    must not keep the next member's reply."""
    first, second, seen = DirectReply(), DirectReply(), []

    def broken(_reply: DirectReply) -> None:
        raise ValueError("a bug in one connection")

    first.add_done_callback(broken)
    second.add_done_callback(lambda r: seen.append(r.result()))
    with caplog.at_level(logging.ERROR, logger="app.kafka.context"):
        for reply, value in ((first, "a"), (second, "b")):
            reply.set_result(value)
    assert seen == ["b"]
    assert [r.exc_info[0] for r in caplog.records if r.exc_info] == [ValueError]
