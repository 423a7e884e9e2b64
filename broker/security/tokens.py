"""Delegation tokens (KIP-48): the store, its rules, its persistence, the SCRAM credentials of a token.

A token is (id, owner, requester, renewers, issue / expiry / max timestamps); its password is
``HMAC-SHA512(delegation.token.secret.key, token id)``, never stored: it is recomputed from the
key at start-up (so a changed key invalidates every token, as in Kafka).  A client logs in with
SCRAM-SHA-256/512, the token id as user name, the base64 HMAC as password and the SCRAM
extension ``tokenauth=true``; the session's principal is the token's owner.

The rules are Kafka 4.4's ``DelegationTokenControlManager`` (create / renew / expire, expiry
sweep) and ``DelegationTokenManager.filterToken`` (describe); the request-level checks
(connection, owner impersonation) are in the handlers, as in ``KafkaApis``.  Settings, with
Kafka's defaults: ``delegation.token.secret.key`` (none: every API answers
DELEGATION_TOKEN_AUTH_DISABLED), ``delegation.token.max.lifetime.ms`` (7 days),
``delegation.token.expiry.time.ms`` (1 day), ``delegation.token.expiry.check.interval.ms``
(1 hour; the sweep that removes expired tokens).

The tokens live in ``<data>/meta/delegation-tokens.json`` (0600, atomically replaced).  A
write is all or nothing: the new set is written first and replaces the one in memory only
after the file is in place; a failed write leaves both as they were and answers
KAFKA_STORAGE_ERROR.
"""
from __future__ import annotations

import base64
import json
import logging
import os
import time
from dataclasses import asdict, dataclass, replace

from broker.log.config import ConfigError
from broker.security.scram import MECHANISMS, MIN_ITERATIONS, ScramCredential
from protocol.errors import Errors

log = logging.getLogger("sharebroker.security")

MAX_LIFETIME_DEFAULT_MS = 7 * 24 * 3600 * 1000
EXPIRY_TIME_DEFAULT_MS = 24 * 3600 * 1000
CHECK_INTERVAL_DEFAULT_MS = 3600 * 1000
ERROR_TIMESTAMP = -1  # DelegationTokenManager.ERROR_TIMESTAMP
LONG_MAX = (1 << 63) - 1


def _sum(now: int, duration: int) -> int:
    return LONG_MAX if now > LONG_MAX - duration else now + duration


def split_principal(principal: str) -> tuple[str, str]:
    """``User:alice`` -> ("User", "alice") (KafkaPrincipal's type and name)."""
    ptype, _, name = principal.partition(":")
    return ptype, name


@dataclass(frozen=True)
class TokenInfo:
    """Kafka's TokenInformation; principals as ``Type:name`` strings."""

    token_id: str
    owner: str
    requester: str
    renewers: tuple[str, ...]
    issue_ms: int
    max_ms: int
    expiry_ms: int

    def owner_or_renewer(self, principal: str) -> bool:
        return principal == self.owner or principal in self.renewers

    def expired(self, now_ms: int) -> bool:
        return self.max_ms < now_ms or self.expiry_ms < now_ms


class DelegationTokens:
    """The broker's delegation tokens: the one owner of their state (written by the four token APIs
    and the expiry sweep, read by SCRAM logins)."""

    FILE = "delegation-tokens.json"

    def __init__(self, config, meta_dir: str | None, background=None, clock=time.time):
        key = config.get("delegation.token.secret.key") or ""
        self._key = key.encode("utf-8") if key else None
        self.max_lifetime_ms = config.get_int("delegation.token.max.lifetime.ms", MAX_LIFETIME_DEFAULT_MS)
        self.expiry_time_ms = config.get_int("delegation.token.expiry.time.ms", EXPIRY_TIME_DEFAULT_MS)
        self.check_interval_ms = config.get_int("delegation.token.expiry.check.interval.ms",
                                                CHECK_INTERVAL_DEFAULT_MS)
        self._path = os.path.join(meta_dir, self.FILE) if meta_dir else None
        self.background = background
        self.clock = clock
        self.tokens: dict[str, TokenInfo] = {}
        self._by_hmac: dict[bytes, str] = {}  # derived from tokens; rebuilt by _install
        # SCRAM credentials per token and mechanism, made at the first login (PBKDF2 is slow);
        # written by credential(), dropped by _install when the token goes
        self._credentials: dict[tuple[str, str], ScramCredential] = {}
        if self.enabled and self._path and os.path.exists(self._path):
            try:
                with open(self._path) as f:
                    data = json.load(f)
                self._install({t["token_id"]: TokenInfo(**{**t, "renewers": tuple(t["renewers"])}) for t in data})
            except (ValueError, TypeError, KeyError) as e:  # start-up stops with the file named
                raise ConfigError(f"cannot read the delegation tokens in {self._path}: {e!r}") from None

    @property
    def enabled(self) -> bool:
        return self._key is not None

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    def hmac(self, token_id: str) -> bytes:
        from broker.security.scram import hmac_

        return hmac_("sha512", self._key, token_id.encode("utf-8"))

    # ---------------------------------------------------------- writes
    def create(self, requester: str, owner: str, renewers: list[str], max_lifetime_ms: int
               ) -> tuple[int, TokenInfo | None, bytes]:
        """(error code, the new token, its HMAC) as DelegationTokenControlManager.createDelegationToken
        (the renewers are checked by the handler, as KafkaApis)."""
        if not self.enabled:
            return Errors.DELEGATION_TOKEN_AUTH_DISABLED, None, b""
        import uuid

        now = self.now_ms()
        lifetime = self.max_lifetime_ms
        if max_lifetime_ms > 0:
            lifetime = min(lifetime, max_lifetime_ms)
        max_ms = _sum(now, lifetime)
        token = TokenInfo(str(uuid.uuid4()), owner, requester, tuple(dict.fromkeys(renewers)), now, max_ms,
                          min(max_ms, _sum(now, self.expiry_time_ms)))
        code = self._write({**self.tokens, token.token_id: token})
        return (code, None, b"") if code else (Errors.NONE, token, self.hmac(token.token_id))

    def renew(self, principal: str, hmac: bytes, period_ms: int) -> tuple[int, int]:
        """(error code, new expiry timestamp) as DelegationTokenControlManager.renewDelegationToken."""
        code, token = self._lookup(principal, hmac, check_expired=True)
        if code:
            return code, 0
        renew = self.expiry_time_ms if period_ms <= 0 else min(self.expiry_time_ms, period_ms)
        expiry = min(token.max_ms, _sum(self.now_ms(), renew))
        code = self._write({**self.tokens, token.token_id: replace(token, expiry_ms=expiry)})
        return (code, 0) if code else (Errors.NONE, expiry)

    def expire(self, principal: str, hmac: bytes, period_ms: int) -> tuple[int, int]:
        """(error code, new expiry timestamp) as DelegationTokenControlManager.expireDelegationToken:
        a negative period removes the token at once."""
        code, token = self._lookup(principal, hmac, check_expired=False)
        if code:
            return code, 0
        now = self.now_ms()
        if period_ms < 0:
            code = self._write({k: t for k, t in self.tokens.items() if k != token.token_id})
            return (code, 0) if code else (Errors.NONE, now)
        if token.expired(now):
            return Errors.DELEGATION_TOKEN_EXPIRED, 0
        expiry = min(token.max_ms, _sum(now, period_ms))
        code = self._write({**self.tokens, token.token_id: replace(token, expiry_ms=expiry)})
        return (code, 0) if code else (Errors.NONE, expiry)

    def sweep(self) -> list[str]:
        """Remove the expired tokens (the periodic expiry check); returns their ids."""
        now = self.now_ms()
        gone = [t for t in self.tokens.values() if t.expired(now)]
        if gone and not self._write({k: t for k, t in self.tokens.items() if not t.expired(now)}):
            for t in gone:
                log.info("Delegation token expired for token: %s for owner: %s", t.token_id, t.owner)
            return [t.token_id for t in gone]
        return []

    def _lookup(self, principal: str, hmac: bytes, check_expired: bool) -> tuple[int, TokenInfo | None]:
        if not self.enabled:
            return Errors.DELEGATION_TOKEN_AUTH_DISABLED, None
        token = self.tokens.get(self._by_hmac.get(bytes(hmac), ""))
        if token is None:
            return Errors.DELEGATION_TOKEN_NOT_FOUND, None
        if check_expired and token.expired(self.now_ms()):
            return Errors.DELEGATION_TOKEN_EXPIRED, None
        if not token.owner_or_renewer(principal):
            return Errors.DELEGATION_TOKEN_OWNER_MISMATCH, None
        return Errors.NONE, token

    def _write(self, tokens: dict[str, TokenInfo]) -> int:
        if self._path is not None:
            from broker.log.files import atomic_write

            data = json.dumps([asdict(t) for t in tokens.values()], sort_keys=True).encode()
            try:
                atomic_write(self._path, data, self.background, mode=0o600)
            except OSError as e:
                log.error("cannot write the delegation tokens to %s: %s", self._path, e)
                return Errors.KAFKA_STORAGE_ERROR
        self._install(tokens)
        return Errors.NONE

    def _install(self, tokens: dict[str, TokenInfo]) -> None:
        self.tokens = tokens
        self._by_hmac = {self.hmac(k): k for k in tokens}
        self._credentials = {k: c for k, c in self._credentials.items() if k[0] in tokens}

    # ---------------------------------------------------------- reads
    def visible(self, principal: str, owners: list[str] | None, may_describe_token, may_describe_owner
                ) -> list[TokenInfo]:
        """DescribeDelegationToken's tokens: DelegationTokenManager.filterToken over every token."""
        out = []
        for t in self.tokens.values():
            if owners is not None and not any(t.owner_or_renewer(o) for o in owners):
                continue
            if t.owner_or_renewer(principal) or may_describe_token(t.token_id) or may_describe_owner(t.owner):
                out.append(t)
        return out

    def credential(self, token_id: str, mechanism: str) -> tuple[ScramCredential, TokenInfo] | None:
        """A SCRAM login with ``tokenauth=true``: the token's credential for ``mechanism`` and the
        token, or None (unknown, expired, or tokens disabled)."""
        token = self.tokens.get(token_id) if self.enabled else None
        if token is None or token.expired(self.now_ms()) or mechanism not in MECHANISMS:
            return None
        cred = self._credentials.get((token_id, mechanism))
        if cred is None:
            from broker.security.scram import new_credential

            password = base64.b64encode(self.hmac(token_id)).decode()
            cred = self._credentials[(token_id, mechanism)] = new_credential(mechanism, password, MIN_ITERATIONS)
        return cred, token


def requests_allowed(ctx) -> bool:
    """KafkaApis.allowTokenRequests: tokens are not managed over PLAINTEXT, over SSL without a client
    certificate (an ANONYMOUS principal), nor by a session that logged in with a token."""
    sasl = getattr(ctx.connection, "sasl", None)
    if sasl is not None and sasl.token_id is not None:
        return False
    protocol = ctx.listener.protocol if ctx.listener is not None else "PLAINTEXT"
    return not (protocol == "PLAINTEXT" or (protocol == "SSL" and ctx.principal == "User:ANONYMOUS"))
