"""Incremental fetch sessions (KIP-227) over a socket, with the project's codec.

Expected behaviour is Kafka's ``core/src/main/scala/kafka/server/FetchSession.scala``
(``FetchManager.newContext``, ``FetchSessionCacheShard``, ``IncrementalFetchContext``):

* SessionId/SessionEpoch: (0, 0) opens a session, (id, 0) closes ``id`` and opens a new one,
  (id, -1) closes ``id`` and fetches without a session; (id, n > 0) is incremental.
* An incremental fetch on an unknown id answers FETCH_SESSION_ID_NOT_FOUND, with a wrong epoch
  INVALID_FETCH_SESSION_EPOCH, at a version whose topic addressing (names before v13, ids from
  v13) differs from the session's FETCH_SESSION_TOPIC_ID_ERROR; the error response carries
  session id 0 (``SessionErrorContext``) and leaves the session untouched.
* An incremental response lists only partitions with records, an error, or a changed high
  watermark / log start offset; forgotten partitions leave the session, and a session left with
  no partition is closed (the response is sessionless: session id 0).
* A partition that returned records moves to the end of the session's partition order, so a
  small MaxBytes does not starve the later partitions (``PartitionIterator``:
  ``partitionMap.remove(cachedPart); partitionMap.mustAdd(cachedPart)``).
* A full cache evicts only a session unused for 120 s, or one created more than 120 s ago with
  fewer partitions (``tryEvict``); a new consumer session in a cache full of fresh sessions gets
  session id 0 and the cached sessions stay valid.
"""
from __future__ import annotations

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from protocol.errors import Errors
from protocol.messages.fetch import FetchRequest as F
from protocol.messages.fetch import FetchResponse
from protocol.messages.metadata import MetadataRequest
from protocol.messages.produce import ProduceRequest as P
from protocol.records import HEADER_SIZE, build_batch, read_header
from tests.support import unique
from tests.wire import WireClient

NAMES = 12   # the last Fetch version that names topics
IDS = 16     # a Fetch version that addresses topics by id


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    from broker.testing import BrokerProcess

    with BrokerProcess(tmp_path_factory.mktemp("fetch-sessions")) as b:
        yield b


class Topic:
    """A topic, its id, and a socket to produce and fetch on."""

    def __init__(self, bootstrap: str, partitions: int):
        self.name = unique("fs")
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(self.name, partitions, 1)])[self.name].result(15)
        self.w = WireClient(bootstrap)
        md = self.w.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=self.name)],
                                            allow_auto_topic_creation=False), 12)
        assert md.topics[0].error_code == 0
        self.id = md.topics[0].topic_id
        self.partitions = partitions

    def produce(self, partition: int, batches: int = 1, value: bytes = b"x" * 100) -> None:
        for _ in range(batches):
            req = P(acks=-1, timeout_ms=10_000, topic_data=[P.TopicProduceData(name=self.name, partition_data=[
                P.PartitionProduceData(index=partition, records=build_batch([(None, value, [])]))])])
            r = self.w.request(req, 9)
            assert r.responses[0].partition_responses[0].error_code == 0

    def fetch(self, version: int, session_id: int, epoch: int, offsets: dict[int, int] | None = None,
              forget: tuple[int, ...] = (), max_bytes: int = 1 << 20, w: WireClient | None = None) -> FetchResponse:
        """One Fetch listing ``offsets`` ({partition: fetch offset}) and forgetting ``forget``."""
        by_id = version >= 13
        topic = {"topic_id": self.id} if by_id else {"topic": self.name}
        topics = [F.FetchTopic(**topic, partitions=[
            F.FetchPartition(partition=p, fetch_offset=o, partition_max_bytes=1 << 20)
            for p, o in offsets.items()])] if offsets else []
        forgotten = [F.ForgottenTopic(**topic, partitions=list(forget))] if forget else []
        req = F(max_wait_ms=0, min_bytes=0, max_bytes=max_bytes, isolation_level=0, session_id=session_id,
                session_epoch=epoch, topics=topics, forgotten_topics_data=forgotten)
        return (w or self.w).request(req, version)

    def close(self) -> None:
        self.w.close()


@pytest.fixture
def topic(broker):
    made = []

    def make(partitions: int = 3) -> Topic:
        t = Topic(broker.bootstrap, partitions)
        made.append(t)
        return t

    yield make
    for t in made:
        t.close()


def listed(resp: FetchResponse) -> dict[int, object]:
    """{partition: PartitionData} of every partition the response lists."""
    return {p.partition_index: p for t in resp.responses for p in t.partitions}


def batch_offsets(records) -> list[int]:
    """Base offsets of the batches in a partition's record bytes."""
    data = b"".join(bytes(c) for c in records) if isinstance(records, list) else bytes(records or b"")
    out, pos = [], 0
    while pos + HEADER_SIZE <= len(data):
        h = read_header(data, pos)
        if pos + h.size > len(data):
            break
        out.append(h.base_offset)
        pos += h.size
    return out


def open_session(t: Topic, version: int, offsets: dict[int, int], w: WireClient | None = None) -> int:
    r = t.fetch(version, 0, 0, offsets, w=w)
    assert r.error_code == 0 and r.session_id != 0, r
    assert sorted(listed(r)) == sorted(offsets), "a full fetch lists every partition it asked for"
    return r.session_id


# ----------------------------------------------------------------------------- basics
@pytest.mark.parametrize("version", [NAMES, IDS])
def test_incremental_fetch_lists_only_changed_partitions(topic, version):
    t = topic(3)
    sid = open_session(t, version, {0: 0, 1: 0, 2: 0})
    r = t.fetch(version, sid, 1)
    assert (r.error_code, r.session_id, listed(r)) == (0, sid, {}), "nothing changed: nothing listed"
    t.produce(1, batches=2)
    r = t.fetch(version, sid, 2)
    parts = listed(r)
    assert (r.error_code, r.session_id, sorted(parts)) == (0, sid, [1])
    assert parts[1].high_watermark == 2 and batch_offsets(parts[1].records) == [0, 1]
    # the client moves partition 1 on; partitions 0 and 2 stay cached at offset 0
    r = t.fetch(version, sid, 3, {1: 2})
    assert (r.error_code, listed(r)) == (0, {}), "no new records, high watermarks unchanged"


# ----------------------------------------------------------------------------- session errors
def test_unknown_session_id_is_fetch_session_id_not_found(topic):
    t = topic(1)
    for sid, epoch in ((0x7FFFFFFF, 1), (0, 1), (12345, 7)):
        r = t.fetch(IDS, sid, epoch, {0: 0})
        assert r.error_code == Errors.FETCH_SESSION_ID_NOT_FOUND, (sid, epoch, r)
        assert r.responses == [], "a session error carries no partition data"


def test_closed_sessions_are_not_found(topic):
    t = topic(1)
    first = open_session(t, IDS, {0: 0})
    # (id, 0): close it and open another
    r = t.fetch(IDS, first, 0, {0: 0})
    second = r.session_id
    assert r.error_code == 0 and second not in (0, first)
    assert t.fetch(IDS, first, 1).error_code == Errors.FETCH_SESSION_ID_NOT_FOUND
    assert t.fetch(IDS, second, 1).error_code == 0
    # (id, -1): close it, answer without a session
    r = t.fetch(IDS, second, -1, {0: 0})
    assert (r.error_code, r.session_id, sorted(listed(r))) == (0, 0, [0])
    assert t.fetch(IDS, second, 2).error_code == Errors.FETCH_SESSION_ID_NOT_FOUND


def test_session_error_response_has_session_id_zero(topic):
    t = topic(1)
    sid = open_session(t, IDS, {0: 0})
    assert t.fetch(IDS, sid, 5).session_id == 0
    assert t.fetch(IDS, 0x7FFFFFFF, 1).session_id == 0


@pytest.mark.parametrize("version", [NAMES, IDS])
def test_wrong_epoch_is_invalid_fetch_session_epoch_and_leaves_the_session(topic, version):
    t = topic(1)
    sid = open_session(t, version, {0: 0})
    for wrong in (2, 0x7FFFFFFF, -2):
        r = t.fetch(version, sid, wrong)
        assert r.error_code == Errors.INVALID_FETCH_SESSION_EPOCH, (wrong, r)
        assert r.responses == []
    t.produce(0)
    r = t.fetch(version, sid, 1)  # the expected epoch did not move
    assert (r.error_code, r.session_id, sorted(listed(r))) == (0, sid, [0])
    r = t.fetch(version, sid, 1)  # a replayed request: the session now expects 2
    assert r.error_code == Errors.INVALID_FETCH_SESSION_EPOCH
    assert t.fetch(version, sid, 2).error_code == 0


@pytest.mark.parametrize("opened_at,then", [(NAMES, IDS), (IDS, NAMES)])
def test_topic_id_mismatch_is_fetch_session_topic_id_error(topic, opened_at, then):
    t = topic(1)
    sid = open_session(t, opened_at, {0: 0})
    r = t.fetch(then, sid, 1, {0: 0})
    assert r.error_code == Errors.FETCH_SESSION_TOPIC_ID_ERROR, r
    assert r.responses == []
    assert t.fetch(opened_at, sid, 1).error_code == 0, "the session itself is unaffected"


# ----------------------------------------------------------------------------- forgotten partitions
@pytest.mark.parametrize("version", [NAMES, IDS])
def test_forgotten_partitions_leave_the_session(topic, version):
    t = topic(3)
    sid = open_session(t, version, {0: 0, 1: 0, 2: 0})
    assert t.fetch(version, sid, 1, forget=(1,)).error_code == 0
    for p in range(3):
        t.produce(p)
    r = t.fetch(version, sid, 2)
    assert (r.error_code, sorted(listed(r))) == (0, [0, 2]), "partition 1 was forgotten"
    # added back by an incremental request, it is served again from the offset given
    r = t.fetch(version, sid, 3, {1: 0, 0: 1, 2: 1})
    parts = listed(r)
    assert (r.error_code, sorted(parts)) == (0, [1])
    assert batch_offsets(parts[1].records) == [0]


def test_forgetting_every_partition_closes_the_session(topic):
    t = topic(2)
    sid = open_session(t, IDS, {0: 0, 1: 0})
    r = t.fetch(IDS, sid, 1, forget=(0, 1))
    assert (r.error_code, r.session_id) == (0, 0)
    assert t.fetch(IDS, sid, 2).error_code == Errors.FETCH_SESSION_ID_NOT_FOUND


# ----------------------------------------------------------------------------- partition rotation
@pytest.mark.parametrize("version", [NAMES, IDS])
def test_partitions_that_returned_records_rotate_so_none_starves(topic, version):
    n = 3
    t = topic(n)
    for p in range(n):
        t.produce(p, batches=2 * n)  # more batches than fetches below: no partition runs dry
    offsets = {p: 0 for p in range(n)}
    # MaxBytes 1: each response carries only the first batch of the first partition with data
    r = t.fetch(version, 0, 0, offsets, max_bytes=1)
    sid = r.session_id
    assert r.error_code == 0 and sid != 0
    served = []
    for epoch in range(1, n + 1):
        for p, data in listed(r).items():
            got = batch_offsets(data.records)
            assert len(got) <= 1, "MaxBytes 1 allows one batch per response"
            if got:
                offsets[p] = got[-1] + 1
        changed = {p: o for p, o in offsets.items() if o}
        r = t.fetch(version, sid, epoch, changed, max_bytes=1)
        assert r.error_code == 0
        served += [p for p, data in listed(r).items() if batch_offsets(data.records)]
    # Kafka: the full fetch serves p0 (no rotation in a full context), then the incremental
    # fetches serve p0 (rotated to the end), p1, p2
    assert set(served) == set(range(n)), f"partitions served by {n} incremental fetches: {served}"


# ----------------------------------------------------------------------------- cache size
def test_no_cache_slots_means_no_sessions(broker_factory):
    b = broker_factory({"max.incremental.fetch.session.cache.slots": 0})
    t = Topic(b.bootstrap, 1)
    try:
        r = t.fetch(IDS, 0, 0, {0: 0})
        assert (r.error_code, r.session_id, sorted(listed(r))) == (0, 0, [0]), "served, without a session"
        assert t.fetch(IDS, 0, 1).error_code == Errors.FETCH_SESSION_ID_NOT_FOUND
    finally:
        t.close()


SLOTS = 8  # Kafka splits the slots over 8 cache shards used round robin: 8 fills one per shard


def test_full_cache_does_not_evict_fresh_sessions(broker_factory):
    b = broker_factory({"max.incremental.fetch.session.cache.slots": SLOTS})
    t = Topic(b.bootstrap, 2)
    conns = [WireClient(b.bootstrap) for _ in range(SLOTS)]
    try:
        sids = [open_session(t, IDS, {0: 0, 1: 0}, w=w) for w in conns]
        assert len(set(sids)) == SLOTS
        r = t.fetch(IDS, 0, 0, {0: 0, 1: 0})
        assert (r.error_code, sorted(listed(r))) == (0, [0, 1]), "the fetch itself is served"
        assert r.session_id == 0, "no slot, nothing evictable: no session"
        for w, sid in zip(conns, sids):
            assert t.fetch(IDS, sid, 1, w=w).error_code == 0, "every cached session is still valid"
    finally:
        t.close()
        for w in conns:
            w.close()
