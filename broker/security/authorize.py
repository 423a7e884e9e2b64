"""What handlers call to authorize per resource, as KafkaApis / AuthHelper do.

Every helper asks ``ctx.components.authorizer`` with the request's principal and client
host; without an authorizer (``AllowAll``) they answer "allowed" at once, so a broker
without ``authorizer.class.name`` pays one attribute test.

    if not allowed(ctx, READ, TOPIC, name): ... Errors.TOPIC_AUTHORIZATION_FAILED
    code = authorize_or(ctx, READ, GROUP, group_id, Errors.GROUP_AUTHORIZATION_FAILED)  # 0 when allowed
"""
from __future__ import annotations

from broker.security.acls import CLUSTER_NAME, OPERATIONS, SUPPORTED_OPERATIONS

# the bit sets an authorizer-less broker returns when asked (every supported operation)
ALL_OPERATIONS = {rtype: sum(1 << OPERATIONS[op] for op in ops) for rtype, ops in SUPPORTED_OPERATIONS.items()}
UNSET = -2147483648


def allowed(ctx, operation: str, resource_type: str, name: str) -> bool:
    a = ctx.components.authorizer
    if not a.enabled:
        return True
    return a.allowed(ctx.principal, operation, resource_type, name, ctx.host)


def allowed_cluster(ctx, operation: str) -> bool:
    return allowed(ctx, operation, "CLUSTER", CLUSTER_NAME)


def authorize_or(ctx, operation: str, resource_type: str, name: str, error: int) -> int:
    """0 when allowed, else ``error`` (e.g. Errors.GROUP_AUTHORIZATION_FAILED)."""
    return 0 if allowed(ctx, operation, resource_type, name) else error


def allowed_any(ctx, operation: str, resource_type: str) -> bool:
    """Kafka's ``authorizeByResourceType``: allowed on at least one resource of the type."""
    a = ctx.components.authorizer
    return not a.enabled or a.allowed_any(ctx.principal, operation, resource_type, ctx.host)


def filter_allowed(ctx, operation: str, resource_type: str, names) -> set:
    """The names among ``names`` the principal may ``operation`` (AuthHelper.filterByAuthorized)."""
    a = ctx.components.authorizer
    if not a.enabled:
        return set(names)
    return {n for n in names if a.allowed(ctx.principal, operation, resource_type, n, ctx.host)}


def operations(ctx, resource_type: str, name: str) -> int:
    """The authorized-operations bit set of a resource (every supported one without an authorizer)."""
    a = ctx.components.authorizer
    if not a.enabled:
        return ALL_OPERATIONS[resource_type]
    return a.operations(ctx.principal, resource_type, name, ctx.host)


# ConfigResource.Type codes -> (ACL resource type, its name or None for the resource's own, error)
_CONFIG_RESOURCES = {2: ("TOPIC", None, 29), 4: ("CLUSTER", CLUSTER_NAME, 31), 8: ("CLUSTER", CLUSTER_NAME, 31),
                     16: ("CLUSTER", CLUSTER_NAME, 31), 32: ("GROUP", None, 30)}


def config_resource_error(ctx, resource_type: int, name: str, operation: str) -> int:
    """DescribeConfigs (DESCRIBE_CONFIGS) / IncrementalAlterConfigs (ALTER_CONFIGS) on one config
    resource: 0, or TOPIC_ / CLUSTER_ / GROUP_AUTHORIZATION_FAILED as KafkaApis / AuthHelper answer."""
    entry = _CONFIG_RESOURCES.get(resource_type)
    if entry is None:
        return 0  # not a resource type we serve: the handler's own error
    acl_type, fixed, error = entry
    return 0 if allowed(ctx, operation, acl_type, fixed or name) else error
