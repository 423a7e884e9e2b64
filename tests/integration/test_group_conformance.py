"""Group coordination found wrong by real clients and a fuzzer (issue 8, items 1, 2, 3 and 6),
over sockets with real clients (kafka-python, confluent-kafka) or the project's codec.

1. A JoinGroup listing the same protocol twice (aiokafka with the same assignor twice) no
   longer blocks the classic group: both members get an assignment.
2. A ShareGroupHeartbeat whose SubscribedTopicNames holds a null is refused by the codec (the
   connection is closed, as Kafka closes it for an unparseable request); the group is not
   poisoned, also after a restart.
3. The ``lag`` assignor counts a fresh group's backlog by default (seed 001), and the group
   config ``consumer.auto.offset.reset`` is accepted by IncrementalAlterConfigs.
6. Two ShareConsumers joining a new group together share its partitions from their first
   records on (librdkafka test 0172): neither drains everything before the split.
"""
from __future__ import annotations

import socket
import struct
import time

import pytest
from confluent_kafka import KafkaException, Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, ConfigResource

from broker.testing import BrokerProcess
from protocol.errors import Errors
from protocol.messages.share_group_heartbeat import ShareGroupHeartbeatRequest as HbReq
from tests.integration.test_lag_assignor import lagging_topic, run_group
from tests.support import create_topic, set_group_configs, unique
from tests.wire import WireClient


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("conformance"), config={
            "group.consumer.heartbeat.interval.ms": "500", "group.consumer.min.heartbeat.interval.ms": "500",
            "group.initial.rebalance.delay.ms": "0"}) as b:
        yield b


# ------------------------------------------------------------------ 1. duplicate protocol names
def test_join_group_with_a_protocol_listed_twice(broker):
    """aiokafka sends one protocol per configured assignor, duplicates included (kafka-python
    dedups them by name); the duplicated member and a well-formed one both get partitions."""
    import asyncio

    from aiokafka import AIOKafkaConsumer
    from aiokafka.coordinator.assignors.range import RangePartitionAssignor
    from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

    topic = create_topic(broker.bootstrap, 4)
    group = unique("classic")

    async def run():
        common = dict(bootstrap_servers=broker.bootstrap, group_id=group, session_timeout_ms=10000,
                      heartbeat_interval_ms=300)
        twice = AIOKafkaConsumer(topic, partition_assignment_strategy=(
            RoundRobinPartitionAssignor, RoundRobinPartitionAssignor, RangePartitionAssignor), **common)
        plain = AIOKafkaConsumer(topic, partition_assignment_strategy=(RoundRobinPartitionAssignor,), **common)
        await twice.start()
        await plain.start()
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                await asyncio.gather(twice.getmany(timeout_ms=100), plain.getmany(timeout_ms=100))
                a, b = twice.assignment(), plain.assignment()
                if a and b and len(a) + len(b) == 4:
                    return {tp.partition for tp in a}, {tp.partition for tp in b}
            raise AssertionError(f"not both assigned: {twice.assignment()} / {plain.assignment()}")
        finally:
            await twice.stop()
            await plain.stop()

    a, b = asyncio.run(run())
    assert a | b == {0, 1, 2, 3} and not a & b


# ------------------------------------------------------------------ 2. a null topic name
def _frame_with_null_topic(w: WireClient, group: str, member: str, topic: str) -> bytes:
    marker = "NULL-ME!"
    req = HbReq(group_id=group, member_id=member, member_epoch=0, subscribed_topic_names=[marker, topic])
    _, frame = w.frame(req, 1)
    encoded = bytes([len(marker) + 1]) + marker.encode()  # compact string
    assert frame.count(encoded) == 1
    body = frame[4:].replace(encoded, b"\x00")  # compact null
    return struct.pack(">i", len(body)) + body


def _closed_without_answer(w: WireClient, timeout: float = 10.0) -> bool:
    w.sock.settimeout(timeout)
    try:
        return w.sock.recv(1) == b""
    except (ConnectionResetError, socket.timeout):
        return False


def test_null_subscribed_topic_name_is_refused_and_does_not_poison_the_group(tmp_path):
    with BrokerProcess(tmp_path / "d") as b:
        topic = create_topic(b.bootstrap, 2)
        group = unique("sg")
        with WireClient(b.bootstrap) as w:
            w.send_raw(_frame_with_null_topic(w, group, "bad", topic))
            assert _closed_without_answer(w)
        with WireClient(b.bootstrap) as w:
            r = w.request(HbReq(group_id=group, member_id="good", member_epoch=0, subscribed_topic_names=[topic]), 1)
            assert r.error_code == 0, r
            r = w.request(HbReq(group_id=group, member_id="good", member_epoch=r.member_epoch), 1)
            assert r.error_code == 0, r
        b.restart()
        with WireClient(b.bootstrap) as w:
            r = w.request(HbReq(group_id=group, member_id="other", member_epoch=0, subscribed_topic_names=[topic]), 1)
            assert r.error_code == 0, r


# ------------------------------------------------------------------ 3. lag assignor default
def test_lag_assignor_counts_a_new_groups_backlog_by_default(broker):
    """No broker setting, no group config, no commits: lag = log end - log start (seed 001), so the
    seed's example (at a tenth of its scale) is balanced by lag, not by partition count."""
    topic = lagging_topic(broker.bootstrap, {0: 10_000, 1: 6_000, 2: 5_000})
    sets = run_group(broker.bootstrap, topic, "lag")
    assert set(sets) == {frozenset({0}), frozenset({1, 2})}


def test_consumer_auto_offset_reset_group_config(broker):
    group = unique("cg")
    set_group_configs(broker.bootstrap, group, consumer_auto_offset_reset="latest")
    res = ConfigResource(ConfigResource.Type.GROUP, group)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    described = admin.describe_configs([res])[res].result(15)
    assert described["consumer.auto.offset.reset"].value == "latest"
    with pytest.raises(KafkaException) as e:
        set_group_configs(broker.bootstrap, group, consumer_auto_offset_reset="sometimes")
    assert e.value.args[0].code() == Errors.INVALID_CONFIG
    # under "latest" a never-committed partition counts 0: the lag assignor falls back to counts
    topic = lagging_topic(broker.bootstrap, {0: 3_000, 1: 10, 2: 10})
    sets = run_group(broker.bootstrap, topic, "lag", group)
    assert sorted(map(len, sets)) == [1, 2]


# ------------------------------------------------------------------ 6. first assignment of a new share group
def test_share_consumers_joining_together_split_the_partitions(tmp_path):
    """librdkafka 0172's shape: two ShareConsumers (implicit and explicit acknowledgement) subscribe to a
    new group one right after the other.  The group computes its first assignment
    group.share.initial.assignment.delay.ms (100 ms) after the first member joined and answers both
    joining heartbeats then (issue 29 item 6; before, after the 1 s assignment interval): each reads
    only its own partition.  (Before issue 8, the first member's first heartbeat took every partition
    and it drained both before the split.)"""
    kafka_defaults = {"group.share.min.heartbeat.interval.ms": "5000", "group.share.heartbeat.interval.ms": "5000"}
    with BrokerProcess(tmp_path / "d", config=kafka_defaults) as b:
        bs = b.bootstrap
        topic = create_topic(bs, 2)
        group = unique("sg")
        set_group_configs(bs, group, share_auto_offset_reset="earliest")
        p = Producer({"bootstrap.servers": bs})
        for i in range(400):
            p.produce(topic, value=b"%d" % i, partition=i % 2)
        assert p.flush(30) == 0
        consumers = [ShareConsumer({"bootstrap.servers": bs, "group.id": group, "share.acknowledgement.mode":
                                    mode}) for mode in ("implicit", "explicit")]
        seen: list[set[int]] = [set(), set()]
        got = [0, 0]
        try:
            consumers[0].subscribe([topic])
            consumers[1].subscribe([topic])
            deadline = time.monotonic() + 60
            while sum(got) < 400 and time.monotonic() < deadline:
                for i, c in enumerate(consumers):
                    for m in c.poll(0.2) or []:
                        assert m.error() is None, m.error()
                        seen[i].add(m.partition())
                        got[i] += 1
                        if i == 1:
                            c.acknowledge(m)
            assert sum(got) >= 400, got
            assert seen[0] and seen[1] and not seen[0] & seen[1], seen
        finally:
            for c in consumers:
                c.close()
