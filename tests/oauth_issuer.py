"""A small OAuth issuer for tests: RSA keys served as a JWKS over HTTP, JWTs minted with PyJWT.

The broker's OAUTHBEARER listener fetches this JWKS as it would an identity provider's
(``sasl.oauthbearer.jwks.endpoint.url``); ``rotate`` replaces the served keys, as a provider's key
rotation does.  The Keycloak tests (``tests/keycloak.py``) use a real provider instead.
"""
from __future__ import annotations

import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa


class Issuer:
    def __init__(self, audience: str = "sharebroker"):
        self.audience = audience
        self.keys: dict[str, object] = {}  # kid -> private key, all served
        self.current = self.add_key()
        self.fetches = 0
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                issuer.fetches += 1
                body = json.dumps(issuer.jwks()).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.issuer = self.url + "/realms/test"
        self.jwks_url = self.url + "/realms/test/protocol/openid-connect/certs"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @staticmethod
    def new_key():
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)

    def add_key(self) -> str:
        kid = uuid.uuid4().hex[:12]
        self.keys[kid] = self.new_key()
        return kid

    def rotate(self) -> str:
        """A new signing key; the old ones are no longer served."""
        kid = uuid.uuid4().hex[:12]
        self.keys = {kid: self.new_key()}
        self.current = kid
        return kid

    def jwks(self) -> dict:
        out = []
        for kid, key in self.keys.items():
            jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
            out.append({**jwk, "kid": kid, "use": "sig", "alg": "RS256"})
        return {"keys": out}

    def token(self, sub: str = "alice", lifetime: float = 300, audience: str | None = None, issuer: str | None = None,
              kid: str | None = None, key=None, expires_at: int | None = None, **claims) -> str:
        """A signed access token: ``exp`` ``lifetime`` seconds from now (negative: already expired), or
        ``expires_at``."""
        now = time.time()
        body = {"sub": sub, "iss": issuer or self.issuer, "aud": audience or self.audience, "iat": int(now) - 1,
                "exp": int(now + lifetime) if expires_at is None else expires_at, "scope": "kafka", **claims}
        kid = kid or self.current
        return jwt.encode(body, key or self.keys[kid], algorithm="RS256", headers={"kid": kid})

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def client_first_message(token: str, authzid: str = "") -> bytes:
    """RFC 7628's client first message, as Kafka's OAuthBearerClientInitialResponse writes it."""
    return f"n,{'a=' + authzid if authzid else ''},\x01auth=Bearer {token}\x01\x01".encode()


def listener_settings(jwks_url: str, audience: str, issuer_url: str, listener: str = "OAUTH", **extra) -> dict:
    """An OAUTHBEARER listener (SASL_PLAINTEXT) validating tokens against ``jwks_url``, and a PLAINTEXT one."""
    prefix = f"listener.name.{listener.lower()}.oauthbearer."
    return {
        "listeners": f"PLAINTEXT://127.0.0.1:0,{listener}://127.0.0.1:0",
        "listener.security.protocol.map": f"PLAINTEXT:PLAINTEXT,{listener}:SASL_PLAINTEXT",
        f"listener.name.{listener.lower()}.sasl.enabled.mechanisms": "OAUTHBEARER",
        prefix + "sasl.jaas.config": "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;",
        prefix + "sasl.server.callback.handler.class":
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler",
        "sasl.oauthbearer.jwks.endpoint.url": jwks_url,
        "sasl.oauthbearer.expected.audience": audience,
        "sasl.oauthbearer.expected.issuer": issuer_url,
        **extra,
    }


def broker_settings(issuer: Issuer, listener: str = "OAUTH", **extra) -> dict:
    """:func:`listener_settings` for ``issuer``'s tokens."""
    return listener_settings(issuer.jwks_url, issuer.audience, issuer.issuer, listener, **extra)


@pytest.fixture(scope="module")
def issuer():
    """An :class:`Issuer` for a test module (import this fixture into it)."""
    i = Issuer()
    yield i
    i.close()


def read_values(consumer, n: int, timeout: float = 30.0) -> list[bytes]:
    """Up to ``n`` record values from a subscribed ``Consumer`` within ``timeout`` seconds."""
    got, deadline = [], time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is not None and m.error() is None:
            got.append(m.value())
    return got


def share_read_values(share_consumer, n: int, timeout: float = 30.0) -> list[bytes]:
    """Up to ``n`` record values from a subscribed ``ShareConsumer`` (acknowledged, committed)."""
    got, deadline = [], time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        got += [m.value() for m in share_consumer.poll(0.5) or [] if m.error() is None]
    share_consumer.commit_sync()
    return got
