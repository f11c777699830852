"""TimerQueue against a plain dict of key -> deadline: the same timers fire at the same `now`,
earliest first, whatever the mix of per-group session timers and the other kinds."""

from __future__ import annotations

import random

import pytest

from app.group.timers import TimerKey, TimerQueue, heartbeat_key, join_key, sync_key


def _random_key(rng: random.Random) -> TimerKey:
    group = f"g{rng.randrange(4)}"
    kind = rng.random()
    if kind < 0.7:
        return heartbeat_key(group, f"m{rng.randrange(6)}")
    if kind < 0.85:
        return join_key(group)
    return sync_key(group, rng.randrange(3))


@pytest.mark.parametrize("seed", range(40))
def test_fires_what_a_plain_dict_says_is_due(seed: int) -> None:
    rng = random.Random(seed)
    queue, model = TimerQueue(), {}
    now = 0
    for _ in range(400):
        op = rng.random()
        if op < 0.5:
            key, deadline = _random_key(rng), now + rng.randrange(1, 50)
            queue.schedule(key, deadline)
            model[key] = deadline
        elif op < 0.6:
            key = _random_key(rng)
            queue.cancel(key)
            model.pop(key, None)
        elif op < 0.65:
            batch = [(_random_key(rng), now + rng.randrange(1, 50)) for _ in range(5)]
            queue.schedule_all(batch)
            model.update(batch)
        else:
            now += rng.randrange(0, 15)
            fired = list(queue.pop_due(now))
            due = {k for k, d in model.items() if d <= now}
            assert set(fired) == due and len(fired) == len(due)
            deadlines = [model[k] for k in fired]
            assert deadlines == sorted(deadlines), "earliest first"
            for k in fired:
                del model[k]
        assert dict(queue.deadlines) == model
        bound = queue.next_deadline()
        if model:
            assert bound is not None and bound <= min(model.values())
        assert queue.next_deadline() is None or not model or queue.next_deadline() > now - 50


def test_timers_changed_by_an_expiry_are_seen_in_the_same_pass() -> None:
    queue = TimerQueue()
    for m, d in (("a", 10), ("b", 20), ("c", 30)):
        queue.schedule(heartbeat_key("g", m), d)
    fired = []
    for key in queue.pop_due(25):
        fired.append(key)
        if key == heartbeat_key("g", "a"):
            queue.cancel(heartbeat_key("g", "b"))  # the expiry removed b (a rebalance)
            queue.schedule(join_key("g"), 12)  # and armed a join timer, already due
    assert fired == [heartbeat_key("g", "a"), join_key("g")]
    assert dict(queue.deadlines) == {heartbeat_key("g", "c"): 30}
    assert queue.next_deadline() == 30


def test_heartbeats_add_nothing_to_the_heap() -> None:
    queue = TimerQueue()
    for g in range(10):
        for m in range(100):
            queue.schedule(heartbeat_key(f"g{g}", f"m{m}"), 1_000 + m)
    size = len(queue.heap)
    assert size == 10  # one entry per group, not per member
    for beat in range(1, 16):
        for g in range(10):
            for m in range(100):
                queue.schedule_session(f"g{g}", f"m{m}", 1_000 + beat * 3_000 + m)
    assert len(queue.heap) == size
    assert list(queue.pop_due(45_999)) == []  # every session moved past the old deadlines
    assert len(queue.heap) == size
