"""broker/security/authorize.py: the helpers handlers call, with and without an authorizer."""
from __future__ import annotations

from types import SimpleNamespace

from broker.pipeline import AllowAll
from broker.security.acls import ALLOW, LITERAL, OPERATIONS, AclBinding, AclStore, StandardAuthorizer
from broker.security.authorize import (ALL_OPERATIONS, allowed, describe_groups, enabled, filter_allowed, operations,
                                       split_allowed)

GROUP_TYPE = 3


def ctx(components, principal="User:alice"):
    return SimpleNamespace(components=components, principal=principal, host="127.0.0.1")


def standard(*grants):
    store = AclStore(None)
    store.add([AclBinding(rtype, name, LITERAL, "User:alice", "*", OPERATIONS[op], ALLOW)
               for rtype, name, op in grants])
    return StandardAuthorizer(store, set(), False)


def test_components_without_an_authorizer_allow_everything():
    for components in (SimpleNamespace(), SimpleNamespace(authorizer=AllowAll())):  # unit-test fakes, no ACLs
        c = ctx(components)
        assert not enabled(c)
        assert allowed(c, "READ", "GROUP", "g")
        assert filter_allowed(c, "DESCRIBE", "TOPIC", ["a", "b"]) == {"a", "b"}
        assert operations(c, "GROUP", "g") == ALL_OPERATIONS["GROUP"]


def test_a_standard_authorizer_decides():
    c = ctx(SimpleNamespace(authorizer=standard((GROUP_TYPE, "g", "READ"))))
    assert enabled(c)
    assert allowed(c, "READ", "GROUP", "g") and not allowed(c, "READ", "GROUP", "h")
    assert allowed(c, "DESCRIBE", "GROUP", "g")  # READ implies DESCRIBE
    assert operations(c, "GROUP", "g") == (1 << OPERATIONS["READ"]) | (1 << OPERATIONS["DESCRIBE"])


def _group(gid, error_code=0, topics=()):
    return SimpleNamespace(group_id=gid, error_code=error_code, error_message=None, authorized_operations=-1,
                           members=[SimpleNamespace(topics=set(topics))])


def test_describe_groups_keeps_request_order_and_asks_only_for_allowed_groups():
    asked = []

    def describe(ids):
        asked.append(list(ids))
        return [_group(gid, topics={"t"}) for gid in ids]

    def denied(gid):
        return _group(gid, error_code=30)

    c = ctx(SimpleNamespace(authorizer=standard((GROUP_TYPE, "a", "DESCRIBE"), (GROUP_TYPE, "c", "DESCRIBE"),
                                                (2, "t", "DESCRIBE"))))
    out = describe_groups(c, ["a", "b", "c"], describe, denied, lambda g: g.members[0].topics, True)
    assert asked == [["a", "c"]]
    assert [(g.group_id, g.error_code) for g in out] == [("a", 0), ("b", 30), ("c", 0)]
    assert out[0].authorized_operations == 1 << OPERATIONS["DESCRIBE"]
    # a group assigned a topic the caller may not describe: TOPIC_AUTHORIZATION_FAILED, nothing else
    out = describe_groups(c, ["a"], lambda ids: [_group("a", topics={"t", "secret"})], denied,
                          lambda g: g.members[0].topics, False)
    assert (out[0].error_code, out[0].authorized_operations, out[0].members[0].topics) == (29, -1, set())


def test_split_allowed_keeps_order_and_lets_unnamed_items_through():
    items = [("a", 1), (None, 2), ("b", 3), ("a", 4)]  # None: an unknown topic id
    for components in (SimpleNamespace(), SimpleNamespace(authorizer=standard((2, "a", "READ")))):
        kept, denied = split_allowed(ctx(components), "READ", "TOPIC", items, lambda i: i[0])
        if enabled(ctx(components)):
            assert (kept, denied) == ([("a", 1), (None, 2), ("a", 4)], [("b", 3)])
        else:
            assert (kept, denied) == (items, [])
