"""Share groups end to end with librdkafka's ShareConsumer (confluent-kafka 2.16) over sockets."""
from __future__ import annotations

import time

import pytest
from confluent_kafka import AcknowledgeType, Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from broker.testing import BrokerProcess
from tests.support import unique, until

BROKER_CONFIG = {
    # short locks for the lock-timeout tests (Kafka's own floor is 15 s)
    "group.share.min.record.lock.duration.ms": "1000",
}


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("share"), config=BROKER_CONFIG) as b:
        yield b


def create_topic(bootstrap: str, partitions: int) -> str:
    name = unique("t")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions)])[name].result(15)
    return name


def set_group_configs(bootstrap: str, group: str, **configs: str) -> None:
    res = ConfigResource(ConfigResource.Type.GROUP, group, incremental_configs=[
        ConfigEntry(k.replace("_", "."), str(v), incremental_operation=AlterConfigOpType.SET)
        for k, v in configs.items()])
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.incremental_alter_configs([res])[res].result(15)


def new_group(bootstrap: str, **configs: str) -> str:
    group = unique("g")
    set_group_configs(bootstrap, group, share_auto_offset_reset="earliest", **configs)
    return group


def produce(bootstrap: str, topic: str, n: int, partitions: int = 1, per_batch: int | None = None) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0 if per_batch else 5})
    for i in range(n):
        p.produce(topic, value=b"%d" % i, key=b"%d" % i, partition=i % partitions)
        if per_batch and (i + 1) % per_batch == 0:
            p.flush(10)
    assert p.flush(30) == 0


def consumer(bootstrap: str, group: str, topic: str, **extra) -> ShareConsumer:
    conf = {"bootstrap.servers": bootstrap, "group.id": group}
    conf.update({k.replace("_", "."): v for k, v in extra.items()})
    c = ShareConsumer(conf)
    c.subscribe([topic])
    return c


def poll_records(c: ShareConsumer, timeout: float = 0.5) -> list:
    out = []
    for m in c.poll(timeout) or []:
        assert m.error() is None, m.error()
        out.append(m)
    return out


def key_of(m) -> tuple[int, int]:
    return m.partition(), m.offset()


# ------------------------------------------------------------------ implicit acknowledgement
def test_implicit_acks_three_consumers_each_record_once(broker):
    bs = broker.bootstrap
    topic = create_topic(bs, 3)
    group = new_group(bs)
    produce(bs, topic, 10_000, partitions=3, per_batch=250)
    consumers = [consumer(bs, group, topic) for _ in range(3)]
    seen: dict[tuple[int, int], int] = {}
    per_consumer = [0, 0, 0]
    deadline = time.monotonic() + 90
    try:
        while len(seen) < 10_000 and time.monotonic() < deadline:
            for i, c in enumerate(consumers):
                for m in poll_records(c, 0.2):
                    seen[key_of(m)] = seen.get(key_of(m), 0) + 1
                    per_consumer[i] += 1
    finally:
        for c in consumers:
            c.close()
    assert len(seen) == 10_000, f"{len(seen)} distinct records delivered"
    assert max(seen.values()) == 1, "a record was delivered twice although nobody failed"
    assert all(n > 0 for n in per_consumer), per_consumer


def test_more_consumers_than_partitions_all_receive(broker):
    bs = broker.bootstrap
    topic = create_topic(bs, 1)
    group = new_group(bs)
    produce(bs, topic, 3000, per_batch=10)
    consumers = [consumer(bs, group, topic, max_poll_records=50) for _ in range(5)]
    got = [set() for _ in consumers]
    deadline = time.monotonic() + 60
    try:
        while sum(map(len, got)) < 3000 and time.monotonic() < deadline:
            for i, c in enumerate(consumers):
                got[i].update(key_of(m) for m in poll_records(c, 0.2))
    finally:
        for c in consumers:
            c.close()
    assert sum(map(len, got)) == 3000
    assert all(got), [len(g) for g in got]
    union = set().union(*got)
    assert len(union) == 3000, "records were delivered to two consumers"


# ------------------------------------------------------------------ explicit acknowledgement
def poll_acking(c: ShareConsumer, want, ack, timeout: float, what: str) -> list:
    """Poll in explicit mode, acknowledging each record with ``ack(message)`` before the next poll,
    until ``want`` records arrived (an int) or ``want(got)`` is true (a callable)."""
    got: list = []
    done = want if callable(want) else (lambda g: len(g) >= want)

    def step():
        for m in poll_records(c):
            got.append(m)
            c.acknowledge(m, ack(m))
        return done(got)

    until(step, timeout, what)
    return got


def test_explicit_accept_release_reject_and_delivery_limit(broker):
    bs = broker.bootstrap
    topic = create_topic(bs, 1)
    group = new_group(bs, share_delivery_count_limit="3")
    produce(bs, topic, 30)
    c = consumer(bs, group, topic, share_acknowledgement_mode="explicit")

    def policy(m):
        return (AcknowledgeType.ACCEPT, AcknowledgeType.RELEASE, AcknowledgeType.REJECT)[m.offset() % 3]

    try:
        first = poll_acking(c, 30, policy, 30, "30 records")
        assert all(m.delivery_count() == 1 for m in first)
        released = {m.offset() for m in first if m.offset() % 3 == 1}
        result = c.commit_sync(30)
        assert result and all(v is None for v in result.values()), result

        # Released records come back with delivery count 2, then 3; rejected and accepted ones never.
        for attempt in (2, 3):
            again = poll_acking(c, len(released), lambda m: AcknowledgeType.RELEASE, 30,
                                f"released records, attempt {attempt}")
            assert {m.offset() for m in again} == released
            assert {m.delivery_count() for m in again} == {attempt}
            assert all(v is None for v in c.commit_sync(30).values())
        # The delivery count limit (3) is reached: released records are archived, not redelivered.
        assert poll_records(c, 2.0) == []
    finally:
        c.close()


def test_lock_timeout_redelivers_to_another_member(broker):
    bs = broker.bootstrap
    topic = create_topic(bs, 1)
    group = new_group(bs, share_record_lock_duration_ms="1000")
    produce(bs, topic, 20)
    silent = consumer(bs, group, topic, share_acknowledgement_mode="explicit")
    other = None
    try:
        taken: list = []
        until(lambda: taken.extend(poll_records(silent)) or taken, 30, "records for the silent consumer")
        assert {m.delivery_count() for m in taken} == {1}
        # `silent` never acknowledges and never polls again; the locks run out after 1 s.
        other = consumer(bs, group, topic, share_acknowledgement_mode="explicit")
        got: list = []
        want = {m.offset() for m in taken}
        got = poll_acking(other, lambda g: want <= {m.offset() for m in g}, lambda m: AcknowledgeType.ACCEPT, 30,
                          "redelivery to the other member")
        first_seen = {}
        for m in got:
            first_seen.setdefault(m.offset(), m.delivery_count())
        assert {first_seen[o] for o in want} == {2}
    finally:
        silent.close()
        if other is not None:
            other.close()


def test_close_releases_records_at_once(broker):
    bs = broker.bootstrap
    topic = create_topic(bs, 1)
    group = new_group(bs, share_record_lock_duration_ms="60000")
    produce(bs, topic, 10)
    a = consumer(bs, group, topic, share_acknowledgement_mode="explicit")
    taken: list = []
    until(lambda: taken.extend(poll_records(a)) or taken, 30, "records for the first consumer")
    a.close()  # nothing acknowledged: the records must be released now, not after 60 s
    b = consumer(bs, group, topic, share_acknowledgement_mode="explicit")
    try:
        start = time.monotonic()
        want = {m.offset() for m in taken}
        got = poll_acking(b, lambda g: want <= {m.offset() for m in g}, lambda m: AcknowledgeType.ACCEPT, 20,
                          "released records")
        assert time.monotonic() - start < 20
        assert {m.offset() for m in taken} <= {m.offset() for m in got}
    finally:
        b.close()


def poll_sizes(c: ShareConsumer, total: int, timeout: float = 60) -> list[int]:
    """Poll until ``total`` records arrived; return the size of every non-empty poll. Closes ``c``."""
    sizes: list[int] = []
    deadline = time.monotonic() + timeout
    try:
        while sum(sizes) < total and time.monotonic() < deadline:
            batch = poll_records(c, 0.5)
            if batch:
                sizes.append(len(batch))
    finally:
        c.close()
    assert sum(sizes) == total
    return sizes


def test_max_poll_records_is_honoured(broker):
    bs = broker.bootstrap
    topic = create_topic(bs, 1)
    group = new_group(bs)
    produce(bs, topic, 200, per_batch=1)
    sizes = poll_sizes(consumer(bs, group, topic, max_poll_records=7), 200)
    assert max(sizes) <= 7, sizes


def test_fetch_max_bytes_is_honoured(broker):
    bs = broker.bootstrap
    topic = create_topic(bs, 1)
    group = new_group(bs)
    p = Producer({"bootstrap.servers": bs, "linger.ms": 0})
    for i in range(100):
        p.produce(topic, value=bytes(1000), key=b"%d" % i)
        p.flush(10)
    sizes = poll_sizes(consumer(bs, group, topic, fetch_max_bytes=5000, max_poll_records=500), 100)
    # each single-record batch is ~1.1 KB: a 5000-byte fetch holds at most 5 of them
    assert max(sizes) <= 5, sizes


# ------------------------------------------------------------------ crash
def test_kill9_acknowledged_never_again_unacknowledged_again(tmp_path):
    with BrokerProcess(tmp_path / "data", config=BROKER_CONFIG) as b:
        bs = b.bootstrap
        # One partition: every member of a share group shares it, so the pre-crash member (restored
        # from the log after the restart, as in Kafka) does not hold back the new one's assignment.
        topic = create_topic(bs, 1)
        group = new_group(bs, share_record_lock_duration_ms="5000")
        produce(bs, topic, 2000, per_batch=50)
        c = consumer(bs, group, topic, share_acknowledgement_mode="explicit")
        acked: set = set()
        deadline = time.monotonic() + 60
        while len(acked) < 800 and time.monotonic() < deadline:
            batch = poll_records(c, 0.3)
            for m in batch:
                c.acknowledge(m, AcknowledgeType.ACCEPT)
            result = c.commit_sync(30)
            assert all(v is None for v in result.values()), result
            acked.update(key_of(m) for m in batch)  # answered with success
        # One more poll whose records are acquired but never acknowledged.
        held = {key_of(m) for m in until(lambda: poll_records(c), 30, "records to hold")}
        assert len(acked) >= 800
        b.kill9()
        b.start()
        c.close()
        c2 = consumer(b.bootstrap, group, topic)
        after: list = []
        try:
            remaining = 2000 - len(acked)
            until(lambda: after.extend(poll_records(c2)) or len({key_of(m) for m in after}) >= remaining, 90,
                  "the records not acknowledged before the crash")
        finally:
            c2.close()
        again = {key_of(m) for m in after}
        assert not (again & acked), f"{len(again & acked)} acknowledged records were delivered again"
        assert held <= again, "records acquired but not acknowledged were not delivered again"
        assert again | acked == {(0, i) for i in range(2000)}, "records were lost"
