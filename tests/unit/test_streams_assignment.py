"""Streams groups (KIP-1071) without a broker: the sticky task assignor (Kafka 4.4's StickyTaskAssignor),
the topology against the topics (InternalTopicManager) and member reconciliation (the streams
CurrentAssignmentBuilder)."""
from __future__ import annotations

import pytest

from coordinator.assignors.sticky_task import StreamsMemberSpec, assign
from coordinator.group import streams_topology as T
from coordinator.group.streams import (STABLE, UNRELEASED_TASKS, UNREVOKED_TASKS, StreamsGroup, StreamsMember,
                                       TasksTuple, reconcile)
from protocol.coordinator_records.streams_group_topology import StreamsGroupTopologyValue as V


def count(result, kind: int) -> dict[str, int]:
    return {mid: sum(len(ps) for ps in r[kind].values()) for mid, r in result.items()}


def all_tasks(result, kind: int) -> list:
    return sorted((sid, p) for r in result.values() for sid, ps in r[kind].items() for p in ps)


# ------------------------------------------------------------------ assignor
def test_balanced_over_processes_then_members():
    members = {"a1": StreamsMemberSpec("A"), "a2": StreamsMemberSpec("A"), "b1": StreamsMemberSpec("B")}
    out = assign(members, {"0": (6, False)})
    assert all_tasks(out, 0) == [("0", p) for p in range(6)]
    assert sorted(count(out, 0).values()) == [2, 2, 2]


def test_sticky_active_tasks_stay_with_their_owner():
    prev = {"a": StreamsMemberSpec("A", active={"0": {0, 1, 2, 3}})}
    first = assign(prev, {"0": (4, True)})
    assert first["a"][0] == {"0": {0, 1, 2, 3}}
    members = {"a": StreamsMemberSpec("A", active={"0": {0, 1, 2, 3}}), "b": StreamsMemberSpec("B")}
    out = assign(members, {"0": (4, True)})
    assert len(out["a"][0]["0"]) == 2 and out["a"][0]["0"] <= {0, 1, 2, 3}
    assert out["a"][0]["0"] | out["b"][0]["0"] == {0, 1, 2, 3}


def test_a_previous_standby_takes_over_an_orphaned_active_task():
    members = {"a": StreamsMemberSpec("A", active={"0": {0}}), "b": StreamsMemberSpec("B", standby={"0": {1}}),
               "c": StreamsMemberSpec("C")}
    out = assign(members, {"0": (3, True)})
    assert out["a"][0] == {"0": {0}} and out["b"][0] == {"0": {1}} and out["c"][0] == {"0": {2}}


def test_standbys_on_other_processes_only_stateful_subtopologies():
    members = {"a": StreamsMemberSpec("A"), "b": StreamsMemberSpec("B"), "c": StreamsMemberSpec("C")}
    out = assign(members, {"0": (3, False), "1": (3, True)}, num_standby_replicas=2)
    assert all_tasks(out, 1) == sorted([("1", p) for p in range(3)] * 2)
    proc = {m: s.process_id for m, s in members.items()}
    for p in range(3):
        holders = [proc[mid] for mid, r in out.items() if p in r[0].get("1", set()) | r[1].get("1", set())]
        assert sorted(holders) == ["A", "B", "C"]  # the active and its two standbys: three processes
    # one process cannot hold a task twice: with two processes only one standby each
    two = assign({"a": StreamsMemberSpec("A"), "b": StreamsMemberSpec("B")}, {"1": (2, True)}, 2)
    assert all_tasks(two, 1) == [("1", 0), ("1", 1)]


def test_standby_candidates_by_reported_progress():
    # c reported the most changelog progress for task 1_0: its standby goes there, not to the least loaded b
    members = {"a": StreamsMemberSpec("A", active={"1": {0}}), "b": StreamsMemberSpec("B"),
               "c": StreamsMemberSpec("C", active={"1": {1}}, task_offsets={("1", 0): 50})}
    out = assign(members, {"1": (2, True)}, num_standby_replicas=1)
    assert out["c"][1] == {"1": {0}} and out["a"][0] == {"1": {0}}


# ------------------------------------------------------------------ topology
def info(name, partitions=0, **configs):
    return V.TopicInfo(name=name, partitions=partitions, replication_factor=0,
                       topic_configs=[V.TopicConfig(key=k.replace("_", "."), value=v) for k, v in configs.items()])


def sub(sid, sources=(), sinks=(), rep_sources=(), changelogs=(), copartition=()):
    return V.Subtopology(subtopology_id=sid, source_topics=list(sources), repartition_sink_topics=list(sinks),
                         repartition_source_topics=list(rep_sources), state_changelog_topics=list(changelogs),
                         copartition_groups=list(copartition))


def test_partition_counts_flow_through_repartition_topics():
    topo = V(epoch=1, subtopologies=[
        sub("0", sources=["in"], sinks=["r"]),
        sub("1", rep_sources=[info("r")], changelogs=[info("c", cleanup_policy="compact")]),
    ])
    cfg = T.configure(topo, {"in": 5}.get)
    assert cfg.status == T.MISSING_INTERNAL_TOPICS and cfg.detail == "Internal topics are missing: c, r"
    assert {n: (t.partitions, t.configs) for n, t in cfg.to_create.items()} == {
        "r": (5, {}), "c": (5, {"cleanup.policy": "compact"})}
    cfg = T.configure(topo, {"in": 5, "r": 5, "c": 5}.get)
    assert cfg.ready and {s: n for s, (n, _, _) in cfg.subtopologies.items()} == {"0": 5, "1": 5}
    cfg = T.configure(topo, {"in": 5, "r": 3}.get)
    assert cfg.status == T.INCORRECTLY_PARTITIONED_TOPICS
    assert cfg.detail == "Existing topic r has different number of partitions: expected 5, found 3"


def test_missing_sources_cycles_and_copartitioning():
    assert T.configure(V(epoch=1, subtopologies=[sub("0", sources=["x", "in"])]), {"in": 1}.get).detail == \
        "Source topics x are missing."
    loop = V(epoch=1, subtopologies=[sub("0", sinks=["b"], rep_sources=[info("a")]),
                                     sub("1", sinks=["a"], rep_sources=[info("b")])])
    assert T.configure(loop, {}.get).status == T.INVALID_TOPOLOGY
    join = V(epoch=1, subtopologies=[sub("0", sources=["l", "r"], copartition=[
        V.CopartitionGroup(source_topics=[0, 1], repartition_source_topics=[])])])
    bad = T.configure(join, {"l": 2, "r": 3}.get)
    assert (bad.status, bad.detail) == (T.INCORRECTLY_PARTITIONED_TOPICS,
                                        "Following topics do not have the same number of partitions: [{l=2, r=3}]")
    assert T.configure(join, {"l": 3, "r": 3}.get).ready


# ------------------------------------------------------------------ reconciliation
def member(mid, pid, epoch, active=None, standby=None):
    m = StreamsMember(mid)
    m.process_id, m.member_epoch, m.previous_member_epoch = pid, epoch, epoch - 1
    m.assigned = TasksTuple(active, standby)
    return m


def group_of(*members) -> StreamsGroup:
    g = StreamsGroup("g")
    g.members = {m.member_id: m for m in members}
    return g


def test_revoke_first_then_take_the_new_epoch():
    a = member("a", "A", 3, active={"0": {0, 1}})
    g = group_of(a)
    target = TasksTuple({"0": {0}})
    epoch, prev, state, assigned, pending = reconcile(a, g, 4, target, TasksTuple({"0": {0, 1}}))
    assert (epoch, state, assigned.active, pending.active) == (3, UNREVOKED_TASKS, {"0": {0}}, {"0": {1}})
    a.state, a.assigned, a.pending = state, assigned, pending
    assert reconcile(a, g, 4, target, TasksTuple({"0": {0, 1}})) is None  # still owns task 1
    epoch, prev, state, assigned, pending = reconcile(a, g, 4, target, TasksTuple({"0": {0}}))
    assert (epoch, prev, state, assigned.active, pending.is_empty()) == (4, 3, STABLE, {"0": {0}}, True)


def test_a_task_still_owned_elsewhere_waits():
    a = member("a", "A", 3, active={"0": {0, 1}})
    b = member("b", "B", 3)
    g = group_of(a, b)
    epoch, _, state, assigned, _ = reconcile(b, g, 4, TasksTuple({"0": {1}}), TasksTuple())
    assert (epoch, state, assigned.active) == (4, UNRELEASED_TASKS, {})
    a.assigned = TasksTuple({"0": {0}})  # a released it
    epoch, _, state, assigned, _ = reconcile(b, g, 4, TasksTuple({"0": {1}}), TasksTuple())
    assert (state, assigned.active) == (STABLE, {"0": {1}})


def test_an_active_task_becoming_the_same_members_standby_is_granted_at_once():
    a = member("a", "A", 3, active={"0": {0}})
    g = group_of(a)
    epoch, _, state, assigned, pending = reconcile(a, g, 4, TasksTuple(standby={"0": {0}}), TasksTuple({"0": {0}}))
    assert (state, assigned.standby, pending.active) == (UNREVOKED_TASKS, {"0": {0}}, {"0": {0}})


@pytest.mark.parametrize("owned", [None, TasksTuple({"0": {0}})])
def test_unknown_state_is_fenced_unless_it_owns_nothing(owned):
    from coordinator.group.streams import FencedMember
    a = member("a", "A", 3)
    a.state = 127
    with pytest.raises(FencedMember):
        reconcile(a, group_of(a), 4, TasksTuple(), owned)
