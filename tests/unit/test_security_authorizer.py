"""StandardAuthorizer semantics (StandardAuthorizerData), ACL filters, the decision cache, persistence."""
from __future__ import annotations

from broker.security.acls import (ALLOW, ANY, DENY, LITERAL, MATCH, OPERATIONS as OP, PREFIXED, AclBinding,
                                  AclFilter, AclStore, StandardAuthorizer, parse_super_users, validate_binding)

TOPIC, GROUP, CLUSTER = 2, 3, 4


def acl(name, op, principal="User:alice", pattern=LITERAL, permission=ALLOW, host="*", rtype=TOPIC):
    return AclBinding(rtype, name, pattern, principal, host, OP[op], permission)


def authorizer(*bindings, super_users="", allow_if_no_acl=False, tmp=None):
    store = AclStore(str(tmp) if tmp else None)
    if bindings:
        store.add(bindings)
    return StandardAuthorizer(store, parse_super_users(super_users), allow_if_no_acl)


def test_literal_prefixed_and_wildcard_resources():
    a = authorizer(acl("orders", "READ"), acl("pay-", "WRITE", pattern=PREFIXED), acl("*", "DESCRIBE"))
    assert a.allowed("User:alice", "READ", "TOPIC", "orders")
    assert not a.allowed("User:alice", "READ", "TOPIC", "orders2")  # a literal is not a prefix
    assert a.allowed("User:alice", "WRITE", "TOPIC", "pay-eu")
    assert not a.allowed("User:alice", "WRITE", "TOPIC", "pa")
    assert a.allowed("User:alice", "DESCRIBE", "TOPIC", "anything")  # LITERAL * matches every name
    assert not a.allowed("User:bob", "READ", "TOPIC", "orders")


def test_deny_wins_and_implied_operations():
    a = authorizer(acl("t", "READ"), acl("t", "READ", principal="User:*", permission=DENY),
                   acl("u", "ALTER_CONFIGS"), acl("v", "ALL"), acl("w", "READ", permission=DENY),
                   acl("w", "DESCRIBE"))
    assert not a.allowed("User:alice", "READ", "TOPIC", "t")  # DENY for User:* beats the ALLOW
    assert a.allowed("User:alice", "DESCRIBE", "TOPIC", "t")  # READ implies DESCRIBE; the DENY is READ only
    assert a.allowed("User:alice", "DESCRIBE_CONFIGS", "TOPIC", "u")  # ALTER_CONFIGS implies DESCRIBE_CONFIGS
    assert not a.allowed("User:alice", "DESCRIBE", "TOPIC", "u")
    assert all(a.allowed("User:alice", op, "TOPIC", "v") for op in ("READ", "WRITE", "DELETE", "ALTER_CONFIGS"))
    assert a.allowed("User:alice", "DESCRIBE", "TOPIC", "w")  # a DENY of READ implies nothing
    assert not a.allowed("User:alice", "READ", "TOPIC", "w")


def test_hosts_super_users_and_no_acl_default():
    a = authorizer(acl("t", "READ", host="10.0.0.1"), super_users="User:root; User:ops")
    assert a.allowed("User:alice", "READ", "TOPIC", "t", "10.0.0.1")
    assert not a.allowed("User:alice", "READ", "TOPIC", "t", "10.0.0.2")
    assert a.allowed("User:ops", "ALTER", "CLUSTER", "kafka-cluster")
    assert not a.allowed("User:alice", "READ", "TOPIC", "no-acls")  # allow.everyone.if.no.acl.found=false
    b = authorizer(acl("t", "READ"), allow_if_no_acl=True)
    assert b.allowed("User:x", "READ", "TOPIC", "no-acls")
    assert not b.allowed("User:x", "READ", "TOPIC", "t")  # an ACL exists on t: no default allow


def test_decisions_are_cached_and_the_cache_is_dropped_on_change():
    a = authorizer()
    assert not a.allowed("User:alice", "READ", "TOPIC", "t")
    assert ("User:alice", "*", "READ", "TOPIC", "t") in a._cache
    a.store.add([acl("t", "READ")])
    assert a._cache == {}
    assert a.allowed("User:alice", "READ", "TOPIC", "t")
    a.store.delete([AclFilter(ANY, None, ANY, None, None, ANY, ANY)])
    assert not a.allowed("User:alice", "READ", "TOPIC", "t")


def test_authorize_by_resource_type():
    assert not authorizer().allowed_any("User:alice", "WRITE", "TOPIC")
    assert authorizer(acl("x", "WRITE")).allowed_any("User:alice", "WRITE", "TOPIC")
    assert not authorizer(acl("x", "WRITE"), acl("x", "WRITE", permission=DENY)).allowed_any("User:alice", "WRITE",
                                                                                          "TOPIC")
    assert not authorizer(acl("abc", "WRITE"), acl("ab", "WRITE", pattern=PREFIXED, permission=DENY)).allowed_any(
        "User:alice", "WRITE", "TOPIC")
    assert not authorizer(acl("*", "WRITE"), acl("*", "WRITE", permission=DENY)).allowed_any("User:alice", "WRITE",
                                                                                          "TOPIC")
    assert authorizer(super_users="User:alice").allowed_any("User:alice", "WRITE", "TOPIC")


def test_filters_match_as_kafka():
    lit, pre, star = acl("pay-eu", "READ"), acl("pay-", "READ", pattern=PREFIXED), acl("*", "READ")
    group = acl("pay-eu", "READ", rtype=GROUP)

    def matching(f):
        return [b for b in (lit, pre, star, group) if f.matches(b)]

    assert matching(AclFilter(TOPIC, "pay-eu", MATCH, None, None, ANY, ANY)) == [lit, pre, star]
    assert matching(AclFilter(ANY, "pay-eu", ANY, None, None, ANY, ANY)) == [lit, group]
    assert matching(AclFilter(TOPIC, "pay-", PREFIXED, None, None, ANY, ANY)) == [pre]
    assert matching(AclFilter(TOPIC, None, LITERAL, "User:alice", "*", OP["READ"], ALLOW)) == [lit, star]
    assert matching(AclFilter(ANY, None, ANY, "User:bob", None, ANY, ANY)) == []


def test_validation_and_persistence(tmp_path):
    assert validate_binding(acl("x", "READ", pattern=MATCH)) == "Invalid patternType 2"
    assert validate_binding(acl("other", "ALTER", rtype=CLUSTER)).startswith("The only valid name")
    assert validate_binding(acl("", "READ")) == "Resource name should not be empty"
    assert "no colon" in validate_binding(acl("x", "READ", principal="alice"))
    assert validate_binding(acl("kafka-cluster", "ALTER", rtype=CLUSTER)) is None
    a = authorizer(acl("t", "READ"), acl("p", "WRITE", pattern=PREFIXED), tmp=tmp_path)
    again = AclStore(str(tmp_path))
    assert list(again.bindings) == list(a.store.bindings)
    assert StandardAuthorizer(again).allowed("User:alice", "WRITE", "TOPIC", "pq")


def test_authorized_operations_bit_set():
    a = authorizer(acl("t", "READ"), acl("t", "ALTER_CONFIGS"))
    ops = a.operations("User:alice", "TOPIC", "t")
    assert ops == (1 << OP["READ"]) | (1 << OP["DESCRIBE"]) | (1 << OP["ALTER_CONFIGS"]) | (1 << OP["DESCRIBE_CONFIGS"])
