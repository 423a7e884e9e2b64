"""ShareFetch (78) v1-2: acknowledge, then acquire records for a share-group member.

Order of work, as Kafka 4.4:
1. the same topic may appear more than once (librdkafka does this): entries are
   merged by topic id;
2. acknowledgement batches are validated per partition (Kafka's checks, listed at
   ``validate_ack_batches`` in broker/share/acks.py); a partition that fails them is
   answered with INVALID_REQUEST and left alone;
3. the share session epoch is applied (broker/share/session.py: 0 opens, 1.. continues,
   -1 closes; acks in an opening request -> INVALID_REQUEST);
4. piggy-backed acknowledgements are applied (persisted before they count) and their
   result goes in AcknowledgeErrorCode;
5. with the final epoch the member's records are released and nothing is fetched;
   otherwise records are acquired from the session's partitions, in an order rotated
   on every fetch so no partition starves, within MaxRecords (the whole request),
   BatchSize, ShareAcquireMode (v2: batch_optimized / record_limit) and MaxBytes;
6. with nothing acquired the request waits up to MaxWaitMs, woken by new data,
   released records, lock expiry or freed lock capacity (watchers, no polling).
This handler does 1, 2 and the response; steps 3-6 are the share-partition manager's
(``SharePartitionManager.fetch``, broker/share/manager.py).
With an authorizer, as KafkaApis (KIP-932): READ on the group for the whole request
(GROUP_AUTHORIZATION_FAILED), READ on the topic per partition: a denied partition is
answered TOPIC_AUTHORIZATION_FAILED (its acknowledgements too), is neither fetched nor
acknowledged, and is kept out of the share session (a partition of an open session whose
READ was revoked is taken out of it: Kafka keeps it in the session and answers the error
on every fetch).
Quotas (``broker.quotas``): MaxBytes is capped at what ``consumer_byte_rate`` allows in one
window and the record bytes sent count against it; unlike Kafka 4.4, which answers a throttled
ShareFetch empty and leaves the records it acquired locked until their lock expires, the acquired
records are sent with the throttle time and the connection is then muted for it.
``Records`` is never null (empty bytes), since librdkafka drops a response with a
null records field; it holds the stored batches, or (fair acquisition, the default, while another
member wants the partition's records) sub-batches of the acquired records of partly acquired
uncompressed batches (broker/share/fair.py).  AcquisitionLockTimeoutMs is the group's lock duration.
With the group's ``share.isolation.level=read_committed`` records are read up to the last
stable offset and those of aborted transactions are archived, never delivered
(broker/share/isolation.py); control batches are never delivered.
"""
from __future__ import annotations

import logging

from broker.dispatch import handler
from broker.security.authorize import allowed, enabled, topic_name
from broker.share.acks import validate_ack_batches
from broker.share.errors import ShareError
from protocol.errors import Errors
from protocol.lazy_messages import (ShareFetchRequest,  # the real classes once ShareFetch is first served
                                    ShareFetchResponse)
from protocol.messages.registry import ApiKey

log = logging.getLogger("sharebroker.share")
_T = ShareFetchResponse.ShareFetchableTopicResponse
_P = ShareFetchResponse.PartitionData
_A = ShareFetchResponse.AcquiredRecords
_L = ShareFetchResponse.LeaderIdAndEpoch


def merge_topics(topics) -> dict[tuple[bytes, int], list]:
    """(topic id, partition) -> acknowledgement batches, merging repeated topics and partitions."""
    out: dict[tuple[bytes, int], list] = {}
    for t in topics:
        for p in t.partitions:
            out.setdefault((t.topic_id, p.partition_index), []).extend(p.acknowledgement_batches)
    return out


def by_topic(parts, topic_cls) -> list:
    """``[(topic id, partition response)]`` -> ``topic_cls`` responses, topics and partitions in the
    order first seen (ShareFetch and ShareAcknowledge answers)."""
    topics: dict[bytes, object] = {}
    for tid, part in parts:
        t = topics.get(tid)
        if t is None:
            t = topics[tid] = topic_cls(topic_id=tid, partitions=[])
        t.partitions.append(part)
    return list(topics.values())


def unreadable(ctx, keys) -> set[tuple[bytes, int]]:
    """The (topic id, partition) keys of existing topics the principal may not READ (an unknown
    topic id keeps the answer it gets without an authorizer)."""
    verdict: dict[bytes, bool] = {}
    for tid, _ in keys:
        if tid not in verdict:
            name = topic_name(ctx, tid)
            verdict[tid] = name is not None and not allowed(ctx, "READ", "TOPIC", name)
    return {k for k in keys if verdict[k[0]]}


def _authorize(ctx, req, wanted: dict) -> dict[tuple[bytes, int], bool] | None:
    """None when the group may not be read; else the denied partitions (taken out of ``wanted`` and,
    for an open session, forgotten) -> whether they carried acknowledgements."""
    if not allowed(ctx, "READ", "GROUP", req.group_id):
        return None
    denied = {key: bool(wanted.pop(key)) for key in unreadable(ctx, list(wanted))}
    session = ctx.components.shares.sessions.get(req.group_id, req.member_id) \
        if req.share_session_epoch > 0 else None
    if session is not None:
        revoked = unreadable(ctx, [k for k in session.partitions if k not in denied])
        for tid, p in revoked:
            denied[(tid, p)] = False
            req.forgotten_topics_data.append(ShareFetchRequest.ForgottenTopic(topic_id=tid, partitions=[p]))
    return denied


@handler(ApiKey.SHARE_FETCH, versions=(1, 2))
async def share_fetch(ctx, req):
    group, member = req.group_id, req.member_id
    if not group or not member:
        return ShareFetchResponse(error_code=Errors.INVALID_REQUEST,
                                  error_message="GroupId and MemberId must be set")
    wanted = merge_topics(req.topics)
    denied = _authorize(ctx, req, wanted) if enabled(ctx) else {}
    if denied is None:
        return ShareFetchResponse(error_code=Errors.GROUP_AUTHORIZATION_FAILED)
    if log.isEnabledFor(logging.DEBUG):
        log.debug("ShareFetch v%d %s/%s epoch %d acks %s", ctx.api_version, group, member, req.share_session_epoch,
                  [(k[1], [(a.first_offset, a.last_offset, list(a.acknowledge_types)) for a in v])
                   for k, v in wanted.items() if v])
    invalid = {key for key, batches in wanted.items()
               if batches and validate_ack_batches(batches, ctx.api_version, req.is_renew_ack)}
    q = ctx.quota
    if q is not None:
        req.max_bytes = q.max_fetch_bytes(req.max_bytes)
    try:
        result = await ctx.components.shares.fetch(req, wanted, invalid, ctx.connection)
    except ShareError as e:
        return ShareFetchResponse(error_code=e.code, error_message=e.message)
    if q is not None:  # the acquired records go out, then the connection is muted (README: deviations)
        q.bandwidth(ctx.components.quotas.fetch, sum(len(r) for part in result.partitions for r in part.records))
    leader = _L(leader_id=ctx.components.node.node_id, leader_epoch=0)
    parts = [(part.topic_id, _P(partition_index=part.partition, error_code=part.error,
                                acknowledge_error_code=part.ack_error or 0, current_leader=leader,
                                records=part.records,
                                acquired_records=[_A(first_offset=f, last_offset=last, delivery_count=dc)
                                                  for f, last, dc in part.acquired]))
             for part in result.partitions]
    code = Errors.TOPIC_AUTHORIZATION_FAILED
    parts += [(tid, _P(partition_index=p, error_code=code, acknowledge_error_code=code if had_acks else 0,
                       current_leader=leader, records=b"", acquired_records=[]))
              for (tid, p), had_acks in denied.items()]
    return ShareFetchResponse(acquisition_lock_timeout_ms=result.acquisition_lock_timeout_ms,
                              responses=by_topic(parts, _T))
