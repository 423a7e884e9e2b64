"""SCRAM credentials (RFC 5802 / RFC 7677): the store, its persistence, the server exchange.

A credential is what Kafka keeps for a user and mechanism (``ScramCredential``): the
salt, the iteration count and the keys derived from the salted password
(``StoredKey = H(HMAC(SaltedPassword, "Client Key"))``, ``ServerKey = HMAC(SaltedPassword,
"Server Key")``); never the password.  AlterUserScramCredentials sends the salted
password (the client salts it), which is turned into these keys at once.

The store is ``<data>/meta/scram-credentials.json`` (atomically replaced, 0600) and is
read by every SCRAM exchange, so a change applies to the next login without restart.
``sharebroker.scram.users`` creates credentials at start-up that do not exist yet, in
the syntax of Kafka's ``kafka-storage format --add-scram``:
``SCRAM-SHA-256=[name=alice,password=alice-secret];SCRAM-SHA-512=[name=bob,password=pw,iterations=8192]``.
"""
from __future__ import annotations

import base64
import json
import os
import re
from dataclasses import dataclass

from broker.log.config import ConfigError

# Kafka's ScramMechanism: name, wire type (DescribeUserScramCredentials), hash, iteration bounds.
MECHANISMS = {"SCRAM-SHA-256": (1, "sha256"), "SCRAM-SHA-512": (2, "sha512")}
BY_TYPE = {t: name for name, (t, _) in MECHANISMS.items()}
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
DEFAULT_ITERATIONS = 4096


class ScramError(Exception):
    """An exchange failed; ``message`` is what the client is told."""


@dataclass(frozen=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


def hash_name(mechanism: str) -> str:
    return MECHANISMS[mechanism][1]


# hashlib, hmac and secrets are imported where a credential is made or checked: their OpenSSL digest
# set-up (~0.7 MiB) stays out of a broker nobody logs in to with SCRAM.
def hmac_(alg: str, key: bytes, msg: bytes) -> bytes:
    import hmac

    return hmac.new(key, msg, alg).digest()


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    import hashlib

    return hashlib.pbkdf2_hmac(hash_name(mechanism), password.encode("utf-8"), salt, iterations)


def credential_from_salted(mechanism: str, salted: bytes, salt: bytes, iterations: int) -> ScramCredential:
    import hashlib

    alg = hash_name(mechanism)
    client_key = hmac_(alg, salted, b"Client Key")
    return ScramCredential(salt, hashlib.new(alg, client_key).digest(), hmac_(alg, salted, b"Server Key"),
                           iterations)


def new_credential(mechanism: str, password: str, iterations: int = DEFAULT_ITERATIONS) -> ScramCredential:
    import secrets

    salt = secrets.token_bytes(32)
    return credential_from_salted(mechanism, salted_password(mechanism, password, salt, iterations), salt, iterations)


class ScramStore:
    """Users' SCRAM credentials, persisted in the data directory."""

    FILE = "scram-credentials.json"

    def __init__(self, meta_dir: str | None, background=None):
        self._path = os.path.join(meta_dir, self.FILE) if meta_dir else None
        self.background = background
        self.users: dict[str, dict[str, ScramCredential]] = {}
        if self._path and os.path.exists(self._path):
            with open(self._path) as f:
                data = json.load(f)
            for user, creds in data.items():
                self.users[user] = {m: ScramCredential(base64.b64decode(c["salt"]), base64.b64decode(c["stored_key"]),
                                                       base64.b64decode(c["server_key"]), int(c["iterations"]))
                                    for m, c in creds.items()}

    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        return self.users.get(user, {}).get(mechanism)

    def put(self, user: str, mechanism: str, credential: ScramCredential) -> None:
        self.users.setdefault(user, {})[mechanism] = credential

    def delete(self, user: str, mechanism: str) -> bool:
        creds = self.users.get(user)
        if not creds or mechanism not in creds:
            return False
        del creds[mechanism]
        if not creds:
            del self.users[user]
        return True

    def save(self) -> None:
        if self._path is None:
            return
        from broker.log.files import atomic_write

        data = {u: {m: {"salt": base64.b64encode(c.salt).decode(), "stored_key": base64.b64encode(c.stored_key).decode(),
                        "server_key": base64.b64encode(c.server_key).decode(), "iterations": c.iterations}
                    for m, c in creds.items()} for u, creds in self.users.items()}
        atomic_write(self._path, json.dumps(data, sort_keys=True).encode(), self.background, mode=0o600)

    def bootstrap(self, value: str | None) -> list[str]:
        """Create the credentials of ``sharebroker.scram.users`` that do not exist; returns what was added."""
        added = []
        for mechanism, opts in parse_bootstrap(value):
            user = opts["name"]
            if self.get(user, mechanism) is None:
                self.put(user, mechanism, new_credential(mechanism, opts["password"],
                                                         int(opts.get("iterations", DEFAULT_ITERATIONS))))
                added.append(f"{user} ({mechanism})")
        if added:
            self.save()
        return added


_ENTRY = re.compile(r"^\s*(SCRAM-SHA-256|SCRAM-SHA-512)\s*=\s*\[(.*)\]\s*$")


def parse_bootstrap(value: str | None) -> list[tuple[str, dict[str, str]]]:
    """``MECH=[name=...,password=...[,iterations=N]]`` entries separated by ``;``."""
    out = []
    for item in (v for v in (value or "").split(";") if v.strip()):
        m = _ENTRY.match(item)
        if m is None:
            raise ConfigError(f"Invalid value for configuration sharebroker.scram.users: '{item.strip()}' is not "
                              f"SCRAM-SHA-256=[name=USER,password=PASSWORD] or SCRAM-SHA-512=[...]")
        opts = {}
        for kv in m.group(2).split(","):
            k, sep, v = kv.partition("=")
            if sep:
                opts[k.strip()] = v.strip().strip('"')
        if not opts.get("name") or "password" not in opts:
            raise ConfigError(f"Invalid value for configuration sharebroker.scram.users: '{item.strip()}' needs "
                              f"name= and password=")
        it = opts.get("iterations", str(DEFAULT_ITERATIONS))
        if not it.isdigit() or not MIN_ITERATIONS <= int(it) <= MAX_ITERATIONS:
            raise ConfigError(f"Invalid value for configuration sharebroker.scram.users: iterations {it} outside "
                              f"{MIN_ITERATIONS}-{MAX_ITERATIONS}")
        out.append((m.group(1), opts))
    return out


# ------------------------------------------------------------------ the server side of the exchange
def _attrs(msg: str) -> list[tuple[str, str]]:
    out = []
    for part in msg.split(","):
        k, sep, v = part.partition("=")
        if not sep or len(k) != 1:
            raise ScramError(f"Invalid SCRAM message: {part!r}")
        out.append((k, v))
    return out


def _sasl_name(name: str) -> str:
    if re.search(r"=(?!2C|3D)", name):
        raise ScramError("Invalid username")
    return name.replace("=2C", ",").replace("=3D", "=")


_EXTENSION_KEY = re.compile(r"^[A-Za-z]+$")


def _extensions(attrs: list[str]) -> dict[str, str]:
    """The client-first message's extensions after ``n=`` and ``r=`` (ScramExtensions: ``key=value``)."""
    out = {}
    for part in attrs:
        k, sep, v = part.partition("=")
        if not sep or not _EXTENSION_KEY.match(k):
            raise ScramError(f"Invalid SCRAM extension: {part!r}")
        out[k] = v
    return out


class ScramServer:
    """One SCRAM exchange (ScramSaslServer): client-first -> server-first -> client-final -> server-final.

    With the extension ``tokenauth=true`` the user name is a delegation token id and the credential is
    the token's (``broker.security.tokens``); ``token`` is then the token and the principal its owner."""

    def __init__(self, mechanism: str, store: ScramStore, tokens=None):
        self.mechanism = mechanism
        self.store = store
        self.tokens = tokens  # broker.security.tokens.DelegationTokens, or None
        self.alg = hash_name(mechanism)
        self.state = 0
        self.username: str | None = None
        self.token = None  # the delegation token of a tokenauth=true login
        self.complete = False

    @property
    def principal(self) -> str:
        return self.token.owner if self.token is not None else "User:" + self.username

    def evaluate(self, token: bytes) -> bytes:
        try:
            msg = token.decode("utf-8")
        except UnicodeDecodeError:
            raise ScramError("Invalid SCRAM message encoding") from None
        if self.state == 0:
            return self._client_first(msg)
        if self.state == 1:
            return self._client_final(msg)
        raise ScramError("Unexpected SCRAM message after completion")

    def _client_first(self, msg: str) -> bytes:
        # gs2-header: n|y (no channel binding) "," [a=authzid] ","
        cb, sep, rest = msg.partition(",")
        authz, sep2, bare = rest.partition(",")
        if not sep or not sep2 or cb not in ("n", "y"):
            raise ScramError("Invalid SCRAM client first message")
        parts = bare.split(",")
        attrs = _attrs(",".join(parts[:2]))
        if len(attrs) < 2 or attrs[0][0] != "n" or attrs[1][0] != "r" or not attrs[1][1]:
            raise ScramError("Invalid SCRAM client first message")
        extensions = _extensions(parts[2:])
        user = _sasl_name(attrs[0][1])
        if authz and (not authz.startswith("a=") or _sasl_name(authz[2:]) != user):
            raise ScramError("Authentication failed: Client requested an authorization id that is different "
                             "from username")
        if extensions.get("tokenauth", "").lower() == "true":
            found = self.tokens.credential(user, self.mechanism) if self.tokens is not None else None
            if found is None:
                raise ScramError(f"Token Authentication failed: Invalid tokenId : {user}")
            cred, self.token = found
        else:
            cred = self.store.get(user, self.mechanism)
        if cred is None:
            raise ScramError("Authentication failed: Invalid user credentials")
        self.username, self.cred = user, cred
        self.gs2 = f"{cb},{authz},"
        import secrets

        self.nonce = attrs[1][1] + secrets.token_urlsafe(24).replace("-", "").replace("_", "")
        self.server_first = f"r={self.nonce},s={base64.b64encode(cred.salt).decode()},i={cred.iterations}"
        self.client_first_bare = bare
        self.state = 1
        return self.server_first.encode()

    def _client_final(self, msg: str) -> bytes:
        attrs = _attrs(msg)
        if len(attrs) < 3 or attrs[0][0] != "c" or attrs[1][0] != "r" or attrs[-1][0] != "p":
            raise ScramError("Invalid SCRAM client final message")
        if attrs[0][1] != base64.b64encode(self.gs2.encode()).decode():
            raise ScramError("Invalid channel binding in the client final message")
        if attrs[1][1] != self.nonce:
            raise ScramError("Invalid client nonce in the final client message.")
        without_proof = msg[:msg.rindex(",p=")]
        auth_message = f"{self.client_first_bare},{self.server_first},{without_proof}".encode()
        try:
            proof = base64.b64decode(attrs[-1][1], validate=True)
        except ValueError:
            raise ScramError("Invalid client proof") from None
        cred = self.cred
        signature = hmac_(self.alg, cred.stored_key, auth_message)
        if len(proof) != len(signature):
            raise ScramError("Invalid client credentials")
        client_key = bytes(a ^ b for a, b in zip(proof, signature))
        import hashlib
        import hmac

        if not hmac.compare_digest(hashlib.new(self.alg, client_key).digest(), cred.stored_key):
            raise ScramError("Invalid client credentials")
        self.state = 2
        self.complete = True
        return b"v=" + base64.b64encode(hmac_(self.alg, cred.server_key, auth_message))
