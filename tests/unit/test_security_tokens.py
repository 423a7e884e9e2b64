"""broker.security.tokens with a fake clock: DelegationTokenControlManager's rules, the sweep, persistence,
write faults (all or nothing), and the SCRAM credential of a token."""
from __future__ import annotations

import base64
import hashlib
import hmac as hmac_
import json
import os

import pytest

from broker.config import BrokerConfig
from broker.log.fileio import FaultInjector
from broker.security import scram
from broker.security.tokens import DelegationTokens
from protocol.errors import Errors

KEY = "k3y"
DAY = 24 * 3600 * 1000


class Clock:
    def __init__(self, ms: int = 1_700_000_000_000):
        self.ms = ms

    def __call__(self) -> float:
        return self.ms / 1000.0


def store(tmp_path, clock, **settings) -> DelegationTokens:
    cfg = {"delegation.token.secret.key": KEY, **settings}
    return DelegationTokens(BrokerConfig({k: v for k, v in cfg.items() if v is not None}), str(tmp_path), clock=clock)


def test_create_lifetimes_and_hmac(tmp_path):
    clock = Clock()
    s = store(tmp_path, clock)
    code, t, h = s.create("User:alice", "User:alice", ["User:bob"], -1)
    assert code == 0 and h == hmac_.new(KEY.encode(), t.token_id.encode(), hashlib.sha512).digest()
    assert (t.issue_ms, t.expiry_ms, t.max_ms) == (clock.ms, clock.ms + DAY, clock.ms + 7 * DAY)
    _, t2, _ = s.create("User:alice", "User:alice", [], 5000)
    assert t2.max_ms == t2.expiry_ms == clock.ms + 5000
    _, t3, _ = s.create("User:alice", "User:alice", [], 30 * DAY)  # never above the broker's max
    assert t3.max_ms == clock.ms + 7 * DAY


def test_renew_and_expire_rules(tmp_path):
    clock = Clock()
    s = store(tmp_path, clock, **{"delegation.token.max.lifetime.ms": str(3 * DAY)})
    _, t, h = s.create("User:alice", "User:alice", ["User:bob"], -1)
    assert s.renew("User:carol", h, 1000) == (Errors.DELEGATION_TOKEN_OWNER_MISMATCH, 0)
    assert s.renew("User:bob", b"x", 1000) == (Errors.DELEGATION_TOKEN_NOT_FOUND, 0)
    clock.ms += DAY // 2
    assert s.renew("User:bob", h, 1000) == (0, clock.ms + 1000)
    assert s.renew("User:alice", h, 0) == (0, clock.ms + DAY)
    clock.ms += int(0.9 * DAY)
    assert s.renew("User:alice", h, DAY) == (0, clock.ms + DAY)
    clock.ms += int(0.9 * DAY)
    assert s.renew("User:alice", h, DAY) == (0, t.max_ms)  # capped at the max timestamp
    assert s.expire("User:alice", h, 10) == (0, clock.ms + 10)
    clock.ms += 11
    assert s.renew("User:alice", h, 1) == (Errors.DELEGATION_TOKEN_EXPIRED, 0)
    assert s.expire("User:alice", h, 1) == (Errors.DELEGATION_TOKEN_EXPIRED, 0)
    assert s.credential(t.token_id, "SCRAM-SHA-256") is None  # expired: no login
    assert s.expire("User:bob", h, -1) == (0, clock.ms)  # a negative period removes it, expired or not
    assert s.tokens == {}


def test_sweep_removes_expired_tokens_and_persists(tmp_path):
    clock = Clock()
    s = store(tmp_path, clock)
    _, short, _ = s.create("User:a", "User:a", [], 1000)
    _, long_, h = s.create("User:a", "User:b", [], -1)
    assert s.sweep() == []
    clock.ms += 1001
    assert s.sweep() == [short.token_id]
    again = store(tmp_path, clock)
    assert list(again.tokens) == [long_.token_id] and again.tokens[long_.token_id] == long_
    assert again.renew("User:b", h, 10)[0] == 0
    data = json.loads((tmp_path / DelegationTokens.FILE).read_text())
    assert "hmac" not in json.dumps(data) and oct(os.stat(tmp_path / DelegationTokens.FILE).st_mode & 0o777) == "0o600"
    other_key = store(tmp_path, clock, **{"delegation.token.secret.key": "another"})
    assert other_key.renew("User:b", h, 10)[0] == Errors.DELEGATION_TOKEN_NOT_FOUND  # the HMAC follows the key


def test_disabled_without_a_secret_key(tmp_path):
    s = store(tmp_path, Clock(), **{"delegation.token.secret.key": None})
    assert not s.enabled
    assert s.create("User:a", "User:a", [], -1)[0] == Errors.DELEGATION_TOKEN_AUTH_DISABLED
    assert s.renew("User:a", b"x", 1)[0] == s.expire("User:a", b"x", 1)[0] == Errors.DELEGATION_TOKEN_AUTH_DISABLED
    assert s.credential("x", "SCRAM-SHA-256") is None


@pytest.mark.parametrize("fail_at", [1, 2, 3, 4])
def test_a_failed_write_changes_nothing(tmp_path, fail_at):
    clock = Clock()
    s = store(tmp_path, clock)
    _, t, h = s.create("User:a", "User:a", [], -1)
    before = dict(s.tokens)
    with FaultInjector(fail_at=fail_at, sticky=True) as fi:
        results = [s.create("User:a", "User:a", [], -1)[0], s.renew("User:a", h, 10)[0], s.expire("User:a", h, -1)[0]]
    assert fi.failed and results == [Errors.KAFKA_STORAGE_ERROR] * 3
    assert s.tokens == before
    assert store(tmp_path, clock).tokens == before  # the file kept the old set too
    assert not os.path.exists(tmp_path / (DelegationTokens.FILE + ".tmp"))
    assert s.renew("User:a", h, 10)[0] == 0  # and the store works again


def test_token_credential_is_a_scram_credential_of_the_base64_hmac(tmp_path):
    s = store(tmp_path, Clock())
    _, t, h = s.create("User:a", "User:owner", [], -1)
    for mech in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        cred, token = s.credential(t.token_id, mech)
        assert token is t and cred.iterations == scram.MIN_ITERATIONS
        salted = scram.salted_password(mech, base64.b64encode(h).decode(), cred.salt, cred.iterations)
        assert scram.credential_from_salted(mech, salted, cred.salt, cred.iterations) == cred
        assert s.credential(t.token_id, mech)[0] is cred  # made once


def test_scram_server_token_login_and_extensions(tmp_path):
    s = store(tmp_path, Clock())
    _, t, _ = s.create("User:a", "User:owner", [], -1)
    server = scram.ScramServer("SCRAM-SHA-256", scram.ScramStore(None), s)
    server.evaluate(f"n,,n={t.token_id},r=abc,tokenauth=true".encode())
    assert server.principal == "User:owner" and server.token is t
    with pytest.raises(scram.ScramError, match="Invalid tokenId"):
        scram.ScramServer("SCRAM-SHA-256", scram.ScramStore(None), s).evaluate(b"n,,n=nope,r=abc,tokenauth=true")
    with pytest.raises(scram.ScramError, match="extension"):
        scram.ScramServer("SCRAM-SHA-256", scram.ScramStore(None), s).evaluate(b"n,,n=u,r=abc,bad")
    with pytest.raises(scram.ScramError, match="Invalid user credentials"):  # without the extension: a user name
        scram.ScramServer("SCRAM-SHA-256", scram.ScramStore(None), s).evaluate(
            f"n,,n={t.token_id},r=abc,tokenauth=false".encode())


def test_an_unreadable_token_file_names_itself(tmp_path):
    (tmp_path / DelegationTokens.FILE).write_text("[{\"token_id\": 1}]")
    with pytest.raises(ValueError, match="delegation-tokens.json"):
        store(tmp_path, Clock())
