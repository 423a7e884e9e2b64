"""SCRAM (RFC 7677's test vector), PLAIN, JAAS parsing, the SASL state machine, listeners, the mTLS DN."""
from __future__ import annotations

import base64

import pytest

from broker.config import BrokerConfig
from broker.log.config import ConfigError
from broker.security import listeners as L
from broker.security import sasl as S
from broker.security import scram
from protocol.errors import Errors

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        'password="a\\"b" user_admin="admin-secret" user_alice=alice-secret;')


def test_scram_sha256_rfc7677_vector(monkeypatch):
    store = scram.ScramStore(None)
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    store.put("user", "SCRAM-SHA-256", scram.credential_from_salted(
        "SCRAM-SHA-256", scram.salted_password("SCRAM-SHA-256", "pencil", salt, 4096), salt, 4096))
    import secrets  # scram imports it where a nonce is made

    monkeypatch.setattr(secrets, "token_urlsafe", lambda n: "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    server = scram.ScramServer("SCRAM-SHA-256", store)
    first = server.evaluate(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    assert first == b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    final = server.evaluate(b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                            b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    assert final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert server.complete and server.username == "user"


def test_scram_rejects_bad_proofs_unknown_users_and_nonces():
    store = scram.ScramStore(None)
    store.put("u", "SCRAM-SHA-512", scram.new_credential("SCRAM-SHA-512", "pw"))
    with pytest.raises(scram.ScramError):
        scram.ScramServer("SCRAM-SHA-512", store).evaluate(b"n,,n=nobody,r=abc")
    s = scram.ScramServer("SCRAM-SHA-512", store)
    s.evaluate(b"n,,n=u,r=abc")
    with pytest.raises(scram.ScramError, match="nonce"):
        s.evaluate(b"c=biws,r=other,p=" + base64.b64encode(b"x" * 64))
    s = scram.ScramServer("SCRAM-SHA-512", store)
    s.evaluate(b"n,,n=u,r=abc")
    with pytest.raises(scram.ScramError, match="credentials"):
        s.evaluate(b"c=biws,r=" + s.nonce.encode() + b",p=" + base64.b64encode(b"x" * 64))


def test_scram_store_keeps_no_password_and_persists(tmp_path):
    store = scram.ScramStore(str(tmp_path))
    assert store.bootstrap("SCRAM-SHA-256=[name=alice,password=s3cret-pw];SCRAM-SHA-512=[name=bob,password=x,"
                           "iterations=8192]") == ["alice (SCRAM-SHA-256)", "bob (SCRAM-SHA-512)"]
    text = (tmp_path / "scram-credentials.json").read_text()
    assert "s3cret-pw" not in text and (tmp_path / "scram-credentials.json").stat().st_mode & 0o777 == 0o600
    again = scram.ScramStore(str(tmp_path))
    assert again.get("bob", "SCRAM-SHA-512").iterations == 8192
    assert again.bootstrap("SCRAM-SHA-256=[name=alice,password=changed]") == []  # existing ones are kept
    with pytest.raises(ConfigError):
        scram.parse_bootstrap("alice:secret")
    with pytest.raises(ConfigError):
        scram.parse_bootstrap("SCRAM-SHA-256=[name=a,password=b,iterations=100]")


def test_jaas_and_plain():
    [(module, flag, opts)] = S.parse_jaas(JAAS)
    assert module.endswith("PlainLoginModule") and flag == "required"
    assert opts["password"] == 'a"b' and opts["user_alice"] == "alice-secret"
    with pytest.raises(ConfigError):
        S.parse_jaas("org.Foo required user=x")  # no ';'
    users = S.plain_users(BrokerConfig({"listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS}),
                          "SASL_PLAINTEXT")
    server = S.PlainServer(users)
    with pytest.raises(S.AuthenticationFailed, match="Invalid username or password"):
        server.evaluate(b"\0alice\0wrong")
    with pytest.raises(S.AuthenticationFailed, match="authorization id"):
        S.PlainServer(users).evaluate(b"admin\0alice\0alice-secret")
    assert S.PlainServer(users).evaluate(b"\0alice\0alice-secret") == b""


class Conn:
    peer = "test"

    def __init__(self):
        self.principal = "User:ANONYMOUS"
        self.close_after_response = False


def test_sasl_state_machine():
    users = S.PlainUsers({"alice": "pw"})
    clock = [100.0]
    auth = S.SaslAuthenticator("SASL_PLAINTEXT", ["PLAIN"], users, scram.ScramStore(None), max_reauth_ms=1000,
                               clock=lambda: clock[0])
    c = Conn()
    auth.connected(c)
    assert auth.admits(c, S.API_VERSIONS) and auth.admits(c, S.SASL_HANDSHAKE)
    assert not auth.admits(c, 3) and not auth.admits(c, S.SASL_AUTHENTICATE)
    assert auth.handshake(c, "PLAIN", 1) == (Errors.NONE, ["PLAIN"])
    assert not auth.admits(c, S.API_VERSIONS) and auth.admits(c, S.SASL_AUTHENTICATE)
    code, _, _, lifetime = auth.authenticate(c, b"\0alice\0pw")
    assert code == 0 and lifetime == 1000 and c.principal == "User:alice"
    assert auth.admits(c, 3)
    clock[0] += 1.0
    assert not auth.admits(c, 3) and auth.admits(c, S.SASL_HANDSHAKE)  # expired: only re-authentication
    assert auth.handshake(c, "PLAIN", 1)[0] == Errors.NONE
    assert auth.authenticate(c, b"\0alice\0pw")[0] == 0 and auth.admits(c, 3)
    bad = Conn()
    auth.connected(bad)
    assert auth.handshake(bad, "SCRAM-SHA-256", 1)[0] == Errors.UNSUPPORTED_SASL_MECHANISM and bad.close_after_response
    bad = Conn()
    auth.connected(bad)
    auth.handshake(bad, "PLAIN", 1)
    code, message, _, _ = auth.authenticate(bad, b"\0alice\0nope")
    assert code == Errors.SASL_AUTHENTICATION_FAILED and bad.close_after_response and not auth.admits(bad, 3)


def test_listeners_with_custom_names_and_advertised_addresses():
    cfg = BrokerConfig({"listeners": "PLAINTEXT://:9092,INTERNAL://127.0.0.1:9094,CONTROLLER://:9093",
                        "advertised.listeners": "PLAINTEXT://kafka.example:19092",
                        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SASL_SSL,CONTROLLER:PLAINTEXT",
                        "controller.listener.names": "CONTROLLER"})
    ls = L.parse_listeners(cfg)
    assert [(x.name, x.protocol, x.host, x.port, x.advertised_host, x.advertised_port) for x in ls] == [
        ("PLAINTEXT", "PLAINTEXT", "0.0.0.0", 9092, "kafka.example", 19092),
        ("INTERNAL", "SASL_SSL", "127.0.0.1", 9094, "127.0.0.1", 9094)]
    with pytest.raises(ConfigError, match="No security protocol defined for listener FOO"):
        L.parse_listeners(BrokerConfig({"listeners": "FOO://:1"}))
    with pytest.raises(ConfigError, match="different port"):
        L.parse_listeners(BrokerConfig({"listeners": "PLAINTEXT://:1,SSL://:1"}))
    with pytest.raises(ConfigError, match="subset"):
        L.parse_listeners(BrokerConfig({"listeners": "PLAINTEXT://:1", "advertised.listeners": "SSL://h:2"}))


def test_subject_dn_as_x500principal_writes_it():
    subject = ((("countryName", "US"),), (("organizationName", "Example, Inc."),),
               (("organizationalUnitName", "qa"), ("commonName", "a+b")), (("emailAddress", "x@y.z"),))
    assert L.rfc2253(subject) == "1.2.840.113549.1.9.1=#16057840792e7a,OU=qa+CN=a\\+b,O=Example\\, Inc.,C=US"
