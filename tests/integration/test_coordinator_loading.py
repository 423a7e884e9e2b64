"""Start-up bounded by live state: the broker accepts connections at once and its coordinators load in the
background, answering COORDINATOR_LOAD_IN_PROGRESS (14) until loaded, as Kafka does; real clients retry
and proceed.

The test-only setting ``sharebroker.coordinator.test.load.hold.file`` keeps the coordinators from loading
while that file exists, so the loading window is as long as a test needs.
"""
from __future__ import annotations

import asyncio
import os
import threading
import time
import urllib.request

from confluent_kafka import Consumer, Producer, ShareConsumer, TopicPartition

from broker.log import PartitionLog
from coordinator.group import records as R
from coordinator.runtime import encode_record
from protocol.errors import Errors
from protocol.messages.consumer_group_heartbeat import ConsumerGroupHeartbeatRequest
from protocol.messages.describe_groups import DescribeGroupsRequest
from protocol.messages.describe_transactions import DescribeTransactionsRequest
from protocol.messages.find_coordinator import FindCoordinatorRequest
from protocol.messages.heartbeat import HeartbeatRequest
from protocol.messages.init_producer_id import InitProducerIdRequest
from protocol.messages.join_group import JoinGroupRequest
from protocol.messages.list_groups import ListGroupsRequest
from protocol.messages.list_transactions import ListTransactionsRequest
from protocol.messages.metadata import MetadataRequest
from protocol.messages.offset_commit import OffsetCommitRequest
from protocol.messages.offset_fetch import OffsetFetchRequest
from protocol.messages.read_share_group_state import ReadShareGroupStateRequest
from protocol.messages.share_group_heartbeat import ShareGroupHeartbeatRequest
from protocol.records import build_batch, validate_records
from tests.support import create_topic, set_group_configs, topic_id, unique, until
from tests.wire import WireClient

LOADING = Errors.COORDINATOR_LOAD_IN_PROGRESS
HOLD = "sharebroker.coordinator.test.load.hold.file"


def loaded(broker, since: int = 0) -> bool:
    """The broker logged that its coordinators are loaded (in its log lines from ``since`` on)."""
    return any("coordinators loaded" in line for line in broker.log_lines[since:])


def fetch_req(group, topic, partitions):
    return OffsetFetchRequest(groups=[OffsetFetchRequest.OffsetFetchRequestGroup(
        group_id=group, member_id=None, member_epoch=-1, topics=[
            OffsetFetchRequest.OffsetFetchRequestTopics(name=topic, partition_indexes=list(partitions))])])


def committed(w: WireClient, group: str, topic: str, partitions) -> dict[int, int]:
    g = w.request(fetch_req(group, topic, partitions), 8).groups[0]
    assert g.error_code == 0, g
    return {p.partition_index: p.committed_offset for t in g.topics for p in t.partitions}


def coordinator_answers(w: WireClient, topic: str, tid: bytes) -> dict[str, int]:
    """The error code of one request of each coordinator API (and of APIs that never wait for them)."""
    out = {}
    fc = w.request(FindCoordinatorRequest(key_type=0, coordinator_keys=["g"]), 4)
    out["FindCoordinator"] = fc.coordinators[0].error_code
    md = w.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)]), 12)
    out["Metadata"] = md.topics[0].error_code
    out["OffsetFetch"] = w.request(fetch_req("g", topic, [0]), 8).groups[0].error_code
    r = w.request(OffsetCommitRequest(group_id="g", generation_id_or_member_epoch=-1, member_id="", topics=[
        OffsetCommitRequest.OffsetCommitRequestTopic(name=topic, partitions=[
            OffsetCommitRequest.OffsetCommitRequestPartition(partition_index=0, committed_offset=1)])]), 8)
    out["OffsetCommit"] = r.topics[0].partitions[0].error_code
    out["JoinGroup"] = w.request(JoinGroupRequest(
        group_id="cg", session_timeout_ms=10000, rebalance_timeout_ms=10000, member_id="", protocol_type="consumer",
        protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")]), 5).error_code
    out["Heartbeat"] = w.request(HeartbeatRequest(group_id="cg", generation_id=1, member_id="m"), 3).error_code
    out["ListGroups"] = w.request(ListGroupsRequest(), 4).error_code
    out["DescribeGroups"] = w.request(DescribeGroupsRequest(groups=["g"]), 5).groups[0].error_code
    out["ConsumerGroupHeartbeat"] = w.request(ConsumerGroupHeartbeatRequest(
        group_id="kg", member_id=unique("m"), member_epoch=0, rebalance_timeout_ms=5000,
        subscribed_topic_names=[topic], topic_partitions=[]), 1).error_code
    out["ShareGroupHeartbeat"] = w.request(ShareGroupHeartbeatRequest(
        group_id="sg", member_id=unique("m"), member_epoch=0, subscribed_topic_names=[topic]), 1).error_code
    out["InitProducerId(transactional)"] = w.request(InitProducerIdRequest(
        transactional_id="tx", transaction_timeout_ms=10000, producer_id=-1, producer_epoch=-1), 4).error_code
    out["InitProducerId(idempotent)"] = w.request(InitProducerIdRequest(
        transactional_id=None, transaction_timeout_ms=-1, producer_id=-1, producer_epoch=-1), 4).error_code
    out["DescribeTransactions"] = w.request(DescribeTransactionsRequest(
        transactional_ids=["tx"]), 0).transaction_states[0].error_code
    out["ListTransactions"] = w.request(ListTransactionsRequest(), 0).error_code
    R_ = ReadShareGroupStateRequest
    out["ReadShareGroupState"] = w.request(R_(group_id="sg", topics=[R_.ReadStateData(topic_id=tid, partitions=[
        R_.PartitionData(partition=0, leader_epoch=0)])]), 0).results[0].partitions[0].error_code
    return out


def test_coordinator_apis_answer_load_in_progress_until_loaded(broker_factory, tmp_path, consume_range):
    hold = tmp_path / "hold"
    hold.touch()
    b = broker_factory({HOLD: hold})  # start() returned: the broker accepts connections, nothing loaded
    topic = create_topic(b.bootstrap)  # admin requests are served while the coordinators load
    p = Producer({"bootstrap.servers": b.bootstrap, "enable.idempotence": True})  # InitProducerId, Produce
    p.produce(topic, b"v")
    assert p.flush(15) == 0
    assert [m.value() for m in consume_range(b.bootstrap, topic, 0, 0, 1)] == [b"v"]  # Fetch
    tid = topic_id(b.bootstrap, topic)
    with WireClient(b.bootstrap) as w:
        while_loading = coordinator_answers(w, topic, tid)
    assert not loaded(b)
    assert while_loading == {
        "FindCoordinator": 0, "Metadata": 0, "InitProducerId(idempotent)": 0,
        "Heartbeat": 0,  # Kafka answers a classic heartbeat NONE while the group loads
        "OffsetFetch": LOADING, "OffsetCommit": LOADING, "JoinGroup": LOADING, "ListGroups": LOADING,
        "DescribeGroups": LOADING, "ConsumerGroupHeartbeat": LOADING, "ShareGroupHeartbeat": LOADING,
        "InitProducerId(transactional)": LOADING, "DescribeTransactions": LOADING, "ListTransactions": LOADING,
        "ReadShareGroupState": LOADING}
    os.unlink(hold)
    until(lambda: loaded(b), 30, "coordinators loaded")
    with WireClient(b.bootstrap) as w:
        after = coordinator_answers(w, topic, tid)
    assert {k for k, v in after.items() if v == LOADING} == set()
    assert after["OffsetFetch"] == after["OffsetCommit"] == after["InitProducerId(transactional)"] == 0


# ------------------------------------------------------------------ real clients on a big __consumer_offsets
PARTITIONS, PER_PARTITION, RESUME_AT, HISTORY = 4, 100, 50, 100_000


def write_history(data_dir, topic: str, group: str) -> None:
    """``HISTORY`` offset commits of ``group`` on ``topic`` (what hours of auto-commit leave), the last one of each
    partition at RESUME_AT, appended to the stopped broker's ``__consumer_offsets``."""
    plog = PartitionLog(os.path.join(data_dir, "__consumer_offsets-0"), "__consumer_offsets", 0,
                        {"segment.bytes": 104857600}, clean_shutdown=True)
    now = int(time.time() * 1000)
    rounds = HISTORY // PARTITIONS
    for i in range(rounds):
        offset = RESUME_AT if i == rounds - 1 else i % RESUME_AT
        batch = build_batch([(*encode_record(r.key, r.value, r.value_version), []) for r in (
            R.offset_commit(group, topic, p, offset, -1, "", now, None, None) for p in range(PARTITIONS))],
            timestamp=now)
        plog.append(batch, validate_records(batch, client=False), check_producer=False)
    plog.close()


class Client(threading.Thread):
    """Runs one client job to the end; ``error`` holds what went wrong."""

    def __init__(self, name, job):
        super().__init__(name=name, daemon=True)
        self.job, self.result, self.error = job, None, None

    def run(self):
        try:
            self.result = self.job()
        except BaseException as e:  # noqa: BLE001 - reported by the test
            self.error = e


def confluent_group(bs, topic, group, want):
    c = Consumer({"bootstrap.servers": bs, "group.id": group, "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "fetch.wait.max.ms": 50})
    c.subscribe([topic])
    got = []
    deadline = time.monotonic() + 90
    try:
        while len(got) < want and time.monotonic() < deadline:
            for m in c.consume(100, 0.2):
                assert m.error() is None, m.error()
                got.append((m.partition(), m.offset()))
        c.commit(asynchronous=False)
    finally:
        c.close()
    return got


def kafka_python_group(bs, topic, group, want):
    from kafka import KafkaConsumer

    c = KafkaConsumer(topic, bootstrap_servers=bs, group_id=group, enable_auto_commit=False,
                      auto_offset_reset="earliest")
    got = []
    deadline = time.monotonic() + 90
    try:
        while len(got) < want and time.monotonic() < deadline:
            for records in c.poll(timeout_ms=200).values():
                got += [(r.partition, r.offset) for r in records]
        c.commit()
    finally:
        c.close()
    return got


def aiokafka_group(bs, topic, group, want):
    from aiokafka import AIOKafkaConsumer

    async def run():
        c = AIOKafkaConsumer(topic, bootstrap_servers=bs, group_id=group, enable_auto_commit=False,
                             auto_offset_reset="earliest")
        await c.start()
        got = []
        deadline = time.monotonic() + 90
        try:
            while len(got) < want and time.monotonic() < deadline:
                for records in (await c.getmany(timeout_ms=200)).values():
                    got += [(r.partition, r.offset) for r in records]
            await c.commit()
        finally:
            await c.stop()
        return got

    return asyncio.run(run())


def transactional_producer(bs, topic):
    p = Producer({"bootstrap.servers": bs, "transactional.id": unique("tx"), "linger.ms": 5})
    p.init_transactions(90)
    p.begin_transaction()
    for i in range(10):
        p.produce(topic, b"t%d" % i, partition=0)
    p.commit_transaction(90)
    return 10


def share_group(bs, topic, group, want):
    c = ShareConsumer({"bootstrap.servers": bs, "group.id": group})
    c.subscribe([topic])
    got = set()
    deadline = time.monotonic() + 90
    try:
        while len(got) < want and time.monotonic() < deadline:
            for m in c.poll(0.5) or []:
                assert m.error() is None, m.error()
                got.add((m.partition(), m.offset()))
    finally:
        c.close()
    return got


def requests_seen(url: str) -> dict[str, float]:
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(url, timeout=10) as r:
        text = r.read().decode()
    return {s.labels["request"]: s.value for f in text_string_to_metric_families(text) for s in f.samples
            if s.name == "kafka_network_requestmetrics_requests_total"}


def test_real_clients_retry_and_proceed_on_a_big_offsets_log(broker_factory, tmp_path):
    hold = tmp_path / "hold"
    b = broker_factory({"sharebroker.metrics.listener": "127.0.0.1:0", "group.initial.rebalance.delay.ms": 0,
                        "group.share.heartbeat.interval.ms": 500, "group.share.min.heartbeat.interval.ms": 500})
    bs = b.bootstrap
    topic, txn_topic = create_topic(bs, PARTITIONS), create_topic(bs, 1)
    p = Producer({"bootstrap.servers": bs, "linger.ms": 5})
    for i in range(PARTITIONS * PER_PARTITION):
        p.produce(topic, b"%d" % i, partition=i % PARTITIONS)
    assert p.flush(30) == 0
    resume, share = unique("resume"), unique("sg")
    set_group_configs(bs, share, share_auto_offset_reset="earliest")
    b.stop()
    write_history(b.data_dir, topic, resume)

    hold.touch()
    b.config[HOLD] = str(hold)
    since = len(b.log_lines)
    b.start()
    total = PARTITIONS * PER_PARTITION
    clients = [
        Client("confluent resumes", lambda: confluent_group(bs, topic, resume, PARTITIONS * (PER_PARTITION - RESUME_AT))),
        Client("kafka-python", lambda: kafka_python_group(bs, topic, unique("kp"), total)),
        Client("aiokafka", lambda: aiokafka_group(bs, topic, unique("aio"), total)),
        Client("transactional producer", lambda: transactional_producer(bs, txn_topic)),
        Client("share consumer", lambda: share_group(bs, topic, share, total)),
    ]
    for c in clients:
        c.start()
    # every kind of client has asked a loading coordinator, and was answered COORDINATOR_LOAD_IN_PROGRESS
    until(lambda: (lambda seen: seen.get("JoinGroup", 0) >= 3 and seen.get("InitProducerId", 0) >= 1
                   and seen.get("ShareGroupHeartbeat", 0) >= 1)(requests_seen(b.metrics_url)),
          60, "the clients' first coordinator requests")
    assert not loaded(b, since)
    with WireClient(bs) as w:  # what those clients were answered
        assert w.request(fetch_req(resume, topic, [0]), 8).groups[0].error_code == LOADING
    os.unlink(hold)
    for c in clients:
        c.join(120)
        assert not c.is_alive(), f"{c.name} still running"
        assert c.error is None, f"{c.name}: {c.error!r}"
    resumed = clients[0].result
    assert sorted(resumed) == [(p, o) for p in range(PARTITIONS) for o in range(RESUME_AT, PER_PARTITION)]
    for c in clients[1:3]:
        assert sorted(set(c.result)) == [(p, o) for p in range(PARTITIONS) for o in range(PER_PARTITION)]
    assert len(clients[4].result) == total
    with WireClient(bs) as w:
        assert committed(w, resume, topic, range(PARTITIONS)) == {p: PER_PARTITION for p in range(PARTITIONS)}
    tp = TopicPartition(txn_topic, 0, 0)
    c = Consumer({"bootstrap.servers": bs, "group.id": unique("r"), "isolation.level": "read_committed"})
    c.assign([tp])
    got = []
    until(lambda: got.extend(m.value() for m in c.consume(100, 0.2) if m.error() is None) or len(got) >= 10, 30,
          "the committed transaction")
    c.close()
    assert got == [b"t%d" % i for i in range(10)]
