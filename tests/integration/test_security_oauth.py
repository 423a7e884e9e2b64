"""SASL/OAUTHBEARER with JWTs validated against an issuer's JWKS (broker/security/oauthbearer.py).

The issuer is tests/oauth_issuer.py (keys served over HTTP, tokens minted with PyJWT), so each
refusal cause can be produced on purpose; the Keycloak tests (test_security_oauth_keycloak.py)
log in with tokens from a real identity provider.  Clients: the Kafka wire protocol (the exact
answers), librdkafka through confluent-kafka's ``oauth_cb`` (log in, produce, consume,
share-consume, re-authenticate).
"""
from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, Producer, ShareConsumer
from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, AdminClient, ResourcePatternType, \
    ResourceType

from broker.testing import BrokerProcess
from protocol.errors import Errors
from protocol.messages.metadata import MetadataRequest
from protocol.messages.sasl_authenticate import SaslAuthenticateRequest
from protocol.messages.sasl_handshake import SaslHandshakeRequest
from tests.oauth_issuer import Issuer, broker_settings, client_first_message, issuer, read_values, \
    share_read_values  # noqa: F401 (issuer: a fixture)
from tests.support import connection_closed, create_topic, produce_refused, set_group_configs, unique, until
from tests.wire import WireClient

INVALID_TOKEN = b'{"status":"invalid_token"}'
SHARE_FAST = {"group.share.min.heartbeat.interval.ms": "100", "group.share.heartbeat.interval.ms": "300",
              "group.share.min.session.timeout.ms": "1000", "group.share.session.timeout.ms": "6000"}


@pytest.fixture(scope="module")
def broker(issuer, tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("oauth-broker"), config=broker_settings(
        issuer, **SHARE_FAST, **{"sharebroker.metrics.listener": "127.0.0.1:0"}))
    b.start()
    yield b
    b.close()


def login(w: WireClient, token: str, authzid: str = "", version: int = 2):
    """SaslHandshake + SaslAuthenticate with one token; a refused token's challenge is acknowledged
    with 0x01 as clients do.  Returns (first answer, second answer or None)."""
    hs = w.request(SaslHandshakeRequest(mechanism="OAUTHBEARER"), 1)
    assert hs.error_code == 0, hs
    first = w.request(SaslAuthenticateRequest(auth_bytes=client_first_message(token, authzid)), version)
    if first.error_code or not first.auth_bytes:
        return first, None
    return first, w.request(SaslAuthenticateRequest(auth_bytes=b"\x01"), version)


def metadata(w: WireClient):
    return w.request(MetadataRequest(topics=[], allow_auto_topic_creation=False), 12)


def test_valid_token_logs_in_with_the_token_lifetime(broker, issuer):
    with WireClient(broker.address("OAUTH")) as w:
        first, second = login(w, issuer.token(lifetime=120))
        assert first.error_code == 0 and first.auth_bytes == b"" and second is None
        assert 110_000 < first.session_lifetime_ms <= 120_000  # the session ends with the token
        assert metadata(w).brokers


@pytest.mark.parametrize("case", ["expired", "audience", "issuer", "unknown_key", "wrong_signature", "no_sub"])
def test_refused_tokens_get_kafkas_error(broker, issuer, case):
    """OAuthBearerSaslServer: the challenge {"status":"invalid_token"}, then, after the client's 0x01,
    SASL_AUTHENTICATION_FAILED with that JSON as the message; the connection closes after it."""
    token = {
        "expired": lambda: issuer.token(lifetime=-120),  # past the 30 s clock skew
        "audience": lambda: issuer.token(audience="another-service"),
        "issuer": lambda: issuer.token(issuer="http://127.0.0.1:1/realms/other"),
        "unknown_key": lambda: issuer.token(kid="not-in-the-jwks", key=Issuer.new_key()),
        "wrong_signature": lambda: issuer.token(key=Issuer.new_key()),  # a served kid, another key's signature
        "no_sub": lambda: issuer.token(sub=None),
    }[case]()
    with WireClient(broker.address("OAUTH")) as w:
        first, second = login(w, token)
        assert first.error_code == 0 and first.auth_bytes == INVALID_TOKEN
        assert second.error_code == Errors.SASL_AUTHENTICATION_FAILED
        assert second.error_message == INVALID_TOKEN.decode()
        assert connection_closed(w)


def test_malformed_message_and_authzid(broker, issuer):
    with WireClient(broker.address("OAUTH")) as w:
        w.request(SaslHandshakeRequest(mechanism="OAUTHBEARER"), 1)
        r = w.request(SaslAuthenticateRequest(auth_bytes=b"n,,\x01nothing\x01\x01"), 2)
        assert r.error_code == Errors.SASL_AUTHENTICATION_FAILED
        assert r.error_message == ("Authentication failed during authentication due to invalid credentials with "
                                   "SASL mechanism OAUTHBEARER")
    with WireClient(broker.address("OAUTH")) as w:
        first, _ = login(w, issuer.token(sub="alice"), authzid="bob")
        assert first.error_code == Errors.SASL_AUTHENTICATION_FAILED
        assert "Client requested an authorization id (bob) that is different from the token's principal name " \
               "(alice)" in first.error_message


def test_rotated_key_is_accepted_without_a_restart(tmp_path, issuer):
    """A token signed with a key the broker has not seen makes it fetch the JWKS again (at most once a
    minute per key id); the token itself is refused, as in Kafka, and the next one logs in."""
    own = Issuer()
    b = BrokerProcess(tmp_path, config=broker_settings(own)).start()
    try:
        with WireClient(b.address("OAUTH")) as w:
            assert login(w, own.token())[0].auth_bytes == b""
        fetches = own.fetches
        own.rotate()

        def logged_in():
            with WireClient(b.address("OAUTH")) as w:
                return login(w, own.token())[0].auth_bytes == b""

        until(logged_in, 20, "a token signed with the new key logs in", interval=0.2)
        assert own.fetches == fetches + 1  # one refresh, asked for by the unknown kid
        with WireClient(b.address("OAUTH")) as w:  # the old key is gone with the refresh
            old = own.token(kid="gone", key=Issuer.new_key())
            assert login(w, old)[0].auth_bytes == INVALID_TOKEN
    finally:
        b.close()
        own.close()


def test_reauthentication_keeps_the_connection(broker, issuer):
    """KIP-368: the session ends with the token; a re-authentication with a fresh token before then keeps
    the connection; without it the next request closes the connection."""
    with WireClient(broker.address("OAUTH")) as w:
        first, _ = login(w, issuer.token(lifetime=3))
        assert 0 < first.session_lifetime_ms <= 3000
        started = time.monotonic()
        first, _ = login(w, issuer.token(lifetime=300))  # re-authentication on the same connection
        assert first.error_code == 0 and first.session_lifetime_ms > 290_000
        while time.monotonic() - started < 3.5:
            assert metadata(w).brokers
        assert login(w, issuer.token(sub="bob"))[0].error_code == Errors.SASL_AUTHENTICATION_FAILED  # same principal
    with WireClient(broker.address("OAUTH")) as w:
        login(w, issuer.token(lifetime=2))

        def closed():
            try:
                metadata(w)
                return False
            except (ConnectionError, OSError):
                return True

        until(closed, 15, "the broker closes the connection once the token expired", interval=0.1)


def _oauth_conf(b, issuer: Issuer, sub: str, lifetime: int = 300, **extra) -> dict:
    def token_cb(_config):
        exp = int(time.time()) + lifetime  # the token's own exp, so that the client refreshes it in time
        return issuer.token(sub=sub, expires_at=exp), exp

    return {"bootstrap.servers": b.address("OAUTH"), "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "OAUTHBEARER", "oauth_cb": token_cb, **extra}


def login_counts(b) -> dict[tuple[str, ...], float]:
    """The SASL login counters of /metrics: (metric, label values...) -> count."""
    import re
    import urllib.request

    text = urllib.request.urlopen(b.metrics_url, timeout=10).read().decode()
    out = {}
    for m in re.finditer(r'^(sharebroker_sasl_\w+)\{([^}]*)\} (\S+)$', text, re.M):
        out[(m.group(1), *re.findall(r'="([^"]*)"', m.group(2)))] = float(m.group(3))
    return out


def test_librdkafka_produces_consumes_and_share_consumes(broker, issuer):
    topic = create_topic(broker.address("PLAINTEXT"), prefix="oauth")
    group = unique("g")
    set_group_configs(broker.address("PLAINTEXT"), group, share_auto_offset_reset="earliest")
    p = Producer(_oauth_conf(broker, issuer, "alice"))
    for i in range(10):
        p.produce(topic, b"v%d" % i)
    assert p.flush(30) == 0
    c = Consumer(_oauth_conf(broker, issuer, "alice", **{"group.id": unique("cg"), "auto.offset.reset": "earliest"}))
    c.subscribe([topic])
    got = read_values(c, 10)
    c.close()
    assert sorted(got) == sorted(b"v%d" % i for i in range(10))
    sc = ShareConsumer(_oauth_conf(broker, issuer, "alice", **{"group.id": group}))
    sc.subscribe([topic])
    shared = share_read_values(sc, 10)
    sc.close()
    assert sorted(shared) == sorted(got)


def test_librdkafka_reauthenticates_on_token_expiry(broker, issuer):
    """Tokens living 12 s: librdkafka refreshes each at 80% of its life (on a 1 s timer) and re-authenticates
    each session at 90% of it, so with the fresh token (shorter tokens make it re-authenticate with the old
    one, twice within a second, which Kafka refuses); the producer keeps its connections (no new login) and
    never fails for 28 s."""
    topic = create_topic(broker.address("PLAINTEXT"), prefix="oauth-reauth")
    key = ("sharebroker_sasl_authentications_total", "OAUTH", "OAUTHBEARER", "reauthentication")
    p = Producer(_oauth_conf(broker, issuer, "alice", lifetime=12))
    p.produce(topic, b"x")
    assert p.flush(10) == 0
    before = login_counts(broker)
    errors = []
    end = time.monotonic() + 28
    while time.monotonic() < end:
        p.produce(topic, b"x", on_delivery=lambda err, msg: err and errors.append(err))
        p.flush(5)
        time.sleep(0.05)
    assert p.flush(10) == 0 and not errors
    after = login_counts(broker)
    assert after.get(key, 0) - before.get(key, 0) >= 2  # re-authentications
    new = ("sharebroker_sasl_authentications_total", "OAUTH", "OAUTHBEARER", "authentication")
    assert after[new] == before[new]  # no connection had to log in again


def test_failures_are_counted_by_cause(broker, issuer):
    before = login_counts(broker)
    with WireClient(broker.address("OAUTH")) as w:
        login(w, issuer.token(audience="elsewhere"))
    key = ("sharebroker_sasl_authentication_failures_total", "OAUTH", "OAUTHBEARER", "audience")
    assert login_counts(broker).get(key, 0) == before.get(key, 0) + 1
    import urllib.request

    page = urllib.request.urlopen(broker.metrics_url.removesuffix("metrics"), timeout=10).read().decode()
    assert '<h2 id="logins">' in page and "failed: audience" in page  # the status page


def test_acls_apply_to_oauth_principals(tmp_path, issuer):
    b = BrokerProcess(tmp_path, config=broker_settings(issuer, **{
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin;User:ANONYMOUS"})).start()
    try:
        topic = create_topic(b.address("PLAINTEXT"), prefix="oauth-acl")
        p = Producer(_oauth_conf(b, issuer, "carol", **{"message.timeout.ms": 3000}))
        assert produce_refused(p, topic, 10) == "TOPIC_AUTHORIZATION_FAILED"
        admin = AdminClient(_oauth_conf(b, issuer, "admin"))
        acl = AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:carol", "*",
                         AclOperation.WRITE, AclPermissionType.ALLOW)
        admin.create_acls([acl])[acl].result(15)
        p2 = Producer(_oauth_conf(b, issuer, "carol"))
        p2.produce(topic, b"allowed")
        assert p2.flush(15) == 0
    finally:
        b.close()


def test_refused_configurations(tmp_path, issuer):
    """Missing settings stop start-up with Kafka's message; without the oauth extra, with one naming it."""
    base = broker_settings(issuer)
    cases = [
        ({"sasl.oauthbearer.expected.audience": ""}, "requires \"sasl.oauthbearer.expected.audience\""),
        ({"sasl.oauthbearer.expected.issuer": ""}, "requires \"sasl.oauthbearer.expected.issuer\""),
        ({"sasl.oauthbearer.jwks.endpoint.url": ""}, "requires \"sasl.oauthbearer.jwks.endpoint.url\""),
        ({"listener.name.oauth.oauthbearer.sasl.server.callback.handler.class": ""},
         "OAuthBearerUnsecuredValidatorCallbackHandler"),
        ({"sasl.oauthbearer.jwks.endpoint.url": "http://127.0.0.1:1/certs"}, "Could not refresh JWKS"),
    ]
    for n, (change, message) in enumerate(cases):
        b = BrokerProcess(tmp_path / str(n), config={**base, **change})
        with pytest.raises(RuntimeError, match="did not start") as e:
            b.start()
        assert message in str(e.value), (change, str(e.value)[-800:])
    shadow = tmp_path / "no-extra"
    (shadow / "jwt").mkdir(parents=True)
    (shadow / "jwt" / "__init__.py").write_text("raise ImportError(\"No module named 'jwt'\")\n")
    import os

    b = BrokerProcess(tmp_path / "x", config=base, env={"PYTHONPATH": f"{shadow}:{os.getcwd()}"})
    with pytest.raises(RuntimeError, match="did not start") as e:
        b.start()
    assert "needs the optional extra sharebroker[oauth]" in str(e.value)
    plain = BrokerProcess(tmp_path / "y", env={"PYTHONPATH": f"{shadow}:{os.getcwd()}"}).start()  # as today
    plain.close()


def test_unsecured_tokens_only_when_configured(tmp_path):
    """OAuthBearerUnsecuredValidatorCallbackHandler, named explicitly: unsigned tokens for development."""
    import base64
    import json

    def b64(d):
        return base64.urlsafe_b64encode(json.dumps(d).encode()).rstrip(b"=").decode()

    prefix = "listener.name.dev.oauthbearer."
    b = BrokerProcess(tmp_path, config={
        "listeners": "DEV://127.0.0.1:0", "listener.security.protocol.map": "DEV:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "OAUTHBEARER",
        prefix + "sasl.jaas.config": "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
                                     "unsecuredValidatorRequiredScope=\"kafka\";",
        prefix + "sasl.server.callback.handler.class":
            "org.apache.kafka.common.security.oauthbearer.internals.unsecured."
            "OAuthBearerUnsecuredValidatorCallbackHandler"}).start()
    try:
        now = int(time.time())
        good = f"{b64({'alg': 'none'})}.{b64({'sub': 'dev', 'exp': now + 60, 'iat': now, 'scope': 'kafka'})}."
        no_scope = f"{b64({'alg': 'none'})}.{b64({'sub': 'dev', 'exp': now + 60, 'iat': now})}."
        with WireClient(b.address("DEV")) as w:
            assert login(w, good)[0].auth_bytes == b""
        with WireClient(b.address("DEV")) as w:
            assert login(w, no_scope)[1].error_code == Errors.SASL_AUTHENTICATION_FAILED
    finally:
        b.close()


def test_user_quotas_apply_to_oauth_principals(broker, issuer):
    """A ``user`` quota (AlterClientQuotas) holds the OAuth principal of that name, not another one."""
    from tests.integration.test_quotas import _produce_request, set_quota

    topic = create_topic(broker.address("PLAINTEXT"), prefix="oauth-quota")
    set_quota(broker.address("PLAINTEXT"), [("user", "dave")], producer_byte_rate=100_000)
    throttles = {}
    for user in ("dave", "erin"):
        with WireClient(broker.address("OAUTH")) as w:
            assert login(w, issuer.token(sub=user))[0].auth_bytes == b""
            w.request(_produce_request(topic, 500_000), 9)
            throttles[user] = w.request(_produce_request(topic, 700_000), 9).throttle_time_ms
    assert throttles["dave"] > 0 and throttles["erin"] == 0
