"""DescribeAcls (29) v1-3: the ACL bindings matching a filter, grouped by resource pattern.

DESCRIBE on CLUSTER or CLUSTER_AUTHORIZATION_FAILED; without an authorizer
SECURITY_DISABLED; a filter with UNKNOWN elements INVALID_REQUEST.  Pattern type
MATCH finds the bindings that apply to the named resource (LITERAL same name,
LITERAL ``*``, PREFIXED prefixes of it), ANY every pattern type with that name.
"""
from __future__ import annotations

from broker.dispatch import handler
from broker.security.acls import AclFilter
from broker.security.authorize import allowed_cluster
from protocol.errors import Errors
from protocol.lazy_messages import DescribeAclsResponse
from protocol.messages.registry import ApiKey


def filter_problem(f: AclFilter) -> str | None:
    """Why Kafka refuses a DescribeAcls / DeleteAcls filter (UNKNOWN or out-of-range elements)."""
    if not (1 <= f.resource_type <= 7 and 1 <= f.pattern_type <= 4 and 1 <= f.operation <= 15
            and 1 <= f.permission_type <= 3):
        return "The filter must not contain UNKNOWN elements"
    return None


@handler(ApiKey.DESCRIBE_ACLS, versions=(1, 3))
async def describe_acls(ctx, req):
    if not allowed_cluster(ctx, "DESCRIBE"):
        return DescribeAclsResponse(error_code=Errors.CLUSTER_AUTHORIZATION_FAILED, error_message=None, resources=[])
    store = ctx.components.security.acls
    if store is None:
        return DescribeAclsResponse(error_code=Errors.SECURITY_DISABLED,  # Kafka's words (AclApis)
                                    error_message="No Authorizer is configured on the broker", resources=[])
    f = AclFilter(req.resource_type_filter, req.resource_name_filter, req.pattern_type_filter, req.principal_filter,
                  req.host_filter, req.operation, req.permission_type)
    problem = filter_problem(f)
    if problem:
        return DescribeAclsResponse(error_code=Errors.INVALID_REQUEST, error_message=problem, resources=[])
    groups: dict[tuple, list] = {}
    for b in store.matching(f):
        groups.setdefault((b.resource_type, b.resource_name, b.pattern_type), []).append(
            DescribeAclsResponse.AclDescription(principal=b.principal, host=b.host, operation=b.operation,
                                                permission_type=b.permission_type))
    return DescribeAclsResponse(error_message="", resources=[  # Kafka leaves the field at its default, ""
        DescribeAclsResponse.DescribeAclsResource(resource_type=rt, resource_name=name, pattern_type=pt, acls=acls)
        for (rt, name, pt), acls in groups.items()])
