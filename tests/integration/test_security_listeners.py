"""Listeners, TLS and SASL with real clients: PLAINTEXT, SSL (client certificates), SASL_PLAINTEXT/PLAIN,
SASL_SSL/SCRAM-SHA-256 and -512 on one broker; Kafka's exchange rules checked on the wire."""
from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from broker.testing import BrokerProcess
from protocol.errors import Errors
from protocol.messages.api_versions import ApiVersionsRequest
from protocol.messages.metadata import MetadataRequest
from protocol.messages.produce import ProduceRequest
from protocol.messages.registry import ApiKey
from protocol.messages.sasl_authenticate import SaslAuthenticateRequest
from protocol.messages.sasl_handshake import SaslHandshakeRequest
from tests.support import (client_security, connection_closed, make_pki, security_settings, tls_wire, until,
                           wire_plain_login)
from tests.wire import WireClient


def all_topics(**fields) -> MetadataRequest:
    """A Metadata request for every topic (a null topic list; the constructor turns None into [])."""
    r = MetadataRequest(**fields)
    r.topics = None
    return r

COMBOS = [("SASL_PLAINTEXT", "PLAIN"), ("SASL_SSL", "SCRAM-SHA-256"), ("SASL_SSL", "SCRAM-SHA-512"), ("SSL", None)]
IDS = ["sasl_plaintext-plain", "sasl_ssl-scram256", "sasl_ssl-scram512", "ssl-client-cert"]


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"), key_password="keystore-pw")


@pytest.fixture(scope="module")
def broker(pki, tmp_path_factory):
    settings = security_settings(pki, **{
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,"
                     "SASL_SSL://127.0.0.1:0,REAUTH://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,"
                                          "SASL_SSL:SASL_SSL,REAUTH:SASL_PLAINTEXT",
        "listener.name.reauth.plain.sasl.jaas.config": security_settings(pki)[
            "listener.name.sasl_plaintext.plain.sasl.jaas.config"],
        "listener.name.reauth.connections.max.reauth.ms": "3000",
        "ssl.key.password": "keystore-pw",
    })
    b = BrokerProcess(tmp_path_factory.mktemp("sec-broker"), config=settings)
    b.start()
    yield b
    b.close()


def _topic(b) -> str:
    name = f"sec-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic(name, 1)])[name].result(15)
    return name


def test_each_listener_advertises_itself(broker, pki):
    for protocol, mech in COMBOS:
        admin = AdminClient(client_security(broker, protocol, pki, mech, "admin"))
        md = admin.list_topics(timeout=15)
        assert [(b.host, b.port) for b in md.brokers.values()] == [("127.0.0.1", broker.listener_ports[protocol])]


@pytest.mark.parametrize("protocol,mech", COMBOS, ids=IDS)
def test_confluent_kafka(broker, pki, protocol, mech):
    topic = _topic(broker)
    conf = client_security(broker, protocol, pki, mech, "alice")
    p = Producer(conf)
    for i in range(20):
        p.produce(topic, f"v{i}".encode())
    assert p.flush(15) == 0
    c = Consumer({**conf, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    got = []
    deadline = time.monotonic() + 30
    while len(got) < 20 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got.append(m.value())
    c.close()
    assert got == [f"v{i}".encode() for i in range(20)]


def _kafka_python_conf(b, pki, protocol, mech, user="alice", password=None):
    conf = {"bootstrap_servers": b.address(protocol), "security_protocol": protocol}
    if protocol in ("SSL", "SASL_SSL"):
        conf.update(ssl_cafile=pki["ca"], ssl_check_hostname=True)
    if protocol == "SSL":
        conf.update(ssl_certfile=pki["client_cert"], ssl_keyfile=pki["client_key"])
    if mech:
        conf.update(sasl_mechanism=mech, sasl_plain_username=user,
                    sasl_plain_password=password if password is not None else f"{user}-secret")
    return conf


@pytest.mark.parametrize("protocol,mech", COMBOS, ids=IDS)
def test_kafka_python(broker, pki, protocol, mech):
    from kafka import KafkaConsumer, KafkaProducer

    topic = _topic(broker)
    conf = _kafka_python_conf(broker, pki, protocol, mech)
    p = KafkaProducer(**conf)
    for i in range(10):
        p.send(topic, f"k{i}".encode())
    p.flush(15)
    p.close()
    c = KafkaConsumer(topic, group_id=f"g-{topic}", auto_offset_reset="earliest", consumer_timeout_ms=15000, **conf)
    got = []
    for m in c:
        got.append(m.value)
        if len(got) == 10:
            break
    c.close()
    assert got == [f"k{i}".encode() for i in range(10)]


@pytest.mark.parametrize("protocol,mech", COMBOS, ids=IDS)
def test_aiokafka(broker, pki, protocol, mech):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.helpers import create_ssl_context

    topic = _topic(broker)
    conf = {"bootstrap_servers": broker.address(protocol), "security_protocol": protocol}
    if protocol in ("SSL", "SASL_SSL"):
        conf["ssl_context"] = create_ssl_context(
            cafile=pki["ca"], **({"certfile": pki["client_cert"], "keyfile": pki["client_key"]} if protocol == "SSL"
                                 else {}))
    if mech:
        conf.update(sasl_mechanism=mech, sasl_plain_username="bob", sasl_plain_password="bob-secret")

    async def run():
        p = AIOKafkaProducer(**conf)
        await p.start()
        try:
            for i in range(10):
                await p.send_and_wait(topic, f"a{i}".encode())
        finally:
            await p.stop()
        c = AIOKafkaConsumer(topic, group_id=f"g-{topic}", auto_offset_reset="earliest", **conf)
        await c.start()
        got = []
        try:
            async with asyncio.timeout(30):
                async for m in c:
                    got.append(m.value)
                    if len(got) == 10:
                        break
        finally:
            await c.stop()
        return got

    assert asyncio.run(run()) == [f"a{i}".encode() for i in range(10)]


# ------------------------------------------------------------------ failures: nothing leaks
@pytest.mark.parametrize("protocol,mech,user,password", [
    ("SASL_PLAINTEXT", "PLAIN", "alice", "wrong"), ("SASL_PLAINTEXT", "PLAIN", "mallory", "x"),
    ("SASL_SSL", "SCRAM-SHA-256", "alice", "wrong"), ("SASL_SSL", "SCRAM-SHA-512", "mallory", "x")],
    ids=["plain-wrong-password", "plain-unknown-user", "scram256-wrong-password", "scram512-unknown-user"])
def test_bad_login_fails_cleanly_with_confluent(broker, pki, protocol, mech, user, password):
    topic = _topic(broker)
    errors = []
    conf = {**client_security(broker, protocol, pki, mech, user, password), "error_cb": errors.append,
            "message.timeout.ms": 3000}
    p = Producer(conf)
    reports = []
    p.produce(topic, b"must not land", on_delivery=lambda err, msg: reports.append(err))
    p.flush(10)
    assert reports and reports[0] is not None
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors
    with WireClient(broker.bootstrap) as w:  # nothing was appended
        from protocol.messages.list_offsets import ListOffsetsRequest
        req = ListOffsetsRequest(replica_id=-1, topics=[ListOffsetsRequest.ListOffsetsTopic(
            name=topic, partitions=[ListOffsetsRequest.ListOffsetsPartition(partition_index=0, timestamp=-1)])])
        assert w.request(req, 7).topics[0].partitions[0].offset == 0


def test_bad_login_fails_cleanly_with_kafka_python_and_aiokafka(broker, pki):
    from aiokafka import AIOKafkaProducer
    from kafka import KafkaProducer
    from kafka.errors import KafkaError as KPError

    # kafka-python 3.0 logs the SASL failure and retries its bootstrap until bootstrap_timeout_ms
    with pytest.raises(KPError):
        KafkaProducer(**_kafka_python_conf(broker, pki, "SASL_PLAINTEXT", "PLAIN", "alice", "wrong"),
                      max_block_ms=5000, bootstrap_timeout_ms=3000)

    async def aio():
        p = AIOKafkaProducer(bootstrap_servers=broker.address("SASL_PLAINTEXT"), security_protocol="SASL_PLAINTEXT",
                             sasl_mechanism="PLAIN", sasl_plain_username="alice", sasl_plain_password="wrong",
                             request_timeout_ms=5000)
        try:
            await p.start()
        finally:
            await p.stop()

    with pytest.raises(Exception):
        asyncio.run(aio())


def test_ssl_listener_refuses_clients_without_a_certificate(broker, pki):
    import ssl

    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        w = tls_wire(broker.address("SSL"), pki, client_cert=False)
        w.request(ApiVersionsRequest(), 0)  # TLS 1.3: the refusal shows on first use


# ------------------------------------------------------------------ the exchange on the wire
def test_requests_before_authentication_close_the_connection_unanswered(broker):
    topic = _topic(broker)
    with WireClient(broker.address("SASL_PLAINTEXT")) as w:
        w.send(all_topics(), 12)
        assert connection_closed(w)
    records = _one_record_batch()
    with WireClient(broker.address("SASL_PLAINTEXT")) as w:
        assert w.request(ApiVersionsRequest(client_software_name="t", client_software_version="1"), 3).error_code == 0
        w.send(ProduceRequest(acks=-1, timeout_ms=5000, topic_data=[ProduceRequest.TopicProduceData(
            name=topic, partition_data=[ProduceRequest.PartitionProduceData(index=0, records=records)])]), 9)
        assert connection_closed(w)
    with WireClient(broker.address("SASL_PLAINTEXT")) as w:  # SaslAuthenticate before SaslHandshake
        w.send(SaslAuthenticateRequest(auth_bytes=b"\0alice\0alice-secret"), 2)
        assert connection_closed(w)
    with WireClient(broker.bootstrap) as w:
        md = w.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
                                       allow_auto_topic_creation=False), 12)
        assert md.topics[0].error_code == 0
        from protocol.messages.list_offsets import ListOffsetsRequest
        req = ListOffsetsRequest(replica_id=-1, topics=[ListOffsetsRequest.ListOffsetsTopic(
            name=topic, partitions=[ListOffsetsRequest.ListOffsetsPartition(partition_index=0, timestamp=-1)])])
        assert w.request(req, 7).topics[0].partitions[0].offset == 0  # the produce never ran


def _one_record_batch() -> bytes:
    from protocol.records import build_batch

    return build_batch([(None, b"x", [])])


def test_failed_login_is_answered_then_closed(broker):
    with WireClient(broker.address("SASL_PLAINTEXT")) as w:
        r = wire_plain_login(w, "alice", "wrong")
        assert r.error_code == Errors.SASL_AUTHENTICATION_FAILED
        assert r.error_message == "Authentication failed: Invalid username or password"
        assert connection_closed(w)
    with WireClient(broker.address("SASL_PLAINTEXT")) as w:
        r = wire_plain_login(w, "nobody", "x", authenticate_version=0)
        assert r.error_code == Errors.SASL_AUTHENTICATION_FAILED
        assert connection_closed(w)


def test_failed_login_closes_after_the_failed_authentication_delay(broker):
    """Kafka's connection.failed.authentication.delay.ms (100 ms): the answer comes, the connection
    reads nothing more (a request sent after the failure is never answered) and closes after the delay."""
    import time as _time

    with WireClient(broker.address("SASL_PLAINTEXT")) as w:
        r = wire_plain_login(w, "alice", "wrong")
        answered = _time.monotonic()
        assert r.error_code == Errors.SASL_AUTHENTICATION_FAILED
        w.send(ApiVersionsRequest(), 0)
        assert connection_closed(w)
        assert _time.monotonic() - answered >= 0.09


def test_unsupported_mechanism_lists_the_enabled_ones_then_closes(broker):
    with WireClient(broker.address("SASL_PLAINTEXT")) as w:
        r = w.request(SaslHandshakeRequest(mechanism="GSSAPI"), 1)
        assert r.error_code == Errors.UNSUPPORTED_SASL_MECHANISM
        assert r.mechanisms == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
        assert connection_closed(w)


def test_successful_login_then_requests_work(broker, pki):
    with WireClient(broker.address("SASL_PLAINTEXT")) as w:
        r = wire_plain_login(w, "alice", "alice-secret")
        assert r.error_code == 0 and r.session_lifetime_ms == 0
        md = w.request(all_topics(), 12)
        assert md.brokers[0].port == broker.listener_ports["SASL_PLAINTEXT"]
        # a second handshake without re-authentication configured: ILLEGAL_SASL_STATE, as Kafka's KafkaApis
        assert w.request(SaslHandshakeRequest(mechanism="PLAIN"), 1).error_code == Errors.ILLEGAL_SASL_STATE
        assert w.request(SaslAuthenticateRequest(auth_bytes=b""), 2).error_code == Errors.ILLEGAL_SASL_STATE
    with tls_wire(broker.address("SASL_SSL"), pki) as w:
        assert wire_plain_login(w, "bob", "bob-secret").error_code == 0
        assert w.request(all_topics(), 12).brokers[0].port == broker.listener_ports["SASL_SSL"]


def test_sasl_apis_on_plaintext_are_illegal_state(broker):
    with WireClient(broker.bootstrap) as w:
        assert w.request(SaslHandshakeRequest(mechanism="PLAIN"), 1).error_code == Errors.ILLEGAL_SASL_STATE
        assert w.request(SaslAuthenticateRequest(auth_bytes=b"x"), 1).error_code == Errors.ILLEGAL_SASL_STATE


def test_legacy_v0_handshake_with_raw_tokens(broker):
    import struct

    with WireClient(broker.address("SASL_PLAINTEXT")) as w:
        r = w.request(SaslHandshakeRequest(mechanism="PLAIN"), 0)
        assert r.error_code == 0
        token = b"\0alice\0alice-secret"
        w.send_raw(struct.pack(">i", len(token)) + token)
        assert w.recv_frame() == b""  # PLAIN's empty server token, raw
        assert w.request(all_topics(), 12).brokers[0].port == broker.listener_ports["SASL_PLAINTEXT"]
    with WireClient(broker.address("SASL_PLAINTEXT")) as w:
        assert w.request(SaslHandshakeRequest(mechanism="PLAIN"), 0).error_code == 0
        token = b"\0alice\0bad"
        w.send_raw(struct.pack(">i", len(token)) + token)
        assert connection_closed(w)


def test_session_lifetime_and_reauthentication(broker):
    """connections.max.reauth.ms (KIP-368) on a custom listener name mapped to SASL_PLAINTEXT."""
    addr = broker.address("REAUTH")
    with WireClient(addr) as w:
        r = wire_plain_login(w, "alice", "alice-secret", authenticate_version=1)
        assert r.error_code == 0 and r.session_lifetime_ms == 3000
        started = time.monotonic()
        assert w.request(all_topics(), 12).brokers[0].port == broker.listener_ports["REAUTH"]

        def closed():
            try:
                w.request(all_topics(), 12)
                return False
            except (ConnectionError, OSError):
                return True

        until(closed, 15, "the broker closes the connection once the session expired", interval=0.1)
        assert time.monotonic() - started >= 2.9
    with WireClient(addr) as w:  # re-authenticating in time keeps the connection
        wire_plain_login(w, "alice", "alice-secret", authenticate_version=1)
        # re-authenticate every 1.05 s (at most one a second, as Kafka), using the connection meanwhile:
        # six renewals outlive two sessions (counted, not timed: a slow machine makes fewer per second)
        started = time.monotonic()
        for _ in range(6):
            r = wire_plain_login(w, "alice", "alice-secret", authenticate_version=1)
            assert r.error_code == 0 and r.session_lifetime_ms == 3000
            renewed = time.monotonic()
            while time.monotonic() - renewed < 1.05:
                assert w.request(all_topics(), 12).topics is not None
        assert time.monotonic() - started > 2 * 3.0
        assert wire_plain_login(w, "alice", "alice-secret", authenticate_version=1).error_code == 0
        hs = w.request(SaslHandshakeRequest(mechanism="PLAIN"), 1)  # within the second: refused, still open
        assert hs.error_code == Errors.ILLEGAL_SASL_STATE and hs.mechanisms == []
        assert w.request(all_topics(), 12).topics is not None
    with WireClient(addr) as w:  # a re-authentication cannot change the principal
        wire_plain_login(w, "alice", "alice-secret", authenticate_version=1)
        r = wire_plain_login(w, "bob", "bob-secret", authenticate_version=1)
        assert r.error_code == Errors.SASL_AUTHENTICATION_FAILED
        assert connection_closed(w)


def test_confluent_reauthenticates(broker):
    """librdkafka re-authenticates before the 3 s session ends: a producer keeps working for 8 s."""
    topic = _topic(broker)
    p = Producer({"bootstrap.servers": broker.address("REAUTH"), "security.protocol": "SASL_PLAINTEXT",
                  "sasl.mechanism": "PLAIN", "sasl.username": "alice", "sasl.password": "alice-secret"})
    errors = []
    end = time.monotonic() + 8
    sent = 0
    while time.monotonic() < end:
        p.produce(topic, b"x", on_delivery=lambda err, msg: err and errors.append(err))
        sent += 1
        p.flush(5)
    assert p.flush(10) == 0 and not errors and sent > 4
