"""The share-group "lag" assignor: members go where the backlog is.

KIP-1226 gives every share partition a lag (records not yet in a terminal
state: log end offset - SPSO - DeliveryCompleteCount) and announces, as its next
step, an assignor that places share-group members by those backlogs.  This is
that assignor.  In a share group several members may share a partition, so
instead of handing out partitions we hand out *members*: a partition that holds
90 % of the backlog should hold about 90 % of the members.

Per pool (as ``simple``: one pool when every member subscribes to the same
topics, else one pool per topic shared by its subscribers), with M members:

1. **Backlog.** ``lag(topic_id, partition)`` (negative counts as 0).  Partitions
   with lag > 0 are *backlogged*; when no partition has any, every partition
   counts with weight 1, so an idle group is spread evenly, as ``simple`` does.
2. **Groups.** F = total backlog / M is one member's fair share.  A partition
   with at least F is *heavy* and forms a group of its own.  The other
   backlogged partitions are *light*: they are packed, largest first, into
   ``k = ceil(light backlog / F)`` bins (at most one per light partition), each
   time into the bin with the least backlog (balanced lag; with fewer members
   than partitions every partition is light and this is the whole story).
   Heavy groups plus bins never number more than M.
3. **Members per group** in proportion to the group's backlog, by largest
   remainder with at least one member each: groups whose quota is below one
   get one member and the quotas of the others are recomputed, then floors,
   then the largest remainders (ties: the group more current members hold, then
   the heavier group, then partition order).  Every member of a group holds all
   its partitions, so every backlogged partition has at least one member.
4. **Stickiness.** Members keep the group they overlap most (most current
   partitions in it; ties: heavier group, member id) while it has room; the
   others fill the remaining places in member-id order.
5. **Hysteresis.** The current assignment is *close* when its estimated drain
   (the largest member load, a partition's backlog split evenly among its
   holders) is at most ``(1 + tolerance)`` times the target's plus ``min_gain``
   records (defaults 20 % and 1,000; no absolute slack when nothing has
   backlog).  It is kept unchanged when it is close, valid (every member holds
   a partition, every backlogged partition has a member) and no member is idle
   (holds no backlogged partition) while the target gives each member more
   than ``min_gain`` records.
6. **Bounded movement.** Otherwise idle and new members take their target,
   and so do working members (those holding a backlogged partition) whose
   backlogged partitions change, but only when the current assignment is not
   close and at most ``ceil(M * move_fraction)`` of them (default a quarter,
   at least one) per assignment: those moving to the most under-staffed group
   first, and never leaving a partition nobody else holds yet; the others stay
   until a later assignment.  A backlogged partition nobody would hold is given
   to a member whose target holds it, even beyond the bound.
7. **Drained partitions** (lag 0 while others have backlog) keep one holder
   so records arriving there are consumed: their first current holder (by
   member id), else the member with the fewest partitions (then the least
   load, then member id).  That member works elsewhere; when the drained
   partition is empty its fetches come from the other one.

Seed example (issue 10 benchmark): backlogs 90,000 / 5,000 / 3,000 / 2,000 and
8 members: F = 12,500, one heavy partition and one bin of the three light ones
(10,000 < F), quotas 7.2 and 0.8 -> 7 members on the heavy partition and one
member holding the three light ones.

The assignor is a pure function of its input; the minimum time between two
lag-driven assignments is the coordinator's (``coordinator.group.share``).
``assignable`` limits the pools as for ``simple``.  Racks are not used.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from fractions import Fraction

from .base import AssignablePredicate, Assignment, LagLookup, MemberSpec, TopicId, TopicPartition, TopicSpec, ceil_div
from .base import share_assignment

Group = list[TopicPartition]


class ShareLagAssignor:
    name = "lag"

    def __init__(self, tolerance: Fraction = Fraction(1, 5), min_gain: int = 1000,
                 move_fraction: Fraction = Fraction(1, 4)):
        self.tolerance = Fraction(tolerance)
        self.min_gain = min_gain
        self.move_fraction = Fraction(move_fraction)

    def assign(
        self,
        members: Mapping[str, MemberSpec],
        topics: Mapping[TopicId, TopicSpec],
        *,
        lag: LagLookup | None = None,
        assignable: AssignablePredicate | None = None,
    ) -> Assignment:
        def place(targets, subscribers, held):
            lags = {tp: max(0, int(lag(*tp))) if lag is not None else 0 for tp in targets}
            return self.place(targets, subscribers, held, lags)

        return share_assignment(members, topics, assignable, place)

    # ------------------------------------------------------------------ one pool
    def place(
        self,
        targets: Sequence[TopicPartition],
        subscribers: Sequence[str],
        held: Mapping[str, Sequence[TopicPartition]],
        lags: Mapping[TopicPartition, int],
    ) -> dict[str, list[TopicPartition]]:
        """Members of one pool over its partitions; ``held`` are the current ones (pool order)."""
        if not targets or not subscribers:
            return {m: [] for m in subscribers}
        order = {tp: i for i, tp in enumerate(targets)}
        total = sum(lags[tp] for tp in targets)
        weight = dict(lags) if total else dict.fromkeys(targets, 1)
        backlog = [tp for tp in targets if weight[tp] > 0]
        drained = [tp for tp in targets if weight[tp] == 0]
        backlog_set = set(backlog)
        current = {m: [tp for tp in held.get(m, ()) if tp in order] for m in subscribers}
        working = {m: [tp for tp in current[m] if tp in backlog_set] for m in subscribers}

        groups = _groups(backlog, weight, len(subscribers))
        sizes = [sum(weight[tp] for tp in g) for g in groups]
        holders_now = [sum(1 for m in subscribers if set(working[m]) & set(g)) for g in groups]
        counts = _apportion(sizes, len(subscribers), holders_now)
        target = _match(groups, counts, subscribers, current)
        ideal = max(Fraction(s, n) for s, n in zip(sizes, counts))

        floor = self.min_gain if total else 0  # records: meaningless for the weights of an idle pool
        valid = all(current[m] for m in subscribers) and backlog_set <= {tp for m in subscribers
                                                                      for tp in working[m]}
        close = _drain(working, weight) <= ideal * (1 + self.tolerance) + floor
        idle = any(not working[m] for m in subscribers) and ideal > floor
        if valid and close and not idle:
            final = {m: list(current[m]) for m in subscribers}
            keep_all_holders = True
        else:
            budget = 0 if close else max(1, ceil_div(len(subscribers) * self.move_fraction.numerator,
                                                     self.move_fraction.denominator))
            final = _bounded(subscribers, working, target, groups, sizes, holders_now, backlog, budget)
            keep_all_holders = False
        _cover_drained(final, drained, current, subscribers, weight, keep_all_holders)
        return {m: sorted(set(ps), key=order.__getitem__) for m, ps in final.items()}


def _bounded(subscribers, working, target, groups, sizes, holders_now, backlog, budget):
    """Targets for members that move freely (no backlogged partition), for at most ``budget``
    working members, and for whoever must move so that every backlogged partition keeps a member."""
    group_of = {m: i for i, g in enumerate(groups) for m in target[i]}
    goal = {m: groups[group_of[m]] for m in subscribers}
    final: dict[str, list[TopicPartition]] = {}
    movers = []
    for m in subscribers:
        if set(goal[m]) == set(working[m]) or not working[m]:
            final[m] = list(goal[m])
        else:
            movers.append(m)
    movers.sort(key=lambda m: (-Fraction(sizes[group_of[m]], holders_now[group_of[m]] + 1), m))
    for m in movers:
        final[m] = list(working[m])
    holders: dict[TopicPartition, int] = {}
    for ps in final.values():
        for tp in ps:
            holders[tp] = holders.get(tp, 0) + 1
    stayed, progress = list(movers), True
    while budget and progress:  # a mover may not leave a partition nobody else holds yet
        progress = False
        for m in list(stayed):
            leaving = set(working[m]) - set(goal[m])
            if budget and all(holders[tp] > 1 for tp in leaving):
                for tp in leaving:
                    holders[tp] -= 1
                for tp in set(goal[m]) - set(working[m]):
                    holders[tp] = holders.get(tp, 0) + 1
                final[m] = list(goal[m])
                stayed.remove(m)
                budget, progress = budget - 1, True
    while True:
        covered = {tp for ps in final.values() for tp in ps}
        missing = [tp for tp in backlog if tp not in covered]
        if not missing:
            return final
        m = next(m for m in stayed if missing[0] in goal[m])
        stayed.remove(m)
        final[m] = list(goal[m])


def _groups(backlog: Sequence[TopicPartition], weight: Mapping[TopicPartition, int], members: int) -> list[Group]:
    """Heavy partitions alone, light ones packed by balanced backlog into bins (see step 2)."""
    total = sum(weight[tp] for tp in backlog)
    heavy = [tp for tp in backlog if weight[tp] * members >= total]
    light = sorted((tp for tp in backlog if weight[tp] * members < total), key=lambda tp: -weight[tp])
    groups: list[Group] = [[tp] for tp in heavy]
    if light:
        light_total = sum(weight[tp] for tp in light)
        bins: list[Group] = [[] for _ in range(min(len(light), max(1, ceil_div(light_total * members, total))))]
        loads = [0] * len(bins)
        for tp in light:  # stable sort: ties stay in partition order
            i = min(range(len(bins)), key=lambda i: (loads[i], len(bins[i]), i))
            bins[i].append(tp)
            loads[i] += weight[tp]
        groups += bins
    return sorted(groups, key=lambda g: -sum(weight[tp] for tp in g))


def _apportion(sizes: Sequence[int], seats: int, holders: Sequence[int]) -> list[int]:
    """Largest remainder with at least one seat each; ``seats >= len(sizes)``."""
    counts = [0] * len(sizes)
    fixed: set[int] = set()
    while True:
        free = seats - len(fixed)
        rest = sum(s for i, s in enumerate(sizes) if i not in fixed)
        small = [i for i, s in enumerate(sizes) if i not in fixed and s * free < rest]
        if not small:
            break
        fixed.update(small)
    for i in fixed:
        counts[i] = 1
    remainders = []
    for i, s in enumerate(sizes):
        if i not in fixed:
            counts[i], r = divmod(s * free, rest)
            remainders.append((-r, -holders[i], -s, i))
    for _, _, _, i in sorted(remainders)[: seats - sum(counts)]:
        counts[i] += 1
    return counts


def _match(groups: Sequence[Group], counts: Sequence[int], subscribers: Sequence[str],
           current: Mapping[str, Sequence[TopicPartition]]) -> list[list[str]]:
    """Members per group: those overlapping a group most keep it while it has room (step 4)."""
    members: list[list[str]] = [[] for _ in groups]
    placed: set[str] = set()
    pairs = sorted((-len(set(current[m]) & set(g)), i, m) for i, g in enumerate(groups) for m in subscribers
                   if set(current[m]) & set(g))
    for _, i, m in pairs:
        if m not in placed and len(members[i]) < counts[i]:
            members[i].append(m)
            placed.add(m)
    rest = iter(m for m in subscribers if m not in placed)
    for i, n in enumerate(counts):
        while len(members[i]) < n:
            members[i].append(next(rest))
    return members


def _drain(sets: Mapping[str, Sequence[TopicPartition]], weight: Mapping[TopicPartition, int]) -> Fraction:
    """Estimated drain: the largest member load, each partition's backlog split among its holders."""
    holders: dict[TopicPartition, int] = {}
    for ps in sets.values():
        for tp in ps:
            holders[tp] = holders.get(tp, 0) + 1
    return max((sum((Fraction(weight[tp], holders[tp]) for tp in ps), Fraction(0)) for ps in sets.values()),
               default=Fraction(0))


def _cover_drained(final, drained, current, subscribers, weight, keep_all_holders) -> None:
    """Each drained partition keeps its current holder(s), else goes to the least busy member (step 7)."""
    loads = {m: sum(weight[tp] for tp in final[m]) for m in subscribers}
    for tp in drained:
        holders = [m for m in subscribers if tp in current[m]]
        if holders:
            for m in holders if keep_all_holders else holders[:1]:
                final[m].append(tp)
            continue
        m = min(subscribers, key=lambda m: (len(final[m]), loads[m], m))
        final[m].append(tp)
