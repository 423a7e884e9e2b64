"""Delayed redelivery (share.redelivery.backoff.ms): a released record comes back no earlier than
backoff x 2^(deliveries - 1) after its release. Lower bounds only; librdkafka's ShareConsumer."""
from __future__ import annotations

import time

import pytest
from confluent_kafka import AcknowledgeType, Producer, ShareConsumer

from tests.support import create_topic, set_group_configs, unique, until


def setup(bootstrap: str, **configs) -> tuple[str, str]:
    topic = create_topic(bootstrap, 1)
    group = unique("g")
    set_group_configs(bootstrap, group, share_auto_offset_reset="earliest", **configs)
    p = Producer({"bootstrap.servers": bootstrap})
    p.produce(topic, key=b"k", value=b"job")
    assert p.flush(30) == 0
    return topic, group


def next_delivery(c: ShareConsumer, timeout: float):
    """(message, arrival time) of the next record polled."""
    def step():
        for m in c.poll(0.1) or []:
            if m.error() is None:
                return m, time.monotonic()
        return None
    return until(step, timeout, "a delivery")


@pytest.mark.sharebroker({})
def test_released_record_waits_500_then_1000_ms(sharebroker):
    bs = sharebroker.bootstrap
    topic, group = setup(bs, share_redelivery_backoff_ms=500, share_redelivery_backoff_max_ms=10_000)
    c = ShareConsumer({"bootstrap.servers": bs, "group.id": group, "share.acknowledgement.mode": "explicit"})
    c.subscribe([topic])
    try:
        arrivals = []
        for expected_count in (1, 2, 3):
            m, t = next_delivery(c, 30)
            assert (m.offset(), m.delivery_count()) == (0, expected_count)
            arrivals.append(t)
            released = time.monotonic()  # before the RELEASE leaves the client, so a lower bound holds
            c.acknowledge(m, AcknowledgeType.RELEASE)
            assert all(v is None for v in c.commit_sync(30).values())
            arrivals.append(released)
        # arrivals: [d1, r1, d2, r2, d3, r3]
        assert arrivals[2] - arrivals[1] >= 0.5, "2nd delivery earlier than 500 ms after the release"
        assert arrivals[4] - arrivals[3] >= 1.0, "3rd delivery earlier than 1000 ms after the release"
    finally:
        c.close()


@pytest.mark.sharebroker({"group.share.min.record.lock.duration.ms": "1000"})
def test_lock_expiry_is_delayed_too_and_backoff_zero_redelivers(sharebroker):
    bs = sharebroker.bootstrap
    topic, group = setup(bs, share_redelivery_backoff_ms=1500, share_record_lock_duration_ms=1000)
    conf = {"bootstrap.servers": bs, "group.id": group, "share.acknowledgement.mode": "explicit"}
    silent, other = ShareConsumer(conf), ShareConsumer(conf)
    silent.subscribe([topic])
    other.subscribe([topic])
    try:
        m, first = next_delivery(silent, 30)  # never acknowledged, never polled again: the 1 s lock runs out
        assert m.delivery_count() == 1
        m, again = next_delivery(other, 30)
        assert m.delivery_count() == 2
        # The lock starts when the broker acquires the record, which the client sees later (``first``):
        # under load by up to a few hundred ms. Allow 0.5 s of that; without the backoff the record
        # would be back about 1.0 s after ``first``.
        assert again - first >= 1.0 + 1.5 - 0.5, "redelivered before lock expiry + backoff"
        other.acknowledge(m, AcknowledgeType.ACCEPT)
        other.commit_sync(30)
    finally:
        other.close()
        silent.close()

    topic, group = setup(bs)  # share.redelivery.backoff.ms defaults to 0: today's behaviour
    c = ShareConsumer({"bootstrap.servers": bs, "group.id": group, "share.acknowledgement.mode": "explicit"})
    c.subscribe([topic])
    try:
        for expected_count in (1, 2):
            m, _ = next_delivery(c, 30)
            assert m.delivery_count() == expected_count
            c.acknowledge(m, AcknowledgeType.RELEASE)
            c.commit_sync(30)
    finally:
        c.close()


@pytest.mark.sharebroker({})
def test_backoff_configs_are_validated_and_described(sharebroker):
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, ConfigResource

    bs = sharebroker.bootstrap
    group = unique("g")
    for key, bad in (("share_redelivery_backoff_ms", "-1"), ("share_redelivery_backoff_ms", "x"),
                     ("share_redelivery_backoff_max_ms", "0"), ("share_redelivery_backoff_max_ms", "3600001")):
        with pytest.raises(KafkaException) as e:
            set_group_configs(bs, group, **{key: bad})
        assert e.value.args[0].name() == "INVALID_CONFIG", (key, bad, e.value)
    set_group_configs(bs, group, share_redelivery_backoff_ms=250)
    admin = AdminClient({"bootstrap.servers": bs})
    res = ConfigResource(ConfigResource.Type.GROUP, group)
    entries = admin.describe_configs([res])[res].result(15)
    assert entries["share.redelivery.backoff.ms"].value == "250"
    assert entries["share.redelivery.backoff.max.ms"].value == "60000"
