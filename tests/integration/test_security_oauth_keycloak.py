"""SASL/OAUTHBEARER with Keycloak, a real OpenID Connect provider (tests/keycloak): the broker validates
Keycloak's tokens against its JWKS; librdkafka (``sasl.oauthbearer.method=oidc``) and the Java client
(``OAuthBearerLoginCallbackHandler``) get tokens with the client-credentials flow and log in, produce,
consume and share-consume; ACLs apply to the principals (the ``azp`` claim: the client id); tokens for
another audience or from another realm (issuer and keys) are refused; librdkafka re-authenticates when
its 12 s tokens expire, keeping its connections.  The refusal causes one by one and key rotation are in
test_security_oauth.py (tokens minted there on purpose).
"""
from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, Producer, ShareConsumer
from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, AdminClient, ResourcePatternType, \
    ResourceType

from broker.testing import BrokerProcess
from protocol.errors import Errors
from tests.integration.test_security_oauth import INVALID_TOKEN, SHARE_FAST, login, login_counts
from tests.kafka_ref import launcher
from tests.missing_inputs import missing_input
from tests.oauth_issuer import listener_settings, read_values, share_read_values
from tests.support import create_topic, produce_refused, set_group_configs, unique
from tests.wire import WireClient

pytestmark = pytest.mark.xdist_group("keycloak")  # one worker, one Keycloak (a session fixture)


def keycloak_settings(keycloak, listener: str = "OAUTH", **extra) -> dict:
    """An OAUTHBEARER listener for the ``kafka`` realm's tokens (audience ``kafka-broker``, principal
    ``azp``), StandardAuthorizer with ``bob`` and the PLAINTEXT listener's ``User:ANONYMOUS`` as super users."""
    return listener_settings(keycloak.jwks_url(), "kafka-broker", keycloak.issuer(), listener, **{
        "sasl.oauthbearer.sub.claim.name": "azp",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:ANONYMOUS;User:bob", **SHARE_FAST, **extra})


@pytest.fixture(scope="module")
def broker(keycloak, tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("kc-broker"),
                      config=keycloak_settings(keycloak, **{"sharebroker.metrics.listener": "127.0.0.1:0"}))
    b.start()
    yield b
    b.close()


def oidc(bootstrap: str, keycloak, client: str, **extra) -> dict:
    """librdkafka's own OIDC client-credentials login."""
    return {"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "OAUTHBEARER", "sasl.oauthbearer.method": "oidc",
            "sasl.oauthbearer.client.id": client, "sasl.oauthbearer.client.secret": f"{client}-secret",
            "sasl.oauthbearer.token.endpoint.url": keycloak.token_url(), **extra}


def allow(b, keycloak, principal: str, resource_type, name: str, *operations) -> None:
    admin = AdminClient(oidc(b.address("OAUTH"), keycloak, "bob"))  # a super user, logged in through Keycloak
    acls = [AclBinding(resource_type, name, ResourcePatternType.LITERAL, principal, "*", op, AclPermissionType.ALLOW)
            for op in operations]
    for f in admin.create_acls(acls).values():
        f.result(15)


def test_keycloak_tokens_are_accepted_or_refused(broker, keycloak):
    with WireClient(broker.address("OAUTH")) as w:
        first, _ = login(w, keycloak.token("bob"))
        assert first.error_code == 0 and first.auth_bytes == b"" and 200_000 < first.session_lifetime_ms <= 300_000
    for token in (keycloak.token("elsewhere"),  # another audience
                  keycloak.token("alice", realm="other")):  # another issuer, signed with keys not in the JWKS
        with WireClient(broker.address("OAUTH")) as w:
            first, second = login(w, token)
            assert first.auth_bytes == INVALID_TOKEN
            assert second.error_code == Errors.SASL_AUTHENTICATION_FAILED
            assert second.error_message == INVALID_TOKEN.decode()


def test_librdkafka_oidc_with_acls_and_reauthentication(broker, keycloak):
    """alice (12 s tokens) is denied until granted; then produces, consumes and share-consumes for longer
    than two token lifetimes, re-authenticating without new connections."""
    topic = create_topic(broker.address("PLAINTEXT"), prefix="kc")
    group, cgroup = unique("kc-share"), unique("kc-cg")
    set_group_configs(broker.address("PLAINTEXT"), group, share_auto_offset_reset="earliest")
    p = Producer(oidc(broker.address("OAUTH"), keycloak, "alice", **{"message.timeout.ms": 5000}))
    assert produce_refused(p, topic) == "TOPIC_AUTHORIZATION_FAILED"
    allow(broker, keycloak, "User:alice", ResourceType.TOPIC, topic, AclOperation.WRITE, AclOperation.READ,
          AclOperation.DESCRIBE)
    allow(broker, keycloak, "User:alice", ResourceType.GROUP, group, AclOperation.READ)
    allow(broker, keycloak, "User:alice", ResourceType.GROUP, cgroup, AclOperation.READ)
    p = Producer(oidc(broker.address("OAUTH"), keycloak, "alice"))
    key = ("sharebroker_sasl_authentications_total", "OAUTH", "OAUTHBEARER", "reauthentication")
    before = login_counts(broker).get(key, 0)
    sent, errors = 0, []
    end = time.monotonic() + 28  # 2.3 token lifetimes
    while time.monotonic() < end:
        p.produce(topic, b"v%d" % sent, on_delivery=lambda err, msg: err and errors.append(err))
        sent += 1
        p.flush(5)
        time.sleep(0.2)
    assert p.flush(15) == 0 and not errors
    assert login_counts(broker).get(key, 0) - before >= 2
    c = Consumer(oidc(broker.address("OAUTH"), keycloak, "alice",
                      **{"group.id": cgroup, "auto.offset.reset": "earliest"}))
    c.subscribe([topic])
    assert len(read_values(c, sent)) == sent
    c.close()
    sc = ShareConsumer(oidc(broker.address("OAUTH"), keycloak, "alice", **{"group.id": group}))
    sc.subscribe([topic])
    assert len(share_read_values(sc, sent)) == sent
    sc.close()


def test_java_client_logs_in_produces_consumes_and_share_consumes(broker, keycloak, tmp_path):
    if launcher.missing_tools():
        missing_input("the Java client needs java and mvn")
    topic = create_topic(broker.address("PLAINTEXT"), prefix="kc-java")
    group = unique("kc-java")
    set_group_configs(broker.address("PLAINTEXT"), group, share_auto_offset_reset="earliest")
    done = keycloak.java_client(broker.address("OAUTH"), topic, group, 20, tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert done.stdout.split("\n")[:3] == ["produced 20", "consumed 20", "shared 20"], done.stdout
