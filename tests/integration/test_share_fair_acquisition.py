"""Fair acquisition (ours, broker/share/fair.py) against the real broker.

A log batch bigger than a ShareFetch's MaxRecords is shared among the members MaxRecords at a
time (librdkafka sends its ``max.poll.records`` as MaxRecords), the rest of the batch left for the
others; ``share.fair.acquisition.enable=false`` (group) or ``group.share.fair.acquisition.enable=false``
(broker) gives Kafka 4.4's whole-batch acquisition. Uncompressed batches go out as sub-batches of
the acquired records, compressed ones whole with the acquired ranges.

- librdkafka's ShareConsumer (confluent-kafka 2.16) with one producer batch of 10,000 records:
  every member receives records of it, no poll holds more than ``max.poll.records``, every record
  is delivered once with implicit acknowledgement, and DescribeShareGroupOffsets v1's lag is exact;
- the same with gzip batches;
- over the wire (the project codec): the exact AcquiredRecords and the bytes of the sub-batches
  (read back by kafka-python's own batch reader), compressed batches whole, the record-lock cap.
"""
from __future__ import annotations

import contextlib
import threading
import time

import pytest
from confluent_kafka import Producer
from kafka.record.default_records import DefaultRecordBatch

from protocol.messages.describe_share_group_offsets import DescribeShareGroupOffsetsRequest as DescReq
from protocol.messages.produce import ProduceRequest
from protocol.messages.share_fetch import ShareFetchRequest as FetchReq
from protocol.messages.share_group_describe import ShareGroupDescribeRequest
from protocol.records import COMPRESSION_GZIP, batch_crc_valid, build_batch, read_header, uncompressed_batch
from tests.integration.test_share_consumers import consumer, new_group, poll_records
from tests.support import create_topic, share_member_assigned, stored_batches, topic_id, unique, until
from tests.wire import WireClient

N = 10_000
MAX_POLL = 50


# ------------------------------------------------------------------ helpers
def produce_one_big_batch(bs: str, topic: str, n: int = N, compression: str = "none") -> None:
    """``n`` records that librdkafka puts in one log batch (checked)."""
    # the partition's leader known before the first record, and a linger far longer than the loop takes
    # even on a loaded machine: the batch goes out when it holds n records (batch.num.messages)
    p = Producer({"bootstrap.servers": bs, "linger.ms": 30_000, "batch.num.messages": n,
                  "batch.size": 1_000_000, "compression.type": compression})
    p.list_topics(topic, timeout=10)
    for i in range(n):
        p.produce(topic, value=b"v%05d" % i)
    assert p.flush(30) == 0
    assert [b.records_count for b in stored_batches(bs, topic)] == [n]


def lag(bs: str, group: str, topic: str) -> tuple[int, int]:
    """(start offset, lag) of partition 0 from DescribeShareGroupOffsets v1 (KIP-1226)."""
    with WireClient(bs) as w:
        r = w.request(DescReq(groups=[DescReq.DescribeShareGroupOffsetsRequestGroup(group_id=group, topics=[
            DescReq.DescribeShareGroupOffsetsRequestTopic(topic_name=topic, partitions=[0])])]), 1)
    (p,) = r.groups[0].topics[0].partitions
    assert p.error_code == 0, p
    return p.start_offset, p.lag


def members_assigned(bs: str, group: str, n: int) -> bool:
    with WireClient(bs) as w:
        (g,) = w.request(ShareGroupDescribeRequest(group_ids=[group]), 1).groups
    return len(g.members) == n and all(m.assignment.topic_partitions for m in g.members)


class Members:
    """``n`` ShareConsumers (implicit acknowledgement, ``max.poll.records`` 50), one thread each,
    polling until every record was delivered; each spends ``work_s`` per record. The share
    consumers are all assigned before ``start`` returns, so the records produced next are
    fetched by all of them."""

    def __init__(self, bs: str, group: str, topic: str, n: int, work_s: float = 0.0002, total: int = N):
        self.total, self.work_s = total, work_s
        self.consumers = [consumer(bs, group, topic, max_poll_records=MAX_POLL) for _ in range(n)]
        self.polls: list[list[list[int]]] = [[] for _ in range(n)]  # offsets of each non-empty poll
        self.seen: dict[int, int] = {}
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.errors: list[BaseException] = []
        self.threads: list[threading.Thread] = []

        def assigned() -> bool:
            for c in self.consumers:
                assert poll_records(c, 0.05) == []  # nothing produced yet; polling drives the join
            return members_assigned(bs, group, n)

        until(assigned, 30, f"{n} assigned members")

    def start(self) -> "Members":
        self.threads = [threading.Thread(target=self._run, args=(i,), daemon=True)
                        for i in range(len(self.consumers))]
        for t in self.threads:
            t.start()
        return self

    def _run(self, i: int) -> None:
        c = self.consumers[i]
        try:
            deadline = time.monotonic() + 120
            while not self.done.is_set() and time.monotonic() < deadline:
                batch = poll_records(c, 0.2)
                if not batch:
                    continue
                self.polls[i].append([m.offset() for m in batch])
                time.sleep(self.work_s * len(batch))
                with self.lock:
                    for m in batch:
                        self.seen[m.offset()] = self.seen.get(m.offset(), 0) + 1
                    if len(self.seen) >= self.total:
                        self.done.set()
            c.commit_sync(30)  # implicit mode: accept the last poll's records before closing
        except BaseException as e:  # noqa: BLE001 -- reported by join()
            self.errors.append(e)
        finally:
            c.close()

    def join(self) -> None:
        for t in self.threads:
            t.join(150)
        assert not self.errors, self.errors


# ------------------------------------------------------------------ librdkafka
@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_a_big_producer_batch_is_shared_by_every_member(sharebroker, compression):
    bs = sharebroker.bootstrap
    topic = create_topic(bs, 1)
    group = new_group(bs)
    members = Members(bs, group, topic, 4)
    produce_one_big_batch(bs, topic, compression=compression)
    members.start().join()
    assert sorted(members.seen) == list(range(N)), "every record delivered"
    assert set(members.seen.values()) == {1}, "no record delivered twice"
    sizes = [len(p) for polls in members.polls for p in polls]
    assert max(sizes) <= MAX_POLL, "a member held more than MaxRecords of the batch"
    got = [sum(len(p) for p in polls) for polls in members.polls]
    assert all(got), f"a member waited while others shared the batch: {got}"
    assert until(lambda: lag(bs, group, topic)[1] == 0, 15, "lag 0")


def test_lag_is_exact_while_a_big_batch_is_handed_out_in_pieces(sharebroker):
    bs = sharebroker.bootstrap
    topic = create_topic(bs, 1)
    group = new_group(bs)
    produce_one_big_batch(bs, topic)
    # Another member is assigned the partition and has not fetched it: the consumers share the batch
    # (alone, a consumer acquires it whole, as Kafka; librdkafka then returns all of it in one poll).
    idle = Member(bs, group, topic, topic_id(bs, topic))
    delivered = 0
    for _ in range(2):
        c = consumer(bs, group, topic, max_poll_records=MAX_POLL)
        try:
            polls = 0
            deadline = time.monotonic() + 30
            while polls < 3 and time.monotonic() < deadline:
                batch = poll_records(c, 0.5)
                assert len(batch) <= MAX_POLL
                delivered += len(batch)
                polls += bool(batch)
            assert c.commit_sync(30) is not None
        finally:
            c.close()
    idle.close()
    assert delivered == 6 * MAX_POLL
    # The rest of the batch is the lag, exactly (the share coordinator's start offset may be the
    # one before the last acknowledgements: docs/differences.md says why).
    assert until(lambda: lag(bs, group, topic)[1] == N - delivered, 15, "the exact lag")


@pytest.mark.parametrize("where", ["group", "broker"])
def test_kafka_exact_setting_gives_the_whole_batch_to_one_member(sharebroker_factory, where):
    broker = sharebroker_factory({"group.share.fair.acquisition.enable": "false"} if where == "broker" else {})
    bs = broker.bootstrap
    topic = create_topic(bs, 1)
    group = new_group(bs, **({"share_fair_acquisition_enable": "false"} if where == "group" else {}))
    members = Members(bs, group, topic, 3)
    produce_one_big_batch(bs, topic)
    members.start().join()
    assert sorted(members.seen) == list(range(N)) and set(members.seen.values()) == {1}
    got = sorted(sum(len(p) for p in polls) for polls in members.polls)
    assert got == [0, 0, N], "Kafka 4.4: one member acquires the whole log batch, the others wait"
    assert until(lambda: lag(bs, group, topic)[1] == 0, 15, "lag 0")


# ------------------------------------------------------------------ over the wire
class Member:
    """One share-group member on its own connection, ShareFetch v1 with the project codec."""

    def __init__(self, bs: str, group: str, topic: str, tid: bytes):
        self.w = WireClient(bs)
        self.group, self.tid, self.member = group, tid, unique("m")
        share_member_assigned(self.w, group, self.member, topic, tid)
        self.epoch = 0

    def fetch(self, max_records: int = MAX_POLL, acks=(), wait_ms: int | None = None
              ) -> tuple[list[tuple[int, int, int]], list[bytes]]:
        """(AcquiredRecords, the record batches) of one ShareFetch (MaxWaitMs `wait_ms`, by default
        2 s for the first and 0 after it)."""
        part = FetchReq.FetchPartition(partition_index=0, acknowledgement_batches=[
            FetchReq.AcknowledgementBatch(first_offset=f, last_offset=last, acknowledge_types=[1])
            for f, last in acks])
        r = self.w.request(FetchReq(group_id=self.group, member_id=self.member, share_session_epoch=self.epoch,
                                    max_wait_ms=(2000 if self.epoch == 0 else 0) if wait_ms is None else wait_ms,
                                    min_bytes=1, max_bytes=1 << 24,
                                    max_records=max_records, batch_size=max_records,
                                    topics=[FetchReq.FetchTopic(topic_id=self.tid, partitions=[part])]), 1)
        self.epoch += 1
        assert r.error_code == 0, r
        (p,) = [p for t in r.responses for p in t.partitions]
        assert p.error_code == 0 and p.acknowledge_error_code == 0, p
        blob, out, pos = memoryview(bytes(p.records or b"")), [], 0
        while pos < len(blob):
            size = read_header(blob, pos).size
            out.append(bytes(blob[pos:pos + size]))
            pos += size
        return [(a.first_offset, a.last_offset, a.delivery_count) for a in p.acquired_records], out

    def close(self) -> None:
        self.w.close()


def wire_produce(bs: str, topic: str, batches: list[bytes]) -> None:
    with WireClient(bs) as w:
        for b in batches:
            r = w.request(ProduceRequest(acks=-1, timeout_ms=5000, topic_data=[ProduceRequest.TopicProduceData(
                name=topic, partition_data=[ProduceRequest.PartitionProduceData(index=0, records=b)])]), 9)
            assert r.responses[0].partition_responses[0].error_code == 0


def values(n: int, start: int = 0) -> list[tuple]:
    return [(b"k%d" % i, b"value %d" % i, [("h", b"%d" % i)]) for i in range(start, start + n)]


def read_back(batch: bytes) -> list[tuple[int, bytes, bytes]]:
    """(offset, key, value) of every record, read by kafka-python's reader (CRC checked)."""
    kb = DefaultRecordBatch(batch)
    assert kb.validate_crc()
    return [(r.offset, r.key, r.value) for r in kb]


def gzip(batch: bytes) -> bytes:
    from protocol import compression
    from protocol.records import _assemble, batch_body
    info = read_header(batch)
    return _assemble(info, info.attributes | COMPRESSION_GZIP, info.base_timestamp, info.max_timestamp,
                     info.records_count, compression.compress(COMPRESSION_GZIP, batch_body(batch)))


@pytest.fixture
def wire(sharebroker):
    bs = sharebroker.bootstrap
    topic = create_topic(bs, 1)
    return bs, topic, topic_id(bs, topic)


@contextlib.contextmanager
def wire_members(wire, n: int, **group_configs):
    """``n`` members of a new group (``group_configs`` set first), closed afterwards."""
    bs, topic, tid = wire
    group = new_group(bs, **group_configs)
    members = [Member(bs, group, topic, tid) for _ in range(n)]
    try:
        yield members
    finally:
        for m in members:
            m.close()


def test_sub_batches_hold_exactly_the_acquired_records(wire):
    bs, topic, _ = wire
    wire_produce(bs, topic, [build_batch(values(1000)), build_batch(values(5, 1000))])
    with wire_members(wire, 2) as (a, b):
        acquired, batches = a.fetch()
        assert acquired == [(0, 49, 1)] and len(batches) == 1
        info = read_header(batches[0])
        assert (info.base_offset, info.last_offset_delta, info.records_count) == (0, 999, 50)
        assert batch_crc_valid(batches[0])
        assert read_back(batches[0]) == [(i, b"k%d" % i, b"value %d" % i) for i in range(50)]
        acquired, batches = b.fetch()
        assert acquired == [(50, 99, 1)]
        assert [r[0] for r in read_back(batches[0])] == list(range(50, 100))
        # The last piece of the big batch and the next (small) batch, whole, in one answer.
        acquired, batches = a.fetch(max_records=1000, acks=[(0, 49)])
        assert acquired == [(100, 1004, 1)]
        assert [r[0] for r in read_back(batches[0])] == list(range(100, 1000))
        assert read_back(batches[1]) == [(i, b"k%d" % i, b"value %d" % i) for i in range(1000, 1005)]


def test_a_lone_member_acquires_whole_log_batches(wire):
    """Nobody else wants the records: Kafka's batches, stored bytes, one fetch per log batch."""
    bs, topic, _ = wire
    first, second = build_batch(values(1000)), build_batch(values(1000, 1000))
    wire_produce(bs, topic, [first, second])
    with wire_members(wire, 1) as (a,):
        acquired, batches = a.fetch()
        assert acquired == [(0, 999, 1)]
        assert len(batches) == 1 and read_header(batches[0]).records_count == 1000
        assert batches[0][16:] == first[16:]  # the stored batch (magic, CRC, records), not a rewritten one
        acquired, batches = a.fetch(acks=[(0, 999)])
        assert acquired == [(1000, 1999, 1)] and read_back(batches[0])[-1][0] == 1999


def test_members_share_while_one_of_them_waits_for_records(wire):
    bs, topic, _ = wire
    with wire_members(wire, 2) as (a, b):
        assert a.fetch(wait_ms=0) == ([], [])
        waiting: list = []
        t = threading.Thread(target=lambda: waiting.append(b.fetch(wait_ms=15_000)), daemon=True)
        t.start()
        wire_produce(bs, topic, [build_batch(values(1000))])
        t.join(20)
        acquired, _ = a.fetch()
        (b_acquired, _), = waiting
        assert sorted(acquired + b_acquired) == [(0, 49, 1), (50, 99, 1)]


def test_a_member_busy_with_whole_batches_does_not_make_the_others_share(wire):
    bs, topic, _ = wire
    wire_produce(bs, topic, [build_batch(values(1000, 1000 * k)) for k in range(3)])
    with wire_members(wire, 2, share_partition_max_record_locks="4000") as (a, b):
        assert a.fetch()[0] == [(0, 49, 1)]                       # b assigned, not fetched yet: shared
        assert b.fetch()[0] == [(50, 99, 1)]                      # a got one piece: it comes back for more
        assert a.fetch(max_records=1000)[0] == [(100, 1999, 1)]   # more than its MaxRecords: a is busy
        acquired, batches = b.fetch(acks=[(50, 99)])              # so b takes the next batch whole
        assert acquired == [(2000, 2999, 1)] and read_header(batches[0]).records_count == 1000
        assert a.fetch(acks=[(100, 1999)]) == ([], [])            # a found nothing: it wants records
        wire_produce(bs, topic, [build_batch(values(1000, 3000))])
        assert b.fetch(acks=[(2000, 2999)])[0] == [(3000, 3049, 1)]


def test_compressed_batches_go_out_whole_with_the_acquired_ranges(wire):
    bs, topic, _ = wire
    wire_produce(bs, topic, [gzip(build_batch(values(1000)))])
    with wire_members(wire, 2) as (a, b):
        acquired, batches = a.fetch()
        assert acquired == [(0, 49, 1)] and len(batches) == 1
        info = read_header(batches[0])
        assert info.compression == COMPRESSION_GZIP and info.records_count == 1000
        assert [r[0] for r in read_back(uncompressed_batch(batches[0]))] == list(range(1000))
        acquired, batches2 = b.fetch()
        assert acquired == [(50, 99, 1)] and batches2 == batches


def test_kafka_exact_group_gets_the_stored_batch_whole(wire):
    bs, topic, _ = wire
    wire_produce(bs, topic, [build_batch(values(1000))])
    with wire_members(wire, 2, share_fair_acquisition_enable="false") as (a, b):
        acquired, batches = a.fetch()
        assert acquired == [(0, 999, 1)]
        assert read_header(batches[0]).records_count == 1000 and len(read_back(batches[0])) == 1000
        assert b.fetch() == ([], [])


def test_the_record_lock_cap_is_exact(wire):
    bs, topic, _ = wire
    wire_produce(bs, topic, [build_batch(values(30, 30 * k)) for k in range(10)])
    with wire_members(wire, 3, share_partition_max_record_locks="100") as (a, b, c):
        assert a.fetch(max_records=80)[0] == [(0, 89, 1)]          # whole small batches (soft MaxRecords)
        acquired, batches = b.fetch(max_records=80)
        assert acquired == [(90, 99, 1)]                             # cut at the cap, inside batch 90-119
        assert [r[0] for r in read_back(batches[0])] == list(range(90, 100))
        assert c.fetch()[0] == []                                    # 100 records locked: nothing more
        assert b.fetch(acks=[(90, 99)])[0] == []                     # SPSO still 0
        assert a.fetch(max_records=1, acks=[(0, 89)])[0] == [(100, 100, 1)]
        assert c.fetch(max_records=500)[0] == [(101, 199, 1)]        # SPSO 100: the window is 100..199

# ------------------------------------------------------------------ the settings
def test_the_settings_are_booleans_described_with_the_broker_default(sharebroker_factory):
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

    from protocol.errors import Errors

    broker = sharebroker_factory({"group.share.fair.acquisition.enable": "false"})
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    group = unique("g")
    res = ConfigResource(ConfigResource.Type.GROUP, group)
    entry = admin.describe_configs([res])[res].result(15)["share.fair.acquisition.enable"]
    assert entry.value == "false" and entry.source == 4  # STATIC_BROKER_CONFIG
    for value, ok in (("TRUE", True), ("maybe", False)):
        alter = ConfigResource(ConfigResource.Type.GROUP, group, incremental_configs=[
            ConfigEntry("share.fair.acquisition.enable", value, incremental_operation=AlterConfigOpType.SET)])
        if ok:
            admin.incremental_alter_configs([alter])[alter].result(15)
        else:
            with pytest.raises(KafkaException) as e:
                admin.incremental_alter_configs([alter])[alter].result(15)
            assert e.value.args[0].code() == Errors.INVALID_CONFIG
    assert admin.describe_configs([res])[res].result(15)["share.fair.acquisition.enable"].value == "TRUE"

