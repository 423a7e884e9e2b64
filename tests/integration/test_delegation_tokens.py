"""Delegation tokens (APIs 38-41, KIP-48): the four APIs on the wire, SCRAM logins with a token
(our wire client and kafka-python), expiry, the expiry sweep and persistence across a restart."""
from __future__ import annotations

import base64
import uuid

import pytest
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient, NewTopic,
                                   ResourcePatternType, ResourceType)

from broker.testing import BrokerProcess
from protocol.errors import Errors
from protocol.messages.create_acls import CreateAclsRequest
from protocol.messages.create_delegation_token import CreateDelegationTokenRequest
from protocol.messages.describe_delegation_token import DescribeDelegationTokenRequest
from protocol.messages.expire_delegation_token import ExpireDelegationTokenRequest
from protocol.messages.metadata import MetadataRequest
from protocol.messages.renew_delegation_token import RenewDelegationTokenRequest
from tests.support import PLAIN_JAAS, connection_closed, make_pki, tls_wire, until, wire_scram_login
from tests.wire import WireClient

SECRET = "token-secret-key"
USERS = ("admin", "alice", "bob", "carol")
DAY_MS = 24 * 3600 * 1000

Create = CreateDelegationTokenRequest
Renewer = CreateDelegationTokenRequest.CreatableRenewers
Owner = DescribeDelegationTokenRequest.DescribeDelegationTokenOwner


def token_settings(**extra) -> dict:
    """PLAINTEXT and SASL_PLAINTEXT listeners (PLAIN and SCRAM users admin, alice, bob, carol), the
    StandardAuthorizer with super user admin, tokens enabled with a fast expiry sweep."""
    return {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,SSL:SSL",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "sharebroker.scram.users": ";".join(f"{m}=[name={u},password={u}-secret]" for u in USERS
                                            for m in ("SCRAM-SHA-256", "SCRAM-SHA-512")),
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin",
        "delegation.token.secret.key": SECRET,
        "delegation.token.expiry.check.interval.ms": "200",
        **extra,
    }


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def broker(tmp_path_factory, pki):
    """With an SSL listener too, where a client certificate is requested, not required."""
    b = BrokerProcess(tmp_path_factory.mktemp("token-broker"), config=token_settings(**{
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": pki["server"],
        "ssl.truststore.type": "PEM", "ssl.truststore.location": pki["ca"],
        "listener.name.ssl.ssl.client.auth": "requested"}))
    b.start()
    yield b
    b.close()


def login(b, user: str, mechanism: str = "SCRAM-SHA-256") -> WireClient:
    """A SASL_PLAINTEXT wire connection logged in as ``user`` (its SCRAM password)."""
    w = WireClient(b.address("SASL_PLAINTEXT"))
    r = wire_scram_login(w, mechanism, user, f"{user}-secret")
    assert r.error_code == 0, r
    return w


def token_login(b, token_id: str, hmac: bytes, mechanism: str = "SCRAM-SHA-256"):
    """(connection, SaslAuthenticate response) of a token login."""
    w = WireClient(b.address("SASL_PLAINTEXT"))
    return w, wire_scram_login(w, mechanism, token_id, base64.b64encode(hmac).decode(), token=True)


def create(w, version: int = 3, **fields):
    fields.setdefault("renewers", [])
    fields.setdefault("max_lifetime_ms", -1)
    r = w.request(Create(**fields), version)
    return r


def described(w, owners=None, version: int = 3) -> dict:
    req = DescribeDelegationTokenRequest()
    req.owners = owners
    r = w.request(req, version)
    assert r.error_code == 0, r
    return {t.token_id: t for t in r.tokens}


def test_create_renew_expire_describe(broker):
    with login(broker, "alice") as w:
        r = create(w, renewers=[Renewer(principal_type="User", principal_name="bob")])
        assert r.error_code == 0 and (r.principal_type, r.principal_name) == ("User", "alice")
        assert (r.token_requester_principal_type, r.token_requester_principal_name) == ("User", "alice")
        assert r.expiry_timestamp_ms - r.issue_timestamp_ms == DAY_MS
        assert r.max_timestamp_ms - r.issue_timestamp_ms == 7 * DAY_MS
        import hashlib
        import hmac as hmac_

        assert bytes(r.hmac) == hmac_.new(SECRET.encode(), r.token_id.encode(), hashlib.sha512).digest()
        token_id, hmac = r.token_id, bytes(r.hmac)
        mine = described(w)[token_id]
        assert (mine.principal_name, [x.principal_name for x in mine.renewers]) == ("alice", ["bob"])
        assert bytes(mine.hmac) == hmac and mine.expiry_timestamp == r.expiry_timestamp_ms
        # a shorter requested lifetime caps the max and the first expiry
        short = create(w, max_lifetime_ms=60000)
        assert short.max_timestamp_ms - short.issue_timestamp_ms == 60000
        assert short.expiry_timestamp_ms == short.max_timestamp_ms
        # renew: a period shorter than the expiry time is taken; by owner or renewer only
        rn = w.request(RenewDelegationTokenRequest(hmac=hmac, renew_period_ms=3600000), 2)
        assert rn.error_code == 0 and 0 < rn.expiry_timestamp_ms - r.issue_timestamp_ms <= 3600000 + 60000
        rn = w.request(RenewDelegationTokenRequest(hmac=bytes(short.hmac), renew_period_ms=-1), 2)
        assert rn.error_code == 0 and rn.expiry_timestamp_ms == short.max_timestamp_ms  # never past the max
        unknown = w.request(RenewDelegationTokenRequest(hmac=b"nope", renew_period_ms=1000), 2)
        assert unknown.error_code == Errors.DELEGATION_TOKEN_NOT_FOUND
        assert w.request(ExpireDelegationTokenRequest(hmac=b"nope", expiry_time_period_ms=1), 2).error_code == \
            Errors.DELEGATION_TOKEN_NOT_FOUND
    with login(broker, "carol") as w:
        assert w.request(RenewDelegationTokenRequest(hmac=hmac, renew_period_ms=1000), 1).error_code == \
            Errors.DELEGATION_TOKEN_OWNER_MISMATCH
        assert w.request(ExpireDelegationTokenRequest(hmac=hmac, expiry_time_period_ms=-1), 1).error_code == \
            Errors.DELEGATION_TOKEN_OWNER_MISMATCH
        assert token_id not in described(w)  # neither owner nor renewer, no ACL
    with login(broker, "bob", "SCRAM-SHA-512") as w:
        assert token_id in described(w)  # a renewer sees it
        rn = w.request(RenewDelegationTokenRequest(hmac=hmac, renew_period_ms=2 * DAY_MS), 2)
        assert rn.error_code == 0  # capped at delegation.token.expiry.time.ms
        assert rn.expiry_timestamp_ms - r.issue_timestamp_ms <= DAY_MS + 60000
        ex = w.request(ExpireDelegationTokenRequest(hmac=hmac, expiry_time_period_ms=-1), 2)
        assert ex.error_code == 0
        assert token_id not in described(w)
        assert w.request(RenewDelegationTokenRequest(hmac=hmac, renew_period_ms=1), 2).error_code == \
            Errors.DELEGATION_TOKEN_NOT_FOUND


def test_describe_owner_filters_and_acls(broker):
    with login(broker, "alice") as w:
        a = create(w).token_id
    with login(broker, "bob") as w:
        b = create(w).token_id
    with login(broker, "admin") as w:  # a super user sees every token; an owner filter narrows
        assert {a, b} <= set(described(w))
        assert described(w, []) == {}
        only_bob = described(w, [Owner(principal_type="User", principal_name="bob")])
        assert b in only_bob and a not in only_bob
        # the owner may be someone else: CREATE_TOKENS on User:carol (admin is a super user)
        r = create(w, owner_principal_type="User", owner_principal_name="carol")
        assert r.error_code == 0 and r.principal_name == "carol" and r.token_requester_principal_name == "admin"
        c = r.token_id
        # DESCRIBE_TOKENS on User:bob lets carol see bob's tokens; DESCRIBE on one token id that token
        acl = CreateAclsRequest.AclCreation
        made = w.request(CreateAclsRequest(creations=[
            acl(resource_type=7, resource_name="User:bob", resource_pattern_type=3, principal="User:carol",
                host="*", operation=14, permission_type=3),
            acl(resource_type=6, resource_name=a, resource_pattern_type=3, principal="User:carol", host="*",
                operation=8, permission_type=3)]), 3)
        assert [x.error_code for x in made.results] == [0, 0]
    with login(broker, "carol") as w:
        seen = described(w)
        assert {a, b, c} <= set(seen)
        assert seen[c].principal_name == "carol"
        assert {a, b} & set(described(w, [Owner(principal_type="User", principal_name="carol")])) == set()
    with login(broker, "alice") as w:
        assert b not in described(w) and c not in described(w)
        # alice may not create tokens owned by bob
        r = create(w, owner_principal_type="User", owner_principal_name="bob")
        assert r.error_code == Errors.DELEGATION_TOKEN_AUTHORIZATION_FAILED and r.token_id == ""
        assert r.expiry_timestamp_ms == -1 and r.principal_name == "bob" and r.token_requester_principal_name == "alice"
        bad = create(w, renewers=[Renewer(principal_type="Group", principal_name="ops")])
        assert bad.error_code == Errors.INVALID_PRINCIPAL_TYPE


def test_not_allowed_over_plaintext_anonymous_ssl_nor_from_a_token_session(broker, pki):
    with WireClient(broker.address("PLAINTEXT")) as w:
        assert create(w).error_code == Errors.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED
        assert create(w, version=1).error_code == Errors.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED
        rn = w.request(RenewDelegationTokenRequest(hmac=b"x", renew_period_ms=1), 2)
        assert (rn.error_code, rn.expiry_timestamp_ms) == (Errors.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED, -1)
        ex = w.request(ExpireDelegationTokenRequest(hmac=b"x", expiry_time_period_ms=1), 1)
        assert (ex.error_code, ex.expiry_timestamp_ms) == (Errors.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED, -1)
        d = w.request(DescribeDelegationTokenRequest(), 3)
        assert (d.error_code, d.tokens) == (Errors.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED, [])
    with tls_wire(broker.address("SSL"), pki) as w:  # SSL without a client certificate: ANONYMOUS
        assert create(w).error_code == Errors.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED
    with tls_wire(broker.address("SSL"), pki, client_cert=True) as w:  # with one: its subject owns the token
        r = create(w)
        assert r.error_code == 0 and r.principal_name == pki["client_dn"], r
    with login(broker, "alice") as w:
        r = create(w)
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        w, auth = token_login(broker, r.token_id, bytes(r.hmac), mechanism)
        with w:
            assert auth.error_code == 0, auth
            assert create(w).error_code == Errors.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED
            assert w.request(DescribeDelegationTokenRequest(), 3).error_code == \
                Errors.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED
            assert w.request(MetadataRequest(topics=[]), 12).brokers  # an ordinary session otherwise


def test_token_logins_fail_with_a_wrong_hmac_an_unknown_id_or_without_the_extension(broker):
    with login(broker, "alice") as w:
        r = create(w)
    w, auth = token_login(broker, r.token_id, b"wrong")
    w.close()
    assert auth.error_code == Errors.SASL_AUTHENTICATION_FAILED
    w, auth = token_login(broker, str(uuid.uuid4()), bytes(r.hmac))
    w.close()
    assert auth.error_code == Errors.SASL_AUTHENTICATION_FAILED
    with WireClient(broker.address("SASL_PLAINTEXT")) as w:  # without tokenauth=true the id is a user name
        auth = wire_scram_login(w, "SCRAM-SHA-256", r.token_id, base64.b64encode(bytes(r.hmac)).decode())
        assert auth.error_code == Errors.SASL_AUTHENTICATION_FAILED


def test_expired_tokens_fail_logins_and_are_swept(broker):
    with login(broker, "alice") as w:
        r = create(w)
        ex = w.request(ExpireDelegationTokenRequest(hmac=bytes(r.hmac), expiry_time_period_ms=300), 2)
        assert ex.error_code == 0 and ex.expiry_timestamp_ms <= r.issue_timestamp_ms + 300 + 60000
        session, auth = token_login(broker, r.token_id, bytes(r.hmac))
        assert auth.error_code == 0 and 0 < auth.session_lifetime_ms <= 300  # a token session ends with it

        def login_refused():
            c, a = token_login(broker, r.token_id, bytes(r.hmac))
            c.close()
            return a.error_code == Errors.SASL_AUTHENTICATION_FAILED

        until(login_refused, 15, "the expired token refused")
        with session:  # past its lifetime only a re-authentication is admitted: anything else closes it
            session.send(MetadataRequest(topics=[]), 12)
            assert connection_closed(session)
        until(lambda: r.token_id not in described(w), 15, "the expiry sweep removing the token")
        assert w.request(RenewDelegationTokenRequest(hmac=bytes(r.hmac), renew_period_ms=1), 2).error_code == \
            Errors.DELEGATION_TOKEN_NOT_FOUND


def test_tokens_survive_a_restart(broker):
    with login(broker, "alice") as w:
        r = create(w, renewers=[Renewer(principal_type="User", principal_name="bob")])
    broker.restart()
    w, auth = token_login(broker, r.token_id, bytes(r.hmac), "SCRAM-SHA-512")
    w.close()
    assert auth.error_code == 0
    with login(broker, "alice") as w:
        t = described(w)[r.token_id]
        assert (t.expiry_timestamp, t.max_timestamp, [x.principal_name for x in t.renewers]) == \
            (r.expiry_timestamp_ms, r.max_timestamp_ms, ["bob"])
        assert bytes(t.hmac) == bytes(r.hmac)


def test_kafka_python_clients_log_in_with_a_token_as_its_owner(broker, monkeypatch):
    """kafka-python (like librdkafka) has no SCRAM extensions setting: its client-first message is
    patched to carry Kafka's ``tokenauth=true`` (ScramLoginModule's ``tokenauth`` option)."""
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.errors import KafkaError
    from kafka.net.sasl import scram as kp_scram

    original = kp_scram.ScramClient.first_message

    def first_message(self):
        msg = original(self)  # b"n,," + bare; the auth message so far is bare
        self.auth_message += b",tokenauth=true"
        return msg + b",tokenauth=true"

    monkeypatch.setattr(kp_scram.ScramClient, "first_message", first_message)
    topic, group = f"tok-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.address("SASL_PLAINTEXT"), "security.protocol": "SASL_PLAINTEXT",
                         "sasl.mechanism": "PLAIN", "sasl.username": "admin", "sasl.password": "admin-secret"})
    admin.create_topics([NewTopic(topic, 1)])[topic].result(15)
    acls = [AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:alice", "*", op,
                       AclPermissionType.ALLOW) for op in (AclOperation.WRITE, AclOperation.READ)]
    acls.append(AclBinding(ResourceType.GROUP, group, ResourcePatternType.LITERAL, "User:alice", "*",
                           AclOperation.READ, AclPermissionType.ALLOW))
    for f in admin.create_acls(acls).values():
        f.result(15)
    with login(broker, "alice") as w:
        alice = create(w)
    with login(broker, "bob") as w:
        bob = create(w)

    def conf(token, mechanism="SCRAM-SHA-256"):
        return {"bootstrap_servers": broker.address("SASL_PLAINTEXT"), "security_protocol": "SASL_PLAINTEXT",
                "sasl_mechanism": mechanism, "sasl_plain_username": token.token_id,
                "sasl_plain_password": base64.b64encode(bytes(token.hmac)).decode()}

    p = KafkaProducer(**conf(alice))
    for i in range(5):
        p.send(topic, f"t{i}".encode()).get(15)
    p.close()
    c = KafkaConsumer(topic, group_id=group, auto_offset_reset="earliest", consumer_timeout_ms=15000,
                      **conf(alice, "SCRAM-SHA-512"))
    got = []
    for m in c:
        got.append(m.value)
        if len(got) == 5:
            break
    c.close()
    assert got == [f"t{i}".encode() for i in range(5)]
    # bob's token logs in as bob, who may not write the topic
    p = KafkaProducer(**conf(bob), max_block_ms=5000, retries=0)
    with pytest.raises(KafkaError):
        p.send(topic, b"x").get(10)
    p.close()


def test_without_a_secret_key_tokens_are_disabled(tmp_path):
    settings = token_settings()
    del settings["delegation.token.secret.key"]
    with BrokerProcess(tmp_path / "no-key", config=settings) as b:
        with login(b, "alice") as w:
            r = create(w)
            assert r.error_code == Errors.DELEGATION_TOKEN_AUTH_DISABLED and r.token_id == ""
            assert w.request(RenewDelegationTokenRequest(hmac=b"x", renew_period_ms=1), 2).error_code == \
                Errors.DELEGATION_TOKEN_AUTH_DISABLED
            assert w.request(ExpireDelegationTokenRequest(hmac=b"x", expiry_time_period_ms=1), 2).error_code == \
                Errors.DELEGATION_TOKEN_AUTH_DISABLED
            assert w.request(DescribeDelegationTokenRequest(), 2).error_code == Errors.DELEGATION_TOKEN_AUTH_DISABLED
        w, auth = token_login(b, str(uuid.uuid4()), b"x")
        w.close()
        assert auth.error_code == Errors.SASL_AUTHENTICATION_FAILED
