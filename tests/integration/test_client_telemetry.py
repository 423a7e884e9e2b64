"""KIP-714 client telemetry against the real broker: GetTelemetrySubscriptions (71) and PushTelemetry (72)
over the wire (valid and error answers), CLIENT_METRICS (16) subscriptions through IncrementalAlterConfigs /
DescribeConfigs / ListConfigResources kept across a restart, and librdkafka (confluent-kafka 2.16.1) producers
and share consumers pushing their metrics until they show on /metrics."""
from __future__ import annotations

import contextlib
import html
import re
import urllib.request

import pytest
from confluent_kafka import Producer, ShareConsumer
from prometheus_client.parser import text_string_to_metric_families

from broker.client_metrics import uuid_str
from protocol.messages.describe_configs import DescribeConfigsRequest
from protocol.messages.get_telemetry_subscriptions import GetTelemetrySubscriptionsRequest
from protocol.messages.incremental_alter_configs import IncrementalAlterConfigsRequest
from protocol.messages.list_config_resources import ListConfigResourcesRequest
from protocol.messages.push_telemetry import PushTelemetryRequest
from protocol.primitives import ZERO_UUID
from tests.integration.cli_helpers import create_topic, share_group
from tests.missing_inputs import missing_input
from tests.support import until
from tests.unit.test_otlp import ld, point
from tests.wire import WireClient

CLIENT_METRICS = 16
_AR = IncrementalAlterConfigsRequest.AlterConfigsResource
_AC = IncrementalAlterConfigsRequest.AlterableConfig


@pytest.fixture
def broker(broker_factory):
    return broker_factory({"sharebroker.metrics.listener": "127.0.0.1:0", "telemetry.max.bytes": 4096})


def alter(bootstrap: str, name: str, validate_only=False, **configs) -> tuple[int, str]:
    ops = [_AC(name=k.replace("_", "."), config_operation=1 if v is None else 0, value=v)
           for k, v in configs.items()]
    with WireClient(bootstrap) as w:
        r = w.request(IncrementalAlterConfigsRequest(
            resources=[_AR(resource_type=CLIENT_METRICS, resource_name=name, configs=ops)],
            validate_only=validate_only), 1)
    (res,) = r.responses
    return res.error_code, res.error_message


def describe(bootstrap: str, name: str) -> dict:
    with WireClient(bootstrap) as w:
        r = w.request(DescribeConfigsRequest(resources=[DescribeConfigsRequest.DescribeConfigsResource(
            resource_type=CLIENT_METRICS, resource_name=name, configuration_keys=None)], include_synonyms=True), 4)
    (res,) = r.results
    assert res.error_code == 0, res.error_message
    return {c.name: (c.value, c.config_source, c.config_type) for c in res.configs}


def listed(bootstrap: str, version: int, types=()) -> list:
    with WireClient(bootstrap) as w:
        r = w.request(ListConfigResourcesRequest(resource_types=list(types)), version)
    assert r.error_code == 0
    return sorted((c.resource_name, c.resource_type) for c in r.config_resources
                  if version == 0 or c.resource_type == CLIENT_METRICS)


def scrape(url: str, family: str) -> list[dict]:
    with urllib.request.urlopen(url, timeout=10) as r:
        text = r.read().decode()
    return [dict(s.labels, value=s.value) for f in text_string_to_metric_families(text)
            for s in f.samples if s.name == family]


def share_consumer_row(url: str, client_id: str) -> list[str] | None:
    """The status page's "Share consumers" row of ``client_id`` (cells as text), or None."""
    with urllib.request.urlopen(url, timeout=10) as r:
        page = r.read().decode()
    table = re.search(r'<table class="share-consumers">(.*?)</table>', page, re.S)
    for tr in re.findall(r"<tr>(.*?)</tr>", table.group(1) if table else "", re.S):
        cells = [html.unescape(re.sub(r"<[^>]+>", "", c)) for c in re.findall(r"<td[^>]*>(.*?)</td>", tr, re.S)]
        if cells and cells[0] == client_id:
            return cells
    return None


def test_no_subscription_is_an_empty_one(broker):
    with WireClient(broker.bootstrap) as w:
        r = w.request(GetTelemetrySubscriptionsRequest(client_instance_id=ZERO_UUID), 0)
        assert r.error_code == 0 and r.client_instance_id != ZERO_UUID
        assert r.requested_metrics == [] and r.push_interval_ms == 300_000 and r.delta_temporality
        assert r.telemetry_max_bytes == 4096 and 1 in r.accepted_compression_types  # gzip: stdlib
        again = w.request(GetTelemetrySubscriptionsRequest(client_instance_id=r.client_instance_id), 0)
        assert again.error_code == 89  # THROTTLING_QUOTA_EXCEEDED: sooner than the push interval


def test_push_answers_and_errors(broker):
    assert alter(broker.bootstrap, "all", metrics="*", interval_ms="100") == (0, None)
    with WireClient(broker.bootstrap, client_id="wire-app") as w:
        g = w.request(GetTelemetrySubscriptionsRequest(), 0)
        assert g.requested_metrics == ["*"] and g.push_interval_ms == 100
        iid, sid = g.client_instance_id, g.subscription_id

        def push(**kw):
            args = dict(client_instance_id=iid, subscription_id=sid, metrics=b"")
            args.update(kw)
            return w.request(PushTelemetryRequest(**args), 0).error_code

        assert push(client_instance_id=ZERO_UUID) == 42  # INVALID_REQUEST
        assert push(subscription_id=sid ^ 1) == 117  # UNKNOWN_SUBSCRIPTION_ID (first push after the get)
        assert push() == 89  # THROTTLING_QUOTA_EXCEEDED: sooner than 100 ms after the last push
        until(lambda: push(compression_type=7) == 76, 10, "UNSUPPORTED_COMPRESSION_TYPE")
        until(lambda: push(metrics=b"x" * 4097) == 118, 10, "TELEMETRY_TOO_LARGE")
        until(lambda: push(metrics=b"\x0a\x09") == 87, 10, "INVALID_RECORD")
        data = ld(1, ld(2, ld(2, ld(1, b"wire.gauge") + ld(5, ld(1, point(as_double=2.5))))))
        until(lambda: push(metrics=data) == 0, 10, "an accepted push")
        rows = scrape(broker.metrics_url, "sharebroker_client_metric")
        assert {"client_instance_id": uuid_str(iid), "client_id": "wire-app", "name": "wire.gauge",
                "attributes": "", "value": 2.5} in rows
        until(lambda: push(terminating=True) == 0, 10, "a terminating push")
        assert push() == 42  # nothing after terminating


def test_client_metrics_resources(broker):
    bs = broker.bootstrap
    assert alter(bs, "", metrics="*")[0] == 42
    assert alter(bs, "s1", bogus="1") == (42, "Unknown client metrics configuration: bogus")
    assert alter(bs, "s1", interval_ms="99")[0] == 42
    assert alter(bs, "s1", match="client_id")[0] == 40  # INVALID_CONFIG
    assert alter(bs, "s1", validate_only=True, metrics="*") == (0, None)
    assert listed(bs, 1) == []
    assert alter(bs, "s1", metrics="org.apache.kafka.producer.,org.apache.kafka.consumer.",
                 interval_ms="1000", match="client_software_name=librdkafka") == (0, None)
    assert alter(bs, "s2", metrics="*") == (0, None)
    assert describe(bs, "s1") == {
        "metrics": ("org.apache.kafka.producer.,org.apache.kafka.consumer.", 7, 7),
        "interval.ms": ("1000", 7, 3), "match": ("client_software_name=librdkafka", 7, 7)}
    assert describe(bs, "s2")["interval.ms"] == ("300000", 5, 3)
    assert listed(bs, 1, [CLIENT_METRICS]) == [("s1", 16), ("s2", 16)]
    assert listed(bs, 0) == [("s1", 16), ("s2", 16)]  # v0: ListClientMetricsResources
    assert alter(bs, "s2", metrics=None) == (0, None)  # every key deleted: the subscription goes
    broker.restart()
    assert listed(broker.bootstrap, 1) == [("s1", 16)]
    assert describe(broker.bootstrap, "s1")["interval.ms"] == ("1000", 7, 3)


def test_librdkafka_producer_and_share_consumer_push_their_metrics(broker):
    bs = broker.bootstrap
    assert alter(bs, "everything", metrics="*", interval_ms="500") == (0, None)
    topic = create_topic(bs, 1, prefix="telemetry")
    group = share_group(bs)
    producer = Producer({"bootstrap.servers": bs, "client.id": "tele-producer", "linger.ms": 5})
    consumer = ShareConsumer({"bootstrap.servers": bs, "group.id": group, "client.id": "tele-share"})
    consumer.subscribe([topic])
    try:
        def pushed(client_id: str) -> set:
            for i in range(5):
                producer.produce(topic, value=b"v%d" % i)
            producer.poll(0)
            consumer.poll(0.1)
            rows = scrape(broker.metrics_url, "sharebroker_client_metric") + \
                scrape(broker.metrics_url, "sharebroker_client_counter_total")
            return {r["name"] for r in rows if r["client_id"] == client_id}

        names = until(lambda: pushed("tele-producer"), 60, "the producer's pushed metrics on /metrics")
        assert any(n.startswith("org.apache.kafka.producer.") for n in names), names
        names = until(lambda: pushed("tele-share"), 60, "the share consumer's pushed metrics on /metrics")
        assert any(n.startswith("org.apache.kafka.consumer.share.") for n in names), names
        # the status page shows the share consumer's own view (its poll idle ratio as it pushed it)
        row = until(lambda: share_consumer_row(broker.metrics_url.replace("/metrics", "/"), "tele-share"), 30,
                    "the share consumer on the status page")
        assert re.fullmatch(r"\d\.\d\d", row[3]) and "rdkafka" in row[2], row
    finally:
        consumer.close()
        producer.flush(10)


@pytest.fixture(name="kafka_java")
def _kafka_java():
    """``java -cp <Kafka 4.4's jars>`` (tests/kafka_ref resolves them with Maven once); skipped as the
    reference Kafka is, when java or mvn is missing."""
    import os

    from tests.kafka_ref.launcher import classpath, missing_tools

    if os.environ.get("SHAREBROKER_NO_KAFKA_REF") == "1":
        pytest.skip("the reference Kafka 4.4 is turned off (SHAREBROKER_NO_KAFKA_REF=1)")
    if missing_tools():
        missing_input("Kafka 4.4's tools need java and mvn (tests/kafka_ref)")
    return ["java", "-Xmx256m", "-cp", classpath()]


def test_kafka_configs_and_the_java_clients(broker, kafka_java):
    """kafka-configs.sh --entity-type client-metrics sets and shows subscriptions; Kafka 4.4's console producer
    and console share consumer (the Java clients) push their metrics to /metrics."""
    import subprocess

    def configs(*args) -> subprocess.CompletedProcess:
        return subprocess.run([*kafka_java, "org.apache.kafka.tools.ConfigCommand", "--bootstrap-server",
                               broker.bootstrap, "--entity-type", "client-metrics", *args],
                              capture_output=True, text=True, timeout=120)

    bad = configs("--alter", "--entity-name", "all", "--add-config", "interval.ms=5")
    assert bad.returncode != 0 and "interval must be between 100 and 3600000" in bad.stderr
    assert configs("--alter", "--entity-name", "all", "--add-config", "metrics=*,interval.ms=1000").returncode == 0
    shown = configs("--describe", "--entity-name", "all").stdout
    assert "metrics=* " in shown and "interval.ms=1000 " in shown, shown
    topic = create_topic(broker.bootstrap, 1, prefix="telemetry-java")
    group = share_group(broker.bootstrap)
    java = [subprocess.Popen([*kafka_java, "org.apache.kafka.tools.ConsoleProducer", "--bootstrap-server",
                              broker.bootstrap, "--topic", topic, "--command-property", "client.id=java-producer"],
                             stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True),
            subprocess.Popen([*kafka_java, "org.apache.kafka.tools.consumer.ConsoleShareConsumer",
                              "--bootstrap-server", broker.bootstrap, "--topic", topic, "--group", group,
                              "--command-property", "client.id=java-share"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    try:
        def names() -> dict:
            java[0].stdin.write("hello\n")
            java[0].stdin.flush()
            rows = scrape(broker.metrics_url, "sharebroker_client_metric") + \
                scrape(broker.metrics_url, "sharebroker_client_counter_total")
            out: dict = {}
            for r in rows:
                out.setdefault(r["client_id"], set()).add(r["name"])
            return out if {"java-producer", "java-share"} <= set(out) else None

        got = until(names, 90, "the Java producer's and share consumer's pushed metrics on /metrics")
        assert any(n.startswith("org.apache.kafka.producer.") for n in got["java-producer"])
        assert any(n.startswith("org.apache.kafka.consumer.") for n in got["java-share"])
        page = broker.metrics_url.replace("/metrics", "/")
        row = until(lambda: (r := share_consumer_row(page, "java-share")) and "–" not in r[3:5] and r, 60,
                    "the Java share consumer's records per request on the status page")
        assert re.fullmatch(r"\d\.\d\d", row[3]) and row[6] == "0", row  # idle ratio; no acknowledgement errors
    finally:
        for p in java:
            p.kill()
            p.wait(30)
        with contextlib.suppress(OSError):
            java[0].stdin.close()
