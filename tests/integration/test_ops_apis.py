"""The admin and operations APIs of issue 27: AlterConfigs (legacy), DescribeLogDirs,
AlterReplicaLogDirs, OffsetForLeaderEpoch, DescribeTopicPartitions, ElectLeaders,
Alter/ListPartitionReassignments, DescribeQuorum and UpdateFeatures, each at every version we serve
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
from protocol.messages.offset_for_leader_epoch import OffsetForLeaderEpochRequest
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
