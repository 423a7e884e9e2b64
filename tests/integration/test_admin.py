"""Admin APIs through confluent-kafka's AdminClient (and the raw protocol where librdkafka cannot ask).

Topics and partitions are created and deleted, topic and broker configs described and
altered, and every refused request gets the error code Kafka answers with.
"""
from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer, TopicCollection, TopicPartition
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource,
                                   NewPartitions, NewTopic, OffsetSpec, ResourceType)

from broker.testing import BrokerProcess
from protocol.messages.describe_cluster import DescribeClusterRequest
from protocol.messages.metadata import MetadataRequest

NUM_PARTITIONS = 3  # the broker default used for -1 partitions and auto-created topics


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("admin"), config={"num.partitions": str(NUM_PARTITIONS)})
    b.start()
    yield b
    b.stop()


@pytest.fixture(scope="module")
def admin(broker):
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def error_of(future, timeout: float = 15.0) -> KafkaError | None:
    try:
        future.result(timeout)
    except KafkaException as e:
        return e.args[0]
    return None


def code_of(future) -> int | None:
    err = error_of(future)
    return None if err is None else err.code()


def topics(admin: AdminClient) -> dict:
    return admin.list_topics(timeout=10).topics


def configs(admin: AdminClient, rtype: ResourceType, name: str) -> dict:
    res = ConfigResource(rtype, name)
    return admin.describe_configs([res])[res].result(10)


def alter(admin: AdminClient, rtype: ResourceType, name: str, *ops, validate_only: bool = False):
    entries = [ConfigEntry(k, v, incremental_operation=op) for k, op, v in ops]
    res = ConfigResource(rtype, name, incremental_configs=entries)
    return admin.incremental_alter_configs([res], validate_only=validate_only)[res]


SET, DELETE, APPEND, SUBTRACT = (AlterConfigOpType.SET, AlterConfigOpType.DELETE, AlterConfigOpType.APPEND,
                                 AlterConfigOpType.SUBTRACT)


# ----------------------------------------------------------------------------- topics
def test_create_describe_produce_delete_recreate(broker, admin):
    fs = admin.create_topics([NewTopic("adm-a", 3, 1, config={"retention.ms": "86400000"}),
                              NewTopic("adm-b")])  # -1 partitions / replication factor: broker defaults
    assert code_of(fs["adm-a"]) is None and code_of(fs["adm-b"]) is None
    t = topics(admin)
    assert sorted(t["adm-a"].partitions) == [0, 1, 2]
    assert sorted(t["adm-b"].partitions) == list(range(NUM_PARTITIONS))

    desc = admin.describe_topics(TopicCollection(["adm-a"]))["adm-a"].result(10)
    assert desc.name == "adm-a" and not desc.is_internal
    assert [(p.id, p.leader.id, [r.id for r in p.replicas], [r.id for r in p.isr]) for p in desc.partitions] == \
        [(i, 1, [1], [1]) for i in range(3)]
    first_id = str(desc.topic_id)

    p = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(30):
        p.produce("adm-a", value=b"%d" % i, partition=i % 3)
    assert p.flush(10) == 0
    tp = TopicPartition("adm-a", 2)
    assert admin.list_offsets({tp: OffsetSpec.latest()})[tp].result(10).offset == 10

    fs = admin.delete_topics(["adm-a", "adm-b"])
    assert code_of(fs["adm-a"]) is None and code_of(fs["adm-b"]) is None
    t = topics(admin)
    assert "adm-a" not in t and "adm-b" not in t
    assert not (broker.data_dir / "adm-a-0").exists()

    # the name is free again: a new topic (new id), with none of the old records
    assert code_of(admin.create_topics([NewTopic("adm-a", 1, 1)])["adm-a"]) is None
    desc = admin.describe_topics(TopicCollection(["adm-a"]))["adm-a"].result(10)
    assert str(desc.topic_id) != first_id and len(desc.partitions) == 1
    tp = TopicPartition("adm-a", 0)
    assert admin.list_offsets({tp: OffsetSpec.latest()})[tp].result(10).offset == 0
    assert code_of(admin.delete_topics(["adm-a"])["adm-a"]) is None


@pytest.mark.parametrize("new_topic, code", [
    (NewTopic("bad-zero", 0, 1), KafkaError.INVALID_PARTITIONS),
    (NewTopic("bad-rf3", 1, 3), KafkaError.INVALID_REPLICATION_FACTOR),
    (NewTopic("bad-rf0", 1, 0), KafkaError.INVALID_REPLICATION_FACTOR),
    (NewTopic("a/b", 1, 1), KafkaError.TOPIC_EXCEPTION),
    (NewTopic("..", 1, 1), KafkaError.TOPIC_EXCEPTION),
    (NewTopic(".", 1, 1), KafkaError.TOPIC_EXCEPTION),
    (NewTopic("", 1, 1), KafkaError.TOPIC_EXCEPTION),
    (NewTopic("x" * 250, 1, 1), KafkaError.TOPIC_EXCEPTION),
    (NewTopic("spaces in name", 1, 1), KafkaError.TOPIC_EXCEPTION),
    (NewTopic("bad-cfg-key", 1, 1, config={"no.such.config": "1"}), KafkaError.INVALID_CONFIG),
    (NewTopic("bad-cfg-value", 1, 1, config={"retention.ms": "soon"}), KafkaError.INVALID_CONFIG),
    (NewTopic("bad-cfg-range", 1, 1, config={"segment.bytes": "1024"}), KafkaError.INVALID_CONFIG),
    (NewTopic("bad-cfg-choice", 1, 1, config={"cleanup.policy": "sometimes"}), KafkaError.INVALID_CONFIG),
], ids=lambda x: x.topic[:20] if isinstance(x, NewTopic) else None)
def test_create_topic_errors(admin, new_topic, code):
    err = error_of(admin.create_topics([new_topic])[new_topic.topic])
    assert err is not None and err.code() == code, err
    assert new_topic.topic not in topics(admin)


def test_create_existing_topic_and_duplicates(admin):
    assert code_of(admin.create_topics([NewTopic("adm-exists", 1, 1)])["adm-exists"]) is None
    err = error_of(admin.create_topics([NewTopic("adm-exists", 2, 1)])["adm-exists"])
    assert err.code() == KafkaError.TOPIC_ALREADY_EXISTS
    assert len(topics(admin)["adm-exists"].partitions) == 1
    err = error_of(admin.create_topics([NewTopic("__consumer_offsets", 1, 1)])["__consumer_offsets"])
    assert err.code() == KafkaError.TOPIC_ALREADY_EXISTS
    # validate_only reports the same error
    err = error_of(admin.create_topics([NewTopic("adm-exists", 1, 1)], validate_only=True)["adm-exists"])
    assert err.code() == KafkaError.TOPIC_ALREADY_EXISTS


def test_validate_only_does_not_create(broker, admin):
    fs = admin.create_topics([NewTopic("adm-vo", 4, 1, config={"retention.ms": "1000"})], validate_only=True)
    assert code_of(fs["adm-vo"]) is None
    assert "adm-vo" not in topics(admin)
    assert not (broker.data_dir / "adm-vo-0").exists()
    # and it still validates
    fs = admin.create_topics([NewTopic("adm-vo", 1, 3)], validate_only=True)
    assert code_of(fs["adm-vo"]) == KafkaError.INVALID_REPLICATION_FACTOR
    fs = admin.create_topics([NewTopic("adm-vo", 1, 1, config={"x.y": "z"})], validate_only=True)
    assert code_of(fs["adm-vo"]) == KafkaError.INVALID_CONFIG
    assert "adm-vo" not in topics(admin)


def test_too_many_partitions_in_one_request(admin):
    fs = admin.create_topics([NewTopic("adm-huge-1", 6000, 1), NewTopic("adm-huge-2", 5000, 1)])
    assert code_of(fs["adm-huge-1"]) == KafkaError.POLICY_VIOLATION
    assert code_of(fs["adm-huge-2"]) == KafkaError.POLICY_VIOLATION
    t = topics(admin)
    assert "adm-huge-1" not in t and "adm-huge-2" not in t
    assert code_of(admin.create_topics([NewTopic("adm-grow-cap", 1, 1)])["adm-grow-cap"]) is None
    np = NewPartitions("adm-grow-cap", 10_002)
    assert code_of(admin.create_partitions([np])["adm-grow-cap"]) == KafkaError.POLICY_VIOLATION
    assert len(topics(admin)["adm-grow-cap"].partitions) == 1


def test_delete_unknown_and_internal_topics(admin):
    assert code_of(admin.delete_topics(["adm-never-existed"])["adm-never-existed"]) == \
        KafkaError.UNKNOWN_TOPIC_OR_PART
    assert code_of(admin.delete_topics(["__consumer_offsets"])["__consumer_offsets"]) is not None
    assert "__consumer_offsets" in topics(admin)


def test_create_partitions(broker, admin):
    assert code_of(admin.create_topics([NewTopic("adm-grow", 2, 1)])["adm-grow"]) is None
    np = NewPartitions("adm-grow", 5)
    assert code_of(admin.create_partitions([np], validate_only=True)["adm-grow"]) is None
    assert len(topics(admin)["adm-grow"].partitions) == 2, "validate_only added partitions"
    assert code_of(admin.create_partitions([np])["adm-grow"]) is None
    assert sorted(topics(admin)["adm-grow"].partitions) == [0, 1, 2, 3, 4]

    p = Producer({"bootstrap.servers": broker.bootstrap, "topic.metadata.refresh.interval.ms": 100})
    delivered = []
    p.produce("adm-grow", value=b"to-new-partition", partition=4,
              on_delivery=lambda err, msg: delivered.append((err, msg.partition(), msg.offset())))
    assert p.flush(10) == 0 and delivered == [(None, 4, 0)]

    for total in (3, 5):  # decreasing, unchanged
        err = error_of(admin.create_partitions([NewPartitions("adm-grow", total)])["adm-grow"])
        assert err is not None and err.code() == KafkaError.INVALID_PARTITIONS, (total, err)
    err = error_of(admin.create_partitions([NewPartitions("adm-nope", 3)])["adm-nope"])
    assert err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    assert len(topics(admin)["adm-grow"].partitions) == 5


# ----------------------------------------------------------------------------- configs
def test_describe_and_alter_topic_configs(admin):
    assert code_of(admin.create_topics([NewTopic("adm-cfg", 1, 1, config={"retention.ms": "3600000"})])["adm-cfg"]) \
        is None
    c = configs(admin, ResourceType.TOPIC, "adm-cfg")
    assert c["retention.ms"].value == "3600000"
    assert c["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert c["segment.bytes"].value == "1073741824"
    assert c["segment.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
    assert c["cleanup.policy"].value == "delete"
    assert {"max.message.bytes", "retention.bytes", "min.insync.replicas", "message.timestamp.type"} <= set(c)

    assert code_of(alter(admin, ResourceType.TOPIC, "adm-cfg", ("retention.ms", SET, "7200000"),
                         ("segment.bytes", SET, "2097152"))) is None
    c = configs(admin, ResourceType.TOPIC, "adm-cfg")
    assert (c["retention.ms"].value, c["segment.bytes"].value) == ("7200000", "2097152")
    assert c["segment.bytes"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value

    # DELETE goes back to the default; APPEND/SUBTRACT work on lists, starting from the default
    assert code_of(alter(admin, ResourceType.TOPIC, "adm-cfg", ("retention.ms", DELETE, None),
                         ("cleanup.policy", APPEND, "compact"))) is None
    c = configs(admin, ResourceType.TOPIC, "adm-cfg")
    assert c["retention.ms"].value == "604800000" and c["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    assert sorted(c["cleanup.policy"].value.split(",")) == ["compact", "delete"]
    assert code_of(alter(admin, ResourceType.TOPIC, "adm-cfg", ("cleanup.policy", SUBTRACT, "delete"))) is None
    assert configs(admin, ResourceType.TOPIC, "adm-cfg")["cleanup.policy"].value == "compact"

    # validate_only changes nothing
    assert code_of(alter(admin, ResourceType.TOPIC, "adm-cfg", ("segment.bytes", SET, "3145728"),
                         validate_only=True)) is None
    assert configs(admin, ResourceType.TOPIC, "adm-cfg")["segment.bytes"].value == "2097152"

    # refused: unknown key, bad value, value out of range, append to a non-list; nothing applied
    for ops in ([("no.such.config", SET, "1")], [("retention.ms", SET, "later")],
                [("segment.bytes", SET, "10")], [("min.insync.replicas", SET, "0")],
                [("segment.bytes", SET, "4194304"), ("retention.ms", SET, "x")],
                [("retention.ms", APPEND, "5")]):
        err = error_of(alter(admin, ResourceType.TOPIC, "adm-cfg", *ops))
        assert err is not None and err.code() == KafkaError.INVALID_CONFIG, (ops, err)
    assert configs(admin, ResourceType.TOPIC, "adm-cfg")["segment.bytes"].value == "2097152"

    assert code_of(alter(admin, ResourceType.TOPIC, "adm-no-topic", ("retention.ms", SET, "1"))) == \
        KafkaError.UNKNOWN_TOPIC_OR_PART
    res = ConfigResource(ResourceType.TOPIC, "adm-no-topic")
    assert code_of(admin.describe_configs([res])[res]) == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_every_kafka_topic_config_is_accepted_and_described(admin):
    """Issue 35 item 1: MirrorMaker 2 copies a Kafka 4.4 topic's configs (remote.copy.lag.bytes...) with one
    AlterConfigs; a name refused here failed the whole change. Every topic config Kafka 4.4 defines
    (broker/kafka_configs.json, from Kafka's LogConfig) is described, and set through both the legacy and
    the incremental API, with Kafka's validation (tiered storage is refused: it is disabled here)."""
    from broker.configs import kafka_configs

    kafka = kafka_configs()["topic"]
    assert code_of(admin.create_topics([NewTopic("adm-mm2", 1, 1)])["adm-mm2"]) is None
    described = configs(admin, ResourceType.TOPIC, "adm-mm2")
    assert sorted(described) == sorted(kafka)
    copied = {"remote.copy.lag.bytes": "1048576", "remote.copy.lag.ms": "60000",
              "max.decompressed.message.bytes": "10485760", "retention.ms": "3600000"}
    legacy = ConfigResource(ResourceType.TOPIC, "adm-mm2", set_config=copied)
    with pytest.warns(DeprecationWarning):
        result = admin.alter_configs([legacy])[legacy]
    assert code_of(result) is None
    c = configs(admin, ResourceType.TOPIC, "adm-mm2")
    assert {k: (c[k].value, c[k].source) for k in copied} == {
        k: (v, ConfigSource.DYNAMIC_TOPIC_CONFIG.value) for k, v in copied.items()}
    assert code_of(alter(admin, ResourceType.TOPIC, "adm-mm2", ("remote.copy.lag.bytes", SET, "2048"))) is None
    assert configs(admin, ResourceType.TOPIC, "adm-mm2")["remote.copy.lag.bytes"].value == "2048"
    for name, value in (("remote.copy.lag.ms", "-2"), ("remote.storage.enable", "true")):
        err = error_of(alter(admin, ResourceType.TOPIC, "adm-mm2", (name, SET, value)))
        assert err is not None and err.code() == KafkaError.INVALID_CONFIG, (name, err)


def test_describe_and_alter_broker_configs(admin):
    c = configs(admin, ResourceType.BROKER, "1")
    assert c["num.partitions"].value == str(NUM_PARTITIONS)
    assert c["num.partitions"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert c["num.partitions"].is_read_only
    assert c["log.retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value and not c["log.retention.ms"].is_read_only
    assert code_of(admin.create_topics([NewTopic("adm-inherit", 1, 1)])["adm-inherit"]) is None

    # a dynamic cluster default reaches topics that have no override of their own
    try:
        assert code_of(alter(admin, ResourceType.BROKER, "1", ("log.retention.ms", SET, "123456"))) is None
        c = configs(admin, ResourceType.BROKER, "1")
        assert c["log.retention.ms"].value == "123456"
        assert c["log.retention.ms"].source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value
        t = configs(admin, ResourceType.TOPIC, "adm-inherit")["retention.ms"]
        assert t.value == "123456" and t.source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value

        # Kafka refuses bad broker config changes with INVALID_REQUEST (not INVALID_CONFIG), in its words
        for ops, words in (([("node.id", SET, "7")], "Cannot update these configs dynamically: [node.id]"),
                           ([("num.partitions", SET, "9")], None),
                           ([("log.retention.ms", SET, "eventually")], None),
                           ([("ssl.keystore.location", SET, "/x.jks")], "These security configs can be dynamically "
                            "updated only per-listener using the listener prefix: [ssl.keystore.location]")):
            err = error_of(alter(admin, ResourceType.BROKER, "1", *ops))
            assert err is not None and err.code() == KafkaError.INVALID_REQUEST, (ops, err)
            assert words is None or err.str() == words, err
        assert configs(admin, ResourceType.BROKER, "1")["log.retention.ms"].value == "123456"
    finally:
        assert code_of(alter(admin, ResourceType.BROKER, "1", ("log.retention.ms", DELETE, None))) is None
    t = configs(admin, ResourceType.TOPIC, "adm-inherit")["retention.ms"]
    assert t.value == "604800000" and t.source == ConfigSource.DEFAULT_CONFIG.value


def test_dynamic_broker_config_survives_restart(broker_factory):
    b = broker_factory()
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    assert code_of(alter(admin, ResourceType.BROKER, "1", ("log.segment.bytes", SET, "2097152"))) is None
    b.kill9()
    b.start()
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    c = configs(admin, ResourceType.BROKER, "1")["log.segment.bytes"]
    assert c.value == "2097152" and c.source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value


# ----------------------------------------------------------------------------- metadata and cluster
def test_metadata_auto_creates_topics_with_num_partitions(broker, admin, raw_connection):
    p = Producer({"bootstrap.servers": broker.bootstrap})
    delivered = []
    p.produce("adm-auto", value=b"x", on_delivery=lambda err, msg: delivered.append(err))
    assert p.flush(10) == 0 and delivered == [None]
    assert sorted(topics(admin)["adm-auto"].partitions) == list(range(NUM_PARTITIONS))

    # a Metadata request that does not allow auto-creation leaves unknown topics alone
    conn = raw_connection(broker.port)
    resp = conn.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="adm-not-auto")],
                                        allow_auto_topic_creation=False), 12)
    assert [(t.name, t.error_code) for t in resp.topics] == [("adm-not-auto", KafkaError.UNKNOWN_TOPIC_OR_PART)]
    # ...and an illegal name is never created
    resp = conn.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="bad/name")],
                                        allow_auto_topic_creation=True), 12)
    assert [(t.name, t.error_code) for t in resp.topics] == [("bad/name", KafkaError.TOPIC_EXCEPTION)]
    assert "adm-not-auto" not in topics(admin) and "bad/name" not in topics(admin)


def test_auto_create_disabled(broker_factory, raw_connection):
    b = broker_factory({"auto.create.topics.enable": "false"})
    conn = raw_connection(b.port)
    resp = conn.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="adm-off")],
                                        allow_auto_topic_creation=True), 12)
    assert [(t.name, t.error_code) for t in resp.topics] == [("adm-off", KafkaError.UNKNOWN_TOPIC_OR_PART)]
    assert "adm-off" not in AdminClient({"bootstrap.servers": b.bootstrap}).list_topics(timeout=10).topics


def test_describe_cluster(broker, admin, raw_connection):
    c = admin.describe_cluster(include_authorized_operations=True).result(10)
    assert c.controller.id == 1
    assert [(n.id, n.host, n.port) for n in c.nodes] == [(1, "127.0.0.1", broker.port)]
    assert c.cluster_id

    conn = raw_connection(broker.port)
    for version in (0, 1, 2):
        resp = conn.request(DescribeClusterRequest(include_cluster_authorized_operations=False), version)
        assert resp.error_code == 0 and resp.cluster_id == c.cluster_id and resp.controller_id == 1
        assert [(x.broker_id, x.host, x.port) for x in resp.brokers] == [(1, "127.0.0.1", broker.port)]
        assert resp.cluster_authorized_operations == -2147483648
    resp = conn.request(DescribeClusterRequest(include_cluster_authorized_operations=True), 1)
    assert resp.cluster_authorized_operations > 0
    # DESCRIBE (8) and ALTER_CONFIGS (11) among the allowed operations
    assert resp.cluster_authorized_operations & (1 << 8) and resp.cluster_authorized_operations & (1 << 11)
    resp = conn.request(DescribeClusterRequest(endpoint_type=3), 1)
    assert resp.error_code == KafkaError.UNSUPPORTED_ENDPOINT_TYPE


def test_longest_legal_topic_name(broker_factory):
    """249 characters is Kafka's limit; every file and directory the broker derives from the
    name (metadata, partition directories, their "-delete" renames) must still fit in 255 bytes."""
    b = broker_factory()
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    names = ["m" * 249, "n" * 230]
    for name in names:
        assert code_of(admin.create_topics([NewTopic(name, 2, 1)])[name]) is None
    p = Producer({"bootstrap.servers": b.bootstrap})
    for name in names:
        p.produce(name, value=b"v", partition=1)
    assert p.flush(10) == 0
    b.stop()
    b.start()
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    for name in names:
        assert len(topics(admin)[name].partitions) == 2
        tp = TopicPartition(name, 1)
        assert admin.list_offsets({tp: OffsetSpec.latest()})[tp].result(10).offset == 1
    assert code_of(admin.delete_topics([names[0]])[names[0]]) is None
    b.kill9()
    b.start()
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    t = topics(admin)
    assert names[0] not in t and names[1] in t


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_kafka_python_admin_client(broker):
    """A second client library, speaking other API versions to the same handlers."""
    from kafka.admin import ConfigResource as KPConfigResource, ConfigResourceType, KafkaAdminClient
    from kafka.admin import NewPartitions as KPNewPartitions, NewTopic as KPNewTopic
    from kafka.errors import InvalidPartitionsError, TopicAlreadyExistsError, UnknownTopicOrPartitionError

    kp = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10000)
    try:
        kp.create_topics([KPNewTopic("adm-kp", 2, 1, topic_configs={"retention.ms": "5000000"})])
        with pytest.raises(TopicAlreadyExistsError):
            kp.create_topics([KPNewTopic("adm-kp", 2, 1)])
        kp.create_partitions({"adm-kp": KPNewPartitions(4)})
        with pytest.raises(InvalidPartitionsError):
            kp.create_partitions({"adm-kp": KPNewPartitions(1)})
        described = kp.describe_configs([KPConfigResource(ConfigResourceType.TOPIC, "adm-kp")])
        text = repr(described)
        assert "retention.ms" in text and "5000000" in text
        kp.delete_topics(["adm-kp"])
        with pytest.raises(UnknownTopicOrPartitionError):
            kp.delete_topics(["adm-kp"])
    finally:
        kp.close()


def test_topic_names_colliding_on_dot_and_underscore_are_refused(broker, unique_name):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    base = unique_name("dot.topic")
    assert code_of(admin.create_topics([NewTopic(base, 1, 1)])[base]) is None
    twin = base.replace(".", "_")
    assert code_of(admin.create_topics([NewTopic(twin, 1, 1)])[twin]) == KafkaError.TOPIC_EXCEPTION
