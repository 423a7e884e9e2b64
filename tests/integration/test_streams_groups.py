"""KIP-1071 streams groups on the wire: StreamsGroupHeartbeat (88) / StreamsGroupDescribe (89) /
StreamsGroupTopologyDescriptionUpdate (93) and the streams group in the other group APIs, with the wire client.

What a Kafka Streams 4.4 client relies on (the Java application itself runs in ``test_java_apps.py``): a
joining member's topology is stored and checked against the topics (missing source topics are a status,
internal topics are created with the partition counts the coordinator decides), tasks are assigned by the
sticky task assignor (standbys on another process with ``streams.num.standby.replicas``), a task moves to
another member only after its owner released it, epochs fence stale members, and the whole group survives
a broker restart.
"""
from __future__ import annotations

import pytest

from broker.testing import BrokerProcess
from protocol.errors import Errors
from protocol.messages.consumer_group_heartbeat import ConsumerGroupHeartbeatRequest
from protocol.messages.create_topics import CreateTopicsRequest
from protocol.messages.delete_groups import DeleteGroupsRequest
from protocol.messages.describe_configs import DescribeConfigsRequest
from protocol.messages.describe_groups import DescribeGroupsRequest
from protocol.messages.incremental_alter_configs import IncrementalAlterConfigsRequest
from protocol.messages.join_group import JoinGroupRequest
from protocol.messages.list_groups import ListGroupsRequest
from protocol.messages.metadata import MetadataRequest
from protocol.messages.offset_commit import OffsetCommitRequest
from protocol.messages.offset_fetch import OffsetFetchRequest
from protocol.messages.streams_group_describe import StreamsGroupDescribeRequest
from protocol.messages.streams_group_heartbeat import StreamsGroupHeartbeatRequest as H
from protocol.messages.streams_group_topology_description_update import StreamsGroupTopologyDescriptionUpdateRequest
from tests.support import unique, until
from tests.wire import WireClient

GROUP = 32
MISSING_SOURCE_TOPICS, MISSING_INTERNAL_TOPICS, STALE_TOPOLOGY, ASSIGNMENT_DELAYED = 1, 3, 0, 5
# Kafka delays a new group's first assignment by 3 s and spaces assignments 1 s apart: off here (one test below
# sets them per group), so each step's answer carries its outcome
NO_DELAYS = {"group.streams.initial.rebalance.delay.ms": "0", "group.streams.assignment.interval.ms": "0"}


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("streams-groups"),
                      config={"group.streams.min.session.timeout.ms": "1000", **NO_DELAYS})
    b.start()
    try:
        yield b
    finally:
        b.close()


@pytest.fixture
def w(broker):
    with WireClient(broker.bootstrap) as c:
        yield c


def create_topic(w, name: str, partitions: int) -> None:
    r = w.request(CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
        name=name, num_partitions=partitions, replication_factor=1)], timeout_ms=5000), 5)
    assert r.topics[0].error_code == 0


def partitions_of(w, name: str) -> int | None:
    r = w.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=name)],
                                  allow_auto_topic_creation=False), 12)
    t = r.topics[0]
    return None if t.error_code else len(t.partitions)


def word_count_topology(app: str, source: str, epoch: int = 1):
    """Kafka Streams' word count: subtopology 0 reads the source and writes the repartition topic,
    subtopology 1 reads it and counts into a store (changelog)."""
    rep, changelog = f"{app}-counts-repartition", f"{app}-counts-changelog"
    return H.Topology(epoch=epoch, subtopologies=[
        H.Subtopology(subtopology_id="0", source_topics=[source], repartition_sink_topics=[rep],
                      state_changelog_topics=[], repartition_source_topics=[], copartition_groups=[]),
        H.Subtopology(subtopology_id="1", source_topics=[], repartition_sink_topics=[],
                      state_changelog_topics=[H.TopicInfo(name=changelog, topic_configs=[
                          H.KeyValue(key="cleanup.policy", value="compact")])],
                      repartition_source_topics=[H.TopicInfo(name=rep, topic_configs=[
                          H.KeyValue(key="cleanup.policy", value="delete")])],
                      copartition_groups=[])])


def tasks(ids) -> dict[str, list[int]]:
    return {t.subtopology_id: sorted(t.partitions) for t in ids or () if t.partitions}


def join(w, group: str, member: str, topology, process: str = "p1", version: int = 1, **extra):
    return w.request(H(group_id=group, member_id=member, member_epoch=0, rebalance_timeout_ms=30000,
                       topology=topology, active_tasks=[], standby_tasks=[], warmup_tasks=[], process_id=process,
                       user_endpoint=H.Endpoint(host="app-" + process, port=8080), client_tags=[], **extra), version)


def beat(w, group: str, member: str, epoch: int, owned=None, version: int = 1, **extra):
    """A heartbeat reporting ``owned`` (a response's or an earlier state's TaskIds: active, standby, warmup)."""
    kinds = {}
    if owned is not None:
        kinds = {k: [H.TaskIds(subtopology_id=t.subtopology_id, partitions=list(t.partitions)) for t in v or ()]
                 for k, v in zip(("active_tasks", "standby_tasks", "warmup_tasks"), owned)}
    return w.request(H(group_id=group, member_id=member, member_epoch=epoch, **kinds, **extra), version)


def describe(w, group: str):
    (g,) = w.request(StreamsGroupDescribeRequest(group_ids=[group], include_authorized_operations=False), 1).groups
    return g


def owned_of(resp):
    return resp.active_tasks, resp.standby_tasks, resp.warmup_tasks


def alter_group_config(w, group: str, key: str, value: str | None) -> int:
    IAC = IncrementalAlterConfigsRequest
    r = w.request(IAC(resources=[IAC.AlterConfigsResource(resource_type=GROUP, resource_name=group, configs=[
        IAC.AlterableConfig(name=key, config_operation=1 if value is None else 0, value=value)])]), 1)
    return r.responses[0].error_code


# ------------------------------------------------------------------------------------------------ tests
def test_join_before_and_after_the_source_topic_exists_creates_the_internal_topics(w):
    app, source = unique("app"), unique("src")
    r = join(w, app, "m1", word_count_topology(app, source))
    assert r.error_code == 0 and r.member_id == "m1" and r.member_epoch >= 1
    assert [(s.status_code, s.status_detail) for s in r.status] == [
        (MISSING_SOURCE_TOPICS, f"Source topics {source} are missing.")]
    assert tasks(r.active_tasks) == {} and r.heartbeat_interval_ms == 5000
    g = describe(w, app)
    assert (g.group_state, len(g.members), g.topology.epoch) == ("NotReady", 1, 1)
    assert partitions_of(w, f"{app}-counts-repartition") is None  # nothing created without the source

    create_topic(w, source, 3)
    r = beat(w, app, "m1", r.member_epoch, owned_of(r))
    assert r.error_code == 0 and r.status == []
    # two subtopologies of 3 tasks each (the repartition topic takes the source's 3 partitions)
    assert tasks(r.active_tasks) == {"0": [0, 1, 2], "1": [0, 1, 2]}
    assert partitions_of(w, f"{app}-counts-repartition") == 3
    assert partitions_of(w, f"{app}-counts-changelog") == 3
    cfg = w.request(DescribeConfigsRequest(resources=[DescribeConfigsRequest.DescribeConfigsResource(
        resource_type=2, resource_name=f"{app}-counts-changelog", configuration_keys=["cleanup.policy"])]), 4)
    assert [(c.name, c.value) for c in cfg.results[0].configs] == [("cleanup.policy", "compact")]
    # the interactive-query view: this member's endpoint hosts every source partition of its active tasks
    (ep,) = r.partitions_by_user_endpoint
    assert (ep.user_endpoint.host, ep.user_endpoint.port) == ("app-p1", 8080)
    assert {t.topic: t.partitions for t in ep.active_partitions} == {
        source: [0, 1, 2], f"{app}-counts-repartition": [0, 1, 2]}
    g = describe(w, app)
    assert (g.group_state, g.group_epoch, g.assignment_epoch) == ("Stable", r.member_epoch, r.member_epoch)


def test_a_task_moves_only_after_its_owner_released_it(w):
    app, source = unique("app"), unique("src")
    create_topic(w, source, 4)
    a = join(w, app, "a", word_count_topology(app, source), process="pa")
    a = beat(w, app, "a", a.member_epoch, owned_of(a)) if not a.active_tasks else a
    assert tasks(a.active_tasks) == {"0": [0, 1, 2, 3], "1": [0, 1, 2, 3]}
    a_owned = owned_of(a)

    b = join(w, app, "b", word_count_topology(app, source), process="pb")
    epoch = b.member_epoch
    assert b.error_code == 0 and tasks(b.active_tasks) == {}  # a still owns every task
    g = describe(w, app)
    target = {m.member_id: tasks(m.target_assignment.active_tasks) for m in g.members}
    assert sorted(len(sum(t.values(), [])) for t in target.values()) == [4, 4]  # balanced target

    # a learns what to give up; its epoch stays until it released the tasks
    a2 = beat(w, app, "a", a.member_epoch, a_owned)
    assert a2.member_epoch == a.member_epoch and tasks(a2.active_tasks) == target["a"]
    assert describe(w, app).group_state == "Reconciling"
    # b's heartbeat: the tasks a has not released yet still wait
    b2 = beat(w, app, "b", epoch, ([], [], []))
    assert tasks(b2.active_tasks) == {}
    # a reports it owns only what it kept: released, it takes the new epoch
    a3 = beat(w, app, "a", a2.member_epoch, owned_of(a2))
    assert a3.member_epoch == epoch
    b3 = beat(w, app, "b", b2.member_epoch, ([], [], []))
    assert tasks(b3.active_tasks) == target["b"]
    b4 = beat(w, app, "b", b3.member_epoch, owned_of(b3))
    assert describe(w, app).group_state == "Stable" and b4.error_code == 0


def test_standby_replicas_from_the_group_config(w):
    app, source = unique("app"), unique("src")
    create_topic(w, source, 2)
    a = join(w, app, "a", word_count_topology(app, source), process="pa")
    b = join(w, app, "b", word_count_topology(app, source), process="pb")
    assert alter_group_config(w, app, "streams.num.standby.replicas", "1") == 0
    assert alter_group_config(w, app, "streams.num.standby.replicas", "3") == Errors.INVALID_CONFIG
    states = {"a": a, "b": b}

    def settled():
        for mid in ("a", "b"):
            r = beat(w, app, mid, states[mid].member_epoch, owned_of(states[mid]))
            if r.active_tasks is not None:
                states[mid] = r
            else:
                states[mid].member_epoch = r.member_epoch
        return describe(w, app).group_state == "Stable"

    until(settled, 15, "the group Stable with standbys")
    # task changelog offsets a member reports are kept (in memory) and described
    T = H.TaskOffset
    r = beat(w, app, "a", states["a"].member_epoch, task_offsets=[T(subtopology_id="1", partition=0, offset=7)],
             task_end_offsets=[T(subtopology_id="1", partition=0, offset=9)])
    assert r.error_code == 0
    r = beat(w, app, "a", r.member_epoch, task_end_offsets=[T(subtopology_id="1", partition=1, offset=4)])
    (ma,) = [m for m in describe(w, app).members if m.member_id == "a"]
    assert [(t.subtopology_id, t.partition, t.offset) for t in ma.task_offsets] == [("1", 0, 7)]
    assert [(t.subtopology_id, t.partition, t.offset) for t in ma.task_end_offsets] == [("1", 1, 4)]
    g = describe(w, app)
    by = {m.member_id: (tasks(m.assignment.active_tasks), tasks(m.assignment.standby_tasks)) for m in g.members}
    # subtopology 1 is stateful (a changelog): each of its tasks has a standby on the other process
    for sid_p in [("1", 0), ("1", 1)]:
        sid, p = sid_p
        holders = [(mid, p in act.get(sid, []), p in stb.get(sid, [])) for mid, (act, stb) in by.items()]
        assert sorted((x, y) for _, x, y in holders) == [(False, True), (True, False)], by
    assert all(0 not in stb.get("0", []) and 1 not in stb.get("0", []) for _, stb in by.values())  # stateless


def test_errors_and_fencing(w):
    app, source = unique("app"), unique("src")
    create_topic(w, source, 1)
    bad = w.request(H(group_id=app, member_id="m", member_epoch=0, rebalance_timeout_ms=1000, topology=None,
                      active_tasks=[], standby_tasks=[], warmup_tasks=[]), 1)
    assert (bad.error_code, bad.error_message) == (Errors.INVALID_REQUEST,
                                                   "Topology must be non-null when (re-)joining.")
    bad = join(w, app, "m", H.Topology(epoch=1, subtopologies=[H.Subtopology(
        subtopology_id="0", source_topics=["__consumer_offsets"])]))
    assert bad.error_code == Errors.STREAMS_INVALID_TOPOLOGY
    assert bad.error_message == ("Use of Kafka internal topics __consumer_offsets in a Kafka Streams topology is "
                                 "prohibited.")
    for broken in ([H.Subtopology(subtopology_id="0", source_topics=[source], state_changelog_topics=[
                        H.TopicInfo(name="c", partitions=3)])],
                   [H.Subtopology(subtopology_id="0", source_topics=[source], copartition_groups=[
                       H.CopartitionGroup(source_topics=[4])])],
                   [H.Subtopology(subtopology_id="0", source_topics=[source])] * 2):
        r = join(w, app, "m", H.Topology(epoch=1, subtopologies=broken))
        assert r.error_code == Errors.STREAMS_INVALID_TOPOLOGY, broken
    assert r.error_message == "Subtopology 0 is defined twice."
    assert beat(w, app, "m", 3).error_code == Errors.GROUP_ID_NOT_FOUND  # not joined: no group yet
    r = join(w, app, "m", word_count_topology(app, source))
    assert r.error_code == 0
    assert beat(w, app, "x", r.member_epoch).error_code == Errors.UNKNOWN_MEMBER_ID
    assert beat(w, app, "m", r.member_epoch + 1).error_code == Errors.FENCED_MEMBER_EPOCH
    # the previous epoch passes while the member reports no task it does not own (a heartbeat crossing
    # the answer that moved it on); owning anything else is fenced
    assert r.member_epoch >= 2
    assert beat(w, app, "m", r.member_epoch - 1, ([], [], [])).error_code == 0
    stale = beat(w, app, "m", r.member_epoch - 1, ([], [H.TaskIds(subtopology_id="1", partitions=[0])], []))
    assert stale.error_code == Errors.FENCED_MEMBER_EPOCH
    # a task the topology does not have
    bogus = beat(w, app, "m", r.member_epoch, ([H.TaskIds(subtopology_id="7", partitions=[0])], [], []))
    assert (bogus.error_code, bogus.error_message) == (Errors.INVALID_REQUEST,
                                                       "Subtopology 7 does not exist in the topology.")
    # another topology at the same epoch: updates are not supported (Kafka 4.4)
    other = join(w, app, "n", word_count_topology(app, unique("other")))
    assert (other.error_code, other.error_message) == (Errors.INVALID_REQUEST,
                                                       "Topology updates are not supported yet.")
    # an older topology epoch joins, with STALE_TOPOLOGY in its status
    old = join(w, app, "o", word_count_topology(app, source, epoch=0))
    assert old.error_code == 0 and STALE_TOPOLOGY in [s.status_code for s in old.status]
    # no topology description plugin: as Kafka's default broker
    upd = w.request(StreamsGroupTopologyDescriptionUpdateRequest(
        group_id=app, member_id="m", topology_epoch=1,
        topology_description=StreamsGroupTopologyDescriptionUpdateRequest.TopologyDescription()), 0)
    assert upd.error_code == Errors.UNSUPPORTED_VERSION
    # leaving
    bye = w.request(H(group_id=app, member_id="o", member_epoch=-1), 1)
    assert (bye.error_code, bye.member_id, bye.member_epoch) == (0, "o", -1)
    assert sorted(m.member_id for m in describe(w, app).members) == ["m"]
    assert w.request(H(group_id=app, member_id="o", member_epoch=-1), 1).error_code == Errors.UNKNOWN_MEMBER_ID


def test_static_member_leaves_and_a_new_member_id_takes_its_place(w):
    app, source = unique("app"), unique("src")
    create_topic(w, source, 2)
    a = join(w, app, "a1", word_count_topology(app, source), instance_id="inst")
    a = beat(w, app, "a1", a.member_epoch, owned_of(a), instance_id="inst")
    held = tasks(describe(w, app).members[0].assignment.active_tasks)
    assert held == {"0": [0, 1], "1": [0, 1]}
    taken = join(w, app, "a2", word_count_topology(app, source), instance_id="inst")
    assert taken.error_code == Errors.UNRELEASED_INSTANCE_ID
    bye = w.request(H(group_id=app, member_id="a1", member_epoch=-2, instance_id="inst"), 1)
    assert (bye.error_code, bye.member_epoch) == (0, -2)
    back = join(w, app, "a2", word_count_topology(app, source), instance_id="inst")
    assert back.error_code == 0 and tasks(back.active_tasks) == held  # the same tasks, no rebalance
    (m,) = describe(w, app).members
    assert (m.member_id, m.instance_id) == ("a2", "inst")
    assert beat(w, app, "a1", a.member_epoch, instance_id="inst").error_code == Errors.FENCED_INSTANCE_ID


def test_the_streams_group_in_the_other_group_apis(w):
    app, source = unique("app"), unique("src")
    create_topic(w, source, 2)
    r = join(w, app, "m", word_count_topology(app, source))
    r = beat(w, app, "m", r.member_epoch, owned_of(r))
    listed = w.request(ListGroupsRequest(states_filter=[], types_filter=["streams"]), 5).groups
    assert [(g.group_id, g.protocol_type, g.group_state, g.group_type) for g in listed if g.group_id == app] == [
        (app, "streams", "Stable", "streams")]
    assert app not in [g.group_id for g in w.request(ListGroupsRequest(types_filter=["consumer"]), 5).groups]
    (d,) = w.request(DescribeGroupsRequest(groups=[app]), 6).groups
    assert (d.error_code, d.error_message) == (Errors.GROUP_ID_NOT_FOUND, f"Group {app} is not a classic group.")
    cg = w.request(ConsumerGroupHeartbeatRequest(group_id=app, member_id="c", member_epoch=0, rebalance_timeout_ms=1000,
                                                 subscribed_topic_names=[source], topic_partitions=[]), 1)
    assert (cg.error_code, cg.error_message) == (Errors.GROUP_ID_NOT_FOUND, f"Group {app} is not a consumer group.")
    jg = w.request(JoinGroupRequest(group_id=app, session_timeout_ms=10000, rebalance_timeout_ms=10000,
                                    member_id="", protocol_type="consumer",
                                    protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")]),
                   7)
    assert jg.error_code == Errors.INCONSISTENT_GROUP_PROTOCOL

    def commit(epoch, member="m", version=9):
        c = w.request(OffsetCommitRequest(group_id=app, generation_id_or_member_epoch=epoch, member_id=member,
                                          topics=[OffsetCommitRequest.OffsetCommitRequestTopic(
                                              name=source, partitions=[OffsetCommitRequest.OffsetCommitRequestPartition(
                                                  partition_index=0, committed_offset=5)])]), version)
        return c.topics[0].partitions[0].error_code

    assert commit(r.member_epoch) == 0
    assert commit(r.member_epoch + 1) == Errors.STALE_MEMBER_EPOCH
    assert commit(r.member_epoch, member="nobody") == Errors.UNKNOWN_MEMBER_ID
    assert commit(r.member_epoch, version=8) == Errors.UNSUPPORTED_VERSION

    def fetch(epoch):
        f = w.request(OffsetFetchRequest(groups=[OffsetFetchRequest.OffsetFetchRequestGroup(
            group_id=app, member_id="m", member_epoch=epoch,
            topics=[OffsetFetchRequest.OffsetFetchRequestTopics(name=source, partition_indexes=[0])])]), 9)
        (g,) = f.groups
        return g.error_code, [p.committed_offset for t in g.topics for p in t.partitions]

    assert fetch(r.member_epoch) == (0, [5])
    assert fetch(r.member_epoch + 5)[0] == Errors.STALE_MEMBER_EPOCH

    assert w.request(DeleteGroupsRequest(groups_names=[app]), 2).results[0].error_code == Errors.NON_EMPTY_GROUP
    assert w.request(H(group_id=app, member_id="m", member_epoch=-1), 1).error_code == 0
    g = describe(w, app)
    assert (g.group_state, g.assignment_epoch) == ("Empty", g.group_epoch)  # the target follows the last leave
    assert w.request(DeleteGroupsRequest(groups_names=[app]), 2).results[0].error_code == 0
    assert describe(w, app).error_code == Errors.GROUP_ID_NOT_FOUND


def test_initial_rebalance_delay_and_assignment_interval(w):
    app, source = unique("app"), unique("src")
    create_topic(w, source, 2)
    assert alter_group_config(w, app, "streams.initial.rebalance.delay.ms", "1500") == 0
    assert alter_group_config(w, app, "streams.assignment.interval.ms", "1000") == 0
    assert alter_group_config(w, app, "streams.assignment.interval.ms", "20000") == Errors.INVALID_CONFIG
    a = join(w, app, "a", word_count_topology(app, source), process="pa")
    b = join(w, app, "b", word_count_topology(app, source), process="pb")  # within the delay: one assignment
    for r in (a, b):
        assert tasks(r.active_tasks) == {} and (ASSIGNMENT_DELAYED, "Assignment delayed due to the configured "
                                                "initial rebalance delay.") in [(s.status_code, s.status_detail)
                                                                                for s in r.status]
    first = describe(w, app)
    assert first.assignment_epoch < first.group_epoch

    def assigned():
        g = describe(w, app)
        return g.assignment_epoch == g.group_epoch and g
    g = until(assigned, 10, "the delayed first assignment")  # computed when the delay ends, without a heartbeat
    assert sorted(len(sum(tasks(m.target_assignment.active_tasks).values(), [])) for m in g.members) == [2, 2]
    # a third member right after: the next assignment waits for the interval, then comes at a heartbeat
    c = join(w, app, "c", word_count_topology(app, source), process="pc")
    assert ASSIGNMENT_DELAYED in [s.status_code for s in c.status]
    state = {"c": c}

    def target_with_c():
        r = beat(w, app, "c", state["c"].member_epoch, ([], [], []))
        state["c"] = r
        return ASSIGNMENT_DELAYED not in [s.status_code for s in r.status] and describe(w, app)
    g = until(target_with_c, 10, "the next assignment after the interval")
    assert g.assignment_epoch == g.group_epoch and {m.member_id for m in g.members} == {"a", "b", "c"}
    assert any(tasks(m.target_assignment.active_tasks) for m in g.members if m.member_id == "c")


def test_session_timeout_from_the_group_config_fences_a_silent_member(w):
    app, source = unique("app"), unique("src")
    create_topic(w, source, 1)
    cfg = w.request(DescribeConfigsRequest(resources=[DescribeConfigsRequest.DescribeConfigsResource(
        resource_type=GROUP, resource_name=app, configuration_keys=None)]), 4).results[0]
    values = {c.name: c.value for c in cfg.configs}
    assert (values["streams.session.timeout.ms"], values["streams.heartbeat.interval.ms"],
            values["streams.num.standby.replicas"]) == ("45000", "5000", "0")
    assert alter_group_config(w, app, "streams.session.timeout.ms", "1000") == 0
    assert alter_group_config(w, app, "streams.heartbeat.interval.ms", "6000") == 0
    r = join(w, app, "m", word_count_topology(app, source))
    assert r.heartbeat_interval_ms == 6000
    until(lambda: describe(w, app).group_state == "Empty", 15, "the silent member fenced after 1 s")


def test_a_broker_restart_keeps_the_streams_group(tmp_path):
    with BrokerProcess(tmp_path / "data", config=NO_DELAYS) as b:
        with WireClient(b.bootstrap) as w:
            app, source = unique("app"), unique("src")
            create_topic(w, source, 2)
            a = join(w, app, "a", word_count_topology(app, source), process="pa")
            b1 = join(w, app, "b", word_count_topology(app, source), process="pb")
            a = beat(w, app, "a", a.member_epoch, owned_of(a))
            before = describe(w, app)
        b.restart()
        with WireClient(b.bootstrap) as w:
            after = until(lambda: (lambda g: g if g.error_code == 0 else None)(describe(w, app)), 15,
                          "the group loaded")
            assert after == before
            # the members carry on at their epochs: the restart changed nothing they hold
            assert beat(w, app, "b", b1.member_epoch, owned_of(b1)).error_code == 0
