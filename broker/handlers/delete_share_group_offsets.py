"""DeleteShareGroupOffsets (92) v0: delete an empty share group's state for whole topics.

GROUP_ID_NOT_FOUND / NON_EMPTY_GROUP at the top level, UNKNOWN_TOPIC_OR_PARTITION per topic
(coordinator/group/share_offsets.py); afterwards ``share.auto.offset.reset`` applies again.
As KafkaApis: DELETE on the group (top level GROUP_AUTHORIZATION_FAILED), READ on each
topic (that topic TOPIC_AUTHORIZATION_FAILED, not deleted; the others proceed).
"""
from __future__ import annotations

from broker.dispatch import handler
from broker.security.authorize import TOPIC_AUTHORIZATION_MESSAGE, allowed, enabled, split_allowed
from protocol.errors import Errors
from protocol.lazy_messages import DeleteShareGroupOffsetsResponse as Resp
from protocol.messages.registry import ApiKey
from protocol.primitives import ZERO_UUID


@handler(ApiKey.DELETE_SHARE_GROUP_OFFSETS, versions=(0, 0))
async def delete_share_group_offsets(ctx, req):
    groups = ctx.components.groups
    if not enabled(ctx):
        return await groups.delete_share_group_offsets(req, ctx.api_version)
    if not allowed(ctx, "DELETE", "GROUP", req.group_id):
        return Resp(error_code=Errors.GROUP_AUTHORIZATION_FAILED)
    req.topics, unreadable = split_allowed(ctx, "READ", "TOPIC", req.topics, lambda t: t.topic_name)
    denied = [Resp.DeleteShareGroupOffsetsResponseTopic(
        topic_name=t.topic_name, topic_id=ZERO_UUID, error_code=Errors.TOPIC_AUTHORIZATION_FAILED,
        error_message=TOPIC_AUTHORIZATION_MESSAGE) for t in unreadable]
    resp = await groups.delete_share_group_offsets(req, ctx.api_version)
    if not resp.error_code:
        resp.responses = denied + resp.responses
    return resp
