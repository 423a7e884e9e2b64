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

from tests.differential.harness import assert_as_expected, differences, run_on_both
from tests.differential.test_oauth import Side, _answer, brokers_alike
from tests.integration.test_security_oauth_keycloak import keycloak_settings, oidc
from tests.oauth_issuer import read_values, share_read_values
from tests.support import produce_refused, set_group_configs, unique
from tests.wire import WireClient

pytestmark = pytest.mark.xdist_group("keycloak")  # one worker, one Keycloak (a session fixture)
EXPECTED: dict[tuple[str, str], str] = {}  # (scenario, path) -> why ours differs; none


@pytest.fixture(scope="module")
def brokers(keycloak, tmp_path_factory):
    settings = keycloak_settings(keycloak, "KC", **{"group.initial.rebalance.delay.ms": "0"})
    yield from brokers_alike(settings, keycloak.jwks_url(), tmp_path_factory.mktemp("differential-oauth-kc"), "KC")


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
    out["alice_without_acl"] = [produce_refused(Producer(s.client("alice", **{"message.timeout.ms": 5000})), topic)]
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
