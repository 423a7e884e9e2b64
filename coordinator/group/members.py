"""Member timers of the groups whose members heartbeat with epochs: KIP-848 consumer groups and KIP-1071
streams groups (``ConsumerGroupManager``, ``StreamsGroupManager`` mix this in).

A member that misses its session timeout, or stays revoking (UNREVOKED_PARTITIONS / UNREVOKED_TASKS)
past its rebalance timeout, is fenced: a timer write (``schedule_records``) computes the fencing records
on the committed group when it runs, not when the timer fired.  The manager provides ``c`` (the
coordinator), ``timers``, ``session_timeout_ms(group_id)`` and ``_fence(draft, member)``; ``TIMER`` names
its timers, ``PROTOCOL`` its groups in the runtime's task names, ``GROUP_CLASS`` its group type.
"""
from __future__ import annotations

UNREVOKED = 1  # reconcile.UNREVOKED_PARTITIONS, streams.UNREVOKED_TASKS


class MemberTimers:
    TIMER = "?"
    PROTOCOL = "?"
    GROUP_CLASS: type = object

    @staticmethod
    def _emit(group, records: list, rec) -> None:
        """Record ``rec`` and apply it to the draft ``group`` at once, so the operation's next steps see it."""
        records.append(rec)
        group.replay(rec)

    def _group(self, group_id: str):
        g = self.c.groups.get(group_id)
        return g if isinstance(g, self.GROUP_CLASS) else None

    def _schedule_session_timeout(self, group_id: str, member_id: str) -> None:
        self.timers.schedule((f"{self.TIMER}-session", group_id, member_id), self.session_timeout_ms(group_id),
                             lambda: self.c.schedule_records(lambda: self.fence_by_id(group_id, member_id),
                                                             f"{self.PROTOCOL} session timeout"))

    def _rebalance_timer(self, group_id: str, member_id: str, epoch: int, state: int, timeout_ms: int) -> None:
        """Armed while the member revokes (at ``epoch``), cancelled once it moved on."""
        key = (f"{self.TIMER}-rebalance", group_id, member_id)
        if state != UNREVOKED:
            self.timers.cancel(key)
            return
        self.timers.schedule(key, max(timeout_ms, 0), lambda: self.c.schedule_records(
            lambda: self._rebalance_timeout(group_id, member_id, epoch), f"{self.PROTOCOL} rebalance timeout"))

    def _rebalance_timeout(self, group_id: str, member_id: str, epoch: int) -> list:
        group = self._group(group_id)
        m = group.members.get(member_id) if group else None
        if m is None or m.member_epoch != epoch or m.state != UNREVOKED:
            return []
        return self.fence_by_id(group_id, member_id)

    def cancel_member_timers(self, group_id: str, member_id: str) -> None:
        self.timers.cancel((f"{self.TIMER}-session", group_id, member_id))
        self.timers.cancel((f"{self.TIMER}-rebalance", group_id, member_id))

    def on_loaded(self, group) -> None:
        for mid in group.members:
            self._schedule_session_timeout(group.group_id, mid)

    def on_removed(self, group) -> None:
        for mid in group.members:
            self.cancel_member_timers(group.group_id, mid)

    def fence_by_id(self, group_id: str, member_id: str, _reason=None) -> list:
        """Records removing a member (session or rebalance timeout), computed on the committed group."""
        group = self._group(group_id)
        if group is None or member_id not in group.members:
            return []
        draft = group.copy()
        return self._fence(draft, draft.members[member_id])
