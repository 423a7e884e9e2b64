"""The admin and operations APIs of issue 27: AlterConfigs (legacy), DescribeLogDirs,
AlterReplicaLogDirs, OffsetForLeaderEpoch, DescribeTopicPartitions, ElectLeaders,
Alter/ListPartitionReassignments, DescribeQuorum, UpdateFeatures, UnregisterBroker, UnregisterController,
AddRaftVoter and RemoveRaftVoter, each at every version we serve
over the wire (tests/wire.py), and through the clients that have them (kafka-python's admin has all
of them, aiokafka's alter_configs, confluent-kafka's describe_topics / elect_leaders).
"""
from __future__ import annotations

import asyncio
import os
import uuid

import pytest
from confluent_kafka import Producer

from broker.testing import BrokerProcess
from protocol.errors import Errors
from protocol.messages.add_raft_voter import AddRaftVoterRequest
from protocol.messages.alter_configs import AlterConfigsRequest
from protocol.messages.alter_partition_reassignments import AlterPartitionReassignmentsRequest
from protocol.messages.alter_replica_log_dirs import AlterReplicaLogDirsRequest
from protocol.messages.api_versions import ApiVersionsRequest
from protocol.messages.create_topics import CreateTopicsRequest
from protocol.messages.delete_records import DeleteRecordsRequest
from protocol.messages.describe_configs import DescribeConfigsRequest
from protocol.messages.describe_log_dirs import DescribeLogDirsRequest
from protocol.messages.describe_quorum import DescribeQuorumRequest
from protocol.messages.describe_topic_partitions import DescribeTopicPartitionsRequest
from protocol.messages.elect_leaders import ElectLeadersRequest
from protocol.messages.list_partition_reassignments import ListPartitionReassignmentsRequest
from protocol.messages.metadata import MetadataRequest
from protocol.messages.offset_for_leader_epoch import OffsetForLeaderEpochRequest
from protocol.messages.remove_raft_voter import RemoveRaftVoterRequest
from protocol.messages.unregister_broker import UnregisterBrokerRequest
from protocol.messages.unregister_controller import UnregisterControllerRequest
from protocol.messages.update_features import UpdateFeaturesRequest
from tests.wire import WireClient

TOPIC, BROKER, BROKER_LOGGER, GROUP = 2, 4, 8, 32


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("ops"))
    b.start()
    yield b
    b.stop()


@pytest.fixture
def wire(broker):
    with WireClient(broker.bootstrap) as w:
        yield w


def create_topic(w: WireClient, partitions: int = 1, prefix: str = "ops", configs=None) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    C = CreateTopicsRequest
    cfgs = [C.CreatableTopicConfig(name=k, value=v) for k, v in (configs or {}).items()]
    resp = w.request(C(topics=[C.CreatableTopic(name=name, num_partitions=partitions, replication_factor=1,
                                                 configs=cfgs)], timeout_ms=10000), 7)
    assert resp.topics[0].error_code == 0, resp
    return name


def produce(bootstrap: str, topic: str, n: int, partition: int = 0, size: int = 100) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(n):
        p.produce(topic, value=b"x" * size, key=str(i).encode(), partition=partition)
    assert p.flush(15) == 0


def topic_configs(w: WireClient, name: str) -> dict[str, tuple[str, int]]:
    """The topic's configs with their sources (1 = the topic's own override)."""
    R = DescribeConfigsRequest
    resp = w.request(R(resources=[R.DescribeConfigsResource(resource_type=TOPIC, resource_name=name)]), 4)
    return {c.name: (c.value, c.config_source) for c in resp.results[0].configs}


# ----------------------------------------------------------------------------- AlterConfigs (33)
def alter_configs(w, version, *resources, validate_only=False):
    R = AlterConfigsRequest
    res = [R.AlterConfigsResource(resource_type=t, resource_name=n,
                                  configs=[R.AlterableConfig(name=k, value=v) for k, v in cfgs])
           for t, n, cfgs in resources]
    return [(r.error_code, r.error_message) for r in w.request(R(resources=res, validate_only=validate_only),
                                                                 version).responses]


@pytest.mark.parametrize("version", [0, 1, 2])
def test_alter_configs_replaces_the_whole_set_of_topic_overrides(wire, version):
    name = create_topic(wire, configs={"retention.ms": "5000000", "cleanup.policy": "compact"})
    assert alter_configs(wire, version, (TOPIC, name, [("segment.bytes", "2097152")])) == [(0, None)]
    got = topic_configs(wire, name)
    assert got["segment.bytes"] == ("2097152", 1)
    assert got["retention.ms"][1] != 1 and got["cleanup.policy"] == ("delete", 5), got  # left out: deleted
    # validate_only changes nothing; an invalid set changes nothing either
    assert alter_configs(wire, version, (TOPIC, name, [("retention.ms", "7")]), validate_only=True) == [(0, None)]
    code, _ = alter_configs(wire, version, (TOPIC, name, [("retention.ms", "7"), ("cleanup.policy", "bogus")]))[0]
    assert code == Errors.INVALID_CONFIG
    code, _ = alter_configs(wire, version, (TOPIC, name, [("no.such.config", "1")]))[0]
    assert code == Errors.INVALID_CONFIG
    got = topic_configs(wire, name)
    assert got["segment.bytes"] == ("2097152", 1) and got["retention.ms"][1] != 1
    # an empty set deletes every override
    assert alter_configs(wire, version, (TOPIC, name, [])) == [(0, None)]
    assert all(src != 1 for _, src in topic_configs(wire, name).values())


def test_alter_configs_refusals_as_kafka_preprocess(broker, wire):
    name = create_topic(wire)
    dup = alter_configs(wire, 2, (TOPIC, name, [("retention.ms", "1000")]), (TOPIC, name, [("retention.ms", "2000")]))
    assert dup == [(Errors.INVALID_REQUEST, "Each resource must appear at most once.")] * 2
    assert alter_configs(wire, 2, (TOPIC, name, [("retention.ms", "1"), ("retention.ms", "2")])) == \
        [(Errors.INVALID_REQUEST, "Error due to duplicate config keys")]
    assert alter_configs(wire, 2, (TOPIC, name, [("retention.ms", None), ("segment.ms", None)])) == \
        [(Errors.INVALID_REQUEST, "Null value not supported for : retention.ms, segment.ms")]
    assert alter_configs(wire, 2, (BROKER_LOGGER, "1", [("kafka", "DEBUG")])) == \
        [(Errors.INVALID_REQUEST, "Unknown resource type 8")]
    code, msg = alter_configs(wire, 2, (BROKER, "7", [("log.retention.ms", "1000")]))[0]
    assert code == Errors.INVALID_REQUEST and "Unexpected broker id" in msg
    code, _ = alter_configs(wire, 2, (TOPIC, "no-such-topic-here", [("retention.ms", "1000")]))[0]
    assert code == Errors.UNKNOWN_TOPIC_OR_PARTITION
    code, _ = alter_configs(wire, 2, (BROKER, "", [("num.partitions", "4")]))[0]
    assert code == Errors.INVALID_REQUEST  # not a dynamic config


def test_alter_configs_group_set(wire):
    group = f"g-{uuid.uuid4().hex[:8]}"

    def overrides():
        R = DescribeConfigsRequest
        r = wire.request(R(resources=[R.DescribeConfigsResource(resource_type=GROUP, resource_name=group)]), 4)
        return {c.name: c.value for c in r.results[0].configs if c.config_source == 8}  # GROUP_CONFIG

    both = [("share.auto.offset.reset", "earliest"), ("share.record.lock.duration.ms", "20000")]
    assert alter_configs(wire, 2, (GROUP, group, both)) == [(0, None)]
    assert overrides() == dict(both)
    assert alter_configs(wire, 2, (GROUP, group, [("share.record.lock.duration.ms", "25000")])) == [(0, None)]
    assert overrides() == {"share.record.lock.duration.ms": "25000"}
    code, _ = alter_configs(wire, 2, (GROUP, group, [("share.record.lock.duration.ms", "x")]))[0]
    assert code == Errors.INVALID_CONFIG and overrides() == {"share.record.lock.duration.ms": "25000"}
    assert alter_configs(wire, 2, (GROUP, group, [])) == [(0, None)] and overrides() == {}


def test_alter_configs_broker_dynamic_set(broker_factory):
    b = broker_factory()
    with WireClient(b.bootstrap) as w:
        assert alter_configs(w, 1, (BROKER, "1", [("log.retention.ms", "3600000"),
                                                   ("log.segment.bytes", "2097152")])) == [(0, None)]
        assert alter_configs(w, 1, (BROKER, "", [("log.segment.bytes", "4194304")])) == [(0, None)]
    b.kill9()
    b.start()
    with WireClient(b.bootstrap) as w:
        R = DescribeConfigsRequest
        resp = w.request(R(resources=[R.DescribeConfigsResource(resource_type=BROKER, resource_name="1")]), 4)
        got = {c.name: (c.value, c.config_source) for c in resp.results[0].configs}
    assert got["log.segment.bytes"] == ("4194304", 3)  # DYNAMIC_DEFAULT_BROKER_CONFIG
    assert got["log.retention.ms"][1] != 3  # left out of the second set: no longer dynamic


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_kafka_python_alter_configs(broker, wire):
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

    name = create_topic(wire)
    kp = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10000)
    try:
        out = kp.alter_configs([ConfigResource(ConfigResourceType.TOPIC, name, configs={"retention.ms": "4000000"})],
                               incremental=False)
        assert out == {"topic": {name: "OK"}}, out
        assert topic_configs(wire, name)["retention.ms"] == ("4000000", 1)
        out = kp.alter_configs([ConfigResource(ConfigResourceType.BROKER, "1",
                                               configs={"log.cleaner.delete.retention.ms": "90000000"})],
                               incremental=False)
        assert out == {"broker": {"1": "OK"}}, out
    finally:
        kp.close()


def test_aiokafka_alter_configs(broker, wire):
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

    name = create_topic(wire, configs={"segment.ms": "3600000"})

    async def run():
        admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
        await admin.start()
        try:
            return await admin.alter_configs([
                ConfigResource(ConfigResourceType.TOPIC, name, {"retention.ms": "6000000"}),
                ConfigResource(ConfigResourceType.BROKER, "1", {"log.cleaner.delete.retention.ms": "80000000"})])
        finally:
            await admin.close()

    responses = asyncio.run(run())
    results = [r.to_object()["resources"] for r in responses]
    assert [[(x["error_code"], x["resource_name"]) for x in rs] for rs in results] == [[(0, name)], [(0, "1")]]
    got = topic_configs(wire, name)
    assert got["retention.ms"] == ("6000000", 1) and got["segment.ms"][1] != 1  # the whole set replaced


# ----------------------------------------------------------------------------- DescribeLogDirs (35)
def on_disk_bytes(data_dir, topic: str, partition: int) -> int:
    d = os.path.join(data_dir, f"{topic}-{partition}")
    return sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d) if f.endswith(".log"))


@pytest.mark.parametrize("version", [1, 2, 3, 4, 5])
def test_describe_log_dirs(broker, wire, version):
    name = create_topic(wire, partitions=2)
    other = create_topic(wire)
    produce(broker.bootstrap, name, 20, partition=1)
    R = DescribeLogDirsRequest
    req = R(topics=[R.DescribableLogDirTopic(topic=name, partitions=[0, 1, 9]),
                    R.DescribableLogDirTopic(topic="no-such-topic", partitions=[0])])
    resp = wire.request(req, version)
    assert resp.error_code == 0 and len(resp.results) == 1
    d = resp.results[0]
    assert d.error_code == 0 and d.log_dir == os.path.abspath(broker.data_dir)
    assert [t.name for t in d.topics] == [name]
    sizes = {p.partition_index: p.partition_size for p in d.topics[0].partitions}
    assert sizes == {0: 0, 1: on_disk_bytes(broker.data_dir, name, 1)} and sizes[1] > 20 * 100
    assert all(p.offset_lag == 0 and not p.is_future_key for p in d.topics[0].partitions)
    if version >= 4:
        st = os.statvfs(broker.data_dir)
        assert d.total_bytes == st.f_blocks * st.f_frsize and 0 < d.usable_bytes <= d.total_bytes
    else:
        assert d.total_bytes == -1 and d.usable_bytes == -1
    everything = R()
    everything.topics = None  # null: every partition
    names = {t.name for t in wire.request(everything, version).results[0].topics}
    assert {name, other, "__consumer_offsets"} <= names


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_kafka_python_log_dirs(broker, wire):
    from kafka.admin import KafkaAdminClient

    name = create_topic(wire, partitions=2)
    produce(broker.bootstrap, name, 5)
    kp = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10000)
    try:
        (entry,) = kp.describe_log_dirs()
        (d,) = entry["log_dirs"]
        parts = {t["name"]: t["partitions"] for t in d["topics"]}
        assert parts[name][0]["partition_size"] == on_disk_bytes(broker.data_dir, name, 0)
        out = kp.alter_replica_log_dirs({(name, 0, 1): d["log_dir"], (name, 1, 1): "/elsewhere"})
        assert {tpr.partition: err.errno for tpr, err in out.items()} == {0: 0, 1: Errors.LOG_DIR_NOT_FOUND}, out
    finally:
        kp.close()


# ----------------------------------------------------------------------------- AlterReplicaLogDirs (34)
@pytest.mark.parametrize("version", [1, 2])
def test_alter_replica_log_dirs(broker, wire, version):
    name = create_topic(wire, partitions=2)
    R = AlterReplicaLogDirsRequest
    here = os.path.abspath(broker.data_dir)
    req = R(dirs=[R.AlterReplicaLogDir(path=here, topics=[R.AlterReplicaLogDirTopic(name=name, partitions=[0]),
                                                          R.AlterReplicaLogDirTopic(name="nope", partitions=[0])]),
                  R.AlterReplicaLogDir(path="/somewhere/else", topics=[R.AlterReplicaLogDirTopic(name=name,
                                                                                                 partitions=[1])]),
                  R.AlterReplicaLogDir(path=here + "/", topics=[R.AlterReplicaLogDirTopic(name=name,
                                                                                          partitions=[5])])])
    resp = wire.request(req, version)
    got = {(t.topic_name, p.partition_index): p.error_code for t in resp.results for p in t.partitions}
    assert got == {(name, 0): 0, ("nope", 0): Errors.UNKNOWN_TOPIC_OR_PARTITION,
                   (name, 1): Errors.LOG_DIR_NOT_FOUND, (name, 5): Errors.LOG_DIR_NOT_FOUND}
    long_name = "l" * 249
    req = R(dirs=[R.AlterReplicaLogDir(path=here, topics=[R.AlterReplicaLogDirTopic(name=long_name, partitions=[0])])])
    assert wire.request(req, version).results[0].partitions[0].error_code == Errors.INVALID_TOPIC_EXCEPTION


# ----------------------------------------------------------------------------- OffsetForLeaderEpoch (23)
def epochs(w, version, topic, *parts, replica_id=-1):
    R = OffsetForLeaderEpochRequest
    req = R(replica_id=replica_id, topics=[R.OffsetForLeaderTopic(topic=topic, partitions=[
        R.OffsetForLeaderPartition(partition=p, current_leader_epoch=cur, leader_epoch=e) for p, cur, e in parts])])
    return [(p.error_code, p.leader_epoch, p.end_offset) for p in w.request(req, version).topics[0].partitions]


@pytest.mark.parametrize("version", [2, 3, 4])
def test_offset_for_leader_epoch(broker, wire, version):
    name = create_topic(wire, partitions=2)
    produce(broker.bootstrap, name, 7)
    assert epochs(wire, version, name, (0, 0, 0), (0, -1, 0), (1, 0, 0)) == [(0, 0, 7), (0, 0, 7), (0, 0, 0)]
    assert epochs(wire, version, name, (0, -1, 1), (0, -1, -1)) == [(0, -1, -1), (0, -1, -1)]
    assert epochs(wire, version, name, (0, 1, 0), (0, -5, 0)) == [(Errors.UNKNOWN_LEADER_EPOCH, -1, -1),
                                                                   (Errors.FENCED_LEADER_EPOCH, -1, -1)]
    assert epochs(wire, version, name, (7, -1, 0)) == [(Errors.UNKNOWN_TOPIC_OR_PARTITION, -1, -1)]
    assert epochs(wire, version, "no-such-topic", (0, -1, 0)) == [(Errors.UNKNOWN_TOPIC_OR_PARTITION, -1, -1)]
    # an epoch below the first known one: that epoch, ending where the log now starts
    D = DeleteRecordsRequest
    wire.request(D(topics=[D.DeleteRecordsTopic(name=name, partitions=[D.DeleteRecordsPartition(
        partition_index=0, offset=3)])], timeout_ms=5000), 2)
    assert epochs(wire, version, name, (0, -1, -2)) == [(0, -2, 3)]


def test_offset_for_leader_epoch_after_restart(broker_factory):
    """Batches are written with leader epoch 0 and nothing bumps it: after a crash and a clean
    restart the answer is the same, and matches the epoch Metadata and the batches carry."""
    b = broker_factory()
    with WireClient(b.bootstrap) as w:
        name = create_topic(w)
    produce(b.bootstrap, name, 11)
    for stop in (b.kill9, b.stop):
        stop()
        b.start()
        with WireClient(b.bootstrap) as w:
            assert epochs(w, 4, name, (0, 0, 0)) == [(0, 0, 11)]
    seg = [f for f in os.listdir(os.path.join(b.data_dir, f"{name}-0")) if f.endswith(".log")][0]
    with open(os.path.join(b.data_dir, f"{name}-0", seg), "rb") as f:
        first = f.read(61)
    assert int.from_bytes(first[12:16], "big") == 0  # the first batch's partition leader epoch


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_confluent_kafka_legacy_alter_configs(broker, wire):
    """librdkafka's (deprecated) AdminClient.alter_configs sends AlterConfigs: the whole set."""
    from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

    name = create_topic(wire, configs={"segment.ms": "3600000"})
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    res = ConfigResource(ResourceType.TOPIC, name, set_config={"retention.ms": "7000000"})
    assert admin.alter_configs([res])[res].result(15) is None
    got = topic_configs(wire, name)
    assert got["retention.ms"] == ("7000000", 1) and got["segment.ms"][1] != 1


# ----------------------------------------------------------------------------- DescribeTopicPartitions (75)
def describe_partitions(w, names, limit=2000, cursor=None):
    R = DescribeTopicPartitionsRequest
    req = R(topics=[R.TopicRequest(name=n) for n in names], response_partition_limit=limit,
            cursor=None if cursor is None else R.Cursor(topic_name=cursor[0], partition_index=cursor[1]))
    resp = w.request(req, 0)
    pages = [(t.name, t.error_code, [p.partition_index for p in t.partitions]) for t in resp.topics]
    nxt = None if resp.next_cursor is None else (resp.next_cursor.topic_name, resp.next_cursor.partition_index)
    return pages, nxt, resp


def test_describe_topic_partitions_pages_with_a_cursor(broker, wire):
    prefix = f"dtp-{uuid.uuid4().hex[:6]}"
    a = create_topic(wire, 3, prefix=prefix + "-a")
    b = create_topic(wire, 2, prefix=prefix + "-b")
    c = create_topic(wire, 1, prefix=prefix + "-c")
    names = [c, a, b, a]  # any order, a name twice: sorted, each once
    pages, nxt, resp = describe_partitions(wire, names)
    assert pages == [(a, 0, [0, 1, 2]), (b, 0, [0, 1]), (c, 0, [0])] and nxt is None
    t = resp.topics[0]
    assert not t.is_internal and t.topic_id != bytes(16) and t.topic_authorized_operations > 0
    p = t.partitions[0]
    assert (p.leader_id, p.leader_epoch, p.replica_nodes, p.isr_nodes, p.offline_replicas,
            p.eligible_leader_replicas, p.last_known_elr) == (1, 0, [1], [1], [], [], [])
    # pages of 2 partitions: the cursor walks through a, then b (ending exactly at b's end), then c
    walked, cursor = [], None
    for _ in range(10):
        pages, cursor, _ = describe_partitions(wire, names, limit=2, cursor=cursor)
        walked.append(pages)
        if cursor is None:
            break
    assert walked == [[(a, 0, [0, 1])], [(a, 0, [2]), (b, 0, [0])], [(b, 0, [1]), (c, 0, [0])]]
    pages, cursor, _ = describe_partitions(wire, [a, b], limit=3)
    assert pages == [(a, 0, [0, 1, 2])] and cursor == (b, 0)  # full at a's end: the cursor is b's start
    # unknown and illegal names take no room in a page; limit 0 counts as 1
    pages, cursor, _ = describe_partitions(wire, ["no-such-topic", "bad/name", c], limit=0)
    assert pages == [("bad/name", Errors.INVALID_TOPIC_EXCEPTION, []), (c, 0, [0])]
    assert cursor == ("no-such-topic", 0)
    pages, cursor, _ = describe_partitions(wire, ["no-such-topic", "bad/name", c], cursor=cursor)
    assert pages == [("no-such-topic", Errors.UNKNOWN_TOPIC_OR_PARTITION, [])] and cursor is None
    # a cursor outside the named topics, or with a negative partition: the whole request INVALID_REQUEST
    pages, _, _ = describe_partitions(wire, [a, b], cursor=(c, 0))
    assert pages == [(a, Errors.INVALID_REQUEST, []), (b, Errors.INVALID_REQUEST, [])]
    pages, _, _ = describe_partitions(wire, [a], cursor=(a, -1))
    assert pages == [(a, Errors.INVALID_REQUEST, [])]
    # every topic (an empty list) from a cursor on
    pages, _, _ = describe_partitions(wire, [], cursor=(b, 1))
    assert [p[:3] for p in pages[:2]] == [(b, 0, [1]), (c, 0, [0])]
    assert all(n > b for n, _, _ in pages[1:])


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_describe_topics_through_clients(broker, wire):
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AdminClient
    from kafka.admin import KafkaAdminClient

    name = create_topic(wire, 4)
    kp = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10000)
    try:
        out = kp.describe_topic_partitions([name], response_partition_limit=3)
        assert [p["partition_index"] for p in out["topics"][0]["partitions"]] == [0, 1, 2]
        assert out["next_cursor"]["topic_name"] == name and out["next_cursor"]["partition_index"] == 3
    finally:
        kp.close()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    desc = admin.describe_topics(TopicCollection([name]))[name].result(15)
    assert [p.id for p in desc.partitions] == [0, 1, 2, 3]
    assert all(p.leader.id == 1 and [r.id for r in p.isr] == [1] for p in desc.partitions)


# ----------------------------------------------------------------------------- ElectLeaders (43)
@pytest.mark.parametrize("version", [0, 1, 2])
def test_elect_leaders(broker, wire, version):
    name = create_topic(wire, 2)
    R = ElectLeadersRequest
    for election in ([0] if version == 0 else [0, 1]):
        req = R(election_type=election, topic_partitions=[R.TopicPartitions(topic=name, partitions=[0, 1, 5]),
                                                          R.TopicPartitions(topic="nope", partitions=[0])])
        resp = wire.request(req, version)
        got = [(r.topic, p.partition_id, p.error_code) for r in resp.replica_election_results for p in r.partition_result]
        assert got == [(name, 0, Errors.ELECTION_NOT_NEEDED), (name, 1, Errors.ELECTION_NOT_NEEDED),
                       (name, 5, Errors.UNKNOWN_TOPIC_OR_PARTITION), ("nope", 0, Errors.UNKNOWN_TOPIC_OR_PARTITION)]
        assert resp.error_code == 0
    every = R(election_type=0)
    every.topic_partitions = None
    resp = wire.request(every, version)
    assert name in [r.topic for r in resp.replica_election_results]
    assert all(not r.partition_result for r in resp.replica_election_results)
    if version >= 1:
        resp = wire.request(R(election_type=5, topic_partitions=[R.TopicPartitions(topic=name, partitions=[0])]), version)
        assert resp.error_code == Errors.UNKNOWN_SERVER_ERROR


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_elect_leaders_through_clients(broker, wire):
    from confluent_kafka import ElectionType, KafkaException, TopicPartition
    from confluent_kafka.admin import AdminClient
    from kafka.admin import KafkaAdminClient

    name = create_topic(wire, 2)
    kp = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10000)
    try:
        resp = kp.elect_leaders(0, {name: [0, 1]})  # ELECTION_NOT_NEEDED is no error to it
        assert [p.error_code for r in resp.replica_election_results for p in r.partition_result] == [84, 84]
    finally:
        kp.close()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    try:
        result = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(name, 0)]).result(15)
        codes = {tp.partition: (tp.error.code() if tp.error else 0) for tp in result}
    except KafkaException as e:  # older librdkafka: the partition's error raised
        codes = {0: e.args[0].code()}
    assert codes == {0: Errors.ELECTION_NOT_NEEDED}


# ----------------------------------------------------------------------------- reassignments (45, 46)
@pytest.mark.parametrize("version", [0, 1])
def test_alter_partition_reassignments(broker, wire, version):
    name = create_topic(wire, 2)
    R = AlterPartitionReassignmentsRequest
    cases = [(0, [1]), (1, None), (0, [2]), (0, []), (0, [1, 1]), (7, [1])]
    req = R(topics=[R.ReassignableTopic(name=name, partitions=[R.ReassignablePartition(partition_index=p, replicas=r)
                                                               for p, r in cases]),
                    R.ReassignableTopic(name="nope", partitions=[R.ReassignablePartition(partition_index=0,
                                                                                         replicas=[1])])])
    resp = wire.request(req, version)
    got = [(t.name, p.partition_index, p.error_code) for t in resp.responses for p in t.partitions]
    assert got == [(name, 0, 0), (name, 1, Errors.NO_REASSIGNMENT_IN_PROGRESS),
                   (name, 0, Errors.INVALID_REPLICA_ASSIGNMENT), (name, 0, Errors.INVALID_REPLICA_ASSIGNMENT),
                   (name, 0, Errors.INVALID_REPLICA_ASSIGNMENT), (name, 7, Errors.UNKNOWN_TOPIC_OR_PARTITION),
                   ("nope", 0, Errors.UNKNOWN_TOPIC_OR_PARTITION)]
    assert "no such broker is registered" in resp.responses[0].partitions[2].error_message
    assert resp.error_code == 0 and resp.responses[0].partitions[0].error_message is None
    L = ListPartitionReassignmentsRequest
    listed = wire.request(L(topics=[L.ListPartitionReassignmentsTopics(name=name, partition_indexes=[0, 1])]), 0)
    assert listed.error_code == 0 and listed.topics == []
    every = L()
    every.topics = None
    assert wire.request(every, 0).topics == []


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_reassignments_through_kafka_python(broker, wire):
    from kafka import TopicPartition
    from kafka.admin import KafkaAdminClient

    name = create_topic(wire)
    kp = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10000)
    try:
        out = kp.alter_partition_reassignments({TopicPartition(name, 0): [1], TopicPartition(name, 1): [1]})
        assert {tp.partition: err and err.errno for tp, err in out.items()} == {0: None, 1: 3}, out
        assert kp.list_partition_reassignments() == {}
    finally:
        kp.close()


# ----------------------------------------------------------------------------- DescribeQuorum (55)
@pytest.mark.parametrize("version", [0, 1, 2])
def test_describe_quorum(broker, wire, version):
    R = DescribeQuorumRequest
    req = R(topics=[R.TopicData(topic_name="__cluster_metadata", partitions=[R.PartitionData(partition_index=0)])])
    resp = wire.request(req, version)
    assert resp.error_code == 0
    (t,) = resp.topics
    (p,) = t.partitions
    assert (t.topic_name, p.partition_index, p.error_code, p.leader_id, p.leader_epoch) == \
        ("__cluster_metadata", 0, 0, 1, 1)
    (v,) = p.current_voters
    assert v.replica_id == 1 and v.log_end_offset == p.high_watermark >= 0 and p.observers == []
    if version >= 1:
        assert v.last_fetch_timestamp > 0 and v.last_caught_up_timestamp > 0
    if version >= 2:
        (n,) = resp.nodes
        host, port = broker.bootstrap.rsplit(":", 1)
        assert n.node_id == 1 and [(x.host, x.port) for x in n.listeners] == [(host, int(port))]
    bad = R(topics=[R.TopicData(topic_name="other", partitions=[R.PartitionData(partition_index=0)])])
    (bp,) = wire.request(bad, version).topics[0].partitions
    assert bp.error_code == Errors.UNKNOWN_TOPIC_OR_PARTITION


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_describe_quorum_and_features_through_kafka_python(broker):
    from kafka.admin import KafkaAdminClient

    kp = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10000)
    try:
        q = kp.describe_metadata_quorum()
        (p,) = q["topics"][0]["partitions"]
        assert p["leader_id"] == 1 and [v["replica_id"] for v in p["current_voters"]] == [1]
        assert kp.describe_features()["share.version"]["finalized"] == (2, 2)
    finally:
        kp.close()


# ----------------------------------------------------------------------------- UpdateFeatures (57)
def update(w, version, *updates, validate_only=False):
    R = UpdateFeaturesRequest
    req = R(feature_updates=[R.FeatureUpdateKey(feature=f, max_version_level=lvl, upgrade_type=t,
                                                allow_downgrade=t != 1) for f, lvl, t in updates],
            validate_only=validate_only)
    resp = w.request(req, version)
    return resp.error_code, resp.error_message, [(r.feature, r.error_code) for r in resp.results]


@pytest.mark.parametrize("version", [0, 1, 2])
def test_update_features(broker, wire, version):
    same = update(wire, version, ("share.version", 2, 1), ("group.version", 1, 1), ("streams.version", 1, 1))
    assert same == (0, None, [("share.version", 0), ("group.version", 0), ("streams.version", 0)]
                    if version <= 1 else [])
    prefix = "The update failed for all features since the following feature had an error: Invalid update version"
    cases = [(("share.version", 5, 1), "5 for feature share.version. Local controller 1 only supports versions 0-2"),
             (("share.version", -1, 1), "-1 for feature share.version. A feature version cannot be less than 0."),
             (("foo.version", 1, 1), "1 for feature foo.version. Local controller 1 does not support this feature."),
             (("foo.version", 0, 1), "0 for feature foo.version. Feature foo.version not found."),
             (("transaction.version", 3, 1), "3 for feature transaction.version. Local controller 1 only supports "
                                             "versions 0-2")]
    if version == 0:  # v0 carries no upgrade type: always an upgrade
        cases.append((("share.version", 1, 2), "1 for feature share.version. Can't downgrade the version of this "
                                               "feature without setting the upgrade type to either safe or unsafe "
                                               "downgrade."))
    else:
        cases.append((("share.version", 0, 2), "0 for feature share.version. sharebroker cannot change the "
                                               "finalized level (2)."))
    if version >= 1:
        cases += [(("share.version", 1, 1), "1 for feature share.version. Can't downgrade the version of this "
                                            "feature without setting the upgrade type to either safe or unsafe downgrade."),
                  (("kraft.version", 1, 0), "1 for feature kraft.version. The controller does not support the "
                                            "given upgrade type.")]
    for upd, message in cases:
        for validate_only in (False, True):
            code, msg, results = update(wire, version, ("group.version", 1, 1), upd, validate_only=validate_only)
            assert (code, msg, results) == (Errors.INVALID_UPDATE_VERSION, f"{prefix} {message}", []), upd


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_update_features_through_kafka_python(broker):
    from kafka.admin import KafkaAdminClient
    from kafka.errors import InvalidUpdateVersionError

    kp = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10000)
    try:
        kp.update_features({"transaction.version": 2})
        with pytest.raises(InvalidUpdateVersionError):
            kp.update_features({"transaction.version": 1})
        assert kp.describe_features()["transaction.version"]["finalized"] == (2, 2)
    finally:
        kp.close()


# ------------------------------------------- UnregisterBroker (64), UnregisterController (94)
def test_unregister_broker(wire):
    """Kafka's controller: an id with no registration is BROKER_ID_NOT_REGISTERED; this node's own id is
    refused (a single node cannot leave its cluster; Kafka would unregister it)."""
    def ask(broker_id):
        r = wire.request(UnregisterBrokerRequest(broker_id=broker_id), 0)
        return r.error_code, r.error_message

    assert ask(7) == (Errors.BROKER_ID_NOT_REGISTERED, "Broker ID 7 is not currently registered")
    assert ask(-1) == (Errors.BROKER_ID_NOT_REGISTERED, "Broker ID -1 is not currently registered")
    assert ask(1) == (Errors.INVALID_REQUEST, "Broker cannot unregister itself while it is active.")
    md = wire.request(MetadataRequest(topics=[]), 12)
    assert [b.node_id for b in md.brokers] == [1]  # still registered


def test_unregister_controller(wire):
    """QuorumController.unregisterController at metadata.version 4.4-IV2: itself INVALID_REQUEST, any other
    id (one node, one controller) CONTROLLER_ID_NOT_REGISTERED."""
    def ask(controller_id):
        r = wire.request(UnregisterControllerRequest(controller_id=controller_id), 0)
        return r.error_code, r.error_message

    assert ask(1) == (Errors.INVALID_REQUEST, "Controller cannot unregister itself while it is active.")
    assert ask(3) == (Errors.CONTROLLER_ID_NOT_REGISTERED, "Controller ID 3 is not currently registered.")


# ------------------------------------------------------ AddRaftVoter (80), RemoveRaftVoter (81)
_DIR = bytes(range(1, 17))
_DIR_TEXT = "AQIDBAUGBwgJCgsMDQ4PEA"  # Uuid.toString of _DIR
_VOTERS = "[ReplicaKey(id=1, directoryId=<undefined>)]"  # DescribeQuorum's one voter


@pytest.mark.parametrize("version", [0, 1])
def test_add_raft_voter(broker, wire, version):
    cluster_id = wire.request(MetadataRequest(topics=[]), 12).cluster_id
    L = AddRaftVoterRequest.Listener

    def ask(voter_id, directory_id=_DIR, cluster=None):
        r = wire.request(AddRaftVoterRequest(cluster_id=cluster, timeout_ms=5000, voter_id=voter_id,
                                             voter_directory_id=directory_id,
                                             listeners=[L(name="CONTROLLER", host="127.0.0.1", port=9093)]), version)
        return r.error_code, r.error_message

    other = "AAAAAAAAAAAAAAAAAAAAAA"
    assert ask(2, cluster=other) == (Errors.INCONSISTENT_CLUSTER_ID,
                                     f'The given id "{other}" doesn\'t match the cluster id "{cluster_id}"')
    assert ask(2, directory_id=bytes(16)) == (Errors.INVALID_REQUEST,
                                              "Add voter request didn't include a valid voter")
    assert ask(1, cluster=cluster_id) == (
        Errors.DUPLICATE_VOTER, f"The voter id for ReplicaKey(id=1, directoryId={_DIR_TEXT}) is already part of the "
                                f"set of voters {_VOTERS}.")
    code, message = ask(2)
    assert code == Errors.UNSUPPORTED_VERSION and f"ReplicaKey(id=2, directoryId={_DIR_TEXT})" in message
    assert "single node" in message


def test_remove_raft_voter(wire):
    """A quorum of one voter: Kafka's VoterSet.removeVoter never removes the last one (VOTER_NOT_FOUND)."""
    cluster_id = wire.request(MetadataRequest(topics=[]), 12).cluster_id

    def ask(voter_id, directory_id=_DIR, cluster=None):
        r = wire.request(RemoveRaftVoterRequest(cluster_id=cluster, voter_id=voter_id,
                                                voter_directory_id=directory_id), 0)
        return r.error_code, r.error_message

    assert ask(1, cluster="AAAAAAAAAAAAAAAAAAAAAA")[0] == Errors.INCONSISTENT_CLUSTER_ID
    assert ask(1, directory_id=bytes(16)) == (Errors.INVALID_REQUEST,
                                              "Remove voter request didn't include a valid voter")
    for voter_id in (1, 2):
        assert ask(voter_id, cluster=cluster_id) == (
            Errors.VOTER_NOT_FOUND, f"Cannot remove voter ReplicaKey(id={voter_id}, directoryId={_DIR_TEXT}) from "
                                    f"the set of voters {_VOTERS}")


# ----------------------------------------------------------------------------- ApiVersions
def test_api_versions_advertises_the_operations_apis(wire):
    resp = wire.request(ApiVersionsRequest(client_software_name="t", client_software_version="1"), 3)
    got = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    assert {key: got.get(key) for key in (23, 33, 34, 35, 43, 45, 46, 55, 57, 64, 75, 80, 81, 94)} == {
        23: (2, 4), 33: (0, 2), 34: (1, 2), 35: (1, 5), 43: (0, 2), 45: (0, 1), 46: (0, 0), 55: (0, 2),
        57: (0, 2), 64: (0, 0), 75: (0, 0), 80: (0, 1), 81: (0, 0), 94: (0, 0)}
