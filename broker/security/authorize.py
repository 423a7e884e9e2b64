"""What handlers call to authorize per resource, as KafkaApis / AuthHelper do.

Every helper asks ``ctx.components.authorizer`` with the request's principal and client
host; without an authorizer (``AllowAll``) they answer "allowed" at once, so a broker
without ``authorizer.class.name`` pays one attribute test.

    if not allowed(ctx, "READ", "TOPIC", name): ... Errors.TOPIC_AUTHORIZATION_FAILED
    req.topics, denied = split_allowed(ctx, "READ", "TOPIC", req.topics, lambda t: t.name)
"""
from __future__ import annotations

from broker.security.acls import CLUSTER_NAME, OPERATIONS, SUPPORTED_OPERATIONS
from protocol.errors import Errors

# the bit sets an authorizer-less broker returns when asked (every supported operation)
ALL_OPERATIONS = {rtype: sum(1 << OPERATIONS[op] for op in ops) for rtype, ops in SUPPORTED_OPERATIONS.items()}
UNSET = -2147483648


def authorizer(ctx):
    """The configured authorizer, or None: no ``authorizer.class.name`` (``AllowAll``), or components
    without one at all (unit tests that hand a handler a bare coordinator)."""
    a = getattr(ctx.components, "authorizer", None)
    return a if a is not None and a.enabled else None


def enabled(ctx) -> bool:
    """Whether an authorizer is configured: handlers skip all authorization work when it is not."""
    return authorizer(ctx) is not None


def allowed(ctx, operation: str, resource_type: str, name: str) -> bool:
    a = authorizer(ctx)
    return a is None or a.allowed(ctx.principal, operation, resource_type, name, ctx.host)


def allowed_cluster(ctx, operation: str) -> bool:
    return allowed(ctx, operation, "CLUSTER", CLUSTER_NAME)


def allowed_any(ctx, operation: str, resource_type: str) -> bool:
    """Kafka's ``authorizeByResourceType``: allowed on at least one resource of the type."""
    a = authorizer(ctx)
    return a is None or a.allowed_any(ctx.principal, operation, resource_type, ctx.host)


def filter_allowed(ctx, operation: str, resource_type: str, names) -> set:
    """The names among ``names`` the principal may ``operation`` (AuthHelper.filterByAuthorized)."""
    a = authorizer(ctx)
    if a is None:
        return set(names)
    return {n for n in set(names) if a.allowed(ctx.principal, operation, resource_type, n, ctx.host)}


def split_allowed(ctx, operation: str, resource_type: str, items, name) -> tuple[list, list]:
    """``items`` split, in order, into those allowed and those denied by ``name(item)``
    (AuthHelper.partitionSeqByAuthorized); an item whose name is None (an unknown topic id) counts
    as allowed: it keeps the answer it gets without an authorizer."""
    names = [name(i) for i in items]
    ok = filter_allowed(ctx, operation, resource_type, [n for n in names if n is not None])
    kept, denied = [], []
    for item, n in zip(items, names):
        (kept if n is None or n in ok else denied).append(item)
    return kept, denied


def subscription_error(ctx, group_id: str, topics) -> int:
    """Share/ConsumerGroupHeartbeat: READ on the group, DESCRIBE on each subscribed topic; 0 or the error."""
    if not allowed(ctx, "READ", "GROUP", group_id):
        return Errors.GROUP_AUTHORIZATION_FAILED
    if topics and len(filter_allowed(ctx, "DESCRIBE", "TOPIC", topics)) < len(set(topics)):
        return Errors.TOPIC_AUTHORIZATION_FAILED
    return Errors.NONE


def operations(ctx, resource_type: str, name: str) -> int:
    """The authorized-operations bit set of a resource (every supported one without an authorizer)."""
    a = authorizer(ctx)
    if a is None:
        return ALL_OPERATIONS[resource_type]
    return a.operations(ctx.principal, resource_type, name, ctx.host)


def topic_name(ctx, topic_id: bytes) -> str | None:
    """The name of a topic id (share and v10+ offset RPCs address topics by id); None when unknown."""
    info = ctx.components.logs.topic_by_id(topic_id)
    return None if info is None else info.name


# Kafka's Errors.TOPIC_AUTHORIZATION_FAILED message, for answers that carry one
TOPIC_AUTHORIZATION_MESSAGE = "Topic authorization failed."
# KafkaApis' message for a described group assigned topics the caller may not describe
UNDESCRIBABLE_TOPICS = "The group has described topic(s) that the client is not authorized to describe."


def describe_groups(ctx, group_ids, describe, denied, assigned_topics, include_operations: bool) -> list:
    """ShareGroupDescribe / ConsumerGroupDescribe as KafkaApis answers them: DESCRIBE on each group
    (else an entry that discloses nothing, and the coordinator is not asked about the group), the
    group's authorized operations when asked, and TOPIC_AUTHORIZATION_FAILED without members for a
    group whose members are assigned a topic the caller may not describe.  ``denied(group_id)``
    builds an empty entry with GROUP_AUTHORIZATION_FAILED; ``describe(ids)`` answers one described
    group per id, in order; ``assigned_topics(group)`` names the topics of its members' assignments."""
    group_ids = list(group_ids)
    if not enabled(ctx):
        groups = describe(group_ids)
        if include_operations:
            for g in groups:
                if not g.error_code:
                    g.authorized_operations = ALL_OPERATIONS["GROUP"]
        return groups
    ok = filter_allowed(ctx, "DESCRIBE", "GROUP", group_ids)
    described = iter(describe([gid for gid in group_ids if gid in ok]))
    out = []
    for gid in group_ids:
        if gid not in ok:
            out.append(denied(gid))
            continue
        g = next(described)
        if not g.error_code:
            if include_operations:
                g.authorized_operations = operations(ctx, "GROUP", gid)
            names = assigned_topics(g)
            if len(filter_allowed(ctx, "DESCRIBE", "TOPIC", names)) < len(names):
                g = denied(gid)  # a fresh entry: nothing of the group is disclosed
                g.error_code, g.error_message = 29, UNDESCRIBABLE_TOPICS  # TOPIC_AUTHORIZATION_FAILED
        out.append(g)
    return out


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


def share_state_denied(ctx, req, resp_cls, result_cls):
    """The five share-state RPCs are broker-to-broker: without CLUSTER_ACTION on the CLUSTER every
    partition of the request is answered CLUSTER_AUTHORIZATION_FAILED (KafkaApis'
    ``toGlobalErrorResponse``); None when allowed (and always without an authorizer)."""
    if allowed_cluster(ctx, "CLUSTER_ACTION"):
        return None
    return resp_cls(results=[result_cls(topic_id=t.topic_id, partitions=[
        resp_cls.PartitionResult(partition=p.partition, error_code=31, error_message="Cluster authorization failed.")
        for p in t.partitions]) for t in req.topics])
