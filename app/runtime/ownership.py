"""The unowned-partition watch: every COORD_OWNERSHIP_CHECK_INTERVAL_MS, each Stable consumer
group served here is checked against the topic registry (app/group/ownership.py), so a
partition its assignor left out, or one added to a subscribed topic while the group is Stable,
is seen. A group's check is redone only when its generation or the registry changed; a finding
is logged once per generation. Works with or without the gateway: the registry is COORD_TOPICS
or the upstream's topics."""

from __future__ import annotations

import asyncio
import heapq
import logging
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from app.group.ownership import Ownership, ownership
from app.group.state import STABLE
from app.periodic import Periodic

log = logging.getLogger("app.runtime")


class OwnershipWatch:
    def __init__(
        self,
        read_all: Callable[[Callable[[Any], list[Any]]], tuple[list[Any], bool]],
        topics: Callable[[], Mapping[str, int]],
        interval_ms: int,
    ) -> None:
        self._read_all = read_all
        self._topics = topics
        self.interval_s = interval_ms / 1000
        self.flagged: dict[str, Ownership] = {}  # groups with unowned or doubly owned ones
        self._checked: dict[str, tuple[int, int]] = {}  # group -> (generation, registry)
        self._logged: dict[str, Ownership] = {}
        self._registry: tuple[int, tuple[tuple[str, int], ...]] = (0, ())
        self.loop = Periodic("ownership check", self.interval_s, self.check, first=False)

    def _registry_version(self, topics: Mapping[str, int]) -> int:
        shape = tuple(sorted(topics.items()))
        version, known = self._registry
        if shape != known:
            self._registry = (version + 1, shape)
        return self._registry[0]

    async def check(self) -> None:
        topics = dict(self._topics())
        registry = self._registry_version(topics)
        checked = self._checked

        def stable_groups(core: Any) -> list[Any]:
            out = []
            for g, group in core.groups.items():
                if group.state is not STABLE or group.protocol_type != "consumer":
                    continue
                if checked.get(g) == (group.generation, registry):
                    out.append((g, None))  # unchanged since its last check
                else:
                    out.append((g, core.describe(g)))
            return out

        cores, _ = self._read_all(lambda core: [core])
        seen: list[Any] = []
        for core in cores:  # yielding between cores: many groups must not stall the loop
            seen.extend(stable_groups(core))
            await asyncio.sleep(0)
        flagged: dict[str, Ownership] = {}
        next_checked: dict[str, tuple[int, int]] = {}
        for i, (group_id, view) in enumerate(seen):
            if i % 200 == 199:
                await asyncio.sleep(0)  # many groups: the loop serves requests meanwhile
            if view is None:
                next_checked[group_id] = checked[group_id]
                if group_id in self.flagged:
                    flagged[group_id] = self.flagged[group_id]
                continue
            next_checked[group_id] = (view.generation, registry)
            found = ownership(view, topics)
            if found is None or not (found.unowned or found.doubly_owned):
                continue
            flagged[group_id] = found
            if self._logged.get(group_id) != found:
                self._logged[group_id] = found
                log.warning(
                    "group %r generation %d: %d partition(s) of its subscribed topics owned by "
                    "no member%s%s",
                    group_id,
                    found.generation,
                    len(found.unowned),
                    f" ({_shown(found.unowned)})" if found.unowned else "",
                    f"; {len(found.doubly_owned)} owned by two members "
                    f"({_shown(found.doubly_owned)})"
                    if found.doubly_owned
                    else "",
                )
        for group_id in set(self._logged) - set(flagged):
            del self._logged[group_id]
        self._checked = next_checked
        self.flagged = flagged

    def of(self, group_id: str) -> Ownership | None:
        return self.flagged.get(group_id)


def _shown(partitions: tuple[tuple[str, int], ...]) -> str:
    shown = ", ".join(f"{t}-{p}" for t, p in partitions[:10])
    return shown + (f", … {len(partitions) - 10} more" if len(partitions) > 10 else "")


class OwnershipCollector(Collector):
    """coordinator_group_unowned_partitions and _doubly_owned_partitions for the `limit`
    worst groups (bounded cardinality), and how many groups have any."""

    def __init__(self, watch: OwnershipWatch, limit: int) -> None:
        self.watch = watch
        self.limit = limit

    def collect(self) -> Iterator[GaugeMetricFamily]:
        flagged = self.watch.flagged
        for name, what, pick in (
            ("unowned", "owned by no member", lambda o: len(o.unowned)),
            ("doubly_owned", "assigned to two members of one generation", _doubly),
        ):
            values = {g: pick(o) for g, o in flagged.items() if pick(o)}
            family = GaugeMetricFamily(
                f"coordinator_group_{name}_partitions",
                f"partitions of a Stable group's subscribed topics {what} "
                f"(the {self.limit} worst groups)",
                labels=["group"],
            )
            for g, v in heapq.nsmallest(self.limit, values.items(), key=lambda kv: (-kv[1], kv[0])):
                family.add_metric([g], v)
            yield family
            yield GaugeMetricFamily(
                f"coordinator_groups_with_{name}_partitions",
                f"Stable groups with partitions {what}",
                value=len(values),
            )


def _doubly(o: Ownership) -> int:
    return len(o.doubly_owned)
