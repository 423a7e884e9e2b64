"""ShareFetch (78) v1-2: acknowledge, then acquire records for a share-group member.

Order of work, as Kafka 4.4:
1. the same topic may appear more than once (librdkafka does this): entries are
   merged by topic id;
2. acknowledgement batches are validated per partition (INVALID_REQUEST for first >
   last, overlapping or unordered batches, an empty type list, a type list whose
   length is neither 1 nor last-first+1, a type outside 0..3 (0..4 on v2), RENEW
   without IsRenewAck); such a partition is answered with INVALID_REQUEST and left alone;
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
``Records`` is never null (empty bytes), since librdkafka drops a response with a
null records field.  AcquisitionLockTimeoutMs is the group's lock duration.
Not implemented: read_committed filtering of aborted transactions (transactions
are not supported yet, so the last stable offset is the high watermark).
"""
from __future__ import annotations

import asyncio
import logging

from broker.dispatch import handler
from broker.log.errors import LogError
from broker.share.errors import ShareError
from broker.share.partition import validate_ack_batches
from protocol.errors import Errors
from protocol.messages.registry import ApiKey
from protocol.messages.share_fetch import ShareFetchResponse

log = logging.getLogger("sharebroker.share")
_T = ShareFetchResponse.ShareFetchableTopicResponse
_P = ShareFetchResponse.PartitionData
_A = ShareFetchResponse.AcquiredRecords
_L = ShareFetchResponse.LeaderIdAndEpoch
READ_STEP = 1 << 20


class _Part:
    __slots__ = ("tid", "p", "acks", "error", "ack_error", "records", "acquired", "touched")

    def __init__(self, tid: bytes, p: int):
        self.tid, self.p = tid, p
        self.acks = None
        self.error = Errors.NONE
        self.ack_error: int | None = None
        self.records: list = []
        self.acquired: list = []
        self.touched = False


def merge_topics(topics) -> dict[tuple[bytes, int], list]:
    """(topic id, partition) -> acknowledgement batches, merging repeated topics and partitions."""
    out: dict[tuple[bytes, int], list] = {}
    for t in topics:
        for p in t.partitions:
            out.setdefault((t.topic_id, p.partition_index), []).extend(p.acknowledgement_batches)
    return out


def partition_response(c, part: _Part) -> _P:
    return _P(partition_index=part.p, error_code=part.error,
              acknowledge_error_code=part.ack_error or 0,
              current_leader=_L(leader_id=c.node.node_id, leader_epoch=0),
              records=part.records, acquired_records=part.acquired)


@handler(ApiKey.SHARE_FETCH, versions=(1, 2))
async def share_fetch(ctx, req):
    c = ctx.components
    mgr = c.shares
    group, member, epoch = req.group_id, req.member_id, req.share_session_epoch
    if not group or not member:
        return ShareFetchResponse(error_code=Errors.INVALID_REQUEST,
                                  error_message="GroupId and MemberId must be set")
    wanted = merge_topics(req.topics)
    if log.isEnabledFor(logging.DEBUG):
        log.debug("ShareFetch v%d %s/%s epoch %d acks %s", ctx.api_version, group, member, epoch,
                  [(k[1], [(a.first_offset, a.last_offset, list(a.acknowledge_types)) for a in v])
                   for k, v in wanted.items() if v])
    parts: dict[tuple[bytes, int], _Part] = {}
    has_acks = False
    for key, batches in wanted.items():
        part = parts[key] = _Part(*key)
        if batches:
            has_acks = True
            if validate_ack_batches(batches, ctx.api_version, req.is_renew_ack):
                part.error = Errors.INVALID_REQUEST
                part.touched = True
            else:
                part.acks = batches
    forgotten = [(f.topic_id, p) for f in req.forgotten_topics_data for p in f.partitions]
    try:
        session = mgr.sessions.fetch_context(group, member, epoch, partitions=list(wanted), forgotten=forgotten,
                                             has_acks=has_acks, connection_id=id(ctx.connection))
    except ShareError as e:
        return ShareFetchResponse(error_code=e.code, error_message=e.message)
    mgr.track_connection(ctx.connection)
    config = mgr.group_config(group)

    for part in parts.values():
        if part.acks is None:
            continue
        part.touched = True
        try:
            sp = await mgr.partition(group, part.tid, part.p)
            part.ack_error = await sp.acknowledge(member, part.acks)
        except ShareError as e:
            part.ack_error = e.code

    if epoch == -1:
        mgr.sessions.close(group, member)
        await mgr.release(group, member, list(session.partitions))
        return _response(c, parts.values(), config)

    order = list(session.partitions)
    if order:
        shift = session.epoch % len(order)
        order = order[shift:] + order[:shift]
    for key in order:
        if key not in parts:
            parts[key] = _Part(*key)
    fetch_parts = [parts[k] for k in order if parts[k].error == Errors.NONE]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(req.max_wait_ms, 0) / 1000.0
    while True:
        count = await _acquire(c, mgr, group, member, fetch_parts, req)
        if count or req.max_wait_ms <= 0 or not fetch_parts:
            break
        keys = [("share", group, p.tid, p.p) for p in fetch_parts]
        for p in fetch_parts:
            info = c.logs.topic_by_id(p.tid)
            if info is not None:
                keys.append(("log", info.name, p.p))
        if not await c.watchers.wait(keys, deadline):
            await _acquire(c, mgr, group, member, fetch_parts, req)
            break
    full = epoch == 0
    shown = [p for p in parts.values() if full or p.touched or p.acquired or p.error]
    if log.isEnabledFor(logging.DEBUG):
        log.debug("ShareFetch %s/%s epoch %d acquired %s", group, member, epoch,
                  [(p.p, [(a.first_offset, a.last_offset, a.delivery_count) for a in p.acquired]) for p in shown
                   if p.acquired])
    return _response(c, shown, config)


async def _acquire(c, mgr, group: str, member: str, fetch_parts: list[_Part], req) -> int:
    records_left = req.max_records if req.max_records > 0 else 500
    bytes_left = req.max_bytes
    total = 0
    for part in fetch_parts:
        if records_left <= 0 or bytes_left <= 0:
            break
        try:
            sp = await mgr.partition(group, part.tid, part.p)
        except ShareError as e:
            part.error = e.code
            continue
        _name, plog = mgr.topic_log(part.tid, part.p)
        if plog is None:
            part.error = Errors.UNKNOWN_TOPIC_OR_PARTITION
            continue
        upper = plog.last_stable_offset if sp.config.read_committed else plog.high_watermark
        # Read in bounded steps: unlike Kafka's file slices, a read here copies bytes, and MaxBytes
        # (50 MB from librdkafka) would read far more than MaxRecords can acquire.
        while records_left > 0 and bytes_left > 0:
            offset = sp.next_fetch_offset()
            if offset >= upper and offset >= sp.end_offset:
                break
            try:
                batches = plog.read(max(offset, plog.log_start_offset), min(bytes_left, READ_STEP),
                                    max_offset=upper, min_one=total == 0)
            except LogError:
                break
            if not batches:
                break
            res = sp.acquire(member, batches, max_records=records_left, batch_size=max(req.batch_size, 1),
                             acquire_mode=req.share_acquire_mode, fetch_offset=offset)
            if not res.count:
                break
            if log.isEnabledFor(logging.DEBUG):
                log.debug("acquire %s off=%d spso=%d end=%d batches=%s got=%s", member, offset, sp.start_offset,
                          sp.end_offset, [(x.base_offset, x.last_offset) for x in batches], res.acquired)
            part.records.extend(ref.data for ref in res.batches)
            part.acquired.extend(_A(first_offset=f, last_offset=last, delivery_count=dc)
                                 for f, last, dc in res.acquired)
            records_left -= res.count
            bytes_left -= sum(len(ref.data) for ref in res.batches)
            total += res.count
    return total


def _response(c, parts, config) -> ShareFetchResponse:
    topics: dict[bytes, _T] = {}
    for part in parts:
        t = topics.get(part.tid)
        if t is None:
            t = topics[part.tid] = _T(topic_id=part.tid, partitions=[])
        t.partitions.append(partition_response(c, part))
    return ShareFetchResponse(acquisition_lock_timeout_ms=config.record_lock_duration_ms,
                              responses=list(topics.values()))
