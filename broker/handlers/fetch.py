"""Fetch (1) v4-18 for consumers: byte-for-byte batches, long poll, fetch sessions.

Batches are located in the segment files (headers only) and sent as they are: the
``records`` are ``FileChunk``s that the server hands to ``os.sendfile`` when it can,
so record bytes never pass through Python.  MaxWaitMs / MinBytes long poll
registers on the partitions' watcher keys and is woken by produce; there is no
polling loop.  MaxBytes bounds the response, PartitionMaxBytes each partition, and
the first batch of the first partition with data is returned whole even when it
is larger (Kafka's rule for v3+).  READ_COMMITTED reads up to the last stable
offset and lists aborted transactions.  v13+ address topics by id.  Incremental
fetch sessions: see ``broker.fetch_sessions``.
READ on each TOPIC, else TOPIC_AUTHORIZATION_FAILED for its partitions (every request,
sessions included, as KafkaApis); the others are read and waited for as usual.
Quotas (``broker.quotas``, as KafkaApis): MaxBytes is capped at what ``consumer_byte_rate``
allows in one window; the record bytes read count against it, and a fetch that the fetch or
request quota throttles is answered empty (its bytes taken back, a new fetch session not created)
with the throttle time, the connection muted for it.
Descriptors: the segment files a response reads stay open until it is sent; once one request has used
half as many as ``sharebroker.log.max.open.files`` (``OpenFiles.crowded``: a consumer of tens of thousands
of partitions), its other partitions answer no records, as past MaxBytes, and come in its next fetch.
Not implemented: follower fetches (this is a single node; ReplicaId >= 0 is
answered like a consumer), preferred read replicas.
"""
from __future__ import annotations

import asyncio

from broker.dispatch import handler
from broker.fetch_sessions import SessionPartition
from broker.log.errors import LogError
from broker.log.faults import OPEN_FILES
from broker.log.partition_log import file_spans
from protocol.errors import Errors
from protocol.lazy_messages import FetchResponse  # the real class once Fetch is first served (dispatch.Handler)
from protocol.messages.registry import ApiKey
from protocol.primitives import FileChunk

_TopicResp = FetchResponse.FetchableTopicResponse
_PartResp = FetchResponse.PartitionData
_Aborted = FetchResponse.AbortedTransaction


class _Want:
    """One partition this request reads."""

    __slots__ = ("key", "name", "topic_id", "partition", "offset", "max_bytes", "sp", "denied")

    def __init__(self, key, name, topic_id, partition, offset, max_bytes, sp=None):
        self.key = key
        self.name = name
        self.topic_id = topic_id
        self.partition = partition
        self.offset = offset
        self.max_bytes = max_bytes
        self.sp = sp
        self.denied = False  # no READ on the topic


@handler(ApiKey.FETCH, versions=(4, 18))
async def fetch(ctx, req):
    c = ctx.components
    version = ctx.api_version
    by_id = version >= 13
    err, session, full = (Errors.NONE, None, True)
    if version >= 7:
        err, session, full = c.fetch_sessions.resolve(req.session_id, req.session_epoch, by_id)
        if err:  # Kafka's SessionErrorContext: the error, session id 0, the session untouched
            return FetchResponse(error_code=err, session_id=0)
        if full and req.session_epoch == 0:
            session = c.fetch_sessions.open(by_id, sum(len(t.partitions) for t in req.topics))
    wants = _collect(c, req, session, full, by_id)
    if session is not None and not full and not session.partitions:
        c.fetch_sessions.close(session.id)  # every partition forgotten: sessionless from here
        session = None
    auth = c.authorizer
    if auth.enabled:
        readable = {}
        for w in wants:
            if w.name is not None:
                ok = readable.get(w.name)
                if ok is None:
                    ok = readable[w.name] = auth.allowed(ctx.principal, "READ", "TOPIC", w.name, ctx.host)
                w.denied = not ok
    read_committed = req.isolation_level == 1
    q = ctx.quota
    max_bytes = req.max_bytes if q is None else q.max_fetch_bytes(req.max_bytes)
    min_bytes = min(req.min_bytes, max_bytes)
    deadline = asyncio.get_running_loop().time() + max(req.max_wait_ms, 0) / 1000.0
    while True:
        results, total, errored = _read(c, wants, max_bytes, read_committed)
        if total >= min_bytes or errored or req.max_wait_ms <= 0 or not wants:
            break
        keys = [("log", w.name, w.partition) for w in wants if w.name is not None and not w.denied]
        if not keys:
            break
        if not await c.watchers.wait(keys, deadline):
            results, total, errored = _read(c, wants, max_bytes, read_committed)
            break
    if q is not None and q.fetch_throttled(total):
        if session is not None and full:  # FullFetchContext: the session is created only with a real answer
            c.fetch_sessions.close(session.id)
            session = None
        return FetchResponse(session_id=session.id if session is not None else 0, responses=[])
    return _response(wants, results, session, full, by_id)


def _collect(c, req, session, full: bool, by_id: bool) -> list[_Want]:
    logs = c.logs
    if session is None or full:
        wants = []
        for t in req.topics:
            topic = logs.topic_by_id(t.topic_id) if by_id else logs.topic(t.topic)
            name = topic.name if topic is not None else (None if by_id else t.topic)
            for p in t.partitions:
                key = (t.topic_id if by_id else t.topic, p.partition)
                sp = None
                if session is not None:
                    sp = session.partitions[key] = SessionPartition(t.topic_id, p.fetch_offset,
                                                                    p.partition_max_bytes, p.log_start_offset)
                wants.append(_Want(key, name, t.topic_id, p.partition, p.fetch_offset, p.partition_max_bytes, sp))
        return wants
    parts = session.partitions
    for t in req.topics:
        for p in t.partitions:
            key = (t.topic_id if by_id else t.topic, p.partition)
            sp = parts.get(key)
            if sp is None:
                parts[key] = SessionPartition(t.topic_id, p.fetch_offset, p.partition_max_bytes, p.log_start_offset)
            else:
                sp.fetch_offset, sp.max_bytes, sp.log_start_offset = p.fetch_offset, p.partition_max_bytes, p.log_start_offset
    for f in req.forgotten_topics_data:
        for pi in f.partitions:
            parts.pop((f.topic_id if by_id else f.topic, pi), None)
    wants = []
    for key, sp in parts.items():
        topic = logs.topic_by_id(key[0]) if by_id else logs.topic(key[0])
        name = topic.name if topic is not None else (None if by_id else key[0])
        wants.append(_Want(key, name, sp.topic_id, key[1], sp.fetch_offset, sp.max_bytes, sp))
    return wants


def _read(c, wants: list[_Want], max_bytes: int, read_committed: bool):
    results = []
    total = 0
    errored = False
    logs = c.logs
    for w in wants:
        if w.denied:
            results.append(_PartResp(partition_index=w.partition, error_code=Errors.TOPIC_AUTHORIZATION_FAILED,
                                     high_watermark=-1, records=b""))
            continue
        log = logs.get_log(w.name, w.partition) if w.name is not None else None
        if log is None:
            code = Errors.UNKNOWN_TOPIC_ID if w.name is None else Errors.UNKNOWN_TOPIC_OR_PARTITION
            results.append(_PartResp(partition_index=w.partition, error_code=code, high_watermark=-1,
                                     records=b""))
            errored = True
            continue
        hwm = log.high_watermark
        lso = log.last_stable_offset
        lss = log.log_start_offset
        upper = lso if read_committed else hwm
        chunks: list = []
        code = Errors.NONE
        aborted = None
        if w.offset < lss or w.offset > log.log_end_offset:
            code = Errors.OFFSET_OUT_OF_RANGE
            errored = True
        elif w.offset < upper and (total < max_bytes or not total) and not OPEN_FILES.crowded():
            # the first batch whatever MaxBytes (KIP-74); past the bound on open segment files the other
            # partitions answer no records, as past MaxBytes (the client asks for them again)
            try:
                batches = log.read(w.offset, min(w.max_bytes, max_bytes - total), max_offset=upper,
                                   min_one=total == 0, lazy=True)
            except LogError as e:
                code = e.code
                errored = True
                batches = []
            for fd, pos, size in file_spans(batches):
                chunks.append(FileChunk(fd, pos, size))
                total += size
            if read_committed and batches:
                aborted = [_Aborted(producer_id=pid, first_offset=first)
                           for pid, first in log.aborted_transactions(w.offset, batches[-1].last_offset + 1)]
        if read_committed and aborted is None:
            aborted = []
        results.append(_PartResp(partition_index=w.partition, error_code=code, high_watermark=hwm,
                                 last_stable_offset=lso, log_start_offset=lss, aborted_transactions=aborted,
                                 records=chunks))
    return results, total, errored


def _response(wants, results, session, full: bool, by_id: bool) -> FetchResponse:
    topics: list[_TopicResp] = []
    last = None
    served = []
    for w, r in zip(wants, results):
        sp = w.sp
        if sp is not None:
            changed = (r.error_code or r.records or r.high_watermark != sp.last_hwm
                       or r.last_stable_offset != sp.last_lso or r.log_start_offset != sp.last_lss)
            sp.last_hwm, sp.last_lso, sp.last_lss = r.high_watermark, r.last_stable_offset, r.log_start_offset
            if not full and not changed:
                continue
            if not full and r.records:
                served.append(w.key)
        if last is None or last.topic_id != w.topic_id or (not by_id and last.topic != w.key[0]):
            last = _TopicResp(topic=w.key[0] if not by_id else "", topic_id=w.topic_id, partitions=[])
            topics.append(last)
        last.partitions.append(r)
    if served:  # partitions that returned records go to the end of the session's order
        parts = session.partitions
        for key in served:
            parts[key] = parts.pop(key)
        session.size = len(parts)
    return FetchResponse(session_id=session.id if session is not None else 0, responses=topics)
