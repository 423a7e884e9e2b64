"""KIP-211 offset expiration (seed 002) with real consumers, a 2-second retention and restarts.

The broker runs with ``offsets.retention.ms`` (our millisecond override of Kafka's
``offsets.retention.minutes``, see coordinator/group/config.py) at 2000 and a 100 ms cleanup
interval.  "Retention has passed and a cleanup ran" is never waited for with a sleep: a *control*
group (a standalone commit, which expires by commit time) is committed after the offsets under
test, and the test waits until the control is gone; anything that should have expired by then
has had its chance.

- an active group keeps offsets older than the retention, also across kill -9;
- a classic group's clock starts when it becomes Empty (persisted: a restart neither loses the
  offsets nor restarts the clock from zero); a KIP-848 group's Empty offsets expire by commit
  time, as Kafka's ConsumerGroup does; either way the group then goes Dead and stays gone;
- a topic the active group no longer subscribes to expires while the group is active;
- standalone (assign + commit) offsets expire by their own commit time.
"""
from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from broker.testing import BrokerProcess
from protocol.errors import Errors
from protocol.messages.consumer_group_describe import ConsumerGroupDescribeRequest
from protocol.messages.describe_groups import DescribeGroupsRequest
from protocol.messages.list_groups import ListGroupsRequest
from protocol.messages.offset_commit import OffsetCommitRequest
from protocol.messages.offset_fetch import OffsetFetchRequest
from tests.wire import WireClient
from tests.support import unique, until

RETENTION_S = 2.0
# An offset expires no sooner than this after a time taken before its commit (or the group's Empty)
# was sent: the broker's clock starts later, when it handles the request, and counts whole milliseconds.
EXPIRES_AFTER_S = RETENTION_S - 0.001
CONFIG = {
    "offsets.retention.ms": str(int(RETENTION_S * 1000)),
    "offsets.retention.check.interval.ms": "100",
    "group.initial.rebalance.delay.ms": "0",
    "group.consumer.heartbeat.interval.ms": "500",
    "group.consumer.min.heartbeat.interval.ms": "500",
}


# ------------------------------------------------------------------ helpers
class Broker(BrokerProcess):
    def crash_and_restart(self) -> None:
        self.kill9()
        self.start()


@pytest.fixture
def broker(tmp_path):
    b = Broker(tmp_path / "data", config=CONFIG)
    b.start()
    try:
        yield b
    finally:
        b.close()


def create_topics(bootstrap: str, n: int, partitions: int = 2) -> list[str]:
    names = [unique("t") for _ in range(n)]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(t, partitions) for t in names]).values():
        f.result(15)
    return names


def produce(bootstrap: str, topic: str, per_partition: int, partitions: int = 2) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 2})
    for i in range(per_partition * partitions):
        p.produce(topic, value=b"v%d" % i, partition=i % partitions)
    assert p.flush(15) == 0


def committed(bs: str, group: str, topics: list[str], partitions: int = 2) -> dict[tuple[str, int], int]:
    """The group's committed offsets (OffsetFetch v8, as an admin: no member id, epoch -1)."""
    G = OffsetFetchRequest.OffsetFetchRequestGroup
    T = OffsetFetchRequest.OffsetFetchRequestTopics
    with WireClient(bs) as w:
        r = w.request(OffsetFetchRequest(groups=[G(group_id=group, member_id=None, member_epoch=-1, topics=[
            T(name=t, partition_indexes=list(range(partitions))) for t in topics])]), 8)
    g = r.groups[0]
    assert g.error_code == 0, g
    return {(t.name, p.partition_index): p.committed_offset for t in g.topics for p in t.partitions
            if p.committed_offset >= 0}


def standalone_commit(bs: str, group: str, topic: str, partition: int = 0, offset: int = 1) -> None:
    """A commit without membership (generation -1): a 'simple' group, expiring by commit time."""
    P = OffsetCommitRequest.OffsetCommitRequestPartition
    with WireClient(bs) as w:
        r = w.request(OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=-1, member_id="",
                                          topics=[OffsetCommitRequest.OffsetCommitRequestTopic(
                                              name=topic, partitions=[P(partition_index=partition,
                                                                        committed_offset=offset)])]), 8)
    assert r.topics[0].partitions[0].error_code == 0


def listed(bs: str) -> dict[str, str]:
    with WireClient(bs) as w:
        r = w.request(ListGroupsRequest(), 5)
    return {g.group_id: g.group_state for g in r.groups}


def assert_dead(bs: str, group: str, protocol: str) -> None:
    """Gone everywhere: not listed, described as Dead / not found, no offsets."""
    assert group not in listed(bs)
    with WireClient(bs) as w:
        d = w.request(DescribeGroupsRequest(groups=[group]), 5).groups[0]
        assert (d.error_code, d.group_state, d.members) == (0, "Dead", [])
        d = w.request(DescribeGroupsRequest(groups=[group]), 6).groups[0]
        assert d.error_code == Errors.GROUP_ID_NOT_FOUND
        if protocol == "consumer":
            d = w.request(ConsumerGroupDescribeRequest(group_ids=[group]), 1).groups[0]
            assert d.error_code == Errors.GROUP_ID_NOT_FOUND


def new_consumer(bs: str, group: str, protocol: str, topics: list[str]) -> Consumer:
    c = Consumer({"bootstrap.servers": bs, "group.id": group, "group.protocol": protocol,
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    c.subscribe(topics)
    return c


def consume_n(c: Consumer, n: int, timeout: float = 20.0) -> None:
    got = []

    def step():
        for m in c.consume(100, 0.05):
            assert m.error() is None, m.error()
            got.append(m)
        return len(got) >= n

    until(step, timeout, f"{n} records")
    assert len(got) == n


def wait_expired(bs: str, control: str, topic: str, poll: Consumer | None = None, timeout: float = 20.0) -> float:
    """Wait until the control group's offset is gone (polling ``poll`` meanwhile, so an active consumer
    stays active); returns when."""
    def gone():
        if poll is not None:
            m = poll.poll(0.02)
            assert m is None or m.error() is None, m.error()
        return not committed(bs, control, [topic], 1)

    until(gone, timeout, f"the control group {control} to expire")
    return time.monotonic()


# ------------------------------------------------------------------ an active group, then Empty, then Dead
@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_active_group_keeps_offsets_then_empty_group_expires_and_goes_dead(broker, protocol):
    bs = broker.bootstrap
    (topic,) = create_topics(bs, 1)
    produce(bs, topic, 5)
    group = unique("g")
    c = new_consumer(bs, group, protocol, [topic])
    try:
        consume_n(c, 10)
        t_commit = time.monotonic()
        c.commit(asynchronous=False)
        want = {(topic, 0): 5, (topic, 1): 5}
        assert committed(bs, group, [topic]) == want

        # active: offsets older than the retention stay (the control, committed later, expired)
        control = unique("control")
        standalone_commit(bs, control, topic)
        assert wait_expired(bs, control, topic, poll=c) - t_commit >= EXPIRES_AFTER_S
        assert committed(bs, group, [topic]) == want
        assert listed(bs)[group] == "Stable"

        # ... also across kill -9: the members are still there after the restart, so nothing expires.
        # While waiting, a third control is committed 0.4 retention later: it will expire 0.4
        # retention after the group becomes Empty, which the Empty phase below uses.
        control = unique("control")
        standalone_commit(bs, control, topic)
        t_control = time.monotonic()
        broker.crash_and_restart()
        assert committed(bs, group, [topic]) == want
        late_control = unique("control")

        def control_gone():
            if late_control not in listed(bs) and time.monotonic() - t_control >= 0.4 * RETENTION_S:
                standalone_commit(bs, late_control, topic)
            return late_control in listed(bs) and not committed(bs, control, [topic], 1)

        until(control_gone, 20, "the control group to expire")  # (librdkafka heartbeats in its own thread)
        assert c.poll(0.01) is None
        assert committed(bs, group, [topic]) == want
        assert listed(bs)[group] == "Stable"

        # a fresh commit for partition 1 only, just before the group empties
        produce(bs, topic, 1)
        consume_n(c, 2)
        t_fresh_sent = time.monotonic()  # the broker's commit time is later
        c.commit(offsets=[TopicPartition(topic, 1, 6)], asynchronous=False)
    finally:
        t_empty = time.monotonic()
        c.close()
    until(lambda: listed(bs).get(group) == "Empty", 10, "the group to be Empty")

    # kill -9 while Empty; then wait for a cleanup pass after the restart (the late control expiring)
    broker.crash_and_restart()
    wait_expired(bs, late_control, topic)
    offsets = committed(bs, group, [topic])
    # What is still there within the retention of its clock's start (a lower bound of it here): a
    # slow close and restart on a loaded machine may take longer, and then it may be gone, rightly.
    kept = time.monotonic() - (t_empty if protocol == "classic" else t_fresh_sent) < RETENTION_S
    if protocol == "classic":
        # the clock started when the group became Empty (KIP-211) and survived the crash:
        # all offsets are still there although the oldest commit is older than the retention
        assert offsets == {(topic, 0): 5, (topic, 1): 6} or (not kept and offsets == {})
        gone_after = t_empty
    else:
        # KIP-848 groups (as Kafka's ConsumerGroup): an Empty group's offsets expire by commit time,
        # so the old one has gone and the fresh one survived the crash
        assert offsets == {(topic, 1): 6} or (not kept and offsets == {})
        gone_after = t_fresh_sent
    until(lambda: not committed(bs, group, [topic]), 10, "the Empty group's offsets to expire")
    assert time.monotonic() - gone_after >= EXPIRES_AFTER_S
    until(lambda: group not in listed(bs), 5, "the group to be deleted")
    assert_dead(bs, group, protocol)

    # expired means gone for good: a restart does not bring the group or its offsets back
    broker.crash_and_restart()
    assert not committed(bs, group, [topic])
    assert_dead(bs, group, protocol)


# ------------------------------------------------------------------ a topic the group left
@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_unsubscribed_topic_expires_while_group_is_active(broker, protocol):
    bs = broker.bootstrap
    kept, dropped = create_topics(bs, 2)
    for t in (kept, dropped):
        produce(bs, t, 3)
    group = unique("g")
    c = new_consumer(bs, group, protocol, [kept, dropped])
    try:
        consume_n(c, 12)
        t_commit = time.monotonic()
        c.commit(asynchronous=False)
        both = {(t, p): 3 for t in (kept, dropped) for p in (0, 1)}
        assert committed(bs, group, [kept, dropped]) == both

        c.subscribe([kept])  # the group stays active, on one topic only
        until(lambda: c.poll(0.02) is None and {tp.topic for tp in c.assignment()} == {kept}, 15,
              "the assignment to drop the second topic")

        def dropped_gone():
            assert c.poll(0.02) is None
            return all(t == kept for t, _ in committed(bs, group, [kept, dropped]))

        until(dropped_gone, 20, "the unsubscribed topic's offsets to expire")
        assert time.monotonic() - t_commit >= EXPIRES_AFTER_S
        # the subscribed topic's offsets were committed at the same time and stay
        assert committed(bs, group, [kept, dropped]) == {(kept, 0): 3, (kept, 1): 3}
        assert listed(bs)[group] == "Stable"

        # across kill -9: the expired ones do not come back, the others survive later cleanups too
        control = unique("control")
        standalone_commit(bs, control, kept)
        broker.crash_and_restart()
        assert committed(bs, group, [kept, dropped]) == {(kept, 0): 3, (kept, 1): 3}
        wait_expired(bs, control, kept, poll=c)
        assert committed(bs, group, [kept, dropped]) == {(kept, 0): 3, (kept, 1): 3}
        assert listed(bs)[group] == "Stable"
    finally:
        c.close()


# ------------------------------------------------------------------ standalone consumers
def test_standalone_offsets_expire_by_commit_time(broker):
    bs = broker.bootstrap
    (topic,) = create_topics(bs, 1)
    produce(bs, topic, 10)
    group = unique("standalone")
    c = Consumer({"bootstrap.servers": bs, "group.id": group, "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, 0, 0), TopicPartition(topic, 1, 0)])  # no group membership
        t0 = time.monotonic()
        c.commit(offsets=[TopicPartition(topic, 0, 4), TopicPartition(topic, 1, 4)], asynchronous=False)
        assert committed(bs, group, [topic]) == {(topic, 0): 4, (topic, 1): 4}
        assert listed(bs)[group] == "Empty"  # a group without members or protocol type

        # partition 1 is committed again and again: only partition 0's commit ages
        last = [time.monotonic()]

        def p0_gone():
            if time.monotonic() - last[0] >= 0.3:
                last[0] = time.monotonic()
                c.commit(offsets=[TopicPartition(topic, 1, 5)], asynchronous=False)
            return (topic, 0) not in committed(bs, group, [topic])

        until(p0_gone, 20, "partition 0's offset to expire")
        assert time.monotonic() - t0 >= EXPIRES_AFTER_S
        assert committed(bs, group, [topic]) == {(topic, 1): 5}

        # kill -9: the expired offset stays expired, the fresh one survives
        broker.crash_and_restart()
        assert committed(bs, group, [topic]) == {(topic, 1): 5}

        # no more commits: partition 1 goes too, and with it the group
        until(lambda: not committed(bs, group, [topic]), 20, "partition 1's offset to expire")
        assert time.monotonic() - last[0] >= EXPIRES_AFTER_S
        until(lambda: group not in listed(bs), 5, "the group to be deleted")
        assert_dead(bs, group, "classic")
        broker.crash_and_restart()
        assert not committed(bs, group, [topic])
        assert group not in listed(bs)
    finally:
        try:
            c.close()
        except KafkaException:
            pass
