"""ACLs on the share-group and consumer-group APIs (issue 12): KafkaApis' checks, KIP-932's table row by row.

One broker with StandardAuthorizer semantics, SASL/PLAIN users admin (super user), alice and bob.
Each test makes its own topic and group and grants what it needs through the super user's
AdminClient; protocol-level rows go over a SASL socket with the project codec.
"""
from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, ShareConsumer
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType, AdminClient,
                                   AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourcePatternType,
                                   ResourceType)

from protocol.errors import Errors
from protocol.messages.alter_share_group_offsets import AlterShareGroupOffsetsRequest as AlterReq
from protocol.messages.consumer_group_describe import ConsumerGroupDescribeRequest
from protocol.messages.consumer_group_heartbeat import ConsumerGroupHeartbeatRequest
from protocol.messages.delete_groups import DeleteGroupsRequest
from protocol.messages.delete_share_group_offsets import DeleteShareGroupOffsetsRequest as DeleteReq
from protocol.messages.delete_share_group_state import DeleteShareGroupStateRequest
from protocol.messages.describe_groups import DescribeGroupsRequest
from protocol.messages.describe_share_group_offsets import DescribeShareGroupOffsetsRequest as DescReq
from protocol.messages.heartbeat import HeartbeatRequest
from protocol.messages.initialize_share_group_state import InitializeShareGroupStateRequest
from protocol.messages.join_group import JoinGroupRequest
from protocol.messages.leave_group import LeaveGroupRequest
from protocol.messages.list_groups import ListGroupsRequest
from protocol.messages.offset_commit import OffsetCommitRequest
from protocol.messages.offset_delete import OffsetDeleteRequest
from protocol.messages.offset_fetch import OffsetFetchRequest
from protocol.messages.read_share_group_state import ReadShareGroupStateRequest
from protocol.messages.read_share_group_state_summary import ReadShareGroupStateSummaryRequest
from protocol.messages.share_acknowledge import ShareAcknowledgeRequest
from protocol.messages.share_fetch import ShareFetchRequest
from protocol.messages.share_group_describe import ShareGroupDescribeRequest
from protocol.messages.share_group_heartbeat import ShareGroupHeartbeatRequest
from protocol.messages.sync_group import SyncGroupRequest
from protocol.messages.write_share_group_state import WriteShareGroupStateRequest
from tests.integration.test_security_acls import broker, pki  # noqa: F401 - the same SASL + ACL broker, our own
from tests.support import client_security, share_member_assigned, unique, until, wire_plain_login
from tests.wire import WireClient

OK, TOPIC_DENIED = Errors.NONE, Errors.TOPIC_AUTHORIZATION_FAILED
GROUP_DENIED, CLUSTER_DENIED = Errors.GROUP_AUTHORIZATION_FAILED, Errors.CLUSTER_AUTHORIZATION_FAILED
READ, DESCRIBE, DELETE = AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE


@pytest.fixture(scope="module")
def admin(broker, pki):
    return AdminClient(client_security(broker, "SASL_PLAINTEXT", pki, "PLAIN", "admin"))


@pytest.fixture
def env(broker, pki, admin):
    """A fresh topic with 5 records, a share group starting at the earliest offset, and grant()."""
    topic, group = unique("t"), unique("g")
    admin.create_topics([NewTopic(topic, 1)])[topic].result(15)
    p = Producer(client_security(broker, "SASL_PLAINTEXT", pki, "PLAIN", "admin"))
    for i in range(5):
        p.produce(topic, b"v%d" % i)
    assert p.flush(15) == 0
    res = ConfigResource(ConfigResource.Type.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(15)

    def grant(user, op, rtype, name):
        binding = AclBinding(rtype, name, ResourcePatternType.LITERAL, f"User:{user}", "*", op,
                             AclPermissionType.ALLOW)
        admin.create_acls([binding])[binding].result(15)

    class Env:
        pass

    e = Env()
    e.topic, e.group, e.grant, e.broker, e.pki = topic, group, grant, broker, pki
    e.tid = topic_id_of(broker, topic)
    return e


def login(b, user) -> WireClient:
    w = WireClient(b.address("SASL_PLAINTEXT"))
    assert wire_plain_login(w, user, f"{user}-secret").error_code == 0
    return w


def topic_id_of(b, topic) -> bytes:
    from protocol.messages.metadata import MetadataRequest
    with login(b, "admin") as w:
        md = w.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)]), 12)
    return md.topics[0].topic_id


def every_topic(group: str) -> DescReq:
    """DescribeShareGroupOffsets for every topic of ``group`` (null Topics: the constructor turns None into [])."""
    g = DescReq.DescribeShareGroupOffsetsRequestGroup(group_id=group)
    g.topics = None
    return DescReq(groups=[g])


def share_poll(b, pki, user, group, topic, seconds=20.0, want=5):
    """Consume with a ShareConsumer as ``user``: (values, the KafkaError it raised or None)."""
    c = ShareConsumer({**client_security(b, "SASL_PLAINTEXT", pki, "PLAIN", user), "group.id": group,
                       "error_cb": lambda e: None})
    c.subscribe([topic])
    values, error = [], None
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline and len(values) < want and error is None:
            try:
                for m in c.poll(0.5) or []:
                    if m.error() is None:
                        values.append(m.value())
                    else:
                        error = m.error()
            except KafkaException as e:
                error = e.args[0]
        if values:
            c.commit_sync()
    finally:
        c.close()
    return values, error


# ------------------------------------------------------------------ real clients
def test_share_consumer_needs_read_on_the_group_and_the_topic(env):
    b, pki = env.broker, env.pki
    env.grant("alice", READ, ResourceType.GROUP, env.group)
    values, error = share_poll(b, pki, "alice", env.group, env.topic)
    assert values == [] and error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    env.grant("alice", READ, ResourceType.TOPIC, env.topic)
    values, error = share_poll(b, pki, "alice", env.group, env.topic)
    assert error is None and sorted(values) == [b"v%d" % i for i in range(5)]
    values, error = share_poll(b, pki, "bob", env.group, env.topic)  # bob: no READ on the group
    assert values == [] and error is not None and error.code() == KafkaError.GROUP_AUTHORIZATION_FAILED


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_consumer_group_needs_read_on_the_group(env, protocol):
    b, pki = env.broker, env.pki
    env.grant("alice", READ, ResourceType.TOPIC, env.topic)
    env.grant("alice", DESCRIBE, ResourceType.GROUP, env.group)  # FindCoordinator passes, READ does not

    def consume():
        c = Consumer({**client_security(b, "SASL_PLAINTEXT", pki, "PLAIN", "alice"), "group.id": env.group,
                      "group.protocol": protocol, "auto.offset.reset": "earliest", "error_cb": lambda e: None})
        c.subscribe([env.topic])
        values, error = [], None
        deadline = time.monotonic() + 20
        try:
            while time.monotonic() < deadline and len(values) < 5 and error is None:
                m = c.poll(0.5)
                if m is not None:
                    if m.error() is None:
                        values.append(m.value())
                    elif m.error().code() != KafkaError._PARTITION_EOF:
                        error = m.error()
        finally:
            c.close()
        return values, error

    values, error = consume()
    assert values == [] and error is not None
    # classic: the JoinGroup error; KIP-848: librdkafka makes the heartbeat's error fatal (_FATAL, named)
    assert error.code() == KafkaError.GROUP_AUTHORIZATION_FAILED or \
        (error.code() == KafkaError._FATAL and "Group authorization failed" in error.str())
    env.grant("alice", READ, ResourceType.GROUP, env.group)
    values, error = consume()
    assert error is None and values == [b"v%d" % i for i in range(5)]


# ------------------------------------------------------------------ KIP-932's table on the wire
def test_share_group_heartbeat_read_group_describe_topics(env):
    hb = ShareGroupHeartbeatRequest(group_id=env.group, member_id=unique("m"), member_epoch=0,
                                    subscribed_topic_names=[env.topic])
    with login(env.broker, "alice") as w:
        assert w.request(hb, 1).error_code == GROUP_DENIED
        env.grant("alice", READ, ResourceType.GROUP, env.group)
        assert w.request(hb, 1).error_code == TOPIC_DENIED  # DESCRIBE on the subscribed topic
        env.grant("alice", DESCRIBE, ResourceType.TOPIC, env.topic)
        r = w.request(hb, 1)
        assert r.error_code == OK and r.member_epoch > 0


def _fetch(group, member, tid, epoch, acks=None):
    part = ShareFetchRequest.FetchPartition(partition_index=0, acknowledgement_batches=acks or [])
    return ShareFetchRequest(group_id=group, member_id=member, share_session_epoch=epoch, max_wait_ms=2000,
                             min_bytes=1, max_bytes=1 << 20, max_records=100, batch_size=100,
                             topics=[ShareFetchRequest.FetchTopic(topic_id=tid, partitions=[part])])


def test_share_fetch_and_acknowledge_need_read_group_and_read_topic(env):
    env.grant("alice", READ, ResourceType.GROUP, env.group)
    env.grant("alice", DESCRIBE, ResourceType.TOPIC, env.topic)  # enough to join, not to fetch
    member = unique("m")
    with login(env.broker, "alice") as w, login(env.broker, "bob") as bob:
        share_member_assigned(w, env.group, member, env.topic, env.tid)
        # bob has no READ on the group: the whole request fails, nothing is fetched
        assert bob.request(_fetch(env.group, member, env.tid, 0), 1).error_code == GROUP_DENIED
        ack = ShareAcknowledgeRequest(group_id=env.group, member_id=member, share_session_epoch=1, topics=[])
        assert bob.request(ack, 1).error_code == GROUP_DENIED
        # alice may read the group but not the topic: the partition is answered TOPIC_AUTHORIZATION_FAILED
        r = w.request(_fetch(env.group, member, env.tid, 0), 1)
        assert r.error_code == OK
        (p,) = [p for t in r.responses for p in t.partitions]
        assert (p.error_code, p.acquired_records) == (TOPIC_DENIED, [])
        env.grant("alice", READ, ResourceType.TOPIC, env.topic)
        r = w.request(_fetch(env.group, member, env.tid, 0), 1)  # a new session: the partition is fetched
        (p,) = [p for t in r.responses for p in t.partitions]
        assert p.error_code == OK and [(a.first_offset, a.last_offset) for a in p.acquired_records] == [(0, 4)]


def test_share_acknowledge_for_an_unreadable_topic_is_not_applied(env, admin):
    env.grant("alice", READ, ResourceType.GROUP, env.group)
    env.grant("alice", READ, ResourceType.TOPIC, env.topic)
    member = unique("m")
    batch = ShareAcknowledgeRequest.AcknowledgementBatch(first_offset=0, last_offset=4, acknowledge_types=[1])

    def ack(w, epoch):
        req = ShareAcknowledgeRequest(group_id=env.group, member_id=member, share_session_epoch=epoch, topics=[
            ShareAcknowledgeRequest.AcknowledgeTopic(topic_id=env.tid, partitions=[
                ShareAcknowledgeRequest.AcknowledgePartition(partition_index=0, acknowledgement_batches=[batch])])])
        r = w.request(req, 1)
        assert r.error_code == OK
        return [p.error_code for t in r.responses for p in t.partitions]

    with login(env.broker, "alice") as w:
        share_member_assigned(w, env.group, member, env.topic, env.tid)
        r = w.request(_fetch(env.group, member, env.tid, 0), 1)
        assert [(a.first_offset, a.last_offset) for t in r.responses for p in t.partitions
                for a in p.acquired_records] == [(0, 4)]
        deny = AclBinding(ResourceType.TOPIC, env.topic, ResourcePatternType.LITERAL, "User:alice", "*", READ,
                          AclPermissionType.DENY)
        admin.create_acls([deny])[deny].result(15)
        assert ack(w, 1) == [TOPIC_DENIED]
        flt = AclBindingFilter(ResourceType.TOPIC, env.topic, ResourcePatternType.LITERAL, "User:alice", "*", READ,
                               AclPermissionType.DENY)
        assert admin.delete_acls([flt])[flt].result(15) == [deny]
        assert ack(w, 2) == [OK]  # ACL changes apply at once; ACCEPT again would fail had the first been applied
        # READ revoked while the share session is open: the partition is answered TOPIC_AUTHORIZATION_FAILED
        # although the (incremental) fetch does not name it, and nothing is fetched from it
        admin.create_acls([deny])[deny].result(15)
        produce = Producer(client_security(env.broker, "SASL_PLAINTEXT", env.pki, "PLAIN", "admin"))
        produce.produce(env.topic, b"more")
        assert produce.flush(15) == 0
        incremental = ShareFetchRequest(group_id=env.group, member_id=member, share_session_epoch=3, max_wait_ms=500,
                                        min_bytes=1, max_bytes=1 << 20, max_records=100, batch_size=100, topics=[])
        r = w.request(incremental, 1)
        assert r.error_code == OK
        assert [(p.partition_index, p.error_code, p.acquired_records) for t in r.responses for p in t.partitions] \
            == [(0, TOPIC_DENIED, [])]


def test_share_group_describe_needs_describe_on_group_and_assigned_topics(env):
    env.grant("alice", READ, ResourceType.GROUP, env.group)
    env.grant("alice", READ, ResourceType.TOPIC, env.topic)
    with login(env.broker, "alice") as w:
        share_member_assigned(w, env.group, unique("m"), env.topic, env.tid)
    req = ShareGroupDescribeRequest(group_ids=[env.group], include_authorized_operations=True)
    with login(env.broker, "bob") as w:
        (g,) = w.request(req, 1).groups
        assert (g.error_code, g.members) == (GROUP_DENIED, [])
        env.grant("bob", DESCRIBE, ResourceType.GROUP, env.group)
        (g,) = w.request(req, 1).groups  # the member's assignment names a topic bob may not describe
        assert (g.error_code, g.members) == (TOPIC_DENIED, [])
        env.grant("bob", DESCRIBE, ResourceType.TOPIC, env.topic)
        (g,) = w.request(req, 1).groups
        assert g.error_code == OK and len(g.members) == 1
        assert g.authorized_operations == 1 << 8  # DESCRIBE only (AclOperation code 8)


def test_describe_share_group_offsets_needs_describe_on_group_and_topics(env):
    env.grant("alice", READ, ResourceType.GROUP, env.group)
    env.grant("alice", READ, ResourceType.TOPIC, env.topic)
    assert share_poll(env.broker, env.pki, "alice", env.group, env.topic)[0]  # the share partition exists
    named = DescReq(groups=[DescReq.DescribeShareGroupOffsetsRequestGroup(group_id=env.group, topics=[
        DescReq.DescribeShareGroupOffsetsRequestTopic(topic_name=env.topic, partitions=[0])])])
    every = every_topic(env.group)
    with login(env.broker, "bob") as w:
        (g,) = w.request(named, 1).groups
        assert (g.error_code, g.topics) == (GROUP_DENIED, [])
        env.grant("bob", DESCRIBE, ResourceType.GROUP, env.group)
        (g,) = w.request(named, 1).groups
        assert g.error_code == OK
        assert [(t.topic_name, p.error_code, p.start_offset) for t in g.topics for p in t.partitions] == \
            [(env.topic, TOPIC_DENIED, -1)]
        assert w.request(every, 1).groups[0].topics == []  # undescribable topics are left out
        env.grant("bob", DESCRIBE, ResourceType.TOPIC, env.topic)
        for req in (named, every):
            (g,) = w.request(req, 1).groups
            assert [(t.topic_name, p.error_code, p.lag) for t in g.topics for p in t.partitions] == \
                [(env.topic, OK, 0)]  # all five records were consumed


def test_alter_share_group_offsets_needs_read_on_group_and_topic(env):
    req = AlterReq(group_id=env.group, topics=[AlterReq.AlterShareGroupOffsetsRequestTopic(
        topic_name=env.topic, partitions=[AlterReq.AlterShareGroupOffsetsRequestPartition(partition_index=0,
                                                                                          start_offset=2)])])
    with login(env.broker, "bob") as w:
        r = w.request(req, 0)
        assert (r.error_code, r.responses) == (GROUP_DENIED, [])
        env.grant("bob", READ, ResourceType.GROUP, env.group)
        r = w.request(req, 0)
        assert r.error_code == OK
        assert [(t.topic_name, t.topic_id, p.error_code) for t in r.responses for p in t.partitions] == \
            [(env.topic, env.tid, TOPIC_DENIED)]
        env.grant("bob", READ, ResourceType.TOPIC, env.topic)
        r = w.request(req, 0)
        assert [p.error_code for t in r.responses for p in t.partitions] == [OK]
    with login(env.broker, "admin") as w:  # the new start offset is in place
        r = w.request(every_topic(env.group), 1)
        assert [p.start_offset for t in r.groups[0].topics for p in t.partitions] == [2]


def test_delete_share_group_offsets_needs_delete_on_group_and_read_on_topic(env):
    env.grant("alice", READ, ResourceType.GROUP, env.group)
    env.grant("alice", READ, ResourceType.TOPIC, env.topic)
    assert share_poll(env.broker, env.pki, "alice", env.group, env.topic)[0]
    req = DeleteReq(group_id=env.group, topics=[DeleteReq.DeleteShareGroupOffsetsRequestTopic(topic_name=env.topic)])
    with login(env.broker, "bob") as w:
        r = w.request(req, 0)
        assert (r.error_code, r.responses) == (GROUP_DENIED, [])
        env.grant("bob", DELETE, ResourceType.GROUP, env.group)
        r = w.request(req, 0)
        assert r.error_code == OK and [(t.topic_name, t.error_code) for t in r.responses] == [(env.topic, TOPIC_DENIED)]
        env.grant("bob", READ, ResourceType.TOPIC, env.topic)
        r = w.request(req, 0)
        assert r.error_code == OK and [(t.topic_name, t.error_code) for t in r.responses] == [(env.topic, OK)]


def _state_requests(group, tid):
    return [
        (InitializeShareGroupStateRequest(group_id=group, topics=[InitializeShareGroupStateRequest.InitializeStateData(
            topic_id=tid, partitions=[InitializeShareGroupStateRequest.PartitionData(
                partition=0, state_epoch=1, start_offset=0)])]), 0),
        (ReadShareGroupStateRequest(group_id=group, topics=[ReadShareGroupStateRequest.ReadStateData(
            topic_id=tid, partitions=[ReadShareGroupStateRequest.PartitionData(partition=0, leader_epoch=0)])]), 0),
        (WriteShareGroupStateRequest(group_id=group, topics=[WriteShareGroupStateRequest.WriteStateData(
            topic_id=tid, partitions=[WriteShareGroupStateRequest.PartitionData(
                partition=0, state_epoch=1, leader_epoch=0, start_offset=1, state_batches=[])])]), 0),
        (ReadShareGroupStateSummaryRequest(group_id=group, topics=[
            ReadShareGroupStateSummaryRequest.ReadStateSummaryData(topic_id=tid, partitions=[
                ReadShareGroupStateSummaryRequest.PartitionData(partition=0, leader_epoch=0)])]), 0),
        (DeleteShareGroupStateRequest(group_id=group, topics=[DeleteShareGroupStateRequest.DeleteStateData(
            topic_id=tid, partitions=[DeleteShareGroupStateRequest.PartitionData(partition=0)])]), 0),
    ]


def test_share_state_rpcs_need_cluster_action(env):
    codes = {}
    for user in ("alice", "bob"):
        with login(env.broker, user) as w:
            codes[user] = [[p.error_code for r in w.request(req, v).results for p in r.partitions]
                           for req, v in _state_requests(env.group, env.tid)]
        if user == "alice":
            assert codes["alice"] == [[CLUSTER_DENIED]] * 5
            env.grant("bob", AclOperation.CLUSTER_ACTION, ResourceType.BROKER, "kafka-cluster")
    assert codes["bob"] == [[OK]] * 5


# ------------------------------------------------------------------ consumer-group APIs on the wire
def test_classic_group_apis_need_read_on_the_group(env):
    join = JoinGroupRequest(group_id=env.group, session_timeout_ms=10000, rebalance_timeout_ms=10000,
                            member_id="", protocol_type="consumer",
                            protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")])
    with login(env.broker, "alice") as w:
        assert w.request(join, 5).error_code == GROUP_DENIED
        sync = SyncGroupRequest(group_id=env.group, generation_id=1, member_id="m", assignments=[])
        assert w.request(sync, 3).error_code == GROUP_DENIED
        assert w.request(HeartbeatRequest(group_id=env.group, generation_id=1, member_id="m"), 3).error_code \
            == GROUP_DENIED
        r = w.request(LeaveGroupRequest(group_id=env.group, members=[
            LeaveGroupRequest.MemberIdentity(member_id="m")]), 4)
        assert (r.error_code, r.members) == (GROUP_DENIED, [])
        env.grant("alice", READ, ResourceType.GROUP, env.group)
        r = w.request(join, 5)
        assert r.error_code == Errors.MEMBER_ID_REQUIRED  # past authorization: the protocol goes on


def test_consumer_group_heartbeat_and_describe(env):
    member = unique("m")
    hb = ConsumerGroupHeartbeatRequest(group_id=env.group, member_id=member, member_epoch=0, rebalance_timeout_ms=5000,
                                       subscribed_topic_names=[env.topic], topic_partitions=[])
    describe = ConsumerGroupDescribeRequest(group_ids=[env.group], include_authorized_operations=True)
    with login(env.broker, "alice") as w:
        assert w.request(hb, 1).error_code == GROUP_DENIED
        env.grant("alice", READ, ResourceType.GROUP, env.group)
        assert w.request(hb, 1).error_code == TOPIC_DENIED
        env.grant("alice", DESCRIBE, ResourceType.TOPIC, env.topic)
        assert w.request(hb, 1).error_code == OK
        until(lambda: w.request(describe, 1).groups[0].members[0].assignment.topic_partitions, 10, "assignment")
        (g,) = w.request(describe, 1).groups
        assert g.error_code == OK and g.authorized_operations == (1 << 3) | (1 << 8)  # READ, DESCRIBE
    with login(env.broker, "bob") as w:
        assert w.request(describe, 1).groups[0].error_code == GROUP_DENIED
        env.grant("bob", DESCRIBE, ResourceType.GROUP, env.group)
        (g,) = w.request(describe, 1).groups
        assert (g.error_code, g.members) == (TOPIC_DENIED, [])


def test_offset_apis_list_describe_and_delete_groups(env):
    env.grant("alice", READ, ResourceType.GROUP, env.group)
    other = unique("t")
    commit = OffsetCommitRequest(group_id=env.group, generation_id_or_member_epoch=-1, member_id="", topics=[
        OffsetCommitRequest.OffsetCommitRequestTopic(name=name, partitions=[
            OffsetCommitRequest.OffsetCommitRequestPartition(partition_index=0, committed_offset=3)])
        for name in (env.topic, other)])
    fetch = OffsetFetchRequest(groups=[OffsetFetchRequest.OffsetFetchRequestGroup(group_id=env.group, topics=[
        OffsetFetchRequest.OffsetFetchRequestTopics(name=env.topic, partition_indexes=[0])])])
    with login(env.broker, "bob") as w:  # no ACL on the group
        r = w.request(commit, 8)
        assert {p.error_code for t in r.topics for p in t.partitions} == {GROUP_DENIED}
        assert w.request(fetch, 8).groups[0].error_code == GROUP_DENIED
        assert w.request(DescribeGroupsRequest(groups=[env.group]), 5).groups[0].error_code == GROUP_DENIED
        assert w.request(DeleteGroupsRequest(groups_names=[env.group]), 2).results[0].error_code == GROUP_DENIED
        od = OffsetDeleteRequest(group_id=env.group, topics=[OffsetDeleteRequest.OffsetDeleteRequestTopic(
            name=env.topic, partitions=[OffsetDeleteRequest.OffsetDeleteRequestPartition(partition_index=0)])])
        assert w.request(od, 0).error_code == GROUP_DENIED
    with login(env.broker, "alice") as w:  # READ on the group, nothing on the topic
        r = w.request(commit, 8)
        assert {t.name: [p.error_code for p in t.partitions] for t in r.topics} == \
            {env.topic: [TOPIC_DENIED], other: [TOPIC_DENIED]}  # an unknown topic is not disclosed either
        (g,) = w.request(fetch, 8).groups
        assert [(t.name, p.error_code) for t in g.topics for p in t.partitions] == [(env.topic, TOPIC_DENIED)]
        env.grant("alice", READ, ResourceType.TOPIC, env.topic)
        r = w.request(commit, 8)
        assert {t.name: [p.error_code for p in t.partitions] for t in r.topics} == \
            {env.topic: [OK], other: [TOPIC_DENIED]}
        assert env.group in {g.group_id for g in w.request(ListGroupsRequest(), 4).groups}  # READ implies DESCRIBE
        (g,) = w.request(fetch, 8).groups
        assert [(p.error_code, p.committed_offset) for t in g.topics for p in t.partitions] == [(OK, 3)]
        every = OffsetFetchRequest(groups=[OffsetFetchRequest.OffsetFetchRequestGroup(group_id=env.group)])
        every.groups[0].topics = None  # null: all the group's offsets (the constructor makes None [])
        (g,) = w.request(every, 8).groups
        assert [(t.name, p.committed_offset) for t in g.topics for p in t.partitions] == [(env.topic, 3)]
        assert w.request(od, 0).error_code == GROUP_DENIED  # OffsetDelete needs DELETE on the group
        env.grant("alice", DELETE, ResourceType.GROUP, env.group)
        r = w.request(od, 0)
        assert r.error_code == OK and [p.error_code for t in r.topics for p in t.partitions] == [OK]
    with login(env.broker, "bob") as w:  # the group exists now, still hidden from bob
        assert env.group not in {g.group_id for g in w.request(ListGroupsRequest(), 4).groups}
        assert w.request(DescribeGroupsRequest(groups=[env.group]), 5).groups[0].error_code == GROUP_DENIED
    with login(env.broker, "alice") as w:
        assert w.request(DeleteGroupsRequest(groups_names=[env.group]), 2).results[0].error_code == OK
