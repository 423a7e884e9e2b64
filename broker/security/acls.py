"""ACLs and Kafka's StandardAuthorizer semantics.

An ACL binding is (resource type, resource name, pattern type, principal, host,
operation, permission type), with Kafka's wire codes.  ``AclStore`` keeps them in
``<data>/meta/acls.json`` (atomically replaced) and indexes them per resource type.
``StandardAuthorizer`` decides as ``org.apache.kafka.metadata.authorizer.StandardAuthorizerData``:

- ``super.users`` (``User:a;User:b``) are allowed everything;
- the ACLs that apply to a resource are the LITERAL ones with its name, the LITERAL
  ``*`` ones and the PREFIXED ones whose name starts the resource's; of these, those
  whose principal is the caller's or ``User:*`` and whose host is the client's, ``*``
  or a CIDR block holding it (KIP-1276, metadata.version 4.4-IV1);
- a DENY for the operation (or ALL) wins; else an ALLOW for it (or ALL) allows, where
  an ALLOW of READ, WRITE, DELETE or ALTER also allows DESCRIBE and an ALLOW of
  ALTER_CONFIGS allows DESCRIBE_CONFIGS (DENYs imply nothing);
- no ACL at all on the resource: ``allow.everyone.if.no.acl.found`` (default false).

Decisions are cached per (principal, host, operation, resource type, name); the cache
is dropped whenever the ACLs change, so an authorized request pays one dict lookup.
``allowed_any`` is the ``authorizeByResourceType`` default of Kafka's Authorizer
interface (idempotent producers with WRITE on some topic).
"""
from __future__ import annotations

import functools
import ipaddress
import json
import os
from typing import Iterable, NamedTuple

from broker.pipeline import Authorizer

# org.apache.kafka.common.resource.ResourceType / PatternType, common.acl.AclOperation / AclPermissionType
RESOURCE_TYPES = {"UNKNOWN": 0, "ANY": 1, "TOPIC": 2, "GROUP": 3, "CLUSTER": 4, "TRANSACTIONAL_ID": 5,
                  "DELEGATION_TOKEN": 6, "USER": 7}
PATTERN_TYPES = {"UNKNOWN": 0, "ANY": 1, "MATCH": 2, "LITERAL": 3, "PREFIXED": 4}
OPERATIONS = {"UNKNOWN": 0, "ANY": 1, "ALL": 2, "READ": 3, "WRITE": 4, "CREATE": 5, "DELETE": 6, "ALTER": 7,
              "DESCRIBE": 8, "CLUSTER_ACTION": 9, "DESCRIBE_CONFIGS": 10, "ALTER_CONFIGS": 11,
              "IDEMPOTENT_WRITE": 12, "CREATE_TOKENS": 13, "DESCRIBE_TOKENS": 14, "TWO_PHASE_COMMIT": 15}
PERMISSIONS = {"UNKNOWN": 0, "ANY": 1, "DENY": 2, "ALLOW": 3}
ANY, MATCH, LITERAL, PREFIXED = 1, 2, 3, 4
ALL, DESCRIBE, DESCRIBE_CONFIGS = 2, 8, 10
DENY, ALLOW = 2, 3
WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"
CLUSTER_NAME = "kafka-cluster"
_IMPLIES_DESCRIBE = frozenset({8, 3, 4, 6, 7})
_IMPLIES_DESCRIBE_CONFIGS = frozenset({10, 11})

# The operations each resource type supports (authorized-operation bit sets), as Kafka lists them.
SUPPORTED_OPERATIONS = {
    "TOPIC": ("READ", "WRITE", "CREATE", "DESCRIBE", "DELETE", "ALTER", "DESCRIBE_CONFIGS", "ALTER_CONFIGS"),
    "GROUP": ("READ", "DESCRIBE", "DELETE", "DESCRIBE_CONFIGS", "ALTER_CONFIGS"),
    "CLUSTER": ("CREATE", "CLUSTER_ACTION", "DESCRIBE_CONFIGS", "ALTER_CONFIGS", "IDEMPOTENT_WRITE", "ALTER",
                "DESCRIBE"),
    "TRANSACTIONAL_ID": ("DESCRIBE", "WRITE", "TWO_PHASE_COMMIT"),
}


class AclBinding(NamedTuple):
    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission_type: int


class AclFilter(NamedTuple):
    """DescribeAcls / DeleteAcls filter; ``None`` strings match anything."""

    resource_type: int
    resource_name: str | None
    pattern_type: int
    principal: str | None
    host: str | None
    operation: int
    permission_type: int

    def matches(self, b: AclBinding) -> bool:
        if self.resource_type != ANY and self.resource_type != b.resource_type:
            return False
        pt = self.pattern_type
        if pt not in (ANY, MATCH) and pt != b.pattern_type:
            return False
        name = self.resource_name
        if name is not None:
            if pt == ANY or pt == b.pattern_type:
                if name != b.resource_name:
                    return False
            elif b.pattern_type == LITERAL:
                if name != b.resource_name and b.resource_name != WILDCARD:
                    return False
            elif not name.startswith(b.resource_name):  # PREFIXED under MATCH
                return False
        return ((self.principal is None or self.principal == b.principal)
                and (self.host is None or self.host == b.host)
                and (self.operation == ANY or self.operation == b.operation)
                and (self.permission_type == ANY or self.permission_type == b.permission_type))


def validate_binding(b: AclBinding) -> str | None:
    """Why Kafka refuses to create this binding (AclControlManager / AclApis), or None."""
    if b.resource_type not in (2, 3, 4, 5, 6, 7):
        return f"Invalid resourceType {b.resource_type}"
    if b.pattern_type not in (LITERAL, PREFIXED):
        return f"Invalid patternType {b.pattern_type}"
    if b.operation not in range(2, 16):
        return f"Invalid operation {b.operation}"
    if b.permission_type not in (DENY, ALLOW):
        return f"Invalid permissionType {b.permission_type}"
    if not b.resource_name:
        return "Resource name should not be empty"
    if b.resource_type == 4 and b.resource_name != CLUSTER_NAME:
        return "The only valid name for the CLUSTER resource is kafka-cluster"
    if ":" not in (b.principal or ""):
        return (f"Could not parse principal from `{b.principal}` (no colon is present separating the principal "
                f"type from the principal name)")
    if b.host is None or b.host == "":
        return "Invalid host"
    if "/" in b.host and b.host != WILDCARD:  # KIP-1276 (metadata.version 4.4-IV1+): AclControlManager
        try:
            ipaddress.ip_network(b.host, strict=False)
        except ValueError as e:
            return f"Invalid CIDR notation '{b.host}': {e}"
    return None


@functools.lru_cache(maxsize=1024)
def _host_matches(pattern: str, host: str) -> bool:
    """An ACL's host: ``*``, the client's address, or (KIP-1276) a CIDR block holding it."""
    if pattern == WILDCARD or pattern == host:
        return True
    if "/" not in pattern:
        return False
    try:
        return ipaddress.ip_address(host) in ipaddress.ip_network(pattern, strict=False)
    except ValueError:
        return False


class AclStore:
    """Every ACL binding, persisted; indexed by resource type for the authorizer."""

    FILE = "acls.json"

    def __init__(self, meta_dir: str | None, background=None):
        self._path = os.path.join(meta_dir, self.FILE) if meta_dir else None
        self.background = background
        self.bindings: dict[AclBinding, None] = {}  # insertion-ordered set
        self._listeners: list = []
        if self._path and os.path.exists(self._path):
            with open(self._path) as f:
                for row in json.load(f):
                    self.bindings[AclBinding(*row)] = None
        self._reindex()

    def on_change(self, fn) -> None:
        self._listeners.append(fn)

    def _reindex(self) -> None:
        # resource type -> (literal name -> [acl], prefixed [acl])
        index: dict[int, tuple[dict[str, list[AclBinding]], list[AclBinding]]] = {}
        for b in self.bindings:
            literal, prefixed = index.setdefault(b.resource_type, ({}, []))
            if b.pattern_type == LITERAL:
                literal.setdefault(b.resource_name, []).append(b)
            else:
                prefixed.append(b)
        self.index = index

    def _changed(self) -> None:
        self._reindex()
        if self._path is not None:
            from broker.log.files import atomic_write

            atomic_write(self._path, json.dumps([list(b) for b in self.bindings]).encode(), self.background)
        for fn in self._listeners:
            fn()

    def add(self, bindings: Iterable[AclBinding]) -> None:
        for b in bindings:
            self.bindings[b] = None
        self._changed()

    def matching(self, f: AclFilter) -> list[AclBinding]:
        return [b for b in self.bindings if f.matches(b)]

    def delete(self, filters: list[AclFilter]) -> list[list[AclBinding]]:
        """Remove what each filter matches; returns the matches per filter."""
        out = [self.matching(f) for f in filters]
        gone = {b for m in out for b in m}
        if gone:
            for b in gone:
                self.bindings.pop(b, None)
            self._changed()
        return out

    def applicable(self, resource_type: int, name: str) -> list[AclBinding]:
        """The ACLs whose pattern covers this resource (any principal, host, operation)."""
        entry = self.index.get(resource_type)
        if entry is None:
            return []
        literal, prefixed = entry
        out = list(literal.get(name, ()))
        if name != WILDCARD:
            out += literal.get(WILDCARD, ())
        out += [b for b in prefixed if name.startswith(b.resource_name)]
        return out


def _result(b: AclBinding, principal: str, host: str, op: int) -> int:
    """StandardAuthorizerData.findResult: ALLOW / DENY, or 0 when the ACL does not apply."""
    if b.principal != principal and b.principal != WILDCARD_PRINCIPAL:
        return 0
    if not _host_matches(b.host, host):
        return 0
    if b.operation != ALL:
        if b.permission_type == ALLOW:
            if op == DESCRIBE:
                if b.operation not in _IMPLIES_DESCRIBE:
                    return 0
            elif op == DESCRIBE_CONFIGS:
                if b.operation not in _IMPLIES_DESCRIBE_CONFIGS:
                    return 0
            elif op != b.operation:
                return 0
        elif op != b.operation:
            return 0
    return b.permission_type


def parse_super_users(value: str | None) -> frozenset[str]:
    return frozenset(p.strip() for p in (value or "").split(";") if p.strip())


class StandardAuthorizer(Authorizer):
    """``authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer``."""

    CACHE_LIMIT = 100_000

    def __init__(self, store: AclStore, super_users: frozenset[str] = frozenset(), allow_if_no_acl: bool = False):
        self.store = store
        self.super_users = super_users
        self.allow_if_no_acl = allow_if_no_acl
        self._cache: dict[tuple, bool] = {}
        store.on_change(self._cache.clear)

    def authorize(self, ctx, acl) -> bool:
        """A handler's declared ``acl``: CLUSTER operations on the cluster, others on some resource of the type."""
        host = ctx.connection.host if ctx.connection is not None else "*"
        for a in acl:
            if a.resource_type == "CLUSTER":
                if not self.allowed(ctx.principal, a.operation, "CLUSTER", CLUSTER_NAME, host):
                    return False
            elif not self.allowed_any(ctx.principal, a.operation, a.resource_type, host):
                return False
        return True

    def allowed(self, principal: str, operation: str, resource_type: str, name: str, host: str = "*") -> bool:
        key = (principal, host, operation, resource_type, name)
        r = self._cache.get(key)
        if r is None:
            r = self._decide(principal, host, OPERATIONS[operation], RESOURCE_TYPES[resource_type], name)
            if len(self._cache) >= self.CACHE_LIMIT:
                self._cache.clear()
            self._cache[key] = r
        return r

    def _decide(self, principal: str, host: str, op: int, rtype: int, name: str) -> bool:
        if principal in self.super_users:
            return True
        found = allow = False
        for b in self.store.applicable(rtype, name):
            found = True
            r = _result(b, principal, host, op)
            if r == DENY:
                return False
            if r == ALLOW:
                allow = True
        return allow or (not found and self.allow_if_no_acl)

    def allowed_any(self, principal: str, operation: str, resource_type: str, host: str = "*") -> bool:
        """Authorizer.authorizeByResourceType (Kafka's default implementation)."""
        if self.allowed(principal, operation, resource_type, "hardcode", host):
            return True
        op, rtype = OPERATIONS[operation], RESOURCE_TYPES[resource_type]
        deny_literal, deny_prefixed, allow_literal, allow_prefixed = set(), set(), set(), set()
        wildcard_allow = False
        for b in self.store.bindings:
            if b.resource_type != rtype or (b.host != host and b.host != WILDCARD):
                continue
            if b.principal != principal and b.principal != WILDCARD_PRINCIPAL:
                continue
            if b.operation != op and b.operation != ALL:
                continue
            if b.permission_type == DENY:
                if b.pattern_type == LITERAL:
                    if b.resource_name == WILDCARD:
                        return False
                    deny_literal.add(b.resource_name)
                else:
                    deny_prefixed.add(b.resource_name)
            elif b.permission_type == ALLOW:
                if b.pattern_type == LITERAL:
                    if b.resource_name == WILDCARD:
                        wildcard_allow = True
                        continue
                    allow_literal.add(b.resource_name)
                else:
                    allow_prefixed.add(b.resource_name)
        if wildcard_allow:
            return True
        for literal, names in ((True, allow_literal), (False, allow_prefixed)):
            for name in names:
                if literal and name in deny_literal:
                    continue
                if not any(name[:i] in deny_prefixed for i in range(1, len(name) + 1)):
                    return True
        return False

    def operations(self, principal: str, resource_type: str, name: str, host: str = "*") -> int:
        """The authorized-operations bit set Kafka returns for a resource."""
        return sum(1 << OPERATIONS[op] for op in SUPPORTED_OPERATIONS[resource_type]
                   if self.allowed(principal, op, resource_type, name, host))
