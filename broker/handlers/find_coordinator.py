"""FindCoordinator (10) v0-6: this broker coordinates every group, transaction and share key.

Key types GROUP (0), TRANSACTION (1) and SHARE (2, key ``group:topicId:partition``,
v6+).  An unknown key type or a malformed share key gets INVALID_REQUEST, an empty
group id INVALID_GROUP_ID (as Kafka).  Authorization comes first, as KafkaApis: DESCRIBE on
the GROUP (GROUP_AUTHORIZATION_FAILED), DESCRIBE on the TRANSACTIONAL_ID
(TRANSACTIONAL_ID_AUTHORIZATION_FAILED), CLUSTER_ACTION on the CLUSTER for share keys
(CLUSTER_AUTHORIZATION_FAILED).  The address is the listener the request came on.
"""
from __future__ import annotations

from broker.dispatch import handler
from broker.security.authorize import allowed, allowed_cluster
from protocol.errors import Errors
from protocol.lazy_messages import FindCoordinatorResponse
from protocol.messages.registry import ApiKey


def _check(ctx, key: str, key_type: int) -> int:
    if key_type == 0 and not allowed(ctx, "DESCRIBE", "GROUP", key):
        return Errors.GROUP_AUTHORIZATION_FAILED
    if key_type == 1 and not allowed(ctx, "DESCRIBE", "TRANSACTIONAL_ID", key):
        return Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    if key_type == 2 and not allowed_cluster(ctx, "CLUSTER_ACTION"):
        return Errors.CLUSTER_AUTHORIZATION_FAILED
    if key_type not in (0, 1, 2):
        return Errors.INVALID_REQUEST
    if key_type == 0 and not key:
        return Errors.INVALID_GROUP_ID
    if key_type == 2:
        parts = key.rsplit(":", 2)
        if len(parts) != 3 or not parts[0] or not parts[2].lstrip("-").isdigit():
            return Errors.INVALID_REQUEST
    return Errors.NONE


@handler(ApiKey.FIND_COORDINATOR, versions=(0, 6))
async def find_coordinator(ctx, req):
    c = ctx.components
    host, port = ctx.endpoint()  # the listener this request came on
    if ctx.api_version < 4:
        err = _check(ctx, req.key, req.key_type)
        if err:
            return FindCoordinatorResponse(error_code=err, node_id=-1, host="", port=-1)
        return FindCoordinatorResponse(node_id=c.node.node_id, host=host, port=port)
    out = []
    for key in req.coordinator_keys:
        err = _check(ctx, key, req.key_type)
        if err:
            out.append(FindCoordinatorResponse.Coordinator(key=key, node_id=-1, host="", port=-1, error_code=err))
        else:
            out.append(FindCoordinatorResponse.Coordinator(key=key, node_id=c.node.node_id, host=host, port=port))
    return FindCoordinatorResponse(coordinators=out)
