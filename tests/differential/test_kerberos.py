"""SASL/GSSAPI against the reference Kafka 4.4 configured alike: one KDC (tests/kerberos.py), a Kafka 4.4
of this module's own and a sharebroker, each with StandardAuthorizer (PLAINTEXT clients, User:ANONYMOUS,
are super users), a SASL_PLAINTEXT listener on ``localhost`` logging in as ``kafka/localhost`` from a
keytab (``listener.name.sasl_plaintext.gssapi.sasl.jaas.config``), ``sasl.kerberos.service.name=kafka``
and the same ``sasl.kerberos.principal.to.local.rules``.  The same scenario runs on both and the results
must be identical: logins from librdkafka (kcat) and the Java client, python-gssapi on the wire (Kafka's
exchange after SaslHandshake v1 and v0, re-authentication), tickets for another service refused, ACLs on
short names."""
from __future__ import annotations

import re

import pytest
from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, AdminClient, NewTopic, \
    ResourcePatternType, ResourceType

from broker.testing import BrokerProcess
from protocol.messages.metadata import MetadataRequest
from tests import kerberos
from tests.kerberos import kdc  # noqa: F401  (the realm fixture)
from tests.differential.harness import differences
from tests.differential.test_behaviour import AUTHORIZER, _settle  # User:ANONYMOUS a super user; waits for ACLs
from tests.kafka_ref.launcher import KafkaRef, free_port
from tests.missing_inputs import missing_input
from tests.reference import skip_without_kafka
from tests.support import unique
from tests.wire import WireClient

if kerberos.available():
    missing_input(kerberos.available())


@pytest.fixture(scope="module")
def brokers(kdc, tmp_path_factory):
    """{"kafka": (PLAINTEXT, SASL_PLAINTEXT addresses), "ours": (...)}."""
    skip_without_kafka()
    gss = kerberos.broker_settings(kdc, kdc.keytabs["kafka/localhost"], rules=kerberos.RULES,
                                   **{"connections.max.reauth.ms": "600000"})
    del gss["listeners"]
    port = free_port()
    kafka = KafkaRef(settings={**AUTHORIZER, **gss}, heap="-Xmx384m",
                     jvm_options=(f"-Djava.security.krb5.conf={kdc.krb5_conf}",))
    node = kafka.nodes[0]
    kafka.settings.update({
        "listeners": f"PLAINTEXT://127.0.0.1:{node.port},CONTROLLER://127.0.0.1:{node.controller_port},"
                     f"SASL_PLAINTEXT://{kerberos.HOST}:{port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{node.port},SASL_PLAINTEXT://{kerberos.HOST}:{port}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT"})
    ours_config = {**AUTHORIZER, **gss, "listeners": f"PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://{kerberos.HOST}:0"}
    with kafka, BrokerProcess(tmp_path_factory.mktemp("differential-krb"), config=ours_config,
                              env=kdc.env) as ours:
        yield {"kafka": (kafka.bootstrap, f"{kerberos.HOST}:{port}"),
               "ours": (ours.address("PLAINTEXT"), f"{kerberos.HOST}:{ours.listener_ports['SASL_PLAINTEXT']}")}


def _kcat_failed(r) -> dict:
    out = r.stderr + r.stdout
    return {"exit": r.returncode != 0, "authentication_failed": "Authentication failed" in out}


def scenario(kdc, cp: str, topic: str, plaintext: str, sasl: str) -> dict:
    admin = AdminClient({"bootstrap.servers": plaintext})
    admin.create_topics([NewTopic(topic, 1)])[topic].result(30)
    out: dict = {}
    with WireClient(sasl) as w:
        seen: dict = {}
        out["wire_v1_alice"] = kerberos.gss_login(w, kdc, "alice", 1, seen=seen)
        out["wire_v1_offer"] = seen["offer"]  # the security-layer offer, unwrapped
        out["wire_v1_metadata_host"] = w.request(MetadataRequest(topics=[]), 12).brokers[0].host
        out["wire_reauth_alice"] = kerberos.gss_login(w, kdc, "alice", 1)
    with WireClient(sasl) as w:  # asking for bob's authorization id; then alice again, the same principal?
        out["wire_authzid_bob"] = kerberos.gss_login(w, kdc, "alice", 1, authzid=kdc.full("bob"))
        out["wire_authzid_then_alice"] = kerberos.gss_login(w, kdc, "alice", 1, authzid="")
    with WireClient(sasl) as w:  # a connection of its own: Kafka admits one re-authentication a second
        kerberos.gss_login(w, kdc, "alice", 1)
        code, message = kerberos.gss_login(w, kdc, "bob", 1)
        # Kafka writes the principals type.name (User.analyst); this broker type:name, a known difference
        out["wire_reauth_bob"] = code, bool(re.fullmatch(kerberos.REAUTH_REFUSED, message))
    with WireClient(sasl) as w:
        out["wire_v0_alice"] = kerberos.gss_login(w, kdc, "alice", 0)
        out["wire_v0_metadata_host"] = w.request(MetadataRequest(topics=[]), 12).brokers[0].host
    with WireClient(sasl) as w:
        out["wire_other_service"] = kerberos.gss_login(w, kdc, "alice", 1, service="other")
    with WireClient(sasl) as w:
        out["wire_v0_other_service"] = kerberos.gss_login(w, kdc, "alice", 0, service="other")
    out["java_other_service"] = kerberos.java(kdc, cp, sasl, "alice", topic, service="other")
    out["kcat_other_service"] = _kcat_failed(kerberos.kcat(kdc, sasl, "bob", "-L", "-m", "10", service="other"))
    bindings = [AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, f"User:{user}", "*", op,
                           AclPermissionType.ALLOW)
                for user in ("analyst", "etl") for op in (AclOperation.WRITE, AclOperation.READ)]
    bindings.append(AclBinding(ResourceType.GROUP, "*", ResourcePatternType.LITERAL, "User:analyst", "*",
                               AclOperation.READ, AclPermissionType.ALLOW))
    for f in admin.create_acls(bindings).values():
        f.result(30)
    lines = [f"etl-{i}" for i in range(3)]
    produced = _settle(lambda: kerberos.kcat(kdc, sasl, "etl/localhost", "-P", "-t", topic, stdin="\n".join(lines)),
                       lambda r: r.returncode == 0)
    out["kcat_etl_produce"] = produced.returncode
    read = kerberos.kcat(kdc, sasl, "etl/localhost", "-C", "-t", topic, "-o", "beginning", "-e", "-q", "-c", "3")
    out["kcat_etl_read"] = read.stdout.splitlines()
    denied = kerberos.kcat(kdc, sasl, "bob", "-P", "-t", topic, stdin="x")
    out["kcat_bob_denied"] = "Broker: Topic authorization failed" in denied.stderr
    out["java_alice"] = _settle(lambda: kerberos.java(kdc, cp, sasl, "alice", topic, n=3), lambda r: r == "OK 3")
    out["java_bob"] = kerberos.java(kdc, cp, sasl, "bob", topic, n=1)
    return out


def test_kerberos_as_kafka(kdc, brokers):
    cp = kerberos.java_classpath()
    topic = unique("krb")  # the same name on both (it is in the answers)
    results = {side: scenario(kdc, cp, topic, *addresses) for side, addresses in brokers.items()}
    kafka = results["kafka"]  # the scenario did what it says on Kafka
    assert kafka["java_alice"] == "OK 3" and kafka["wire_v1_alice"] is None and kafka["wire_v0_alice"] is None, kafka
    assert kafka["kcat_etl_read"] == [f"etl-{i}" for i in range(3)] and kafka["kcat_bob_denied"], kafka
    assert kafka["wire_other_service"] is not None and kafka["java_other_service"].startswith("ERROR"), kafka
    assert kafka["kcat_other_service"] == {"exit": True, "authentication_failed": True}, kafka
    assert kafka["wire_authzid_bob"] is None and kafka["wire_authzid_then_alice"] is None, kafka
    assert differences(results["ours"], results["kafka"]) == [], results
