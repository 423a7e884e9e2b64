"""OAUTHBEARER pieces without a broker: the RFC 7628 client message, the JWKS key look-up and its refresh
requests, the claims BrokerJwtValidator reads, the configuration checks (broker/security/oauthbearer.py)."""
from __future__ import annotations

import time

import jwt
import pytest

from broker.config import BrokerConfig
from broker.log.config import ConfigError
from broker.security import oauthbearer as O
from tests.oauth_issuer import Issuer, client_first_message

VALIDATOR = "listener.name.oauth.oauthbearer.sasl.server.callback.handler.class"


def test_client_first_message():
    assert O.parse_client_response(client_first_message("a.b.c")) == ("", "a.b.c", {})
    assert O.parse_client_response(b"n,a=us=2Cer,\x01auth=Bearer x.y.z\x01traceId=42\x01\x01") == \
        ("us,er", "x.y.z", {"traceId": "42"})
    for bad, message in [(b"n,,\x01auth=Bearer a.b.c\x01", "Invalid OAUTHBEARER client first message"),
                         (b"n,,\x01user=x\x01\x01", "'auth' not specified"),
                         (b"n,,\x01auth=Bearer\x01\x01", "invalid 'auth' format"),
                         (b"n,,\x01auth=Basic a.b.c\x01\x01", "Invalid scheme"),
                         (b"\xff", "Invalid OAUTHBEARER client first message")]:
        with pytest.raises(O.BadMessage, match=message):
            O.parse_client_response(bad)


class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def _keys(issuer: Issuer, clock=time.monotonic) -> O.KeySet:
    keys = O.KeySet(issuer.jwks_url, 3_600_000, 100, 1000, clock=clock)
    keys.keys = {k["kid"]: jwt.PyJWK(k) for k in issuer.jwks()["keys"]}
    keys._thread = object()  # as after load(): unknown kids ask the refresh thread
    return keys


def test_an_unknown_kid_asks_for_a_refresh_once_a_minute():
    issuer = Issuer()
    try:
        clock = FakeClock()
        keys = _keys(issuer, clock)
        assert keys.key(issuer.current) is not None and not keys._wake.is_set()
        assert keys.key("new") is None and keys._wake.is_set()
        keys._wake.clear()
        clock.now += 59
        assert keys.key("new") is None and not keys._wake.is_set()  # asked less than a minute ago
        clock.now += 2
        assert keys.key("new") is None and keys._wake.is_set()
        for n in range(40):  # at most 16 key ids remembered
            keys.key(f"kid-{n}")
        assert len(keys._missing) == O.MISSING_KID_CACHE_MAX
        keys._wake.clear()
        assert keys.key("x" * 1001) is None and not keys._wake.is_set()  # too long to be a key id
    finally:
        issuer.close()


def test_claims_read_as_kafka():
    issuer = Issuer()
    try:
        v = O.JwtValidator(_keys(issuer), ["sharebroker"], issuer.issuer, 30, "azp", "scp")
        token = v.validate(issuer.token(azp="client-7", scp=["read", "write"]))
        assert token.principal_name == "client-7" and token.scopes == {"read", "write"}
        assert 298 <= token.expiry_ms / 1000 - time.time() <= 300
        assert v.validate(issuer.token(azp="c", scp="a b")).scopes == {"a", "b"}
        with pytest.raises(O.InvalidToken, match="must not contain duplicates"):
            v.validate(issuer.token(azp="c", scp="a a"))
        with pytest.raises(O.InvalidToken, match="azp value must be non-null") as e:
            v.validate(issuer.token())
        assert e.value.cause == "claim"
    finally:
        issuer.close()


def test_expiry_with_clock_skew_and_unverified_audience():
    issuer = Issuer()
    try:
        v = O.JwtValidator(_keys(issuer), [], issuer.issuer, 30, "sub", "scope")  # allow.unverified.audience
        assert v.validate(issuer.token(lifetime=-10)).principal_name == "alice"  # within the 30 s skew
        assert v.validate(issuer.token(audience="anything")).principal_name == "alice"
        with pytest.raises(O.InvalidToken) as e:
            v.validate(issuer.token(lifetime=-60))
        assert e.value.cause == "expired"
        unsigned = jwt.encode({"sub": "x", "exp": int(time.time()) + 60, "iat": int(time.time())}, None,
                              algorithm="none")
        with pytest.raises(O.InvalidToken) as e:
            v.validate(unsigned)
        assert e.value.cause == "algorithm"
    finally:
        issuer.close()


def _config(**settings) -> BrokerConfig:
    return BrokerConfig(settings)


def test_configuration_checks():
    base = {VALIDATOR: O.VALIDATOR, "sasl.oauthbearer.jwks.endpoint.url": "https://idp/certs",
            "sasl.oauthbearer.expected.audience": "kafka", "sasl.oauthbearer.expected.issuer": "https://idp"}
    validator, keys = O.build_validator(_config(**base), "OAUTH", {})
    assert keys.url == "https://idp/certs" and validator.audiences == ["kafka"] and validator.skew_s == 30
    listener = O.build_validator(_config(**base, **{
        "listener.name.oauth.oauthbearer.sasl.oauthbearer.expected.audience": "a, b"}), "OAUTH", {})[0]
    assert listener.audiences == ["a", "b"]  # the listener's and mechanism's prefix wins
    for change, message in [({"sasl.oauthbearer.jwks.endpoint.url": "ftp://idp/certs"}, "invalid protocol"),
                            ({"sasl.oauthbearer.jwks.endpoint.refresh.ms": "0"}, "must be at least 1"),
                            ({VALIDATOR: "com.example.Mine"}, "com.example.Mine is not supported")]:
        with pytest.raises(ConfigError, match=message):
            O.build_validator(_config(**{**base, **change}), "OAUTH", {})
    unsecured, none = O.build_validator(_config(**{VALIDATOR: O.UNSECURED_VALIDATOR}), "OAUTH",
                                        {"unsecuredValidatorPrincipalClaimName": "user"})
    assert none is None and unsecured.sub_claim == "user"
