"""SASL/OAUTHBEARER against the reference Kafka 4.4, configured alike: an OAUTH listener (SASL_PLAINTEXT)
whose ``OAuthBearerValidatorCallbackHandler`` checks tokens against the JWKS of tests/oauth_issuer.py
(served over HTTP; Kafka 4.4 needs the URL in ``org.apache.kafka.sasl.oauthbearer.allowed.urls``), the
same expected audience and issuer, StandardAuthorizer with ``User:ANONYMOUS`` (the PLAINTEXT listener)
as super user.  Each scenario runs on both and the answers must be the same:

- ``logins``: the wire answers to a valid token and to tokens that are expired, for another audience,
  from another issuer, signed by an unknown key or with a served key id but another key, without the
  principal claim, with another authorization id, and to a malformed client message (error codes,
  challenge bytes, the exact error message, the session lifetime rounded, the connection closed or not);
- ``rotation``: a token signed with a key the broker has not fetched yet is refused, and a later one
  logs in without a restart; the retired key's tokens are refused;
- ``reauthentication``: a second login on the same connection before the token expires keeps it open;
  a third within the same second is refused (ILLEGAL_SASL_STATE, the connection kept); a principal
  change is refused;
- ``clients``: librdkafka (``oauth_cb``) is denied a topic without an ACL, then produces, consumes and
  share-consumes once the ACLs are granted to its OAuth principal.

Its own Kafka 4.4 (~13 s and ~300 MiB while this module runs; `brokers_alike`): the shared reference has no
SASL listener.
"""
from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, Producer, ShareConsumer
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType, AdminClient,
                                  NewTopic, ResourcePatternType, ResourceType)

from broker.testing import BrokerProcess
from protocol.messages.sasl_authenticate import SaslAuthenticateRequest
from protocol.messages.sasl_handshake import SaslHandshakeRequest
from tests.differential.harness import assert_as_expected, differences, run_on_both
from tests.integration.test_security_oauth import SHARE_FAST, login, metadata
from tests.kafka_ref.launcher import KafkaRef, free_port
from tests.oauth_issuer import (Issuer, broker_settings, issuer, read_values,  # noqa: F401 (issuer: a fixture)
                                share_read_values)
from tests.reference import skip_without_kafka
from tests.support import produce_refused, set_group_configs, unique, until
from tests.wire import WireClient

AUTHORIZER = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
              "super.users": "User:ANONYMOUS"}
# (scenario, path) -> why ours differs from Kafka 4.4; empty: the same answers
EXPECTED: dict[tuple[str, str], str] = {}


def brokers_alike(settings: dict, allowed_url: str, directory, listener: str = "OAUTH"):
    """Kafka 4.4 and ours with ``settings`` (an OAUTHBEARER ``listener`` beside PLAINTEXT; Kafka's JVM allows
    ``allowed_url``); yields ((kafka PLAINTEXT, kafka listener), (ours PLAINTEXT, ours listener))."""
    skip_without_kafka()
    kafka = KafkaRef(settings=dict(settings), heap="-Xmx384m",
                     jvm_options=(f"-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls={allowed_url}",))
    node, port = kafka.nodes[0], free_port()
    kafka.settings.update({
        "listeners": f"PLAINTEXT://127.0.0.1:{node.port},CONTROLLER://127.0.0.1:{node.controller_port},"
                     f"{listener}://127.0.0.1:{port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{node.port},{listener}://127.0.0.1:{port}",
        "listener.security.protocol.map": f"PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,{listener}:SASL_PLAINTEXT"})
    with kafka, BrokerProcess(directory, config=settings) as ours:
        yield ((kafka.bootstrap, f"127.0.0.1:{port}"), (ours.address("PLAINTEXT"), ours.address(listener)))


@pytest.fixture(scope="module")
def brokers(issuer, tmp_path_factory):
    settings = {**broker_settings(issuer), **AUTHORIZER, **SHARE_FAST, "group.initial.rebalance.delay.ms": "0"}
    yield from brokers_alike(settings, issuer.jwks_url, tmp_path_factory.mktemp("differential-oauth"))


class Side:
    def __init__(self, label: str, addresses: tuple[str, str], issuer: Issuer):
        self.label, self.issuer = label, issuer
        self.plaintext, self.oauth = addresses

    def close(self) -> None:
        pass


def _closed(w: WireClient) -> bool:
    try:
        metadata(w)
        return False
    except (ConnectionError, OSError):
        return True


def _answer(w: WireClient, token: str, authzid: str = "") -> dict:
    first, second = login(w, token, authzid)
    out = {"first_error": first.error_code, "first_message": first.error_message, "challenge": first.auth_bytes,
           "lifetime_s": round(first.session_lifetime_ms / 10_000) * 10}
    if second is not None:
        out.update(second_error=second.error_code, second_message=second.error_message)
    out["closed"] = _closed(w) if out["first_error"] or second is not None else False
    return out


def logins(s: Side) -> dict:
    i = s.issuer
    tokens = {
        "valid": i.token(lifetime=120),
        "expired": i.token(lifetime=-120),
        "audience": i.token(audience="another-service"),
        "issuer": i.token(issuer="http://127.0.0.1:1/realms/other"),
        "unknown_key": i.token(kid="kid-" + unique("k"), key=Issuer.new_key()),
        "wrong_signature": i.token(key=Issuer.new_key()),
        "no_sub": i.token(sub=None),
    }
    out = {}
    for case, token in tokens.items():
        with WireClient(s.oauth) as w:
            out[case] = _answer(w, token)
    with WireClient(s.oauth) as w:
        out["authzid"] = _answer(w, i.token(sub="alice"), authzid="bob")
    with WireClient(s.oauth) as w:
        w.request(SaslHandshakeRequest(mechanism="OAUTHBEARER"), 1)
        r = w.request(SaslAuthenticateRequest(auth_bytes=b"n,,\x01nothing\x01\x01"), 2)
        out["malformed"] = {"error": r.error_code, "message": r.error_message, "closed": _closed(w)}
    return out


def rotation(s: Side) -> dict:
    i = s.issuer
    with WireClient(s.oauth) as w:
        before = _answer(w, i.token())
    kid = f"{s.label}-{unique('rotated')}"
    key = Issuer.new_key()
    i.keys[kid] = key  # published by the provider, not yet fetched by the broker
    with WireClient(s.oauth) as w:
        first_try = _answer(w, i.token(kid=kid, key=key))

    def accepted():
        with WireClient(s.oauth) as w:
            return login(w, i.token(kid=kid, key=key))[0].auth_bytes == b""

    until(accepted, 30, f"{s.label} accepts the rotated key", interval=0.2)
    return {"before": before, "first_try_with_the_new_key": first_try, "later": True}


def reauthentication(s: Side) -> dict:
    i = s.issuer
    out = {}
    with WireClient(s.oauth) as w:
        out["first"] = _answer(w, i.token(lifetime=60))
        out["again"] = _answer(w, i.token(lifetime=120))
        out["metadata_after"] = bool(metadata(w).brokers)
        hs = w.request(SaslHandshakeRequest(mechanism="OAUTHBEARER"), 1)  # twice within a second
        out["within_a_second"] = {"error": hs.error_code, "mechanisms": hs.mechanisms, "closed": _closed(w)}
        time.sleep(1.1)  # KafkaChannel's minimum interval between re-authentications
        out["other_principal"] = _answer(w, i.token(sub="mallory"))
    return out


def clients(s: Side) -> dict:
    i = s.issuer
    topic, group, cgroup = unique("oauth-diff"), unique("oauth-share"), unique("oauth-cg")
    admin = AdminClient({"bootstrap.servers": s.plaintext})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    set_group_configs(s.plaintext, group, share_auto_offset_reset="earliest")

    def conf(**extra):
        def token_cb(_config):
            exp = int(time.time()) + 300
            return i.token(sub="carol", expires_at=exp), exp
        return {"bootstrap.servers": s.oauth, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
                "oauth_cb": token_cb, **extra}

    out = {}
    out["without_acl"] = [produce_refused(Producer(conf(**{"message.timeout.ms": 5000})), topic)]
    acls = [AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:carol", "*", op,
                       AclPermissionType.ALLOW) for op in (AclOperation.WRITE, AclOperation.READ)]
    acls += [AclBinding(ResourceType.GROUP, g, ResourcePatternType.LITERAL, "User:carol", "*", AclOperation.READ,
                        AclPermissionType.ALLOW) for g in (group, cgroup)]
    for f in admin.create_acls(acls).values():
        f.result(15)
    mine = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, "User:carol", None, AclOperation.ANY,
                            AclPermissionType.ANY)
    until(lambda: len(admin.describe_acls(mine).result(15)) >= 4, 15, "the ACLs are in the broker's metadata")
    p = Producer(conf())
    for n in range(5):
        p.produce(topic, b"v%d" % n)
    out["produced"] = p.flush(30) == 0
    c = Consumer(conf(**{"group.id": cgroup, "auto.offset.reset": "earliest"}))
    c.subscribe([topic])
    out["consumed"] = sorted(read_values(c, 5))
    c.close()
    sc = ShareConsumer(conf(**{"group.id": group}))
    sc.subscribe([topic])
    out["share_consumed"] = sorted(share_read_values(sc, 5))
    sc.close()
    return out


SCENARIOS = {"logins": logins, "rotation": rotation, "reauthentication": reauthentication, "clients": clients}


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_oauthbearer_as_kafka(brokers, issuer, scenario):
    kafka, ours = brokers
    addresses = {kafka[0]: kafka, ours[0]: ours}
    results = run_on_both(SCENARIOS[scenario], lambda label, bs: Side(label, addresses[bs], issuer),
                          kafka[0], ours[0])
    assert_as_expected(scenario, differences(results["ours"], results["kafka"]), EXPECTED)
