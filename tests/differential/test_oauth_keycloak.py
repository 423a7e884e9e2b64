"""SASL/OAUTHBEARER with Keycloak (tests/keycloak) as the provider, against the reference Kafka 4.4
configured alike: each broker's KC listener validates Keycloak's tokens against the ``kafka`` realm's JWKS
(audience ``kafka-broker``, principal from ``azp``), StandardAuthorizer with ``bob`` and the PLAINTEXT
listener's ``User:ANONYMOUS`` as super users.  The scenario, on both brokers:

- Keycloak tokens on the wire: ``bob``'s accepted (session lifetime rounded), ``elsewhere``'s (another
  audience) and the ``other`` realm's (another issuer and keys) refused, with the exact answers;
- librdkafka with its own OIDC login (``sasl.oauthbearer.method=oidc``): ``alice`` denied a topic
  without ACLs; ``bob`` produces, consumes and share-consumes;
- Kafka 4.4's Java client with ``OAuthBearerLoginCallbackHandler`` as ``bob``: produces, consumes and
  share-consumes (tests/keycloak/OAuthClient.java).

Its own Kafka 4.4 (~13 s, ~300 MiB) and the session's Keycloak.
"""
from __future__ import annotations

import pytest
from confluent_kafka import Consumer, Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, NewTopic

from broker.testing import BrokerProcess
from tests.differential.harness import assert_as_expected, differences, run_on_both
from tests.differential.test_oauth import AUTHORIZER, Side, _answer
from tests.integration.test_security_oauth import SHARE_FAST
from tests.integration.test_security_oauth_keycloak import oidc
from tests.kafka_ref.launcher import KafkaRef, free_port
from tests.oauth_issuer import read_values, share_read_values
from tests.reference import skip_without_kafka
from tests.support import set_group_configs, unique
from tests.wire import WireClient

PKG = "org.apache.kafka.common.security.oauthbearer."
pytestmark = pytest.mark.xdist_group("keycloak")  # one worker, one Keycloak (a session fixture)
EXPECTED: dict[tuple[str, str], str] = {}  # (scenario, path) -> why ours differs; none


def settings(keycloak) -> dict[str, str]:
    prefix = "listener.name.kc.oauthbearer."
    return {
        "listeners": "PLAINTEXT://127.0.0.1:0,KC://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,KC:SASL_PLAINTEXT",
        "listener.name.kc.sasl.enabled.mechanisms": "OAUTHBEARER",
        prefix + "sasl.jaas.config": PKG + "OAuthBearerLoginModule required;",
        prefix + "sasl.server.callback.handler.class": PKG + "OAuthBearerValidatorCallbackHandler",
        "sasl.oauthbearer.jwks.endpoint.url": keycloak.jwks_url(),
        "sasl.oauthbearer.expected.audience": "kafka-broker",
        "sasl.oauthbearer.expected.issuer": keycloak.issuer(),
        "sasl.oauthbearer.sub.claim.name": "azp",
        **AUTHORIZER, "super.users": "User:ANONYMOUS;User:bob",
        **SHARE_FAST, "group.initial.rebalance.delay.ms": "0",
    }


@pytest.fixture(scope="module")
def brokers(keycloak, tmp_path_factory):
    """((kafka PLAINTEXT, kafka KC), (ours PLAINTEXT, ours KC))."""
    skip_without_kafka()
    conf = settings(keycloak)
    kafka = KafkaRef(settings=dict(conf), heap="-Xmx384m",
                     jvm_options=(f"-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls={keycloak.jwks_url()}",))
    node, kc_port = kafka.nodes[0], free_port()
    kafka.settings.update({
        "listeners": f"PLAINTEXT://127.0.0.1:{node.port},CONTROLLER://127.0.0.1:{node.controller_port},"
                     f"KC://127.0.0.1:{kc_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{node.port},KC://127.0.0.1:{kc_port}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,KC:SASL_PLAINTEXT"})
    with kafka, BrokerProcess(tmp_path_factory.mktemp("differential-oauth-kc"), config=conf) as ours:
        yield ((kafka.bootstrap, f"127.0.0.1:{kc_port}"), (ours.address("PLAINTEXT"), ours.address("KC")))


class KeycloakSide(Side):
    def __init__(self, label: str, addresses: tuple[str, str], keycloak, directory):
        super().__init__(label, addresses, None)
        self.keycloak, self.directory = keycloak, directory

    def client(self, name: str, **extra) -> dict:
        return oidc(self.oauth, self.keycloak, name, **extra)


def keycloak_clients(s: KeycloakSide) -> dict:
    kc = s.keycloak
    out = {}
    for case, token in (("bob", kc.token("bob")), ("audience", kc.token("elsewhere")),
                        ("issuer", kc.token("alice", realm="other"))):
        with WireClient(s.oauth) as w:
            out[case] = _answer(w, token)
    topic, group = unique("kc-diff"), unique("kc-diff-share")
    admin = AdminClient({"bootstrap.servers": s.plaintext})  # referenced until the results are in
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    set_group_configs(s.plaintext, group, share_auto_offset_reset="earliest")
    denied = []
    p = Producer(s.client("alice", **{"message.timeout.ms": 5000}))
    p.produce(topic, b"denied", on_delivery=lambda err, msg: denied.append(err and err.name()))
    p.flush(15)
    out["alice_without_acl"] = denied
    p = Producer(s.client("bob"))
    for n in range(5):
        p.produce(topic, b"v%d" % n)
    out["bob_produced"] = p.flush(30) == 0
    c = Consumer(s.client("bob", **{"group.id": group + "-cg", "auto.offset.reset": "earliest"}))
    c.subscribe([topic])
    out["bob_consumed"] = sorted(read_values(c, 5))
    c.close()
    sc = ShareConsumer(s.client("bob", **{"group.id": group}))
    sc.subscribe([topic])
    out["bob_share_consumed"] = sorted(share_read_values(sc, 5))
    sc.close()
    java_topic, java_group = unique("kc-diff-java"), unique("kc-diff-java")
    admin.create_topics([NewTopic(java_topic, 1, 1)])[java_topic].result(30)
    set_group_configs(s.plaintext, java_group, share_auto_offset_reset="earliest")
    done = kc.java_client(s.oauth, java_topic, java_group, 5, s.directory)
    out["java"] = {"exit": done.returncode, "output": done.stdout.split("\n")[:3]}
    return out


def test_oauthbearer_with_keycloak_as_kafka(brokers, keycloak, tmp_path):
    kafka, ours = brokers
    addresses = {kafka[0]: kafka, ours[0]: ours}
    results = run_on_both(keycloak_clients,
                          lambda label, bs: KeycloakSide(label, addresses[bs], keycloak, tmp_path), kafka[0], ours[0])
    assert results["ours"]["java"]["exit"] == 0, results
    assert_as_expected("keycloak_clients", differences(results["ours"], results["kafka"]), EXPECTED)
