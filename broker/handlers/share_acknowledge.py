"""ShareAcknowledge (79) v1-2: acknowledge records outside a fetch (explicit mode, commit, close).

It cannot open a share session (epoch 0 -> INVALID_SHARE_SESSION_EPOCH); with the
final epoch (-1) it applies the acknowledgements, closes the session and releases
the member's remaining records.  Batches are validated as for ShareFetch; an
invalid partition gets INVALID_REQUEST.  Acknowledgements are persisted through
the share coordinator before the answer says they succeeded.  v2 adds
IsRenewAck (RENEW, type 4, extends the locks when the group allows renewals) and
AcquisitionLockTimeoutMs.
This handler checks GroupId/MemberId and the batches and builds the response; the
session and the acknowledgements are the share-partition manager's
(``SharePartitionManager.acknowledge``, broker/share/manager.py).
With an authorizer, as KafkaApis (KIP-932): READ on the group (GROUP_AUTHORIZATION_FAILED)
and READ on each partition's topic (TOPIC_AUTHORIZATION_FAILED, its acknowledgements not
applied).
"""
from __future__ import annotations

import logging

from broker.dispatch import handler
from broker.handlers.share_fetch import by_topic, merge_topics, unreadable
from broker.security.authorize import allowed, enabled
from broker.share.errors import ShareError
from broker.share.acks import validate_ack_batches
from protocol.errors import Errors
from protocol.lazy_messages import ShareAcknowledgeResponse  # the real class once ShareAcknowledge is first served
from protocol.messages.registry import ApiKey

log = logging.getLogger("sharebroker.share")
_T = ShareAcknowledgeResponse.ShareAcknowledgeTopicResponse
_P = ShareAcknowledgeResponse.PartitionData
_L = ShareAcknowledgeResponse.LeaderIdAndEpoch


@handler(ApiKey.SHARE_ACKNOWLEDGE, versions=(1, 2))
async def share_acknowledge(ctx, req):
    group, member = req.group_id, req.member_id
    if not group or not member:
        return ShareAcknowledgeResponse(error_code=Errors.INVALID_REQUEST,
                                        error_message="GroupId and MemberId must be set")
    if log.isEnabledFor(logging.DEBUG):
        log.debug("ShareAcknowledge v%d %s/%s epoch %d acks %s", ctx.api_version, group, member,
                  req.share_session_epoch,
                  [(p.partition_index, [(a.first_offset, a.last_offset, list(a.acknowledge_types))
                                        for a in p.acknowledgement_batches]) for t in req.topics for p in t.partitions])
    acks = merge_topics(req.topics)
    denied: set = set()
    if enabled(ctx):
        if not allowed(ctx, "READ", "GROUP", group):
            return ShareAcknowledgeResponse(error_code=Errors.GROUP_AUTHORIZATION_FAILED)
        denied = unreadable(ctx, list(acks))
        for key in denied:
            del acks[key]
    invalid = {key: code for key, batches in acks.items()
               if (code := validate_ack_batches(batches, ctx.api_version, req.is_renew_ack))}
    try:
        result = await ctx.components.shares.acknowledge(req, acks, invalid)
    except ShareError as e:
        return ShareAcknowledgeResponse(error_code=e.code, error_message=e.message)
    leader = _L(leader_id=ctx.components.node.node_id, leader_epoch=0)
    parts = [(tid, _P(partition_index=p, error_code=code, current_leader=leader))
             for tid, p, code in result.partitions + [(tid, p, Errors.TOPIC_AUTHORIZATION_FAILED) for tid, p in denied]]
    return ShareAcknowledgeResponse(acquisition_lock_timeout_ms=result.acquisition_lock_timeout_ms,
                                    responses=by_topic(parts, _T))
