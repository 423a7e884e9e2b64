"""DescribeCluster (60) v0-2: one broker, which is also the controller.

The cluster's authorized operations when asked: the principal's, or 0 without DESCRIBE on
the CLUSTER (AuthHelper.computeDescribeClusterResponse); every one without an authorizer.
The broker's address is the listener the request came on.
"""
from __future__ import annotations

from broker.dispatch import handler
from broker.handlers.metadata import cluster_operations
from broker.security.authorize import UNSET
from protocol.errors import Errors
from protocol.lazy_messages import DescribeClusterResponse
from protocol.messages.registry import ApiKey


@handler(ApiKey.DESCRIBE_CLUSTER, versions=(0, 2))
async def describe_cluster(ctx, req):
    c = ctx.components
    host, port = ctx.endpoint()  # the listener this request came on
    if ctx.api_version >= 1 and req.endpoint_type not in (1, 2):
        return DescribeClusterResponse(error_code=Errors.UNSUPPORTED_ENDPOINT_TYPE,
                                       endpoint_type=req.endpoint_type, cluster_id=c.node.cluster_id)
    return DescribeClusterResponse(
        endpoint_type=req.endpoint_type if ctx.api_version >= 1 else 1,
        cluster_id=c.node.cluster_id, controller_id=c.node.node_id,
        cluster_authorized_operations=cluster_operations(ctx) if req.include_cluster_authorized_operations else UNSET,
        brokers=[DescribeClusterResponse.DescribeClusterBroker(
            broker_id=c.node.node_id, host=host, port=port)])
