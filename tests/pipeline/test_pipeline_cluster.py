"""The pipeline, unchanged, against a 3-node Apache Kafka 4.4 KRaft cluster (``tests/kafka_ref``).

The cluster is started once for the module (bounded heaps) and stopped at its end;
``SHAREBROKER_PIPELINE_CLUSTER=host:port,...`` points the tests at a running one instead. Topics have
replication factor 3. The share workers (``pipeline.workers``) and the ``kafka_topic`` data source
(``pipeline.topics``) run exactly as their sharebroker tests run them, with the same assertions; the
only difference is the broker settings the cluster starts with: Kafka's own minimums for share-group
sessions, heartbeats and locks, lowered as sharebroker's test broker lowers them (``BROKER_CONFIG``),
so the groups' Kafka-standard configs (``FAST_GROUP``) are accepted.
"""
from __future__ import annotations

import sys

import pytest
from confluent_kafka import AcknowledgeType, ShareConsumer
from confluent_kafka.admin import NewTopic
from pyspark import cloudpickle

from broker.testing import BrokerProcess
from pipeline.workers import run_share_workers
from tests.integration.test_migrate import migrate, share_group_state, share_poll
from tests.pipeline.conftest import BROKER_CONFIG, Kafka
from tests.pipeline.test_pipeline_stream import committed_batches, started
from tests.reference import kafka_cluster
from tests.support import unique, until

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the handler travels to the workers by value

CLUSTER_ENV = "SHAREBROKER_PIPELINE_CLUSTER"


@pytest.fixture(scope="module")
def cluster():
    yield from kafka_cluster(CLUSTER_ENV, settings=BROKER_CONFIG)


@pytest.fixture(scope="module")
def ckafka(cluster):
    k = Kafka(cluster.bootstrap)
    yield k
    del k.admin


def replicated_topic(k, partitions: int, prefix: str) -> str:
    name = unique(prefix)
    k.admin.create_topics([NewTopic(name, partitions, replication_factor=3)])[name].result(30)
    return name


def test_share_workers_on_the_cluster_accept_each_record_once(cluster, ckafka, spark):
    topic = replicated_topic(ckafka, 2, "work")
    group = ckafka.group()
    n = 1000
    ckafka.produce(topic, ({"value": b"%d" % i, "partition": i % 2} for i in range(n)), per_flush=20)

    def handler(rec):
        return rec.value.decode()

    res = run_share_workers(spark, {"bootstrap.servers": cluster.bootstrap, "group.id": group}, [topic], handler,
                            workers=4, max_records_per_task=n // 4, idle_timeout=5)
    assert [t["task"] for t in res.tasks] == list(range(4))
    assert res.totals["accepted"] == n and res.totals["released"] == 0 and res.totals["rejected"] == 0, res.table()
    assert res.totals["ack_errors"] == 0
    by_record: dict[int, list] = {}
    for r in res.outputs.collect():
        by_record.setdefault(int(r.result), []).append(r)
    assert sorted(by_record) == list(range(n))
    assert all(len(v) == 1 for v in by_record.values()), "a record was handled twice"
    assert all(v[0].delivery_count <= 2 for v in by_record.values())  # a capped task's records come back once
    assert {(v[0].partition, v[0].offset) for v in by_record.values()} == {(p, o) for p in (0, 1)
                                                                            for o in range(n // 2)}
    assert ckafka.leftovers(group, topic) == []


def test_kafka_topic_write_then_read_back_on_the_cluster(cluster, ckafka, spark):
    topic = replicated_topic(ckafka, 3, "write")
    n = 3000
    src = spark.range(n).selectExpr("id", "cast(id as string) as key", "cast(id * 7 as string) as value",
                                    "cast(id % 3 as int) as partition")
    (src.drop("id").write.format("kafka_topic").mode("append").option("kafka.bootstrap.servers", cluster.bootstrap)
     .option("topic", topic).save())
    df = spark.read.format("kafka_topic").option("kafka.bootstrap.servers", cluster.bootstrap) \
        .option("subscribe", topic).load()
    assert df.rdd.getNumPartitions() == 3  # one input partition per topic-partition
    rows = df.selectExpr("cast(key as string) k", "cast(value as string) v", "partition", "offset").collect()
    assert len(rows) == n
    assert sorted((int(r.k), int(r.v), r.partition) for r in rows) == [(i, i * 7, i % 3) for i in range(n)]
    for p in range(3):  # offsets of each partition are dense from 0: nothing written twice
        assert sorted(r.offset for r in rows if r.partition == p) == list(range(n // 3))


def test_kafka_share_stream_resumes_on_the_cluster_after_a_migration(cluster, ckafka, spark, tmp_path):
    """A share group half-consumed on a sharebroker, moved by ``sharebroker-migrate`` (sync, cutover)
    onto this module's cluster: the ``kafka_share`` streaming source, pointed at the cluster, delivers
    every record the group had not acknowledged, plus exactly the redeliveries cutover counted."""
    with BrokerProcess(tmp_path / "source", config=BROKER_CONFIG) as source:
        skafka = Kafka(source.bootstrap)
        topic = skafka.topic(2, "moved")
        group = skafka.group(share_record_lock_duration_ms=30000)
        n = 200
        skafka.produce(topic, ({"value": b"%d" % i, "key": b"k%d" % i, "partition": i % 2} for i in range(n)),
                       per_flush=20)
        # accept the first 20 records of a partition, then release every third record handed out and
        # accept the others; then a second consumer leaves with records in flight (released when it
        # closes). The start offsets persisted (what DescribeShareGroupOffsets answers) lag one state
        # write behind (as Kafka's SharePartition writes, then advances): the release writes them
        accepted: set[int] = set()
        c = ShareConsumer({"bootstrap.servers": source.bootstrap, "group.id": group,
                           "share.acknowledgement.mode": "explicit"})
        c.subscribe([topic])
        try:
            def step():
                for m in share_poll(c):
                    keep = int(m.value()) < 40 or int(m.value()) % 3 != 0
                    c.acknowledge(m, AcknowledgeType.ACCEPT if keep else AcknowledgeType.RELEASE)
                    accepted.update([int(m.value())] if keep else [])
                return len(accepted) >= 60
            until(step, 60, "part of the records accepted on sharebroker")
            c.commit_sync()
        finally:
            c.close()
        inflight = ShareConsumer({"bootstrap.servers": source.bootstrap, "group.id": group,
                                  "share.acknowledgement.mode": "explicit"})
        inflight.subscribe([topic])
        try:
            until(lambda: share_poll(inflight), 30, "records for the second consumer")
        finally:
            inflight.close()
        del skafka.admin
        until(lambda: share_group_state(source.bootstrap, group) == "Empty", 30, "the share group empty")
        migrate("sync", source.bootstrap, cluster.bootstrap, "--replication-factor", "3")
        out = migrate("cutover", source.bootstrap, cluster.bootstrap).stdout
    redelivered = int(next(line for line in out.splitlines() if line.startswith(group)).split()[3])
    assert 0 < redelivered < len(accepted), out  # some acknowledged records lie below the start offsets

    sink, ck = str(tmp_path / "out"), str(tmp_path / "ck")

    def start():
        df = (spark.readStream.format("kafka_share").option("kafka.bootstrap.servers", cluster.bootstrap)
              .option("kafka.group.id", group).option("subscribe", topic).option("maxRecordsPerBatch", "50")
              .load())
        return df.writeStream.format("parquet").option("checkpointLocation", ck).start(sink)

    unacknowledged = set(range(n)) - accepted
    q = started(start)
    try:
        def in_sink():
            assert q.exception() is None, q.exception()
            got = {int(r.value) for r in spark.read.parquet(sink).select("value").collect()} \
                if committed_batches(ck) else set()
            return got if got >= unacknowledged and len(got & accepted) >= redelivered else None
        got = until(in_sink, 120, "the unacknowledged records in the sink, from the cluster", interval=1.0)
    finally:
        q.stop()
    assert got <= set(range(n)) and len(got & accepted) == redelivered  # nothing skipped, nothing else again
