"""The Prometheus endpoint, scraped over HTTP and parsed with prometheus_client's own parser."""
from __future__ import annotations

import urllib.error
import urllib.request

import pytest
from confluent_kafka import Consumer, Producer, ShareConsumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client.parser import text_string_to_metric_families


from tests.support import set_group_configs, unique, until


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
