"""The lag-aware server-side assignor (seed 001) with librdkafka's KIP-848 consumer.

Seed example at full scale: one topic, partitions lagging 100,000 / 60,000 / 50,000 records, two
consumers (``group.protocol=consumer``).  With ``group.remote.assignor=lag`` each consumer's total
assigned lag is balanced (100,000 vs 110,000); ``range`` gives the 160,000 / 50,000 split the seed
criticises, and so does ``uniform`` when the first consumer owned everything (it is sticky and keeps
partitions 0 and 1).  The group never commits here, so lag is log end minus log start under the
broker's ``group.consumer.lag.offset.reset=earliest``.  A second test shapes the lags with committed
offsets instead.  Assignments are checked as the clients see them (``Consumer.assignment()``) and
as ConsumerGroupDescribe reports them.
"""
from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

from broker.testing import BrokerProcess
from protocol.messages.consumer_group_describe import ConsumerGroupDescribeRequest
from tests.wire import WireClient

SEED_LAGS = {0: 100_000, 1: 60_000, 2: 50_000}
CONFIG = {
    "group.consumer.lag.offset.reset": "earliest",  # the group never committed: lag = all records
    "group.consumer.heartbeat.interval.ms": "500",
    "group.consumer.min.heartbeat.interval.ms": "500",
}


def until(cond, timeout: float, what: str, interval: float = 0.01):
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("lag"), config=CONFIG) as b:
        yield b


def lagging_topic(bootstrap: str, counts: dict[int, int]) -> str:
    """A topic whose partition p holds counts[p] small records."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, len(counts))])[name].result(15)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 10000,
                  "queue.buffering.max.messages": 500000})
    for partition, n in counts.items():
        for _ in range(n):
            p.produce(name, value=b"x", partition=partition)
        p.poll(0)
    assert p.flush(60) == 0
    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": "watermarks"})
    try:
        assert {p: reader.get_watermark_offsets(TopicPartition(name, p), 10) for p in counts} == \
            {p: (0, n) for p, n in counts.items()}
    finally:
        reader.close()
    return name


def consumer(bootstrap: str, group: str, topic: str, assignor: str) -> Consumer:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
                  "group.remote.assignor": assignor, "enable.auto.commit": False,
                  "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    return c


def assigned(c: Consumer) -> frozenset[int]:
    return frozenset(tp.partition for tp in c.assignment())


def settle(consumers: list[Consumer], partitions: int, timeout: float = 20.0) -> list[frozenset[int]]:
    """Poll until every consumer has partitions and together they own each partition exactly once."""
    def done():
        for c in consumers:
            c.poll(0.02)
        sets = [assigned(c) for c in consumers]
        if all(sets) and sum(map(len, sets)) == partitions and frozenset().union(*sets) == set(range(partitions)):
            return sets
        return None

    return until(done, timeout, "the assignment to settle")


def describe(bootstrap: str, group: str):
    with WireClient(bootstrap) as w:
        g = w.request(ConsumerGroupDescribeRequest(group_ids=[group]), 1).groups[0]
    assert g.error_code == 0, g
    return g


def run_group(bootstrap: str, topic: str, assignor: str, group: str | None = None):
    """First consumer joins and takes everything, then the second joins; returns the two settled
    assignments (in join order) after checking them against ConsumerGroupDescribe."""
    group = group or f"g-{uuid.uuid4().hex[:8]}"
    first = consumer(bootstrap, group, topic, assignor)
    second = None
    try:
        assert settle([first], 3) == [frozenset({0, 1, 2})]
        second = consumer(bootstrap, group, topic, assignor)
        sets = settle([first, second], 3)
        g = describe(bootstrap, group)
        assert g.assignor_name == assignor and g.group_state == "Stable"
        by_member = {m.member_id: m for m in g.members}
        for c, mine in zip((first, second), sets):
            m = by_member[c.memberid()]
            parts = {p for tp in m.assignment.topic_partitions for p in tp.partitions}
            target = {p for tp in m.target_assignment.topic_partitions for p in tp.partitions}
            assert parts == target == mine, (parts, target, mine)
        return sets
    finally:
        for c in (first, second):
            if c is not None:
                c.close()


def totals(sets, lags) -> list[int]:
    return [sum(lags[p] for p in s) for s in sets]


@pytest.fixture(scope="module")
def seed_topic(broker):
    return lagging_topic(broker.bootstrap, SEED_LAGS)


def test_lag_assignor_balances_total_lag(broker, seed_topic):
    sets = run_group(broker.bootstrap, seed_topic, "lag")
    # largest lag first: p0 to one consumer, p1 to the other, p2 to the one with less lag so far
    assert set(sets) == {frozenset({0}), frozenset({1, 2})}
    assert sorted(totals(sets, SEED_LAGS)) == [100_000, 110_000]


def test_range_assignor_gives_the_unbalanced_split(broker, seed_topic):
    sets = run_group(broker.bootstrap, seed_topic, "range")
    assert set(sets) == {frozenset({0, 1}), frozenset({2})}  # contiguous ranges, in member-id order
    assert sorted(totals(sets, SEED_LAGS)) == [50_000, 160_000]


def test_uniform_assignor_is_sticky_and_ignores_lag(broker, seed_topic):
    sets = run_group(broker.bootstrap, seed_topic, "uniform")
    # the first consumer owned 0, 1, 2 and keeps its quota of two (the lowest), the newcomer gets 2
    assert sets == [frozenset({0, 1}), frozenset({2})]
    assert totals(sets, SEED_LAGS) == [160_000, 50_000]


def test_lag_comes_from_committed_offsets(broker):
    """The seed's lags at a tenth of the scale, made by committing 0 / 4,000 / 5,000 of 10,000
    records per partition.  Were the commits ignored, every lag would be 10,000 and partitions 0
    and 2 would go together."""
    bs = broker.bootstrap
    topic = lagging_topic(bs, {0: 10_000, 1: 10_000, 2: 10_000})
    group = f"g-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bs})
    commits = {0: 0, 1: 4_000, 2: 5_000}
    req = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p, o) for p, o in commits.items()])
    admin.alter_consumer_group_offsets([req])[group].result(15)
    lags = {p: 10_000 - o for p, o in commits.items()}

    sets = run_group(bs, topic, "lag", group)
    assert set(sets) == {frozenset({0}), frozenset({1, 2})}
    assert sorted(totals(sets, lags)) == [10_000, 11_000]
    sets = run_group(bs, topic, "range", group)
    assert sorted(totals(sets, lags)) == [5_000, 16_000]
