"""A group's dealings with the upstream's own coordinator: moving in, moving out, one owner.

- **Import** (COORD_UPSTREAM_OFFSETS=import or mirror): before the first OffsetFetch of a group
  with no committed offset here is answered, its committed offsets upstream become its
  positions here, durably (the core's `import_offsets`: never over a position committed here).
  While the upstream group still has live members (some consumers still fetch from the brokers
  directly) the import is refused and the group's OffsetFetch answered
  COORDINATOR_LOAD_IN_PROGRESS, which every client retries: the consumers that moved wait, and
  resume at the upstream's last commit once the last direct consumer left, instead of
  consuming every partition a second time from a reset position.
- **Export**: the committed offsets of a group that is Empty here, written to the upstream as
  an admin commit (generation -1), which the upstream refuses while its group has members.
- **One group, one coordinator**: the groups with members here are checked upstream every
  COORD_UPSTREAM_CHECK_INTERVAL_MS; one that has live members there too is flagged (log,
  metric, console) until they leave.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Protocol

from app.group.messages import (
    DeleteGroupResult,
    Error,
    OffsetCommitPartition,
    OffsetCommitResponse,
)
from app.group.state import GroupState
from app.group.view import GroupSummary, GroupView
from app.periodic import Periodic
from app.service import CoordinatorError
from app.upstream.client import UpstreamAdmin, UpstreamGroup, UpstreamOffset, UpstreamUnavailable

if TYPE_CHECKING:
    from app.group.coordinator import GroupCoordinator

log = logging.getLogger("app.upstream")

# a refused or failed import is asked again at most this often per group (its OffsetFetch
# retries meanwhile get the kept answer)
RETRY_S: Final = 2.0
# a group the upstream had no offsets for is not asked again for this long (it may get some
# there only from consumers on the brokers, which the member check sees)
NOTHING_TTL_S: Final = 60.0
_NOTHING_MAX: Final = 100_000


class GroupsService(Protocol):
    """What this module needs of the node (app.service's CoordinatorService, in part)."""

    def schedule_read(self, group_id: str, op: Any, loading_error: Error = ...) -> Any: ...

    def schedule_write(self, name: str, group_id: str, op: Any, *args: Any, **kw: Any) -> Any: ...

    def read_all(self, op: Callable[[GroupCoordinator], list[Any]]) -> tuple[list[Any], bool]: ...


@dataclass(slots=True)
class Refusal:
    reason: str
    at: float  # monotonic seconds
    upstream_members: tuple[str, ...] = ()


@dataclass(slots=True)
class UpstreamCounts:
    imports: dict[str, int] = field(default_factory=dict)  # outcome -> groups
    imported_offsets: int = 0
    exports: int = 0
    checks: int = 0
    check_errors: int = 0


class GroupMover:
    def __init__(
        self,
        service: GroupsService,
        admin: UpstreamAdmin,
        mode: str,
        check_interval_ms: int,
        cluster_id: Callable[[], str | None],
    ) -> None:
        self.service = service
        self.admin = admin
        self.importing = mode in ("import", "mirror")
        self.check_s = check_interval_ms / 1000
        self._cluster_id = cluster_id
        self._nothing: dict[str, float] = {}  # group -> when the upstream had no offsets
        self._inflight: dict[str, asyncio.Task[Error | None]] = {}
        self.refusals: dict[str, Refusal] = {}  # groups whose import waits, and why
        # groups coordinated here that also have live members upstream (the split check)
        self.upstream_members: dict[str, UpstreamGroup] = {}
        self.last_check_ms: int | None = None
        self.counts = UpstreamCounts()
        self.loop = Periodic("upstream member check", self.check_s, self._check, first=False)

    # --- import on first sight ---------------------------------------------------------------

    async def before_offset_fetch(self, group_id: str) -> Error | None:
        """None: answer the OffsetFetch from here; an error: answer the group with it (the
        import it waits for is refused or failed, and is asked again within RETRY_S)."""
        if not self.importing:
            return None
        try:
            has_offsets = self.service.schedule_read(
                group_id, lambda core, now: _has_offsets(core, group_id)
            )
        except CoordinatorError:
            return None  # not served here now: the fetch itself answers that
        if has_offsets:
            return None
        asked = self._nothing.get(group_id)
        if asked is not None and time.monotonic() - asked < NOTHING_TTL_S:
            return None
        refused = self.refusals.get(group_id)
        if refused is not None and time.monotonic() - refused.at < RETRY_S:
            return Error.COORDINATOR_LOAD_IN_PROGRESS
        task = self._inflight.get(group_id)
        if task is None:
            # a task of its own: the edge drives handlers without one (app/kafka/dispatch.py),
            # and the upstream's calls need one for their timeouts
            task = asyncio.get_running_loop().create_task(self._import_on_sight(group_id))
            self._inflight[group_id] = task
            task.add_done_callback(lambda _: self._inflight.pop(group_id, None))
        return await asyncio.shield(task)

    async def _import_on_sight(self, group_id: str) -> Error | None:
        try:
            report = await self.import_group(group_id)
        except UpstreamUnavailable as e:
            self._refuse(group_id, f"the upstream cannot be asked: {e}")
            self._count("upstream unavailable")
            return Error.COORDINATOR_LOAD_IN_PROGRESS
        except CoordinatorError as e:
            return e.error  # e.g. COORD_MAX_GROUPS reached: never "nothing committed"
        if report["refused"]:
            return Error.COORDINATOR_LOAD_IN_PROGRESS
        return None if report["written"] else Error.COORDINATOR_LOAD_IN_PROGRESS

    def _settle(self, group_id: str, nothing_upstream: bool = False) -> None:
        self.refusals.pop(group_id, None)
        if nothing_upstream:
            if len(self._nothing) >= _NOTHING_MAX:
                self._nothing.clear()
            self._nothing[group_id] = time.monotonic()
        else:
            self._nothing.pop(group_id, None)

    def _refuse(self, group_id: str, reason: str, members: tuple[str, ...] = ()) -> None:
        known = self.refusals.get(group_id)
        if known is None or known.reason != reason:
            log.warning(
                "group %r: not importing its offsets from the upstream: %s", group_id, reason
            )
        self.refusals[group_id] = Refusal(reason, time.monotonic(), members)
        if len(self.refusals) > 10_000:  # bounded: the oldest go
            for g in list(self.refusals)[:1000]:
                del self.refusals[g]

    def _count(self, outcome: str) -> None:
        self.counts.imports[outcome] = self.counts.imports.get(outcome, 0) + 1

    # --- import, explicit or on sight ----------------------------------------------------------

    async def import_group(self, group_id: str, dry_run: bool = False) -> dict[str, Any]:
        """Take the group's committed offsets from the upstream where it has none here.
        Raises UpstreamUnavailable, or CoordinatorError when the group is not served here."""
        found = await self.admin.describe([group_id])
        if group_id not in found:
            raise UpstreamUnavailable(f"the upstream did not describe group {group_id!r}")
        upstream = found[group_id]
        here = self.service.schedule_read(group_id, lambda core, now: core.describe(group_id))
        report: dict[str, Any] = {
            "group_id": group_id,
            "dry_run": dry_run,
            "upstream_state": upstream.state,
            "upstream_members": list(upstream.members),
            "refused": None,
            "offsets": [],
            "written": False,
        }
        offsets = await self.admin.fetch_offsets(group_id)
        if upstream.live:
            reason = (
                f"it has {len(upstream.members)} live member(s) on the upstream's own "
                f"coordinator ({', '.join(upstream.members[:5])}): two coordinators would each "
                "hand out every partition. Stop those consumers or point them at the gateway."
            )
            report["refused"] = reason
            if not dry_run:
                self._refuse(group_id, reason, upstream.members)
                self._count("refused: live upstream members")
                return report
        local = {(o.topic, o.partition): o.offset for o in (here.offsets if here else ())}
        take = [o for o in offsets if (o.topic, o.partition) not in local]
        report["offsets"] = [
            {
                "topic": o.topic,
                "partition": o.partition,
                "upstream_offset": o.offset,
                "offset_here": local.get((o.topic, o.partition)),
                "action": "keep" if (o.topic, o.partition) in local else "take",
            }
            for o in offsets
        ]
        if dry_run or report["refused"]:
            return report
        if not take:
            self._settle(group_id, nothing_upstream=not offsets)
            report["written"] = True
            self._count("nothing to import")
            return report
        written = await self._write_import(group_id, take)
        if written is None:
            self._refuse(group_id, "the imported offsets could not be written here")
            self._count("write failed")
            return report
        self._settle(group_id)
        report["written"] = True
        imported = {(t, p) for t, p in written}
        for row in report["offsets"]:
            if row["action"] == "take" and (row["topic"], row["partition"]) not in imported:
                row["action"] = "keep"  # committed here meanwhile
        self.counts.imported_offsets += len(imported)
        self._count("imported")
        log.info(
            "group %r moved in: %d position(s) taken from the upstream cluster %s",
            group_id,
            len(imported),
            self._cluster_id(),
        )
        return report

    async def _write_import(
        self, group_id: str, offsets: list[UpstreamOffset]
    ) -> list[tuple[str, int]] | None:
        origin = self._cluster_id() or "upstream"
        parts = tuple(
            OffsetCommitPartition(o.topic, o.partition, o.offset, o.leader_epoch, o.metadata)
            for o in offsets
        )

        def op(core: GroupCoordinator, handle: int, now: int) -> Any:
            return core.import_offsets(handle, group_id, origin, parts, now)

        resp: OffsetCommitResponse = await self.service.schedule_write(
            "ImportOffsets", group_id, op, creates_group=True
        )
        if any(r.error is not Error.NONE for r in resp.partitions):
            return None
        return [(r.topic, r.partition) for r in resp.partitions]

    # --- export ---------------------------------------------------------------------------

    async def export_group(self, group_id: str, dry_run: bool = False) -> dict[str, Any]:
        """Write the group's positions here to the upstream. ValueError (the reason) for a
        group that has members here; UpstreamUnavailable when the upstream cannot take them."""
        here: GroupView | None = self.service.schedule_read(
            group_id, lambda core, now: core.describe(group_id)
        )
        if here is None or not here.offsets:
            raise LookupError(f"group {group_id!r} has no committed offsets here")
        if here.members or here.state is not GroupState.EMPTY:
            raise ValueError(
                f"group {group_id!r} is {here.state.value} with {len(here.members)} member(s) "
                "here: stop its consumers first, or they and the ones pointed back at the "
                "brokers would both consume every partition"
            )
        offsets = [
            UpstreamOffset(o.topic, o.partition, o.offset, o.leader_epoch, o.metadata)
            for o in here.offsets
        ]
        report: dict[str, Any] = {
            "group_id": group_id,
            "dry_run": dry_run,
            "offsets": [
                {"topic": o.topic, "partition": o.partition, "offset": o.offset} for o in offsets
            ],
            "errors": {},
        }
        if dry_run:
            return report
        errors = await self.admin.commit_offsets(group_id, offsets)
        failed = {f"{t}-{p}": e for (t, p), e in errors.items() if e}
        report["errors"] = failed
        if failed:
            raise UpstreamUnavailable(
                f"the upstream refused {len(failed)} of {len(offsets)} offsets of {group_id!r} "
                f"(error codes {sorted(set(failed.values()))}; 25 UNKNOWN_MEMBER_ID: the group "
                "has members on the upstream's coordinator)"
            )
        # moved out: the upstream holds its positions now. Its state here goes, so that if it
        # comes back it imports the positions it reached there, not these older ones (and the
        # mirror has nothing of it to write back)
        deleted: DeleteGroupResult = await self.service.schedule_write(
            "DeleteGroups", group_id, lambda core, h, now: core.delete_group(h, group_id, now)
        )
        report["deleted_here"] = deleted.error is Error.NONE
        self._nothing.pop(group_id, None)
        self.counts.exports += 1
        log.info(
            "group %r moved out: %d position(s) written to the upstream%s",
            group_id,
            len(offsets),
            "" if report["deleted_here"] else f" (kept here: {deleted.error.name})",
        )
        return report

    # --- one group, one coordinator -------------------------------------------------------

    async def _check(self) -> None:
        try:
            await self.check_active_groups()
        except UpstreamUnavailable as e:
            self.counts.check_errors += 1
            log.debug("upstream member check: %s", e)

    async def check_active_groups(self) -> None:
        summaries, _ = self.service.read_all(lambda core: list(core.groups_view()))
        active = [g.group_id for g in summaries if _active(g)]
        found = await self.admin.describe(active, strict=False) if active else {}
        self.counts.checks += 1
        self.last_check_ms = int(time.time() * 1000)
        live = {g: u for g, u in found.items() if u.live}
        for g, u in live.items():
            if g not in self.upstream_members:
                log.error(
                    "group %r is coordinated here and also has %d live member(s) on the "
                    "upstream's own coordinator (%s): both halves consume every partition; "
                    "point every consumer of the group at the gateway",
                    g,
                    len(u.members),
                    ", ".join(u.members[:5]),
                )
        for g in set(self.upstream_members) - set(live):
            log.info("group %r: no live members upstream any more", g)
        self.upstream_members = live

    def flag_of(self, group_id: str) -> dict[str, Any]:
        """What GET /groups/{id} says of the group's upstream side."""
        refused = self.refusals.get(group_id)
        split = self.upstream_members.get(group_id)
        members = split.members if split else refused.upstream_members if refused else ()
        return {
            "offsets": "import" if self.importing else "off",
            "import_refused": refused.reason if refused else None,
            "live_members_upstream": list(members),
        }


def _has_offsets(core: GroupCoordinator, group_id: str) -> bool:
    group = core.groups.get(group_id)
    return group is not None and bool(group.offsets or group.transient.pending_offset_commits)


def _active(g: GroupSummary) -> bool:
    return g.members > 0 and g.state is not GroupState.DEAD
