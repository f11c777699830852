"""Static members registered ahead of a scale-up (addMembersToGroup; the project's admin API,
no Kafka request): the registration, its expansion deadline, and closing it.

From the first JoinGroup of a registered instance, a join phase of the group does not complete
until every registered instance has joined or the registration's timeout has passed; the ones
that never came are then dropped from it (a record says which).
"""

from __future__ import annotations

import logging
from collections import Counter

from app.group.messages import NO_ERROR, AdminOutcome, AdminResult, Error
from app.group.rebalance import Rebalancer
from app.group.replay import drop_if_unused
from app.group.results import AdminDone, AppendFailure, LogOnly, Result, Write, group_write_error
from app.group.state import DEAD, PREPARING_REBALANCE, Group
from app.group.timers import TimerKey, TimerQueue, expansion_key

log = logging.getLogger(__name__)


class Registrations:
    def __init__(
        self,
        groups: dict[str, Group],
        queue: TimerQueue,
        rebalancer: Rebalancer,
        group_max_size: int,
    ) -> None:
        self.groups = groups
        self.queue = queue
        self.rebalancer = rebalancer
        # registered + joined static members of a group: no more than may ever join it
        self.group_max_size = group_max_size

    def register_static_members(
        self, handle: int, group_id: str, instance_ids: list[str], timeout_ms: int, now: int
    ) -> Result:
        """Expect these static members, so their scale-up rebalances once."""
        out = Result()
        group = self.groups.get(group_id)
        problem = _registration_problem(group, instance_ids, timeout_ms, self.group_max_size)
        if problem is not None:
            out.reply(handle, AdminResult(Error.INVALID_REQUEST, problem, AdminOutcome.INVALID))
            return out
        if group is None:
            group = self.groups[group_id] = Group(group_id, state_timestamp=now)
        if group.registration is None:
            group.transient.registration_unwritten = True
        group.transient.registration_writes += 1
        reg = group.open_registration()
        reg.registered.update(dict.fromkeys(instance_ids))
        reg.batch += tuple(instance_ids)
        reg.timeout_ms = timeout_ms
        reg.registered_ms = now
        out.writes.append(
            Write(
                [reg.record(group_id)],
                AdminDone(group_id, handle, "registered", added=tuple(instance_ids)),
            )
        )
        return out

    def unregister_static_member(
        self, handle: int, group_id: str, instance_id: str, now: int
    ) -> Result:
        """Withdraw a registration that has not joined yet."""
        out = Result()
        group = self.groups.get(group_id)
        # a group being deleted writes no registration after its tombstones
        reg = None if group is None or group.is_(DEAD) else group.registration
        if group is None or reg is None or instance_id not in reg.registered:
            out.reply(
                handle,
                AdminResult(Error.UNKNOWN_MEMBER_ID, "not registered", AdminOutcome.NOT_REGISTERED),
            )
            return out
        del reg.registered[instance_id]
        group.transient.registration_writes += 1
        dropped = (instance_id,)
        reg.batch = tuple(i for i in reg.batch if i != instance_id)
        if not reg.registered:
            self.queue.cancel(expansion_key(group.group_id))
        out.writes.append(
            Write(
                [reg.record(group_id, dropped)],
                AdminDone(group_id, handle, "unregistered", removed=dropped),
            )
        )
        if group.is_(PREPARING_REBALANCE):
            self.rebalancer.try_complete_join(group, now, out)
        return out

    def registration_written(
        self, cont: AdminDone, failure: AppendFailure | None, now: int, out: Result
    ) -> None:
        group = self.groups.get(cont.group_id)
        if group is not None:  # (a group deleted and created again counts from 0)
            tr = group.transient
            tr.registration_writes = max(0, tr.registration_writes - 1)
        if failure is None:
            if group is not None:
                group.transient.registration_unwritten = False
            out.reply(cont.handle, AdminResult(NO_ERROR, cont.what))
            return
        if group is not None:  # undo the change: `added` removed, `removed` restored
            reg = group.open_registration()
            for instance in cont.added:
                reg.registered.pop(instance, None)
            for instance in cont.removed:
                if instance not in group.static_members:
                    reg.registered[instance] = None
            reg.batch = tuple(i for i in reg.batch if i not in cont.added) + tuple(
                i for i in cont.removed if i not in reg.batch
            )
            self._forget_if_unwritten(group)
        error = group_write_error(failure)
        message = f"the registration was not written ({error.name})"
        out.reply(cont.handle, AdminResult(error, message, AdminOutcome.NOT_WRITTEN))

    def _forget_if_unwritten(self, group: Group) -> None:
        """No write of the group's registration succeeded and none is under way: the log holds
        no registration, so neither does the group; and a group the registration created,
        with nothing else in it, is not kept either (a reload would not find it)."""
        tr = group.transient
        reg = group.registration
        if not tr.registration_unwritten or tr.registration_writes or reg is None or reg.registered:
            return
        tr.registration_unwritten = False
        group.registration = None
        drop_if_unused(self.groups, group)

    # ==== the scale-up ==========================================================================

    def member_arrived(self, group: Group, instance_id: str, now: int, out: Result) -> None:
        """A registered instance's first JoinGroup."""
        reg = group.registration
        assert reg is not None  # the instance is registered
        del reg.registered[instance_id]
        if reg.expansion_started_ms < 0:
            reg.expansion_started_ms = now
            self.queue.schedule(expansion_key(group.group_id), now + reg.timeout_ms)
            record = reg.record(group.group_id)
            out.writes.append(Write([record], LogOnly(f"{group.group_id} expansion started")))
        if not reg.registered:
            self.queue.cancel(expansion_key(group.group_id))  # closed once its generation syncs

    def close_if_complete(self, group: Group, out: Result) -> None:
        """Every registered instance is a durable member now: the scale-up is done."""
        reg = group.registration
        if reg is not None and reg.batch and not reg.registered:
            self._close(group, out, ())

    def on_expansion_expired(self, group: Group, key: TimerKey, now: int, out: Result) -> None:
        dropped = tuple(group.registered)
        if not dropped:
            return
        log.info("group %s: registered static members never joined: %s", group.group_id, dropped)
        self._close(group, out, dropped)
        if group.is_(PREPARING_REBALANCE):
            self.rebalancer.try_complete_join(group, now, out)

    def on_loaded(self, group: Group, out: Result) -> None:
        reg = group.registration
        if reg is None:
            return
        for instance in list(reg.registered):
            if instance in group.static_members:  # its join is durable: it arrived
                del reg.registered[instance]
        self.close_if_complete(group, out)
        rearm_expansion(self.queue, group)

    def _close(self, group: Group, out: Result, dropped: tuple[str, ...]) -> None:
        self.queue.cancel(expansion_key(group.group_id))
        reg = group.registration
        assert reg is not None  # there is a registration to close
        reg.registered = {}
        reg.batch = ()
        reg.expansion_started_ms = -1
        out.writes.append(
            Write(
                [reg.record(group.group_id, dropped)],
                LogOnly(f"{group.group_id} registration closed"),
            )
        )


def rearm_expansion(queue: TimerQueue, group: Group) -> None:
    """An expansion under way gets its deadline timer (again): at load, or when a group's
    deletion failed after the deadline fired on the group being deleted."""
    reg = group.registration
    if reg is not None and reg.registered and reg.expansion_started_ms >= 0:
        queue.schedule(expansion_key(group.group_id), reg.expansion_started_ms + reg.timeout_ms)


def _registration_problem(
    group: Group | None, instance_ids: list[str], timeout_ms: int, group_max_size: int
) -> str | None:
    """Linear in the ids (an admin call runs on the loop every Kafka client shares)."""
    if not instance_ids:
        return "group_instance_ids must not be empty"
    if any(not i for i in instance_ids):
        return "a group.instance.id must not be empty"
    dupes = sorted(i for i, n in Counter(instance_ids).items() if n > 1)
    if dupes:
        return f"duplicate group_instance_ids: {_some(dupes)}"
    if timeout_ms <= 0:
        return "expansion_timeout_ms must be positive"
    size = len(instance_ids)
    if group is not None:
        members = sorted(i for i in instance_ids if i in group.static_members)
        if members:
            return f"already members of group {group.group_id!r}: {_some(members)}"
        again = sorted(i for i in instance_ids if i in group.registered)
        if again:
            return f"already registered for group {group.group_id!r}: {_some(again)}"
        if group.is_(DEAD):
            return f"group {group.group_id!r} is being deleted"
        size += len(group.registered) + len(group.members)
    if size > group_max_size:
        return (
            f"{len(instance_ids)} more static members would make the group's members and "
            f"registrations {size}, over group.max.size ({group_max_size})"
        )
    return None


def _some(ids: list[str], shown: int = 20) -> str:
    """At most `shown` ids in a message: a refusal of 10,000 must not answer all of them."""
    more = len(ids) - shown
    return str(ids[:shown]) + (f" and {more} more" if more > 0 else "")
