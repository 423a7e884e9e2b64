"""Share-group membership with Kafka's default heartbeat settings (issue 17, items 1-3).

These brokers run with ``group.share.heartbeat.interval.ms`` 5000 (Kafka's default, set explicitly), so
they show what a user with default settings sees:

- a ShareConsumer that calls ``subscribe()`` with other topics loses the old ones in the answer to that
  heartbeat and gets the new ones at the following heartbeat (confluent-kafka-python's
  ``test_resubscribe_to_different_topic``, also with ``share.auto.offset.reset=latest``);
- a new share consumer gets its partitions in the answer to its first heartbeat, and its first records well
  under a second after ``subscribe()`` (issue 29 item 6: the share state is initialized before that answer);
  a member that waits for partitions (it joined just after the group's last assignment) is asked back
  sooner than the 5 s heartbeat interval (ours: a shorter HeartbeatIntervalMs); that members joining
  together still share the first assignment (librdkafka test 0172) is
  test_group_conformance.py::test_share_consumers_joining_together_split_the_partitions, also at the defaults;
- a DLQ topic name starting with ``__`` is refused as a group config (Kafka 4.4's GroupConfig.validate).
"""
from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from broker.testing import BrokerProcess
from protocol.messages.share_group_heartbeat import ShareGroupHeartbeatRequest as HB
from tests.support import create_topic, describe_share_group, set_group_configs, topic_id, unique, until
from tests.wire import WireClient

HEARTBEAT_MS = 5000  # Kafka's group.share.heartbeat.interval.ms (and .min.) default
KAFKA_DEFAULTS = {"group.share.heartbeat.interval.ms": str(HEARTBEAT_MS),
                  "group.share.min.heartbeat.interval.ms": str(HEARTBEAT_MS)}


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("membership"), config=KAFKA_DEFAULTS) as b:
        yield b


def share_consumer(bootstrap: str, group: str) -> ShareConsumer:
    return ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group})


def describe_member(bootstrap: str, group: str):
    """The group's only member as ShareGroupDescribe shows it (None while there is none)."""
    g = describe_share_group(bootstrap, group)
    return g.members[0] if g.error_code == 0 and len(g.members) == 1 else None


def assigned_topics(member, names: dict[bytes, str]) -> set[str]:
    return {names[tp.topic_id] for tp in member.assignment.topic_partitions if tp.partitions}


def poll_into(c: ShareConsumer, out: list, timeout: float = 0.2) -> list:
    for m in c.poll(timeout) or []:
        assert m.error() is None, m.error()
        out.append(m)
    return out


def receive_marker(c: ShareConsumer, p: Producer, topic: str, seen: list, what: str) -> None:
    """Produce markers to ``topic`` until the consumer receives one: its share partition is then being
    fetched, so records produced afterwards reach it whatever ``share.auto.offset.reset`` says."""
    def got():
        p.produce(topic, value=b"marker")
        p.flush(10)
        poll_into(c, seen)
        return any(m.topic() == topic for m in seen)

    until(got, 30, what, interval=0)


@pytest.mark.parametrize("reset", ["earliest", "latest"])
def test_resubscribe_to_a_different_topic_delivers_only_the_new_one(broker, reset):
    bs = broker.bootstrap
    a, b = create_topic(bs, 1, prefix="resub-a"), create_topic(bs, 1, prefix="resub-b")
    names = {topic_id(bs, a): a, topic_id(bs, b): b}
    group = unique("g")
    set_group_configs(bs, group, share_auto_offset_reset=reset)
    p = Producer({"bootstrap.servers": bs, "linger.ms": 0})
    c = share_consumer(bs, group)
    try:
        c.subscribe([a])
        receive_marker(c, p, a, [], f"a record of {a}")
        c.subscribe([b])
        after: list = []
        # The heartbeat carrying the new subscription revokes a in its own answer (Kafka's maybeReconcile
        # with hasSubscriptionChanged), even though it comes right after the first assignment, inside
        # share.assignment.interval.ms.
        def member_when(cond):
            def check():
                poll_into(c, after)  # keeps the consumer going (acknowledgements, callbacks)
                m = describe_member(bs, group)
                return m if m is not None and cond(m) else None
            return check

        member = until(member_when(lambda m: m.subscribed_topic_names == [b]), 30, "the new subscription at the broker")
        assert a not in assigned_topics(member, names), "a is still assigned after the subscription changed"
        # b is initialized before that heartbeat's answer and assigned once the assignment interval allows.
        until(member_when(lambda m: b in assigned_topics(m, names)), 30, f"{b} assigned")
        receive_marker(c, p, b, after, f"a record of {b}")
        for i in range(5):
            p.produce(a, value=b"a-post-%d" % i)
            p.produce(b, value=b"b-%d" % i)
        p.flush(10)
        until(lambda: len([m for m in poll_into(c, after) if m.value().startswith(b"b-")]) >= 5, 30,
              "the five b records")
        poll_into(c, after, 1.0)
        assert {m.topic() for m in after if m.value() != b"marker"} == {b}, \
            [(m.topic(), m.value()) for m in after]
        assert sorted(m.value() for m in after if m.value().startswith(b"b-")) == [b"b-%d" % i for i in range(5)]
    finally:
        c.close()


def test_first_records_do_not_wait_for_a_second_heartbeat(broker):
    """With Kafka's default 5 s heartbeat interval a new consumer used to get its partitions at its
    second heartbeat, 5 s after subscribe(), then (ours) ~1.1 s after it; now its first heartbeat's
    answer carries them (issue 29 item 6): the first records arrive well under a second."""
    bs = broker.bootstrap
    topic, group = create_topic(bs, 2), unique("g")
    set_group_configs(bs, group, share_auto_offset_reset="earliest")
    p = Producer({"bootstrap.servers": bs})
    for i in range(10):
        p.produce(topic, value=b"%d" % i, partition=i % 2)
    assert p.flush(10) == 0
    c = share_consumer(bs, group)
    try:
        start = time.monotonic()
        c.subscribe([topic])
        got = until(lambda: poll_into(c, [], 0.05), 30, "the first records")
        elapsed = time.monotonic() - start
        print(f"first record {elapsed:.2f} s after subscribe() (heartbeat interval {HEARTBEAT_MS} ms)")
        assert elapsed < 0.8, f"first record after {elapsed:.2f} s"
        assert got
    finally:
        c.close()


def test_first_answer_carries_the_partitions_and_a_waiting_member_is_asked_back_sooner(broker):
    bs = broker.bootstrap
    topic = create_topic(bs, 2)
    tid = topic_id(bs, topic)
    group = unique("g")
    with WireClient(bs) as w:
        # The joining heartbeat is answered once the share state is initialized, with the partitions.
        r = w.request(HB(group_id=group, member_id="m1", member_epoch=0, subscribed_topic_names=[topic]), 1)
        assert r.error_code == 0 and r.heartbeat_interval_ms == HEARTBEAT_MS
        assert {(t.topic_id, tuple(t.partitions)) for t in r.assignment.topic_partitions} == {(tid, (0, 1))}
        # A member joining just after that assignment waits for the assignment interval, at a short interval.
        r = w.request(HB(group_id=group, member_id="m2", member_epoch=0, subscribed_topic_names=[topic]), 1)
        assert r.error_code == 0 and not (r.assignment and r.assignment.topic_partitions)
        assert 0 < r.heartbeat_interval_ms < HEARTBEAT_MS
        intervals = [r.heartbeat_interval_ms]

        def assigned():
            nonlocal r
            r = w.request(HB(group_id=group, member_id="m2", member_epoch=r.member_epoch), 1)
            assert r.error_code == 0, r
            if r.assignment is None or not r.assignment.topic_partitions:
                intervals.append(r.heartbeat_interval_ms)
                return False
            return True

        until(assigned, 15, "the second member's partition", interval=0.1)
        assert [(t.topic_id, len(t.partitions)) for t in r.assignment.topic_partitions] == [(tid, 1)]
        assert all(0 < i < HEARTBEAT_MS for i in intervals), intervals
        assert r.heartbeat_interval_ms == HEARTBEAT_MS
        r = w.request(HB(group_id=group, member_id="m2", member_epoch=r.member_epoch), 1)
        assert r.error_code == 0 and r.heartbeat_interval_ms == HEARTBEAT_MS
        # A member subscribed to a topic that does not exist has nothing to wait for.
        r = w.request(HB(group_id=unique("g"), member_id="m3", member_epoch=0,
                         subscribed_topic_names=[unique("missing")]), 1)
        assert r.error_code == 0 and r.heartbeat_interval_ms == HEARTBEAT_MS


def test_dlq_topic_name_starting_with_double_underscore_is_refused(broker):
    bs = broker.bootstrap
    group = unique("g")
    with pytest.raises(KafkaException) as e:
        set_group_configs(bs, group, errors_deadletterqueue_topic_name="__bad")
    err = e.value.args[0]
    assert err.code() == KafkaError.INVALID_CONFIG, err
    assert "must not start with '__'" in err.str()
    admin = AdminClient({"bootstrap.servers": bs})
    res = ConfigResource(ConfigResource.Type.GROUP, group)
    entries = admin.describe_configs([res])[res].result(15)
    assert entries["errors.deadletterqueue.topic.name"].value == ""  # nothing stored
    set_group_configs(bs, group, errors_deadletterqueue_topic_name="dlq.ok")
    res = ConfigResource(ConfigResource.Type.GROUP, group, incremental_configs=[
        ConfigEntry("errors.deadletterqueue.topic.name", "__x", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException):
        admin.incremental_alter_configs([res])[res].result(15)
    res = ConfigResource(ConfigResource.Type.GROUP, group)
    assert admin.describe_configs([res])[res].result(15)["errors.deadletterqueue.topic.name"].value == "dlq.ok"
