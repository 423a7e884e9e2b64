"""DeleteAcls (31) v1-3: remove the ACL bindings each filter matches; they stop applying at once.

ALTER on CLUSTER or CLUSTER_AUTHORIZATION_FAILED for every filter; without an
authorizer SECURITY_DISABLED; a filter with UNKNOWN elements INVALID_REQUEST.  Each
filter's result lists the bindings it removed (filters match as in DescribeAcls).
"""
from __future__ import annotations

from broker.dispatch import handler
from broker.handlers.describe_acls import filter_problem
from broker.security.acls import AclFilter
from broker.security.authorize import allowed_cluster
from protocol.errors import Errors
from protocol.lazy_messages import DeleteAclsResponse
from protocol.messages.registry import ApiKey

_R = DeleteAclsResponse.DeleteAclsFilterResult
_M = DeleteAclsResponse.DeleteAclsMatchingAcl


@handler(ApiKey.DELETE_ACLS, versions=(1, 3))
async def delete_acls(ctx, req):
    n = len(req.filters)
    if not allowed_cluster(ctx, "ALTER"):
        return DeleteAclsResponse(filter_results=[_R(error_code=Errors.CLUSTER_AUTHORIZATION_FAILED, error_message=None,
                                                     matching_acls=[]) for _ in range(n)])
    store = ctx.components.security.acls
    if store is None:
        return DeleteAclsResponse(filter_results=[_R(error_code=Errors.SECURITY_DISABLED, matching_acls=[],
                                                     error_message="No Authorizer is configured.") for _ in range(n)])
    filters, slots, results = [], [], []
    for x in req.filters:
        f = AclFilter(x.resource_type_filter, x.resource_name_filter, x.pattern_type_filter, x.principal_filter,
                      x.host_filter, x.operation, x.permission_type)
        problem = filter_problem(f)
        if problem:
            results.append(_R(error_code=Errors.INVALID_REQUEST, error_message=problem, matching_acls=[]))
        else:
            slots.append(len(results))
            filters.append(f)
            results.append(None)
    for i, matched in zip(slots, store.delete(filters)):
        results[i] = _R(error_code=Errors.NONE, error_message=None, matching_acls=[
            _M(error_code=Errors.NONE, error_message=None, resource_type=b.resource_type, resource_name=b.resource_name,
               pattern_type=b.pattern_type, principal=b.principal, host=b.host, operation=b.operation,
               permission_type=b.permission_type) for b in matched])
    return DeleteAclsResponse(filter_results=results)
