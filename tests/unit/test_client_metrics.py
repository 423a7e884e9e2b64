"""broker.client_metrics (KIP-714) with a fake clock: subscriptions, instances, push errors in Kafka's
order (ClientMetricsManagerTest's cases), the stored series and their expiry, persistence."""
import gzip
from types import SimpleNamespace

import pytest

from broker.client_metrics import ClientMetricsManager, subscription_id
from broker.config import BrokerConfig
from broker.log.config import ConfigError
from protocol.errors import Errors, KafkaError
from protocol.primitives import ZERO_UUID
from tests.unit.test_otlp import ld, point

ATTRS = {"client_id": "app-1", "client_software_name": "librdkafka", "client_software_version": "2.16.1",
         "client_source_address": "127.0.0.1", "client_source_port": "5555"}


class Clock:
    def __init__(self):
        self.t = 1_000_000

    def __call__(self):
        return self.t


def op(name, value, kind=0):
    return SimpleNamespace(name=name, value=value, config_operation=kind)


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def mgr(tmp_path, clock):
    return ClientMetricsManager(BrokerConfig({"telemetry.max.bytes": "1000"}), str(tmp_path), clock)


def gauge(name: str, value: float) -> bytes:
    return ld(1, ld(2, ld(2, ld(1, name.encode()) + ld(5, ld(1, point(as_double=value))))))


def counter(name: str, delta: int) -> bytes:
    body = ld(1, point(as_int=delta)) + b"\x10\x01" + b"\x18\x01"  # DELTA, monotonic
    return ld(1, ld(2, ld(2, ld(1, name.encode()) + ld(7, body))))


def test_no_subscription_is_empty_at_the_default_interval(mgr):
    err, inst = mgr.get_subscriptions(ZERO_UUID, ATTRS)
    assert err == 0 and inst.instance_id != ZERO_UUID
    assert inst.metrics == [] and inst.interval_ms == 300_000
    assert inst.subscription_id == subscription_id([], 300_000, inst.instance_id)


def test_matching_subscriptions_combine(mgr):
    mgr.alter("a", [op("metrics", "org.apache.kafka.producer."), op("interval.ms", "5000")], False)
    mgr.alter("b", [op("metrics", "org.apache.kafka.consumer."), op("interval.ms", "2000"),
                    op("match", "client_software_name=librdkafka")], False)
    mgr.alter("c", [op("metrics", "*"), op("interval.ms", "100"), op("match", "client_id=other.*")], False)
    err, inst = mgr.get_subscriptions(ZERO_UUID, ATTRS)
    assert inst.metrics == ["org.apache.kafka.consumer.", "org.apache.kafka.producer."] and inst.interval_ms == 2000
    err, other = mgr.get_subscriptions(ZERO_UUID, dict(ATTRS, client_id="other-7"))
    assert other.metrics == ["*"] and other.interval_ms == 100


def test_get_sooner_than_the_interval_is_throttled(mgr, clock):
    mgr.alter("a", [op("metrics", "*"), op("interval.ms", "1000")], False)
    _, inst = mgr.get_subscriptions(ZERO_UUID, ATTRS)
    clock.t += 999
    assert mgr.get_subscriptions(inst.instance_id, ATTRS)[0] == Errors.THROTTLING_QUOTA_EXCEEDED
    clock.t += 1
    assert mgr.get_subscriptions(inst.instance_id, ATTRS)[0] == 0


def test_push_errors_in_kafkas_order(mgr, clock):
    mgr.alter("a", [op("metrics", "*"), op("interval.ms", "1000")], False)
    _, inst = mgr.get_subscriptions(ZERO_UUID, ATTRS)
    iid, sid = inst.instance_id, inst.subscription_id
    assert mgr.push(ZERO_UUID, ATTRS, sid, False, 0, b"") == Errors.INVALID_REQUEST
    assert mgr.push(iid, ATTRS, sid + 1, False, 0, b"") == Errors.UNKNOWN_SUBSCRIPTION_ID  # first push after get
    clock.t += 1000
    assert mgr.push(iid, ATTRS, sid, False, 9, b"") == Errors.UNSUPPORTED_COMPRESSION_TYPE
    clock.t += 1000
    assert mgr.push(iid, ATTRS, sid, False, 0, b"x" * 1001) == Errors.TELEMETRY_TOO_LARGE
    clock.t += 1000
    assert mgr.push(iid, ATTRS, sid, False, 0, b"\x0b") == Errors.INVALID_RECORD
    clock.t += 1000
    assert mgr.push(iid, ATTRS, sid, False, 1, b"not gzip") == Errors.INVALID_RECORD
    clock.t += 1000
    assert mgr.push(iid, ATTRS, sid, False, 1, gzip.compress(gauge("g", 1.5))) == 0
    clock.t += 10
    assert mgr.push(iid, ATTRS, sid, False, 0, b"") == Errors.THROTTLING_QUOTA_EXCEEDED
    assert mgr.push(iid, ATTRS, sid, True, 0, b"") == 0  # a terminating push is let through
    clock.t += 5000
    assert mgr.push(iid, ATTRS, sid, False, 0, b"") == Errors.INVALID_REQUEST  # after terminating


def test_a_get_after_an_unknown_subscription_is_not_throttled(mgr, clock):
    mgr.alter("a", [op("metrics", "*"), op("interval.ms", "60000")], False)
    _, inst = mgr.get_subscriptions(ZERO_UUID, ATTRS)
    assert mgr.push(inst.instance_id, ATTRS, inst.subscription_id + 1, False, 0, b"") == \
        Errors.UNKNOWN_SUBSCRIPTION_ID
    assert mgr.get_subscriptions(inst.instance_id, ATTRS)[0] == 0


def test_a_subscription_change_gives_a_new_subscription_id(mgr, clock):
    mgr.alter("a", [op("metrics", "*"), op("interval.ms", "60000")], False)
    _, inst = mgr.get_subscriptions(ZERO_UUID, ATTRS)
    old = inst.subscription_id
    mgr.alter("a", [op("interval.ms", "30000")], False)
    assert mgr.push(inst.instance_id, ATTRS, old, False, 0, b"") == Errors.UNKNOWN_SUBSCRIPTION_ID
    err, fresh = mgr.get_subscriptions(inst.instance_id, ATTRS)
    assert err == 0 and fresh.interval_ms == 30000 and fresh.subscription_id != old


def test_pushed_series_are_kept_and_expire(mgr, clock):
    mgr.alter("a", [op("metrics", "*"), op("interval.ms", "1000")], False)
    _, inst = mgr.get_subscriptions(ZERO_UUID, ATTRS)
    assert mgr.push(inst.instance_id, ATTRS, inst.subscription_id, False, 0,
                    gauge("org.apache.kafka.consumer.poll.idle.ratio.avg", 0.5) + counter("sent", 3)) == 0
    clock.t += 1000
    assert mgr.push(inst.instance_id, ATTRS, inst.subscription_id, False, 0, counter("sent", 4)) == 0
    (shown,) = mgr.exposed(clock.t)
    got = {s.name: (s.value, s.counter) for s in shown.series.values()}
    assert got == {"org.apache.kafka.consumer.poll.idle.ratio.avg": (0.5, False), "sent": (7, True)}
    clock.t += 2999
    assert mgr.exposed(clock.t)
    clock.t += 1
    assert mgr.exposed(clock.t) == []  # gone for 3 x the push interval
    assert mgr.live(clock.t) == 1
    clock.t += 60_000 - 3000  # Kafka's cache expiry: max(60 s, 3 x interval) after the last request
    assert mgr.live(clock.t) == 0
    mgr.get_subscriptions(ZERO_UUID, ATTRS)
    assert list(mgr.instances) != [inst.instance_id] and len(mgr.instances) == 1  # the old one purged


def test_validation_as_kafka(mgr):
    with pytest.raises(KafkaError) as e:
        mgr.alter("a", [op("nope", "1")], False)
    assert e.value.code == Errors.INVALID_REQUEST
    for bad in ("99", "3600001"):
        with pytest.raises(KafkaError) as e:
            mgr.alter("a", [op("interval.ms", bad)], False)
        assert e.value.code == Errors.INVALID_REQUEST
    for key, value in (("interval.ms", "abc"), ("match", "client_id"), ("match", "nope=x"),
                       ("match", "client_id=(")):
        with pytest.raises(ConfigError):
            mgr.alter("a", [op(key, value)], False)
    with pytest.raises(KafkaError):
        mgr.alter("", [op("metrics", "*")], False)
    mgr.alter("a", [op("metrics", "*")], True)  # validate only
    assert mgr.names() == []


def test_describe_and_persistence(mgr, tmp_path, clock):
    mgr.alter("sub", [op("metrics", "x.,y."), op("interval.ms", "1000")], False)
    again = ClientMetricsManager(BrokerConfig(), str(tmp_path), clock)
    assert again.names() == ["sub"]
    got = {e.name: (e.value, e.source) for e in again.describe("sub")}
    assert got == {"metrics": ("x.,y.", 7), "interval.ms": ("1000", 7), "match": ("", 5)}
    assert {e.name: e.value for e in again.describe("unknown")}["interval.ms"] == "300000"
    again.alter("sub", [op("metrics", None, 1), op("interval.ms", None, 1)], False)  # DELETE every key
    assert ClientMetricsManager(BrokerConfig(), str(tmp_path), clock).names() == []


def test_series_are_bounded(mgr, clock, monkeypatch):
    import broker.client_metrics as cm

    monkeypatch.setattr(cm, "MAX_SERIES_PER_CLIENT", 3)
    monkeypatch.setattr(cm, "MAX_SERIES_TOTAL", 4)
    mgr.max_bytes = 10_000
    mgr.alter("a", [op("metrics", "*"), op("interval.ms", "100")], False)
    sent = []
    for n in range(2):
        _, inst = mgr.get_subscriptions(ZERO_UUID, ATTRS)
        data = b"".join(gauge(f"m{i}" + "x" * 300, i) for i in range(5))  # names longer than MAX_LABEL
        assert mgr.push(inst.instance_id, ATTRS, inst.subscription_id, False, 0, data) == 0
        sent.append(inst)
    assert [len(i.series) for i in sent] == [3, 1] and mgr.series_total == 4
    assert [i.dropped_series for i in sent] == [2, 4]
    assert all(len(s.name) == 255 for s in sent[0].series.values())
    clock.t += 60_000
    mgr.get_subscriptions(ZERO_UUID, ATTRS)  # the two expired instances are freed with their series
    assert mgr.series_total == 0
