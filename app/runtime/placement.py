"""Which live node should own which log partition: even, sticky and deterministic.

Every node computes the plan from the same lease and node tables, so they agree without talking
to each other (transient disagreement while tables change only delays a move by one round).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping


def plan(
    partitions: Iterable[int], nodes: Iterable[int], current: Mapping[int, int]
) -> dict[int, int]:
    """partition -> node. Counts differ by at most one; current owners keep what fits."""
    parts = sorted(set(partitions))
    live = sorted(set(nodes))
    if not live:
        return {}
    base, extra = divmod(len(parts), len(live))
    held: dict[int, int] = {n: 0 for n in live}
    for p in parts:
        owner = current.get(p)
        if owner in held:
            held[owner] += 1
    # the nodes holding most keep the "+1" slots, so a stable cluster moves nothing
    by_holding = sorted(live, key=lambda n: (-held[n], n))
    quota = {n: base + (1 if i < extra else 0) for i, n in enumerate(by_holding)}
    result: dict[int, int] = {}
    for p in parts:
        owner = current.get(p)
        if owner is not None and quota.get(owner, 0) > 0:
            result[p] = owner
            quota[owner] -= 1
    for p in parts:
        if p not in result:
            node = max(live, key=lambda n: (quota[n], -n))
            result[p] = node
            quota[node] -= 1
    return result
