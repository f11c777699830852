"""The item strategies and the KIP-814 basis check, without a network."""

from __future__ import annotations

import pytest

from membership.items import (
    ItemAssignor,
    Subscription,
    decode_assignment,
    encode_metadata,
    range_strategy,
    roundrobin_strategy,
    sticky_strategy,
)
from membership.member import JoinedMember

ITEMS = [f"i{n:02d}" for n in range(10)]


def subs(
    n: int, items: list[str] = ITEMS, owned: dict[str, tuple[list[str], int]] | None = None
) -> dict[str, Subscription]:
    owned = owned or {}
    out = {}
    for k in range(n):
        m = f"m{k}"
        held, gen = owned.get(m, ([], -1))
        out[m] = Subscription(m, f"inst-{k}", tuple(items), tuple(held), gen)
    return out


@pytest.mark.parametrize("strategy", [range_strategy, roundrobin_strategy, sticky_strategy])
def test_every_item_once_and_balanced(strategy) -> None:  # type: ignore[no-untyped-def]
    plan = strategy(subs(3))
    held = [i for items in plan.values() for i in items]
    assert sorted(held) == ITEMS
    assert sorted(len(v) for v in plan.values()) == [3, 3, 4]


def test_range_gives_contiguous_runs() -> None:
    assert range_strategy(subs(3)) == {
        "m0": ["i00", "i01", "i02", "i03"],
        "m1": ["i04", "i05", "i06"],
        "m2": ["i07", "i08", "i09"],
    }


def test_items_go_only_to_members_that_subscribe() -> None:
    members = subs(2)
    members["m1"] = Subscription("m1", "inst-1", ("i00", "extra"), (), -1)
    for strategy in (range_strategy, roundrobin_strategy, sticky_strategy):
        plan = strategy(members)
        assert "extra" in plan["m1"] and set(plan["m1"]) <= {"i00", "extra"}
        assert sorted(i for v in plan.values() for i in v) == sorted([*ITEMS, "extra"])


def test_sticky_keeps_items_where_they_are_when_a_member_joins() -> None:
    owned = {"m0": (ITEMS[:5], 4), "m1": (ITEMS[5:], 4)}
    plan = sticky_strategy(subs(3, owned=owned))
    assert sorted(len(v) for v in plan.values()) == [3, 3, 4]
    moved = [i for m in ("m0", "m1") for i in owned[m][0] if i not in plan[m]]
    assert sorted(moved) == sorted(plan["m2"])  # only what the newcomer takes moves


def test_sticky_drops_a_stale_claim_of_an_older_generation() -> None:
    # KIP-792: m0 still claims i00 from generation 3, m1 held it in generation 5
    owned = {"m0": (["i00", "i01"], 3), "m1": (["i00", "i02"], 5)}
    plan = sticky_strategy(subs(2, items=["i00", "i01", "i02", "i03"], owned=owned))
    assert "i00" in plan["m1"] and "i00" not in plan["m0"]


def joined(member_id: str, instance: str, items: list[str], data: object = None) -> JoinedMember:
    return JoinedMember(member_id, instance, encode_metadata(items, data=data))


def test_basis_detects_a_changed_subscription_but_not_new_member_ids() -> None:
    assignor = ItemAssignor()
    members = [joined("a-1", "a", ITEMS), joined("b-1", "b", ITEMS)]
    plan = assignor.assign("sticky", members)
    items, basis = decode_assignment(plan["a-1"])
    assert basis and items
    # the leader came back with a new member id and nothing else changed: no rebalance
    again = [joined("a-2", "a", ITEMS), joined("b-1", "b", ITEMS)]
    assert not assignor.basis_changed("sticky", again, plan["a-1"])
    # b's subscription changed while the leader was away: rebalance
    changed = [joined("a-2", "a", ITEMS), joined("b-1", "b", [*ITEMS, "extra"])]
    assert assignor.basis_changed("sticky", changed, plan["a-1"])
    # so did its data
    data = [joined("a-2", "a", ITEMS), joined("b-1", "b", ITEMS, data={"zone": "x"})]
    assert assignor.basis_changed("sticky", data, plan["a-1"])


def test_a_member_speaking_another_protocol_gets_nothing() -> None:
    plan = ItemAssignor().assign(
        "range", [joined("a-1", "a", ITEMS), JoinedMember("x-1", None, b"\x00\x01garbage")]
    )
    assert decode_assignment(plan["x-1"])[0] == []
    assert decode_assignment(plan["a-1"])[0] == ITEMS
