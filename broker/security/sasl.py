"""SASL on a listener: Kafka's SaslServerAuthenticator state machine, PLAIN and SCRAM (OAUTHBEARER:
``broker.security.oauthbearer``).

A connection on a SASL listener starts unauthenticated.  It may send ApiVersions
(once, first) and SaslHandshake; after a handshake v1, SaslAuthenticate requests carry
the mechanism's tokens; after a handshake v0, the tokens follow as raw size-prefixed
frames without a request header (the legacy exchange Kafka still accepts).  Any other
request before authentication closes the connection without an answer, as Kafka does
("Unexpected Kafka request of type ... during SASL handshake").

A failed login is answered with SASL_AUTHENTICATION_FAILED (Kafka's message: PLAIN's
own, or "Authentication failed during authentication due to invalid credentials with
SASL mechanism M" for SCRAM) and the connection is closed after that response; an
unsupported mechanism gets UNSUPPORTED_SASL_MECHANISM with the enabled ones, then
the close.  ``connections.max.reauth.ms`` (KIP-368): SaslAuthenticate v1+ tells the
client its session lifetime; a request after the session expired closes the
connection unless it starts a re-authentication (SaslHandshake), which must keep
the mechanism and the principal.

PLAIN users come from the listener's JAAS config (``PlainLoginModule`` options
``user_NAME="password"``); they are kept as salted hashes in memory.  SCRAM users
come from the SCRAM store (``broker.security.scram``), read at every login; a SCRAM login with
the extension ``tokenauth=true`` is a delegation token's (``broker.security.tokens``): its
principal is the token's owner and ``SaslSession.token_id`` marks the session (token sessions
may not manage tokens, as Kafka's ``KafkaPrincipal.tokenAuthenticated``).
"""
from __future__ import annotations

import hashlib
import hmac
import logging
import re
import secrets
import time

from broker.log.config import ConfigError
from broker.pipeline import ANONYMOUS, Authenticator
from broker.security import kerberos, logins
from broker.security.logins import AuthenticationFailed
from broker.security.listeners import listener_setting, ssl_principal
from broker.security.scram import MECHANISMS as SCRAM_MECHANISMS, ScramError, ScramServer
from protocol.errors import Errors
from protocol.messages.registry import ApiKey

log = logging.getLogger("sharebroker.security")

SUPPORTED = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER", kerberos.MECHANISM)
API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = int(ApiKey.API_VERSIONS), int(ApiKey.SASL_HANDSHAKE), \
    int(ApiKey.SASL_AUTHENTICATE)
# exchange stages (SaslServerAuthenticator.SaslState)
INITIAL, HANDSHAKE, AUTHENTICATE, COMPLETE, FAILED = range(5)


# ------------------------------------------------------------------ JAAS
_TOKEN = re.compile(r'\s*(?:"((?:[^"\\]|\\.)*)"|([^\s=;"]+)|(=)|(;))')


def parse_jaas(text: str) -> list[tuple[str, str, dict[str, str]]]:
    """``Module flag key="value" ...;`` entries as (module, flag, options)."""
    tokens = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            if text[pos:].strip() == "":
                break
            raise ConfigError(f"Invalid JAAS config near: {text[pos:pos + 20]!r}")
        pos = m.end()
        if m.group(1) is not None:
            tokens.append(("str", re.sub(r"\\(.)", r"\1", m.group(1))))
        elif m.group(2) is not None:
            tokens.append(("word", m.group(2)))
        elif m.group(3):
            tokens.append(("=", "="))
        else:
            tokens.append((";", ";"))
    entries = []
    i = 0
    while i < len(tokens):
        if i + 1 >= len(tokens) or tokens[i][0] != "word" or tokens[i + 1][0] != "word":
            raise ConfigError("Invalid JAAS config: expected 'LoginModule flag key=value ... ;'")
        module, flag = tokens[i][1], tokens[i + 1][1].lower()
        if flag not in ("required", "requisite", "sufficient", "optional"):
            raise ConfigError(f"Invalid JAAS config: invalid control flag '{flag}'")
        i += 2
        opts = {}
        while i < len(tokens) and tokens[i][0] != ";":
            if i + 2 >= len(tokens) + 0 or tokens[i + 1][0] != "=" or tokens[i][0] != "word":
                raise ConfigError("Invalid JAAS config: options must be key=value")
            opts[tokens[i][1]] = tokens[i + 2][1]
            i += 3
        if i >= len(tokens):
            raise ConfigError("Invalid JAAS config: the entry must end with ';'")
        i += 1
        entries.append((module, flag, opts))
    if not entries:
        raise ConfigError("Invalid JAAS config: no login module")
    return entries


# ------------------------------------------------------------------ PLAIN
class PlainUsers:
    """PLAIN's users: salted SHA-256 of each password (compared in constant time)."""

    def __init__(self, passwords: dict[str, str]):
        self._salt = secrets.token_bytes(16)
        self._hashes = {u: self._hash(p) for u, p in passwords.items()}

    def _hash(self, password: str) -> bytes:
        return hashlib.sha256(self._salt + password.encode("utf-8")).digest()

    def check(self, user: str, password: str) -> bool:
        want = self._hashes.get(user)
        got = self._hash(password)
        return want is not None and hmac.compare_digest(want, got)


class PlainServer:
    """PlainSaslServer: one message ``authzid NUL user NUL password``."""

    token = None  # PLAIN logins are never a delegation token's

    def __init__(self, users: PlainUsers):
        self.users = users
        self.username: str | None = None
        self.complete = False

    @property
    def principal(self) -> str:
        return "User:" + self.username

    def evaluate(self, token: bytes) -> bytes:
        parts = token.split(b"\0")
        if len(parts) != 3:
            raise AuthenticationFailed(f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(parts)}")
        try:
            authz, user, password = (p.decode("utf-8") for p in parts)
        except UnicodeDecodeError:
            raise AuthenticationFailed("Invalid SASL/PLAIN response: not UTF-8") from None
        if not user:
            raise AuthenticationFailed("Authentication failed: username not specified")
        if not password:
            raise AuthenticationFailed("Authentication failed: password not specified")
        if not self.users.check(user, password):
            raise AuthenticationFailed("Authentication failed: Invalid username or password")
        if authz and authz != user:
            raise AuthenticationFailed("Authentication failed: Client requested an authorization id that is "
                                       "different from username")
        self.username = user
        self.complete = True
        return b""


# ------------------------------------------------------------------ the per-connection state
class SaslSession:
    __slots__ = ("stage", "mechanism", "server", "raw", "authenticated", "expiry", "reauth_principal", "token_id",
                 "reauth_started")

    def __init__(self):
        self.stage = INITIAL
        self.mechanism: str | None = None
        self.server = None
        self.raw = False  # handshake v0: tokens arrive as raw frames
        self.authenticated = False
        self.expiry = 0.0  # monotonic deadline of the session (connections.max.reauth.ms), 0: none
        self.reauth_principal: str | None = None
        self.token_id: str | None = None  # the delegation token of a token login (KafkaPrincipal.tokenAuthenticated)
        self.reauth_started = 0.0  # monotonic start of the last re-authentication (at most one a second)


class SslAuthentication(Authenticator):
    """An SSL listener: everything admitted; the principal is the client certificate's subject."""

    def connected(self, connection) -> None:
        connection.principal = ssl_principal(connection.transport)

    def admits(self, connection, api_key: int) -> bool:
        return True

    def principal(self, connection) -> str:
        return connection.principal


class SaslAuthenticator(Authenticator):
    """A SASL_PLAINTEXT / SASL_SSL listener."""

    def __init__(self, listener: str, mechanisms: list[str], plain_users: PlainUsers | None, scram_store,
                 max_reauth_ms: int = 0, clock=time.monotonic, tokens=None, oauth=None, gssapi=None):
        self.listener = listener
        self.mechanisms = mechanisms
        self.plain_users = plain_users
        self.scram_store = scram_store
        self.tokens = tokens  # broker.security.tokens.DelegationTokens (SCRAM logins with tokenauth=true)
        self.max_reauth_ms = max_reauth_ms
        self.clock = clock
        self.oauth, self.jwks = oauth or (None, None)  # broker.security.oauthbearer: the validator, its KeySet
        self.gssapi = gssapi  # broker.security.kerberos.Acceptor when GSSAPI is enabled

    def connected(self, connection) -> None:
        connection.sasl = SaslSession()

    def admits(self, connection, api_key: int) -> bool:
        s = connection.sasl
        if s.authenticated and api_key != SASL_HANDSHAKE and api_key != SASL_AUTHENTICATE:
            return not s.expiry or self.clock() < s.expiry
        if api_key == API_VERSIONS:
            return s.stage == INITIAL
        if api_key == SASL_HANDSHAKE:
            return s.stage in (INITIAL, HANDSHAKE) or s.authenticated
        if api_key == SASL_AUTHENTICATE:
            return (s.stage == AUTHENTICATE and not s.raw) or s.authenticated
        return False

    def principal(self, connection) -> str:
        return connection.principal

    # ---------------------------------------------------------- called by the SASL handlers
    def handshake(self, connection, mechanism: str, version: int) -> tuple[int, list[str]]:
        """SaslHandshake: (error code, enabled mechanisms); an error closes the connection after the answer."""
        s = connection.sasl
        if s.authenticated and s.stage == COMPLETE:
            if self.max_reauth_ms <= 0 and not s.expiry:  # no re-authentication: KafkaApis answers ILLEGAL_SASL_STATE
                return Errors.ILLEGAL_SASL_STATE, self.mechanisms
            if version < 1 or mechanism != s.mechanism:
                connection.close_after_response = True
                return Errors.ILLEGAL_SASL_STATE, self.mechanisms
            now = self.clock()
            if s.reauth_started and now - s.reauth_started < 1.0:  # KafkaChannel.MIN_REAUTH_INTERVAL_ONE_SECOND
                return Errors.ILLEGAL_SASL_STATE, []
            s.reauth_started = now
            s.reauth_principal = connection.principal
        elif s.stage not in (INITIAL, HANDSHAKE):
            connection.close_after_response = True
            return Errors.ILLEGAL_SASL_STATE, self.mechanisms
        if mechanism not in self.mechanisms:
            s.stage = FAILED
            logins.FAILED[self.listener, mechanism if mechanism in SUPPORTED else "other", "unsupported_mechanism"] += 1
            connection.close_after_response = True
            return Errors.UNSUPPORTED_SASL_MECHANISM, self.mechanisms
        s.mechanism = mechanism
        if mechanism == "OAUTHBEARER":
            from broker.security.oauthbearer import OAuthBearerServer

            s.server = OAuthBearerServer(self.oauth)
        elif mechanism == kerberos.MECHANISM:
            s.server = self.gssapi.server()
        else:
            s.server = PlainServer(self.plain_users) if mechanism == "PLAIN" else \
                ScramServer(mechanism, self.scram_store, self.tokens)
        s.stage = AUTHENTICATE
        s.raw = version == 0
        return Errors.NONE, self.mechanisms

    def authenticate(self, connection, token: bytes) -> tuple[int, str | None, bytes, int]:
        """One token: (error code, message, server token, session lifetime ms)."""
        s = connection.sasl
        if s.stage != AUTHENTICATE:
            return (Errors.ILLEGAL_SASL_STATE, "SaslAuthenticate request received after successful authentication",
                    b"", 0)
        try:
            out = s.server.evaluate(bytes(token))
        except AuthenticationFailed as e:
            return self._failed(connection, str(e))
        except (ScramError, kerberos.GssapiFailed) as e:
            log.info("%s authentication failed from %s: %s", s.mechanism, connection.peer, e)
            return self._failed(connection, "Authentication failed during authentication due to invalid "
                                            f"credentials with SASL mechanism {s.mechanism}")
        if not s.server.complete:
            return Errors.NONE, None, out, 0
        server = s.server
        principal = server.principal
        if s.reauth_principal is not None and principal != s.reauth_principal:
            old, new = (p.replace(":", ".", 1) for p in (s.reauth_principal, principal))  # Kafka's type.name
            return self._failed(connection, f"Cannot change principals during re-authentication from {old}: {new}",
                                "principal_change")
        token = server.token
        logins.SUCCEEDED[self.listener, s.mechanism,
                         "authentication" if s.reauth_principal is None else "reauthentication"] += 1
        s.stage, s.server, s.authenticated, s.reauth_principal = COMPLETE, None, True, None
        s.token_id = token.token_id if token is not None else None
        connection.principal = principal
        lifetime = 0
        # a credential with an expiry (a delegation token, an OAuth token) ends the session with it
        # (calcCompletionTimesAndReturnSessionLifetimeMs)
        expiry_ms = token.expiry_ms if token is not None else getattr(server, "expiry_ms", None)
        if expiry_ms is not None:
            now_ms = self.tokens.now_ms() if token is not None else int(time.time() * 1000)
            lifetime = max(0, expiry_ms - now_ms)
            if self.max_reauth_ms > 0:
                lifetime = min(lifetime, self.max_reauth_ms)
        elif self.max_reauth_ms > 0:
            lifetime = self.max_reauth_ms
        if expiry_ms is not None or lifetime:
            s.expiry = self.clock() + lifetime / 1000.0
        return Errors.NONE, None, out, lifetime

    def _failed(self, connection, message: str, cause: str | None = None):
        s = connection.sasl
        logins.FAILED[self.listener, s.mechanism, cause or getattr(s.server, "failure_cause", None) or
                      "credentials"] += 1
        s.stage, s.server, s.authenticated = FAILED, None, False
        connection.principal = ANONYMOUS
        connection.close_after_response = True
        log.info("authentication failed for %s on listener %s: %s", connection.peer, self.listener, message)
        return Errors.SASL_AUTHENTICATION_FAILED, message, b"", 0

    def raw_token(self, connection, token: bytes) -> tuple[bool, bytes | None]:
        """Handshake v0's legacy exchange: (False, None) when it failed (close), else (True, the server
        token to send raw, or None to send no frame)."""
        code, _message, out, _lifetime = self.authenticate(connection, token)
        if code:
            return False, None
        s = connection.sasl
        if s.stage == COMPLETE:
            s.raw = False
            if s.mechanism == kerberos.MECHANISM:  # GssKrb5Server's last answer is null: Kafka sends no frame
                return True, None
        return True, out


def mechanisms_of(config, listener: str) -> list[str]:
    value = listener_setting(config, listener, "sasl.enabled.mechanisms", "GSSAPI")
    mechs = [m.strip().upper() for m in value.split(",") if m.strip()]
    bad = [m for m in mechs if m not in SUPPORTED]
    if bad or not mechs:
        raise ConfigError(f"sasl.enabled.mechanisms for listener {listener}: {', '.join(bad) or 'none'} not "
                          f"supported (this broker offers {', '.join(SUPPORTED)})")
    return mechs


def jaas_config(config, listener: str, mechanism: str) -> str | None:
    return config.get(f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config") or \
        config.get("sasl.jaas.config")


def plain_users(config, listener: str) -> PlainUsers:
    text = jaas_config(config, listener, "PLAIN")
    if not text:
        raise ConfigError(f"Could not find a 'KafkaServer' or '{listener.lower()}.KafkaServer' entry for PLAIN: "
                          f"set listener.name.{listener.lower()}.plain.sasl.jaas.config")
    users = {}
    for module, _flag, opts in parse_jaas(text):
        if not module.endswith("PlainLoginModule"):
            raise ConfigError(f"listener.name.{listener.lower()}.plain.sasl.jaas.config: {module} is not "
                              f"org.apache.kafka.common.security.plain.PlainLoginModule")
        users.update({k[5:]: v for k, v in opts.items() if k.startswith("user_")})
    return PlainUsers(users)


def build_authenticator(config, listener, scram_store, tokens=None) -> Authenticator:
    """The authenticator of one listener from its protocol and Kafka's SASL keys."""
    if listener.sasl:
        mechs = mechanisms_of(config, listener.name)
        for m in mechs:
            text = jaas_config(config, listener.name, m)
            if m in SCRAM_MECHANISMS and text:
                for module, _flag, _opts in parse_jaas(text):
                    if not module.endswith("ScramLoginModule"):
                        raise ConfigError(f"listener.name.{listener.name.lower()}.{m.lower()}.sasl.jaas.config: "
                                          f"{module} is not org.apache.kafka.common.security.scram.ScramLoginModule")
        users = plain_users(config, listener.name) if "PLAIN" in mechs else None
        reauth = int(listener_setting(config, listener.name, "connections.max.reauth.ms", "0"))
        oauth = None
        if "OAUTHBEARER" in mechs:
            from broker.security.oauthbearer import LOGIN_MODULE, build_validator

            options = {}
            for module, _flag, opts in parse_jaas(jaas_config(config, listener.name, "OAUTHBEARER") or
                                                  f"{LOGIN_MODULE} required;"):
                if module != LOGIN_MODULE:
                    raise ConfigError(f"listener.name.{listener.name.lower()}.oauthbearer.sasl.jaas.config: "
                                      f"{module} is not {LOGIN_MODULE}")
                options.update(opts)
            oauth = build_validator(config, listener.name, options)
        gss = None
        if kerberos.MECHANISM in mechs:
            text = jaas_config(config, listener.name, kerberos.MECHANISM)
            gss = kerberos.acceptor(config, listener.name, parse_jaas(text) if text else None)
        return SaslAuthenticator(listener.name, mechs, users, scram_store, reauth, tokens=tokens, oauth=oauth,
                                 gssapi=gss)
    if listener.tls:
        return SslAuthentication()
    return listener.authenticator
