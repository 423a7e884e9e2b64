"""SASL/GSSAPI (Kerberos) with a real KDC (Debian's MIT krb5kdc, its own realm in a temporary directory)
and real clients: librdkafka (kcat, Debian's build with Cyrus SASL: confluent-kafka's wheel has no
GSSAPI), the Java client (kafka-clients 4.4), and python-gssapi on the wire for both of Kafka's
exchanges (SaslHandshake v1 + SaslAuthenticate, and v0's raw tokens).

What it shows: the logins; re-authentication; a ticket for another service of the realm refused; ACLs
and user quotas applied to the short names ``sasl.kerberos.principal.to.local.rules`` gives; a broker without python-gssapi refusing
a GSSAPI listener with a message naming the ``kerberos`` extra.
"""
from __future__ import annotations

import os
import re

import pytest
from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, AdminClient, NewTopic, \
    ResourcePatternType, ResourceType

from broker.testing import BrokerProcess
from protocol.messages.metadata import MetadataRequest
from tests import kerberos
from tests.kerberos import kdc  # noqa: F401  (the realm fixture)
from tests.integration.test_quotas import _produce_request, set_quota
from tests.kafka_ref import launcher
from tests.missing_inputs import missing_input
from tests.support import unique, until
from tests.wire import WireClient

if kerberos.available():
    missing_input(kerberos.available())


def _broker(kdc, tmp_path_factory, **extra) -> BrokerProcess:
    settings = kerberos.broker_settings(kdc, kdc.keytabs["kafka/localhost"], rules=kerberos.RULES, **extra)
    settings["listeners"] += ",PLAINTEXT://localhost:0"
    settings["listener.security.protocol.map"] = "SASL_PLAINTEXT:SASL_PLAINTEXT,PLAINTEXT:PLAINTEXT"
    return BrokerProcess(tmp_path_factory.mktemp("krb-broker"), config=settings, host="localhost",
                         env=kdc.env).start()


@pytest.fixture(scope="module")
def broker(kdc, tmp_path_factory):
    b = _broker(kdc, tmp_path_factory, **{"connections.max.reauth.ms": "600000"})
    yield b
    b.close()


@pytest.fixture(scope="module")
def acl_broker(kdc, tmp_path_factory):
    """An authorizer; the PLAINTEXT listener (User:ANONYMOUS) administers, the Kerberos users are checked."""
    b = _broker(kdc, tmp_path_factory, **{
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:ANONYMOUS"})
    yield b
    b.close()


def _topic(b) -> str:
    name = unique("krb")
    admin = AdminClient({"bootstrap.servers": b.address("PLAINTEXT")})
    admin.create_topics([NewTopic(name, 1)])[name].result(15)
    return name


@pytest.fixture(scope="module")
def java_client():
    if launcher.missing_tools():
        missing_input(f"the Java client needs {' and '.join(launcher.missing_tools())} on PATH")
    return kerberos.java_classpath()


def kcat(kdc, b, principal: str, *args: str, **kw):
    return kerberos.kcat(kdc, b.address("SASL_PLAINTEXT"), principal, *args, **kw)


def kcat_roundtrip(kdc, b, principal: str, topic: str, n: int = 5) -> list[str]:
    return kerberos.kcat_roundtrip(kdc, b.address("SASL_PLAINTEXT"), principal, topic, n)


def java(kdc, cp: str, b, principal: str, topic: str, **kw) -> str:
    return kerberos.java(kdc, cp, b.address("SASL_PLAINTEXT"), principal, topic, **kw)


def test_kcat_logs_in(kdc, broker):
    topic = _topic(broker)
    assert kcat_roundtrip(kdc, broker, "bob", topic) == [f"bob-{i}" for i in range(5)]


def test_java_client_logs_in(kdc, broker, java_client):
    assert java(kdc, java_client, broker, "alice", _topic(broker)) == "OK 5"


@pytest.mark.parametrize("handshake_version", [1, 0], ids=["saslauthenticate", "v0-raw-tokens"])
def test_both_exchanges_on_the_wire(kdc, broker, handshake_version):
    with WireClient(broker.address("SASL_PLAINTEXT")) as w:
        assert kerberos.gss_login(w, kdc, "alice", handshake_version) is None
        assert w.request(MetadataRequest(topics=[]), 12).brokers[0].host == "localhost"


def test_reauthentication_keeps_the_principal(kdc, broker):
    """KIP-368 with GSSAPI: the session logs in again as the same principal; another one is refused."""
    with WireClient(broker.address("SASL_PLAINTEXT")) as w:
        assert kerberos.gss_login(w, kdc, "alice") is None
        assert kerberos.gss_login(w, kdc, "alice") is None
        assert w.request(MetadataRequest(topics=[]), 12).brokers[0].host == "localhost"
    with WireClient(broker.address("SASL_PLAINTEXT")) as w:  # Kafka admits one re-authentication a second
        assert kerberos.gss_login(w, kdc, "alice") is None
        code, message = kerberos.gss_login(w, kdc, "bob")
        assert code == 58 and re.fullmatch(kerberos.REAUTH_REFUSED, message), message


def test_authorization_id_changes_nothing(kdc, broker):
    """alice asking for the authorization id bob logs in as herself (Kafka's SaslServerCallbackHandler):
    her re-authentication without one keeps the principal, User:analyst."""
    with WireClient(broker.address("SASL_PLAINTEXT")) as w:
        assert kerberos.gss_login(w, kdc, "alice", authzid=kdc.full("bob")) is None
        assert kerberos.gss_login(w, kdc, "alice", authzid="") is None


def test_ticket_for_another_service_refused(kdc, broker, java_client):
    """other/localhost is a principal of the realm, so the KDC issues the ticket; the broker's keytab holds
    only kafka/localhost, so it cannot read it and refuses the login, with Kafka's generic message."""
    with WireClient(broker.address("SASL_PLAINTEXT")) as w:
        r = kerberos.gss_login(w, kdc, "alice", service="other")
        assert r[1] == ("Authentication failed during authentication due to invalid credentials with "
                                   "SASL mechanism GSSAPI")
    out = java(kdc, java_client, broker, "alice", _topic(broker), service="other")
    assert out == ("ERROR SaslAuthenticationException: Authentication failed during authentication due to "
                   "invalid credentials with SASL mechanism GSSAPI"), out
    r = kcat(kdc, broker, "bob", "-L", "-m", "10", service="other")
    assert r.returncode != 0 and "Authentication failed" in r.stderr, r.stderr
    until(lambda: sum("GSSAPI authentication failed" in line for line in broker.log_lines) >= 3, 10,
          "the broker's log lines naming the refused logins")


def test_acls_apply_to_short_names(kdc, acl_broker, java_client):
    """alice is User:analyst by the first rule, etl/localhost User:etl by the second, bob User:bob by DEFAULT;
    each is granted or denied by those names."""
    topic = _topic(acl_broker)
    admin = AdminClient({"bootstrap.servers": acl_broker.address("PLAINTEXT")})
    bindings = [AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, f"User:{user}", "*", op,
                           AclPermissionType.ALLOW)
                for user in ("analyst", "etl") for op in (AclOperation.WRITE, AclOperation.READ,
                                                          AclOperation.DESCRIBE)]
    bindings += [AclBinding(ResourceType.GROUP, "*", ResourcePatternType.LITERAL, "User:analyst", "*",
                            AclOperation.READ, AclPermissionType.ALLOW)]
    for f in admin.create_acls(bindings).values():
        f.result(15)
    assert kcat_roundtrip(kdc, acl_broker, "etl/localhost", topic) == [f"etl/localhost-{i}" for i in range(5)]
    denied = kcat(kdc, acl_broker, "bob", "-P", "-t", topic, stdin="x\n")
    assert "TOPIC_AUTHORIZATION_FAILED" in denied.stderr or "Topic authorization failed" in denied.stderr, \
        denied.stderr
    assert java(kdc, java_client, acl_broker, "alice", topic, n=3) == "OK 3"
    out = java(kdc, java_client, acl_broker, "bob", topic, n=1)
    assert out.startswith("ERROR TopicAuthorizationException"), out


def test_user_quotas_apply_to_short_names(kdc, broker):
    """A produce quota for User:analyst holds alice (analyst by the rules), not bob: 10 kB/s lets 100 kB
    through at once (Kafka's default windows), so the second 60 kB answer carries a throttle time."""
    topic = _topic(broker)
    set_quota(broker.address("PLAINTEXT"), [("user", "analyst")], producer_byte_rate=10_000)
    throttles = {}
    try:
        for principal in ("alice", "bob"):
            with WireClient(broker.address("SASL_PLAINTEXT")) as w:
                assert kerberos.gss_login(w, kdc, principal) is None
                throttles[principal] = [w.request(_produce_request(topic, 60_000), 9).throttle_time_ms
                                        for _ in "12"]
    finally:  # the module's other tests produce as alice
        set_quota(broker.address("PLAINTEXT"), [("user", "analyst")], producer_byte_rate=None)
    assert throttles["alice"][0] == 0 and 100 < throttles["alice"][1] <= 3000, throttles
    assert throttles["bob"] == [0, 0], throttles


def test_without_python_gssapi_the_listener_is_refused(kdc, tmp_path):
    """A broker whose Python has no gssapi module does not start a GSSAPI listener and names the extra."""
    shim = tmp_path / "shim" / "gssapi"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text("raise ImportError('No module named gssapi')\n")
    settings = kerberos.broker_settings(kdc, kdc.keytabs["kafka/localhost"])
    env = {**kdc.env, "PYTHONPATH": os.pathsep.join([str(shim.parent), os.environ.get("PYTHONPATH", os.getcwd())])}
    b = BrokerProcess(tmp_path / "data", config=settings, host="localhost", env=env, start_timeout=20)
    with pytest.raises(RuntimeError) as e:
        b.start()
    assert "pip install 'sharebroker[kerberos]'" in str(e.value)
