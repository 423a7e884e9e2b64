"""CreateAcls (30) v1-3: add ACL bindings (``broker.security.acls``), persisted and applied at once.

As Kafka's AclApis: ALTER on CLUSTER or CLUSTER_AUTHORIZATION_FAILED for every
creation; without an authorizer SECURITY_DISABLED ("No Authorizer is configured.");
an invalid binding (resource type, pattern type LITERAL/PREFIXED only, operation,
permission, empty name, a CLUSTER name other than ``kafka-cluster``, a principal
without ``type:``) is INVALID_REQUEST with Kafka's message.  Existing bindings are
kept (creating one twice succeeds).
"""
from __future__ import annotations

from broker.dispatch import handler
from broker.security.acls import AclBinding, validate_binding
from broker.security.authorize import allowed_cluster
from protocol.errors import Errors
from protocol.lazy_messages import CreateAclsResponse
from protocol.messages.registry import ApiKey

_R = CreateAclsResponse.AclCreationResult


@handler(ApiKey.CREATE_ACLS, versions=(1, 3))
async def create_acls(ctx, req):
    n = len(req.creations)
    if not allowed_cluster(ctx, "ALTER"):
        return CreateAclsResponse(results=[_R(error_code=Errors.CLUSTER_AUTHORIZATION_FAILED,
                                              error_message=None) for _ in range(n)])
    store = ctx.components.security.acls
    if store is None:
        return CreateAclsResponse(results=[_R(error_code=Errors.SECURITY_DISABLED,
                                              error_message="No Authorizer is configured.") for _ in range(n)])
    results, valid = [], []
    for c in req.creations:
        b = AclBinding(c.resource_type, c.resource_name, c.resource_pattern_type, c.principal, c.host,
                       c.operation, c.permission_type)
        problem = validate_binding(b)
        if problem:
            results.append(_R(error_code=Errors.INVALID_REQUEST, error_message=problem))
        else:
            valid.append(b)
            results.append(_R(error_code=Errors.NONE, error_message=None))
    if valid:
        store.add(valid)
    return CreateAclsResponse(results=results)
