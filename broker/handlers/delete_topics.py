"""DeleteTopics (20) v1-6: by name, or by id from v6.

Unknown names get UNKNOWN_TOPIC_OR_PARTITION, unknown ids UNKNOWN_TOPIC_ID, an entry
with both a name and an id INVALID_REQUEST, everything TOPIC_DELETION_DISABLED when
``delete.topic.enable`` is false.  The internal topics are refused with
INVALID_TOPIC_EXCEPTION.
"""
from __future__ import annotations

from broker.dispatch import handler
from broker.log.errors import LogError
from protocol.errors import Errors
from protocol.messages.delete_topics import DeleteTopicsResponse
from protocol.messages.registry import ApiKey
from protocol.primitives import ZERO_UUID

_R = DeleteTopicsResponse.DeletableTopicResult


@handler(ApiKey.DELETE_TOPICS, versions=(1, 6))
async def delete_topics(ctx, req):
    c = ctx.components
    if ctx.api_version >= 6:
        wanted = [(t.name, t.topic_id) for t in req.topics]
    else:
        wanted = [(n, ZERO_UUID) for n in req.topic_names]
    out = []
    for name, tid in wanted:
        if name is not None and tid != ZERO_UUID:
            out.append(_R(name=name, topic_id=tid, error_code=Errors.INVALID_REQUEST,
                          error_message="Topic name and topic id cannot both be set"))
            continue
        info = c.logs.topic(name) if name is not None else c.logs.topic_by_id(tid)
        if info is None:
            code = Errors.UNKNOWN_TOPIC_ID if name is None else Errors.UNKNOWN_TOPIC_OR_PARTITION
            out.append(_R(name=name, topic_id=tid, error_code=code))
            continue
        if not c.config.get_bool("delete.topic.enable", True):
            out.append(_R(name=info.name, topic_id=info.topic_id.bytes, error_code=Errors.TOPIC_DELETION_DISABLED))
            continue
        if c.topics.is_internal(info.name):
            out.append(_R(name=info.name, topic_id=info.topic_id.bytes, error_code=Errors.INVALID_TOPIC_EXCEPTION,
                          error_message=f"Internal topic {info.name} cannot be deleted"))
            continue
        try:
            c.topics.delete(info.name)
            out.append(_R(name=info.name, topic_id=info.topic_id.bytes))
        except LogError as e:
            out.append(_R(name=info.name, topic_id=info.topic_id.bytes, error_code=e.code, error_message=str(e)))
    return DeleteTopicsResponse(responses=out)
