"""MirrorMaker 2 (the dedicated driver ``org.apache.kafka.connect.mirror.MirrorMaker``, Kafka's Connect
runtime and Java clients from Maven, ``tests/kafka_ref/mm2-pom.xml``) replicating two topics and a
consumer group's committed offsets from sharebroker A to sharebroker B and, in the same MM2 process,
to the reference Kafka 4.4 (issue 27).

MM2 runs its three connectors on Connect workers (classic groups with protocol type ``connect`` on
each target, config/offset/status topics compacted), creates ``src.<topic>`` on the targets with the
source's configs (DescribeConfigs, CreateTopics, IncrementalAlterConfigs, DescribeAcls), copies the
records (a consumer on A, a producer on the target), writes offset syncs to A and translates the
group's offsets (ListGroups, OffsetFetch on A; DescribeGroups, OffsetFetch, OffsetCommit on the target).

Offsets are exact by construction: the group commits the end of the first records produced,
``offset.lag.max=0`` makes MM2 sync every record, and its translation (``OffsetSyncStore``) is exact for
the latest sync. Then more records are produced and a consumer of that group on B resumes exactly
after the committed ones. Skipped only where java or mvn is missing.
"""
from __future__ import annotations

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from broker.testing import BrokerProcess
from tests.kafka_ref.mirror import MirrorMaker, mm2_classpath
from tests.reference import skip_without_kafka
from tests.support import unique, until


@pytest.fixture(scope="module")
def mm2_cp():
    skip_without_kafka()
    return mm2_classpath()


def produce(bootstrap: str, topic: str, partitions: int, first: int, count: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(first, first + count):
        p.produce(topic, key=b"k%d" % i, value=b"%s-%d" % (topic.encode(), i), partition=i % partitions)
    assert p.flush(15) == 0


def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int] | None:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "mm2-probe"})
    try:
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=5)[1] for p in range(partitions)}
    except Exception:  # not created on the target yet
        return None
    finally:
        c.close()


def group_offsets(admin: AdminClient, group: str) -> dict[tuple[str, int], int]:
    try:
        tps = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(10).topic_partitions
    except Exception:
        return {}
    return {(tp.topic, tp.partition): tp.offset for tp in tps if tp.offset >= 0}


def consume(bootstrap: str, group: str, topics: list[str], count: int) -> list[tuple[str, int, bytes]]:
    """``count`` records read by a member of ``group`` (from its committed offsets), then a check
    that nothing more comes."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                  "auto.offset.reset": "earliest"})
    c.subscribe(topics)
    got: list[tuple[str, int, bytes]] = []
    try:
        def more():
            for m in c.consume(100, timeout=0.5):
                assert m.error() is None, m.error()
                got.append((m.topic(), m.offset(), m.value()))
            return len(got) >= count
        until(more, 60, f"{count} records for {group}")
        assert not c.consume(100, timeout=2)
        c.commit(asynchronous=False)
    finally:
        c.close()
    return got


def apis_served(b: BrokerProcess) -> set[str]:
    """The requests ``b`` has answered at least once (its /metrics)."""
    import urllib.request

    text = urllib.request.urlopen(b.metrics_url, timeout=10).read().decode()
    prefix = 'kafka_network_requestmetrics_requests_total{request="'
    return {line[len(prefix):].split('"')[0] for line in text.splitlines()
            if line.startswith(prefix) and float(line.split()[-1]) > 0}


def test_mirror_maker_2_replicates_topics_and_group_offsets(mm2_cp, kafka_ref, tmp_path):
    metrics = {"sharebroker.metrics.listener": "127.0.0.1:0"}
    a = BrokerProcess(tmp_path / "a", config=metrics).start()
    b = BrokerProcess(tmp_path / "b", config=metrics).start()
    mm = None
    try:
        t1, t2, group = unique("mm2-t1"), unique("mm2-t2"), unique("mm2-g")
        parts = {t1: 2, t2: 1}
        admin_a = AdminClient({"bootstrap.servers": a.bootstrap})
        for f in admin_a.create_topics([NewTopic(t, n, 1) for t, n in parts.items()]).values():
            f.result(15)
        first, second = 120, 60
        for t, n in parts.items():
            produce(a.bootstrap, t, n, 0, first)
        consume(a.bootstrap, group, list(parts), 2 * first)  # the group consumes and commits the first part
        committed = group_offsets(admin_a, group)
        assert committed == {(t1, 0): 60, (t1, 1): 60, (t2, 0): 120}

        targets = {"dst": b.bootstrap, "ref": kafka_ref.bootstrap}
        mm = MirrorMaker(a.bootstrap, targets, f"{t1},{t2}", group, tmp_path / "mm2",
                         extra={"offset.lag.max": "0"}).start()
        expected = {(f"src.{t}", p): o for (t, p), o in committed.items()}

        admins = {name: AdminClient({"bootstrap.servers": bootstrap}) for name, bootstrap in targets.items()}

        def translated(name):
            def check():
                assert mm.alive(), f"MirrorMaker exited:\n{mm.tail()}"
                return group_offsets(admins[name], group) == expected
            return check
        for name, bootstrap in targets.items():
            try:
                until(translated(name), 240, f"{group}'s offsets translated on {name}")
            except AssertionError as e:
                seen = {n: group_offsets(admin, group) for n, admin in admins.items()}
                raise AssertionError(f"{e}: expected {expected} on both, have {seen}") from e
            for t, n in parts.items():
                assert end_offsets(bootstrap, f"src.{t}", n) == end_offsets(a.bootstrap, t, n)

        for t, n in parts.items():  # more records after the committed ones
            produce(a.bootstrap, t, n, first, second)
        for name, bootstrap in targets.items():
            for t, n in parts.items():
                want = end_offsets(a.bootstrap, t, n)
                until(lambda: end_offsets(bootstrap, f"src.{t}", n) == want, 60, f"src.{t} complete on {name}")

        # the group on B resumes exactly after the records it committed on A
        got = consume(b.bootstrap, group, [f"src.{t}" for t in parts], 2 * second)
        assert sorted(v for _, _, v in got) == sorted(b"%s-%d" % (t.encode(), i) for t in parts
                                                     for i in range(first, first + second))
        # what MM2 asked the two sharebrokers (all answered: the records and offsets above)
        assert {"DescribeConfigs", "DescribeAcls", "ListGroups", "OffsetFetch", "CreateTopics", "Fetch",
                "Produce"} <= apis_served(a)  # topic configs and ACLs read, group offsets read, offset syncs
        assert {"CreateTopics", "IncrementalAlterConfigs", "JoinGroup", "SyncGroup", "DescribeGroups",
                "OffsetFetch", "OffsetCommit", "Produce"} <= apis_served(b)  # copies, Connect workers, offsets
    finally:
        if mm is not None:
            mm.stop()
        b.stop()
        a.stop()


def topic_configs(admin: AdminClient, topic: str) -> tuple[dict[str, str], dict[str, str]] | None:
    """({name: value} of every config of ``topic``, {name: value} of those set on the topic itself); None
    while it does not exist."""
    from confluent_kafka.admin import ConfigResource, ConfigSource

    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    try:
        entries = admin.describe_configs([res])[res].result(10)
    except Exception:  # not created on the target yet
        return None
    own = ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    return ({n: e.value for n, e in entries.items()}, {n: e.value for n, e in entries.items() if e.source == own})


def alter_topic(admin: AdminClient, topic: str, changes: dict[str, str | None]) -> None:
    """IncrementalAlterConfigs on ``topic``: SET each name to its value, DELETE those given None."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    res = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.DELETE if v is None else AlterConfigOpType.SET)
        for k, v in changes.items()])
    admin.incremental_alter_configs([res])[res].result(15)


def test_mirror_maker_2_syncs_topic_config_changes_from_kafka(mm2_cp, kafka_ref, tmp_path):
    """MM2 copying a topic from the reference Kafka 4.4 to a sharebroker: the copy is created with the source's
    ``retention.ms``; a change of it on the source (and of ``remote.copy.lag.bytes``, a config accepted here
    and without effect: no tiered storage) arrives on the copy at the next config sync (MirrorSourceConnector's
    ``syncTopicConfigs``: IncrementalAlterConfigs with every config Kafka describes, SET for the topic's own,
    DELETE for the defaults), and so does the override's removal: after each step the copy's own configs
    (DYNAMIC_TOPIC_CONFIG) are exactly the source's, none added by the sync."""
    b = BrokerProcess(tmp_path / "b").start()
    mm = None
    try:
        topic = unique("mm2-cfg")
        source = AdminClient({"bootstrap.servers": kafka_ref.bootstrap})
        source.create_topics([NewTopic(topic, 1, 1, config={"retention.ms": "86400000"})])[topic].result(15)
        produce(kafka_ref.bootstrap, topic, 1, 0, 10)
        mm = MirrorMaker(kafka_ref.bootstrap, {"dst": b.bootstrap}, topic, unique("mm2-no-group"), tmp_path / "mm2",
                         extra={"sync.topic.configs.interval.seconds": "1"}).start()
        target, copy = AdminClient({"bootstrap.servers": b.bootstrap}), f"src.{topic}"

        def synced(own: dict[str, str]):
            """The source's own configs are ``own`` (Kafka describes them from its metadata image, which may
            not have the alter yet: waited for); wait until the copy's are the same."""
            until(lambda: topic_configs(source, topic)[1] == own, 30, f"{topic}'s own configs {own} on the source")

            def check():
                assert mm.alive(), f"MirrorMaker exited:\n{mm.tail()}"
                got = topic_configs(target, copy)
                return got is not None and got[1] == own
            until(check, 60, f"{copy}'s own configs {own}")
            return topic_configs(target, copy)[0]
        until(lambda: end_offsets(b.bootstrap, copy, 1) == {0: 10}, 120, f"{copy}'s records on the target")
        assert synced({"retention.ms": "86400000"})["remote.copy.lag.bytes"] == "-1"

        alter_topic(source, topic, {"retention.ms": "3600000", "remote.copy.lag.bytes": "1048576"})
        synced({"retention.ms": "3600000", "remote.copy.lag.bytes": "1048576"})

        alter_topic(source, topic, {"retention.ms": None})
        assert synced({"remote.copy.lag.bytes": "1048576"})["retention.ms"] == "604800000"  # the default again
        assert end_offsets(b.bootstrap, copy, 1) == {0: 10}
    finally:
        if mm is not None:
            mm.stop()
        b.stop()
