"""The Prometheus endpoint, scraped over HTTP and parsed with prometheus_client's own parser."""
from __future__ import annotations

import urllib.error
import urllib.request

import pytest
from confluent_kafka import AcknowledgeType, Consumer, Producer, ShareConsumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client.parser import text_string_to_metric_families


from protocol.messages.describe_share_group_offsets import DescribeShareGroupOffsetsRequest as DescReq
from protocol.messages.share_acknowledge import ShareAcknowledgeRequest as AckReq
from protocol.messages.share_fetch import ShareFetchRequest as FetchReq
from tests.support import create_topic, set_group_configs, share_member_assigned, topic_id, unique, until
from tests.wire import WireClient

ACCEPT, RELEASE, REJECT = "Accept", "Release", "Reject"
# counters as exposed (JMX-exporter names ending in _count); prometheus_client's parser adds _total to samples
RECORD_ACKS = "kafka_server_share_group_metrics_record_acknowledgement_count_total"
ACK_REQUESTS = "kafka_server_share_group_metrics_share_acknowledgement_count_total"
REBALANCES = "kafka_server_group_coordinator_metrics_rebalance_count_total"


def scrape(url: str) -> dict:
    """{(sample name, frozenset(labels)): value}"""
    with urllib.request.urlopen(url, timeout=10) as r:
        assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = r.read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(samples: dict, name: str, **labels) -> float | None:
    return samples.get((name, frozenset((k, str(v)) for k, v in labels.items())))


@pytest.fixture
def broker(broker_factory):
    return broker_factory({"sharebroker.metrics.listener": "127.0.0.1:0",
                           "group.share.min.record.lock.duration.ms": 1000})


def test_metrics_are_off_unless_configured(broker_factory):
    b = broker_factory()
    assert b.metrics_url is None and not any("metrics on http" in line for line in b.log_lines)


def test_unknown_paths_and_methods(broker):
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(broker.metrics_url.replace("/metrics", "/nope"), timeout=10)
    assert e.value.code == 404
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(urllib.request.Request(broker.metrics_url, data=b"x", method="POST"), timeout=10)
    assert e.value.code == 405


def test_logs_groups_requests_and_share_partitions(broker):
    bs = broker.bootstrap
    topic, group, cgroup = unique("m"), unique("sg"), unique("cg")
    admin = AdminClient({"bootstrap.servers": bs})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(15)
    p = Producer({"bootstrap.servers": bs})
    for i in range(40):
        p.produce(topic, f"v{i}".encode(), partition=i % 2)
    assert p.flush(15) == 0

    s = scrape(broker.metrics_url)
    for part in (0, 1):
        assert value(s, "kafka_log_log_logendoffset", topic=topic, partition=part) == 20
        assert value(s, "kafka_log_log_logstartoffset", topic=topic, partition=part) == 0
        assert value(s, "kafka_log_log_size", topic=topic, partition=part) > 0
    assert value(s, "kafka_network_requestmetrics_requests_total", request="Produce") >= 1
    assert value(s, "sharebroker_request_latency_seconds_count", request="Produce") == \
        value(s, "kafka_network_requestmetrics_requests_total", request="Produce")

    # A consumer group that committed 15 of partition 0: lag 5 there.
    c = Consumer({"bootstrap.servers": bs, "group.id": cgroup, "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition(topic, 0, 15)], asynchronous=False)
    finally:
        c.close()
    assert value(scrape(broker.metrics_url), "sharebroker_consumer_group_lag", group=cgroup, topic=topic,
                 partition=0) == 5

    # A share group that accepts everything: SPSO 20 and lag 0 on both partitions, one Stable share group.
    set_group_configs(bs, group, share_auto_offset_reset="earliest")
    sc = ShareConsumer({"bootstrap.servers": bs, "group.id": group})
    sc.subscribe([topic])
    got = []
    try:
        def drained():
            got.extend(m for m in sc.poll(0.5) or [] if m.error() is None)
            sc.commit_sync()
            now = scrape(broker.metrics_url)
            return len(got) >= 40 and all(
                value(now, "sharebroker_share_partition_start_offset", group=group, topic=topic, partition=q) == 20
                for q in (0, 1)) and now
        s = until(drained, 60, "every record accepted and the SPSO at the end")
        for q in (0, 1):
            assert value(s, "sharebroker_share_partition_lag", group=group, topic=topic, partition=q) == 0
            assert value(s, "sharebroker_share_partition_in_flight_records", group=group, topic=topic,
                         partition=q) == 0
        assert value(s, "kafka_server_group_coordinator_metrics_group_count", protocol="share", state="Stable") >= 1
        assert value(s, "kafka_server_share_coordinator_metrics_write_total") >= 2
        assert value(s, "kafka_server_share_group_metrics_partition_load_time_max") >= 0
    finally:
        sc.close()


def produce(bs: str, topic: str, n: int) -> None:
    p = Producer({"bootstrap.servers": bs})
    for i in range(n):
        p.produce(topic, b"v%d" % i, partition=0)
    assert p.flush(15) == 0


def admin_lag(bs: str, group: str, topic: str) -> int:
    """DescribeShareGroupOffsets v1's lag (KIP-1226) of partition 0, over the project codec."""
    with WireClient(bs) as w:
        r = w.request(DescReq(groups=[DescReq.DescribeShareGroupOffsetsRequestGroup(group_id=group, topics=[
            DescReq.DescribeShareGroupOffsetsRequestTopic(topic_name=topic, partitions=[0])])]), 1)
    (p,) = r.groups[0].topics[0].partitions
    assert p.error_code == 0, p
    return p.lag


def ack_counts(samples: dict) -> dict:
    counts = {t: value(samples, RECORD_ACKS, ack_type=t) for t in (ACCEPT, RELEASE, REJECT)}
    return {**counts, "requests": value(samples, ACK_REQUESTS)}


def test_share_lag_and_record_ack_counters_follow_a_share_consumer(broker):
    """librdkafka's ShareConsumer in explicit mode: ACCEPT / RELEASE / REJECT by offset, each counted here.
    The lag metric, DescribeShareGroupOffsets v1 and this test's own ledger agree."""
    bs = broker.bootstrap
    topic, group = create_topic(bs, 1), unique("sg")
    set_group_configs(bs, group, share_auto_offset_reset="earliest")
    produce(bs, topic, 30)
    before = ack_counts(scrape(broker.metrics_url))
    made = {ACCEPT: 0, RELEASE: 0, REJECT: 0}
    terminal, seen = set(), set()
    policy = {0: (AcknowledgeType.ACCEPT, ACCEPT), 1: (AcknowledgeType.RELEASE, RELEASE),
              2: (AcknowledgeType.REJECT, REJECT)}
    sc = ShareConsumer({"bootstrap.servers": bs, "group.id": group, "share.acknowledgement.mode": "explicit"})
    sc.subscribe([topic])
    try:
        def step():
            for m in sc.poll(0.5) or []:
                assert m.error() is None, m.error()
                # a released record that comes back is accepted: the ledger stays exact either way
                ack, name = policy[m.offset() % 3] if m.offset() not in seen else (AcknowledgeType.ACCEPT, ACCEPT)
                sc.acknowledge(m, ack)
                made[name] += 1
                seen.add(m.offset())
                if name != RELEASE:
                    terminal.add(m.offset())
            assert all(v is None for v in (sc.commit_sync(30) or {}).values())
            return len(seen) == 30

        until(step, 60, "30 records acknowledged")
    finally:
        sc.close()
    produce(bs, topic, 5)  # never delivered: part of the lag too
    expected = 35 - len(terminal)
    assert 0 < expected < 35 and made[RELEASE] > 0

    def agreed():
        s = scrape(broker.metrics_url)
        metric = value(s, "sharebroker_share_partition_lag", group=group, topic=topic, partition=0)
        return metric == expected and admin_lag(bs, group, topic) == expected and s

    s = until(agreed, 20, f"metric lag == DescribeShareGroupOffsets lag == {expected}")
    after = ack_counts(s)
    assert {t: after[t] - before[t] for t in made} == made


def test_share_acknowledgement_requests_are_counted_exactly(broker):
    """Over the wire: one ShareAcknowledge, one ShareFetch carrying acknowledgements, one more ShareAcknowledge:
    three acknowledgement requests; records 3 accepted, 3 released, 4 rejected."""
    bs = broker.bootstrap
    topic, group, member = create_topic(bs, 1), unique("sg"), unique("m")
    set_group_configs(bs, group, share_auto_offset_reset="earliest")
    produce(bs, topic, 10)
    tid = topic_id(bs, topic)

    def batch(first, last, ack_type):
        return FetchReq.AcknowledgementBatch(first_offset=first, last_offset=last, acknowledge_types=[ack_type])

    def fetch(epoch, acks=()):
        return FetchReq(group_id=group, member_id=member, share_session_epoch=epoch, max_wait_ms=5000, min_bytes=1,
                        max_bytes=1 << 20, max_records=100, batch_size=100, topics=[FetchReq.FetchTopic(
                            topic_id=tid, partitions=[FetchReq.FetchPartition(partition_index=0,
                                                                              acknowledgement_batches=list(acks))])])

    def acknowledge(epoch, first, last, ack_type):
        return AckReq(group_id=group, member_id=member, share_session_epoch=epoch, topics=[AckReq.AcknowledgeTopic(
            topic_id=tid, partitions=[AckReq.AcknowledgePartition(partition_index=0, acknowledgement_batches=[
                AckReq.AcknowledgementBatch(first_offset=first, last_offset=last, acknowledge_types=[ack_type])])])])

    with WireClient(bs) as w:
        share_member_assigned(w, group, member, topic, tid)
        before = ack_counts(scrape(broker.metrics_url))
        r = w.request(fetch(0), 1)
        assert [(a.first_offset, a.last_offset) for t in r.responses for p in t.partitions
                for a in p.acquired_records] == [(0, 9)]
        codes = [p.error_code for t in w.request(acknowledge(1, 0, 2, 1), 1).responses for p in t.partitions]
        assert codes == [0]
        r = w.request(fetch(2, [batch(3, 5, 2)]), 1)  # RELEASE piggy-backed on a fetch
        assert [p.acknowledge_error_code for t in r.responses for p in t.partitions] == [0]
        codes = [p.error_code for t in w.request(acknowledge(3, 6, 9, 3), 1).responses for p in t.partitions]
        assert codes == [0]
        after = ack_counts(scrape(broker.metrics_url))
    assert {k: after[k] - before[k] for k in after} == {ACCEPT: 3, RELEASE: 3, REJECT: 4, "requests": 3}


def test_rebalance_count_moves_when_members_join_and_leave(broker):
    """New target assignments of a KIP-848 consumer group and of a share group: a member joins, a second
    joins, one leaves; the protocol's counter moves each time."""
    bs = broker.bootstrap
    topic = create_topic(bs, 2)

    def rebalances(protocol):
        return value(scrape(broker.metrics_url), REBALANCES, protocol=protocol)

    def moved(protocol, polled, since, what):
        def step():
            polled.poll(0.2)  # keeps the client's group membership going
            return rebalances(protocol) > since
        until(step, 30, what)
        return rebalances(protocol)

    for protocol, new in (("consumer", lambda g: Consumer({"bootstrap.servers": bs, "group.id": g,
                                                           "group.protocol": "consumer"})),
                          ("share", lambda g: ShareConsumer({"bootstrap.servers": bs, "group.id": g}))):
        group = unique(protocol)
        first, second = new(group), new(group)
        try:
            count = rebalances(protocol)
            first.subscribe([topic])
            count = moved(protocol, first, count, f"{protocol}: a rebalance when the first member joins")
            second.subscribe([topic])
            count = moved(protocol, second, count, f"{protocol}: a rebalance when the second member joins")
            second.close()
            moved(protocol, first, count, f"{protocol}: a rebalance when a member leaves")
        finally:
            first.close()


def test_fsyncs_of_many_partitions_produced_to_at_once_share_a_syncfs(broker):
    """A Produce request to 64 partitions queues 64 fsyncs on the worker at once (durable mode, the
    default): all but the first are covered by one syncfs (broker/log/background.py, "Merged syncs")."""
    topic = unique("wide")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 64, 1)])[topic].result(30)
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 50})
    for i in range(64):
        p.produce(topic, b"v", partition=i)
    assert p.flush(30) == 0
    s = scrape(broker.metrics_url)
    assert value(s, "sharebroker_log_syncfs_calls_total") >= 1
    assert value(s, "sharebroker_log_merged_syncs_total") >= 4
