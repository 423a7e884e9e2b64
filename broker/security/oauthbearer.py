"""SASL/OAUTHBEARER (KIP-255) with OIDC token validation (KIP-768): the server side.

A client sends one message (RFC 7628 client first message: ``n,a=authzid,^Aauth=Bearer
<JWT>^A...^A^A``).  The token is validated on the event loop against keys held in memory:

- ``OAuthBearerValidatorCallbackHandler`` (Kafka's broker validator, ``BrokerJwtValidator``):
  the JWS signature against the issuer's JWKS (``sasl.oauthbearer.jwks.endpoint.url``, an
  ``http(s)://`` or ``file:`` URL), ``exp`` and ``iat`` required, ``exp`` / ``nbf`` with
  ``sasl.oauthbearer.clock.skew.seconds``, ``aud`` among ``sasl.oauthbearer.expected.audience``,
  ``iss`` equal to ``sasl.oauthbearer.expected.issuer``; the principal is ``User:`` and the claim
  ``sasl.oauthbearer.sub.claim.name``; scopes from ``sasl.oauthbearer.scope.claim.name``.  As in
  Kafka 4.4, an audience and an issuer must be configured unless
  ``sasl.oauthbearer.allow.unverified.audience`` / ``.issuer`` say otherwise.  Only asymmetric signature algorithms are accepted (RS*, PS*, ES*, EdDSA); Kafka's jose4j refuses
  only ``none``, but a shared HMAC secret cannot come from a public JWKS.
- ``OAuthBearerUnsecuredValidatorCallbackHandler`` (development only: unsigned ``alg: none``
  tokens, JAAS options ``unsecuredValidator*``).  Kafka falls back to it when no handler class is
  set; this broker never does: the class must be named.

A refused token is answered as Kafka's ``OAuthBearerSaslServer`` does: a server challenge with
RFC 7628's error JSON (``{"status":"invalid_token"}``); the client acknowledges it with a single
``0x01``, and the login then fails with SASL_AUTHENTICATION_FAILED carrying that JSON.  The
session lifetime is the token's remaining life (capped by ``connections.max.reauth.ms``), so the
client re-authenticates with a fresh token before it expires (KIP-368).

JWKS (``RefreshingHttpsJwks``): fetched once at start-up (off the event loop; a failure stops
start-up), then by a daemon thread every ``sasl.oauthbearer.jwks.endpoint.refresh.ms``, and at
once when a token names an unknown ``kid`` (at most once a minute per ``kid``; that token is
refused, as in Kafka, and the next one finds the key).  A failed refresh keeps the keys held.

Runtime dependency: PyJWT with ``cryptography`` (the ``sharebroker[oauth]`` extra), imported only
when a listener enables OAUTHBEARER; without it the configuration is refused naming the extra.
"""
from __future__ import annotations

import base64
import binascii
import http.client
import json
import logging
import re
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

from broker.log.config import ConfigError
from broker.security.listeners import listener_setting
from broker.security.logins import AuthenticationFailed

log = logging.getLogger("sharebroker.security")

MECHANISM = "OAUTHBEARER"
EXTRA = "sharebroker[oauth]"
_PKG = "org.apache.kafka.common.security.oauthbearer."
VALIDATOR = _PKG + "OAuthBearerValidatorCallbackHandler"
UNSECURED_VALIDATOR = _PKG + "internals.unsecured.OAuthBearerUnsecuredValidatorCallbackHandler"
LOGIN_MODULE = _PKG + "OAuthBearerLoginModule"
INVALID_TOKEN = b'{"status":"invalid_token"}'
CONTROL_A = b"\x01"
MISSING_KID_CACHE_MAX = 16  # RefreshingHttpsJwks.MISSING_KEY_ID_CACHE_MAX_ENTRIES
MISSING_KID_INTERVAL_S = 60.0  # MISSING_KEY_ID_CACHE_IN_FLIGHT_MS
MISSING_KID_MAX_LENGTH = 1000
_FETCH_ERRORS = (OSError, ValueError, http.client.HTTPException)  # network, HTTP status, JSON
_ASYMMETRIC = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")

_KEY = r"[A-Za-z]+"
_VALUE = r"[\x21-\x7E \t\r\n]+"
_INITIAL = re.compile(r"n,(?:a=(?P<authzid>(?:[\x01-\x2B\x2D-\x3C\x3E-\x7F]|=2C|=3D)+))?,\x01"
                      rf"(?P<kvpairs>(?:{_KEY}={_VALUE}\x01)*)\x01")
_AUTH = re.compile(r"(?P<scheme>\w+) +(?P<token>[-_~+/.a-zA-Z0-9]+=*)")


class InvalidToken(Exception):
    """JwtValidatorException: the token is refused; the message is logged, never sent to the client.
    ``cause`` names the failure for the login metrics (expired, audience, issuer, key, signature, ...)."""

    def __init__(self, message: str, cause: str = "invalid"):
        super().__init__(message)
        self.cause = cause


class BadMessage(Exception):
    """The client first message is malformed (Kafka's SaslException: the generic failure message)."""


def parse_client_response(data: bytes) -> tuple[str, str, dict[str, str]]:
    """OAuthBearerClientInitialResponse: (authorization id, token, extensions)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise BadMessage("Invalid OAUTHBEARER client first message") from None
    m = _INITIAL.fullmatch(text)
    if m is None:
        raise BadMessage("Invalid OAUTHBEARER client first message")
    pairs = dict(kv.split("=", 1) for kv in m.group("kvpairs").split("\x01") if kv)
    auth = pairs.pop("auth", None)
    if auth is None:
        raise BadMessage("Invalid OAUTHBEARER client first message: 'auth' not specified")
    a = _AUTH.fullmatch(auth)
    if a is None:
        raise BadMessage("Invalid OAUTHBEARER client first message: invalid 'auth' format")
    if a.group("scheme").lower() != "bearer":
        raise BadMessage(f"Invalid scheme in OAUTHBEARER client first message: {a.group('scheme')}")
    authzid = (m.group("authzid") or "").replace("=2C", ",").replace("=3D", "=")
    return authzid, a.group("token"), pairs


class Token:
    """OAuthBearerToken: what a validated JWT gives the session."""
    __slots__ = ("principal_name", "scopes", "expiry_ms", "issued_at_ms")

    def __init__(self, principal_name: str, scopes: frozenset, expiry_ms: int, issued_at_ms: int | None):
        self.principal_name, self.scopes, self.expiry_ms, self.issued_at_ms = \
            principal_name, scopes, expiry_ms, issued_at_ms


def _claim_string(claims: dict, name: str) -> str:
    """ClaimValidationUtils.validateSubject / validateClaimNameOverride."""
    value = claims.get(name)
    if value is None:
        raise InvalidToken(f"{name} value must be non-null", "claim")
    if not isinstance(value, str):
        raise InvalidToken(f"Could not extract the '{name}' claim from the access token", "claim")
    if not value:
        raise InvalidToken(f"{name} value must be non-empty", "claim")
    if not value.strip():
        raise InvalidToken(f"{name} value must not contain only whitespace", "claim")
    return value.strip()


def _scopes(claims: dict, name: str) -> frozenset:
    """ClaimValidationUtils.validateScopes: a space-separated string or a list; no blank or duplicate."""
    raw = claims.get(name)
    items = raw.split(" ") if isinstance(raw, str) else raw if isinstance(raw, list) else []
    seen = set()
    for s in items:
        s = str(s).strip()
        if not s:
            raise InvalidToken(f"{name} value must be non-empty", "claim")
        if s in seen:
            raise InvalidToken(f"{name} value must not contain duplicates - {s} already present", "claim")
        seen.add(s)
    return frozenset(seen)


def _time_ms(claims: dict, name: str, required: bool) -> int | None:
    value = claims.get(name)
    if value is None:
        if required:
            raise InvalidToken(f"{name} value must be non-null", "claim")
        return None
    if not isinstance(value, (int, float)) or value < 0:
        raise InvalidToken(f"{name} value must be non-negative; value given was \"{value}\"", "claim")
    return int(value * 1000)


# ------------------------------------------------------------------ keys
class KeySet:
    """RefreshingHttpsJwks: the issuer's keys by ``kid``, replaced whole by each successful fetch."""

    def __init__(self, url: str, refresh_ms: int, backoff_ms: int, backoff_max_ms: int, clock=time.monotonic):
        self.url = url
        self.refresh_s = refresh_ms / 1000.0
        self.backoff_s, self.backoff_max_s = backoff_ms / 1000.0, backoff_max_ms / 1000.0
        self.clock = clock
        self.keys: dict[str | None, object] = {}  # kid -> jwt.PyJWK; replaced whole by the refresh thread only
        # kid -> next time a refresh may be asked for it; the loop adds, the refresh thread removes (under _lock)
        self._missing: dict[str, float] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def _fetch(self) -> dict:
        if self.url.startswith("file:"):
            path = urllib.request.url2pathname(urllib.parse.urlparse(self.url).path)
            with open(path, "rb") as f:
                body = f.read()
        else:
            req = urllib.request.Request(self.url, headers={"Accept": "application/json"})
            with urllib.request.urlopen(req, timeout=10) as resp:  # noqa: S310 (http/https checked in config)
                body = resp.read()
        import jwt

        keys = {}
        for k in json.loads(body).get("keys", []):
            if k.get("use", "sig") != "sig":
                continue
            try:
                keys[k.get("kid")] = jwt.PyJWK(k)
            except (jwt.PyJWKError, jwt.InvalidKeyError, ValueError) as e:
                log.info("JWKS %s: key %s skipped: %s", self.url, k.get("kid"), e)
        return keys

    def load(self) -> None:
        """The first fetch (``RefreshingHttpsJwks.init``), blocking: called in a thread at start-up."""
        try:
            self.keys = self._fetch()
        except _FETCH_ERRORS as e:
            raise ConfigError(f"Could not refresh JWKS from {self.url}: {e}") from None
        log.info("OAuth JWKS %s: %d keys (%s)", self.url, len(self.keys), ", ".join(map(str, self.keys)))
        self._thread = threading.Thread(target=self._run, name="jwks-refresh", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            self._wake.wait(self.refresh_s)
            self._wake.clear()
            self._refresh()

    def _refresh(self) -> None:
        """One refresh with Kafka's ``Retry`` backoff; on failure the held keys stay."""
        wait, deadline = self.backoff_s, self.clock() + self.backoff_max_s
        while True:
            try:
                keys = self._fetch()
                break
            except _FETCH_ERRORS as e:
                if self.clock() + wait > deadline:
                    log.warning("OAuth JWKS refresh of %s failed; keeping the %d keys held: %s",
                                self.url, len(self.keys), e)
                    return
                time.sleep(wait)
                wait = min(wait * 2, self.backoff_max_s)
        with self._lock:
            for kid in keys:
                self._missing.pop(kid, None)
        added = sorted(map(str, keys.keys() - self.keys.keys()))
        self.keys = keys
        log.info("OAuth JWKS refresh of %s complete: %d keys%s", self.url, len(keys),
                 f" (new: {', '.join(added)})" if added else "")

    def key(self, kid: str | None):
        """The key of ``kid``, or None after asking for an early refresh (``maybeExpediteRefresh``)."""
        keys = self.keys
        if kid is None and len(keys) == 1:
            return next(iter(keys.values()))
        k = keys.get(kid)
        if k is not None or kid is None or self._thread is None or len(kid) > MISSING_KID_MAX_LENGTH:
            return k
        now = self.clock()
        with self._lock:
            if self._missing.get(kid, 0.0) > now:
                return None
            self._missing.pop(kid, None)  # re-inserted last: the oldest entries go first
            self._missing[kid] = now + MISSING_KID_INTERVAL_S
            while len(self._missing) > MISSING_KID_CACHE_MAX:
                del self._missing[next(iter(self._missing))]
        log.info("OAuth JWKS: unknown key id %s, refreshing %s", kid, self.url)
        self._wake.set()
        return None


# ------------------------------------------------------------------ validators
class JwtValidator:
    """BrokerJwtValidator: signature, exp, iat, nbf, aud, iss; the principal and scope claims."""

    def __init__(self, keys: KeySet, audiences: list[str], issuer: str | None, skew_s: int, sub_claim: str,
                 scope_claim: str):
        import jwt

        self._jwt = jwt
        self.keys, self.audiences, self.issuer, self.skew_s = keys, audiences, issuer, skew_s
        self.sub_claim, self.scope_claim = sub_claim, scope_claim

    def validate(self, token: str) -> Token:
        jwt = self._jwt
        try:
            header = jwt.get_unverified_header(token)
        except jwt.DecodeError as e:
            raise InvalidToken(f"Could not validate the access token: {e}", "malformed") from None
        alg = header.get("alg")
        if alg not in _ASYMMETRIC:
            raise InvalidToken(f"Could not validate the access token: algorithm {alg!r} is not allowed", "algorithm")
        key = self.keys.key(header.get("kid"))
        if key is None:
            raise InvalidToken(f"Could not validate the access token: no key with kid {header.get('kid')!r} in "
                               f"the JWKS of {self.keys.url}", "unknown_key")
        options = {"require": ["exp", "iat"], "verify_aud": bool(self.audiences), "verify_iss": bool(self.issuer)}
        try:
            claims = jwt.decode(token, key, algorithms=[alg], audience=self.audiences or None, issuer=self.issuer,
                                leeway=self.skew_s, options=options)
        except jwt.ExpiredSignatureError as e:
            raise InvalidToken(f"Could not validate the access token: {e}", "expired") from None
        except jwt.InvalidAudienceError as e:
            raise InvalidToken(f"Could not validate the access token: {e} (expected {self.audiences})",
                               "audience") from None
        except jwt.InvalidIssuerError as e:
            raise InvalidToken(f"Could not validate the access token: {e} (expected {self.issuer})",
                               "issuer") from None
        except jwt.InvalidSignatureError as e:
            raise InvalidToken(f"Could not validate the access token: {e}", "signature") from None
        except jwt.InvalidTokenError as e:
            raise InvalidToken(f"Could not validate the access token: {e}", "invalid") from None
        return Token(_claim_string(claims, self.sub_claim), _scopes(claims, self.scope_claim),
                     _time_ms(claims, "exp", True), _time_ms(claims, "iat", False))


class UnsecuredValidator:
    """OAuthBearerUnsecuredValidatorCallbackHandler / OAuthBearerUnsecuredJws: ``alg: none`` tokens, for
    development; ``exp`` required, the principal claim, the required scopes."""

    def __init__(self, options: dict[str, str]):
        self.sub_claim = options.get("unsecuredValidatorPrincipalClaimName", "").strip() or "sub"
        self.scope_claim = options.get("unsecuredValidatorScopeClaimName", "").strip() or "scope"
        self.required_scopes = frozenset(options.get("unsecuredValidatorRequiredScope", "").split())
        try:
            self.skew_ms = int(options.get("unsecuredValidatorAllowableClockSkewMs", "0") or 0)
        except ValueError:
            raise ConfigError("Invalid value for unsecuredValidatorAllowableClockSkewMs") from None

    def validate(self, token: str) -> Token:
        parts = token.split(".")
        if len(parts) != 3 or parts[2]:
            raise InvalidToken("Unsecured JWS must have three dot-separated parts and no signature", "malformed")
        try:
            header, claims = (json.loads(base64.urlsafe_b64decode(p + "=" * (-len(p) % 4))) for p in parts[:2])
        except (ValueError, binascii.Error):
            raise InvalidToken("Unsecured JWS: invalid Base64URL JSON", "malformed") from None
        if not isinstance(header, dict) or not isinstance(claims, dict) or header.get("alg") != "none":
            raise InvalidToken("Unsecured JWS must have alg none", "algorithm")
        now_ms = int(time.time() * 1000)
        exp = _time_ms(claims, "exp", True)
        if now_ms - self.skew_ms >= exp:
            raise InvalidToken(f"The indicated time ({now_ms} ms) is on or after the expiration time ({exp} ms)",
                               "expired")
        iat = _time_ms(claims, "iat", False)
        if iat is not None and iat > now_ms + self.skew_ms:
            raise InvalidToken("The indicated time is before the issued-at time", "invalid")
        scopes = _scopes(claims, self.scope_claim)
        missing = self.required_scopes - scopes
        if missing:
            raise InvalidToken(f"The provided scope ({sorted(scopes)}) was missing a required scope "
                               f"({sorted(missing)})", "scope")
        return Token(_claim_string(claims, self.sub_claim), scopes, exp, iat)


# ------------------------------------------------------------------ the SASL server
class OAuthBearerServer:
    """OAuthBearerSaslServer: one client message; a refused token gets the error JSON as a challenge."""

    token = None  # never a delegation token's login

    def __init__(self, validator):
        self.validator = validator
        self.complete = False
        self.username: str | None = None
        self.expiry_ms: int | None = None  # the token's exp: the session ends with it
        self.error: bytes | None = None
        self.failure_cause: str | None = None  # for the login metrics

    @property
    def principal(self) -> str:
        return "User:" + self.username

    def evaluate(self, data: bytes) -> bytes:
        if data == CONTROL_A and self.error is not None:
            raise AuthenticationFailed(self.error.decode())
        self.error = None
        try:
            authzid, value, _extensions = parse_client_response(data)
        except BadMessage as e:
            log.debug("%s", e)
            self.failure_cause = "malformed"
            raise AuthenticationFailed("Authentication failed during authentication due to invalid credentials "
                                       f"with SASL mechanism {MECHANISM}") from None
        try:
            token = self.validator.validate(value)
        except InvalidToken as e:
            log.warning("%s", e)
            self.error, self.failure_cause = INVALID_TOKEN, e.cause
            return INVALID_TOKEN
        if authzid and authzid != token.principal_name:
            self.failure_cause = "authzid"
            raise AuthenticationFailed(f"Authentication failed: Client requested an authorization id ({authzid}) "
                                       f"that is different from the token's principal name "
                                       f"({token.principal_name})")
        self.username, self.expiry_ms, self.complete = token.principal_name, token.expiry_ms, True
        return b""


# ------------------------------------------------------------------ configuration
def _setting(config, listener: str, key: str, default: str | None = None) -> str | None:
    """ConfigurationUtils.get on a listener's channel configs: ``listener.name.<l>.oauthbearer.<key>``,
    then ``listener.name.<l>.<key>``, then ``<key>``."""
    v = config.get(f"listener.name.{listener.lower()}.oauthbearer.{key}")
    return listener_setting(config, listener, key, default) if v is None or v == "" else v


def _require_extra() -> None:
    try:
        import jwt
    except ImportError as e:
        raise ConfigError(f"SASL mechanism {MECHANISM} needs the optional extra {EXTRA} "
                          f"(pip install '{EXTRA}'): {e}") from None
    if not jwt.algorithms.has_crypto:
        raise ConfigError(f"SASL mechanism {MECHANISM} needs the optional extra {EXTRA} "
                          f"(pip install '{EXTRA}'): the cryptography package is missing")


def build_validator(config, listener: str, jaas_options: dict[str, str]):
    """The listener's validator from Kafka's keys; a KeySet (to load at start-up) or None."""
    prefix = f"listener.name.{listener.lower()}.oauthbearer."
    handler = (_setting(config, listener, "sasl.server.callback.handler.class") or "").strip()
    if handler == UNSECURED_VALIDATOR:
        log.warning("listener %s accepts unsecured (unsigned) OAUTHBEARER tokens: for development only", listener)
        return UnsecuredValidator(jaas_options), None
    if handler != VALIDATOR:
        raise ConfigError(f"{prefix}sasl.server.callback.handler.class must be {VALIDATOR} (JWTs verified "
                          f"with the issuer's JWKS) or, for development only, {UNSECURED_VALIDATOR}"
                          + (f"; {handler} is not supported" if handler else ""))
    _require_extra()
    url = _setting(config, listener, "sasl.oauthbearer.jwks.endpoint.url")
    if not url:
        raise ConfigError("The OAuth validator for the broker requires \"sasl.oauthbearer.jwks.endpoint.url\" to "
                          "be configured so that JWT signatures can be verified, but it was not set.")
    scheme = urllib.parse.urlparse(url).scheme.lower()
    if scheme not in ("http", "https", "file"):
        raise ConfigError(f"The OAuth configuration option sasl.oauthbearer.jwks.endpoint.url contains a URL ({url}) "
                          f"that contains an invalid protocol ({scheme}); only \"http\", \"https\", and \"file\" "
                          f"protocol are supported")
    audiences = [a.strip() for a in (_setting(config, listener, "sasl.oauthbearer.expected.audience") or "")
                 .split(",") if a.strip()]
    issuer = (_setting(config, listener, "sasl.oauthbearer.expected.issuer") or "").strip() or None

    def flag(key):
        return (_setting(config, listener, key) or "false").strip().lower() == "true"

    if not audiences and not flag("sasl.oauthbearer.allow.unverified.audience"):
        raise ConfigError("The OAuth validator for the broker requires \"sasl.oauthbearer.expected.audience\" to be "
                          "configured so that the token's audience (\"aud\") claim can be verified, but it was not "
                          "set. Set \"sasl.oauthbearer.expected.audience\" to the audience(s) that identify this "
                          "cluster, or set \"sasl.oauthbearer.allow.unverified.audience\" to true to accept tokens "
                          "regardless of their audience.")
    if issuer is None and not flag("sasl.oauthbearer.allow.unverified.issuer"):
        raise ConfigError("The OAuth validator for the broker requires \"sasl.oauthbearer.expected.issuer\" to be "
                          "configured so that the token's issuer (\"iss\") claim can be verified, but it was not "
                          "set. Set \"sasl.oauthbearer.expected.issuer\" to the issuer URL of the OAuth/OIDC "
                          "provider that signs the tokens, or set \"sasl.oauthbearer.allow.unverified.issuer\" to "
                          "true to accept tokens regardless of their issuer.")

    def number(key, default):
        try:
            return int(_setting(config, listener, key, default))
        except ValueError:
            raise ConfigError(f"Invalid value for configuration {key}: Not a number of type LONG") from None

    refresh_ms = number("sasl.oauthbearer.jwks.endpoint.refresh.ms", "3600000")
    if refresh_ms <= 0:
        raise ConfigError("The OAuth configuration option sasl.oauthbearer.jwks.endpoint.refresh.ms value must be "
                          "at least 1")
    keys = KeySet(url, refresh_ms, number("sasl.oauthbearer.jwks.endpoint.retry.backoff.ms", "100"),
                  number("sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms", "10000"))
    validator = JwtValidator(keys, audiences, issuer, number("sasl.oauthbearer.clock.skew.seconds", "30"),
                             (_setting(config, listener, "sasl.oauthbearer.sub.claim.name") or "sub").strip(),
                             (_setting(config, listener, "sasl.oauthbearer.scope.claim.name") or "scope").strip())
    return validator, keys
