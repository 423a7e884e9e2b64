"""The streams-group (KIP-1071) task assignor, as Kafka 4.4's ``StickyTaskAssignor``.

Input: the members (``member_id -> StreamsMemberSpec``: process id, the member's current
active and standby tasks, the changelog offsets it reported for tasks it holds no standby
of), the subtopologies (``subtopology_id -> (number of tasks, stateful)``) and the number of
standby replicas.  Output: ``member_id -> (active, standby)``, each ``{subtopology_id:
{partition, ...}}``, for every member.  No warm-up tasks (Kafka's sticky assignor assigns
none either).

Balance is per process (a Kafka Streams instance, which runs one member per stream thread):
a process's load is its tasks divided by its members.  Active tasks first stay with their
previous owner while it is under its quota (``ceil(tasks / members)``, recomputed as members
fill up), then go to a previous standby of the task (the one on the least loaded process),
then to the least loaded member of the least loaded process.  Standby tasks (stateful
subtopologies only) never share a process with the task's active or another of its standbys:
the previous active owner's process first, then previous standbys (and members that reported
offsets for the task: most progress first), then the least loaded processes.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field

Tasks = dict[str, set[int]]


@dataclass
class StreamsMemberSpec:
    process_id: str
    active: Tasks = field(default_factory=dict)
    standby: Tasks = field(default_factory=dict)
    task_offsets: dict[tuple[str, int], int] = field(default_factory=dict)


class _Process:
    __slots__ = ("pid", "members", "counts", "tasks", "active", "standby")

    def __init__(self, pid: str):
        self.pid = pid
        self.members: list[str] = []
        self.counts: dict[str, int] = {}
        self.tasks: set[tuple[str, int]] = set()
        self.active: dict[str, set] = {}
        self.standby: dict[str, set] = {}

    def add_member(self, mid: str) -> None:
        self.members.append(mid)
        self.counts[mid] = 0
        self.active[mid] = set()
        self.standby[mid] = set()

    def load(self) -> float:
        return sum(self.counts.values()) / len(self.members)

    def add(self, mid: str, task: tuple[str, int], active: bool) -> int:
        self.tasks.add(task)
        (self.active if active else self.standby)[mid].add(task)
        self.counts[mid] += 1
        return self.counts[mid]

    def add_to_least_loaded(self, task: tuple[str, int], active: bool) -> int:
        mid = min(self.members, key=lambda m: (self.counts[m], m))
        return self.add(mid, task, active)


def _per_member(tasks: int, members: int) -> int:
    return 0 if members == 0 else -(-tasks // members)


class _State:
    def __init__(self, members: dict[str, StreamsMemberSpec], subtopologies: dict[str, tuple[int, bool]],
                 standbys: int):
        self.standbys = standbys
        self.total_active = sum(n for n, _ in subtopologies.values())
        self.total = self.total_active + sum(n * standbys for n, stateful in subtopologies.values() if stateful)
        self.active_capacity = self.total_capacity = len(members)
        self.active_quota = _per_member(self.total_active, self.active_capacity)
        self.total_quota = _per_member(self.total, self.total_capacity)
        self.processes: dict[str, _Process] = {}
        self.member_process: dict[str, str] = {}
        self.prev_active: dict[tuple[str, int], str] = {}
        candidates: dict[tuple[str, int], list[tuple[int, int, str]]] = {}
        for mid in sorted(members):
            spec = members[mid]
            self.processes.setdefault(spec.process_id, _Process(spec.process_id)).add_member(mid)
            self.member_process[mid] = spec.process_id
            for sid, parts in spec.active.items():
                for p in parts:
                    self.prev_active[(sid, p)] = mid
            standby = {(sid, p) for sid, parts in spec.standby.items() for p in parts}
            for task in standby:  # previous standbys first, then by reported progress (most first)
                candidates.setdefault(task, []).append((0, -spec.task_offsets.get(task, 0), mid))
            for task, offset in spec.task_offsets.items():
                if task not in standby:
                    candidates.setdefault(task, []).append((1, -offset, mid))
        self.prev_standby = {t: [mid for _, _, mid in sorted(c)] for t, c in candidates.items()}

    def process_of(self, mid: str) -> _Process:
        return self.processes[self.member_process[mid]]

    def added(self, count: int, active: bool) -> None:
        """Kafka's maybeUpdateActiveTasksPerMember / maybeUpdateTotalTasksPerMember."""
        if active and count == self.active_quota:
            self.active_capacity -= 1
            self.total_active -= count
            self.active_quota = _per_member(self.total_active, self.active_capacity)
        if count == self.total_quota:
            self.total_capacity -= 1
            self.total -= count
            self.total_quota = _per_member(self.total, self.total_capacity)

    def least_loaded_prev(self, mids: list[str] | None, task=None) -> str | None:
        best, best_pl, best_ml = None, None, None
        for mid in mids or ():
            proc = self.process_of(mid)
            if task is not None and task in proc.tasks:
                continue
            pl, ml = proc.load(), proc.counts[mid]
            if best is None or (pl < best_pl and ml < best_ml):
                best, best_pl, best_ml = mid, pl, ml
        return best


def assign(members: dict[str, StreamsMemberSpec], subtopologies: dict[str, tuple[int, bool]],
           num_standby_replicas: int = 0) -> dict[str, tuple[Tasks, Tasks]]:
    if not members:
        return {}
    st = _State(members, subtopologies, num_standby_replicas)
    active = [(sid, p) for sid in sorted(subtopologies) for p in range(subtopologies[sid][0])]
    _assign_active(st, active)
    if num_standby_replicas > 0:
        stateful = [(sid, p) for sid in sorted(subtopologies) if subtopologies[sid][1]
                    for p in range(subtopologies[sid][0])]
        _assign_standby(st, stateful)
    out: dict[str, tuple[Tasks, Tasks]] = {}
    for mid in members:
        proc = st.process_of(mid)
        out[mid] = (_compact(proc.active[mid]), _compact(proc.standby[mid]))
    return out


def _compact(tasks: set[tuple[str, int]]) -> Tasks:
    out: Tasks = {}
    for sid, p in tasks:
        out.setdefault(sid, set()).add(p)
    return out


def _assign_active(st: _State, tasks: list[tuple[str, int]]) -> None:
    remaining = sorted(tasks, key=lambda t: (t[1], t[0]))
    for step in ("previous active", "previous standby"):
        left = []
        for task in remaining:
            mid = st.prev_active.get(task) if step == "previous active" else \
                st.least_loaded_prev(st.prev_standby.get(task))
            if mid is not None:
                proc = st.process_of(mid)
                if proc.counts[mid] < st.active_quota:
                    count = proc.add(mid, task, True)
                    st.added(count, True)
                    continue
            left.append(task)
        remaining = left
    heap = [(p.load(), pid) for pid, p in st.processes.items()]
    heapq.heapify(heap)
    for task in sorted(remaining):
        _, pid = heapq.heappop(heap)
        proc = st.processes[pid]
        st.added(proc.add_to_least_loaded(task, True), True)
        heapq.heappush(heap, (proc.load(), pid))


def _assign_standby(st: _State, tasks: list[tuple[str, int]]) -> None:
    to_least_loaded: list[tuple[tuple[str, int], int]] = []
    for task in sorted(tasks, key=lambda t: (t[1], t[0]), reverse=True):
        for i in range(st.standbys):
            prev = st.prev_active.get(task)
            if prev is not None:
                proc = st.process_of(prev)
                if task not in proc.tasks and proc.counts[prev] < st.total_quota:
                    st.added(proc.add(prev, task, False), False)
                    continue
            mid = st.least_loaded_prev(st.prev_standby.get(task), task)
            if mid is not None:
                proc = st.process_of(mid)
                if proc.counts[mid] < st.total_quota:
                    st.added(proc.add(mid, task, False), False)
                    continue
            to_least_loaded.append((task, st.standbys - i))
            break
    to_least_loaded.sort(key=lambda x: x[0], reverse=True)
    for task, replicas in to_least_loaded:
        for _ in range(replicas):
            # the least loaded process that does not hold the task yet (Kafka's
            # assignStandbyToMemberWithLeastLoad); none left: fewer standbys than configured
            free = [p for p in st.processes.values() if task not in p.tasks]
            if not free:
                break
            proc = min(free, key=lambda p: (p.load(), p.pid))
            st.added(proc.add_to_least_loaded(task, False), False)
