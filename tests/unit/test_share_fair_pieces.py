"""Fair acquisition (ours, broker/share/fair.py): in batch_optimized mode a log batch of more than
MaxRecords records is acquired MaxRecords at a time, the rest left in the log for the other
members; small batches are still acquired whole; the max-record-locks window is exact. With
``fair_acquisition=False`` the partition acquires whole batches, as Kafka 4.4."""
from __future__ import annotations

from protocol import compression
from protocol import records as R

from broker.share.acks import ACK_ACCEPT as ACC, ACK_RELEASE as REL
from broker.share.fair import OpenBatches, RecordIndexCache, ResponseRecords, last_new_to_acquire
from broker.share.partition import ACQUIRED, AVAILABLE, RECORD_LIMIT
from tests.unit.share_partition_support import Ref, make


def cached_states(sp):
    return sum(1 if b.offsets is None else len(b.offsets) for b in sp._cache)


async def test_a_big_batch_is_shared_max_records_at_a_time():
    h = await make(sizes=(10_000,), start=0)
    assert h.fetch("a", max_records=50) == [(0, 49, 1)]
    assert h.fetch("b", max_records=50) == [(50, 99, 1)]
    # The rest of the batch stays in the log: it is not in flight, so it takes no record lock.
    assert h.sp.end_offset == 100 and h.sp.in_flight_count == 100
    assert h.state(100) is None and h.sp.next_fetch_offset() == 100
    assert h.state(49) == (ACQUIRED, 1, "a", False) and h.state(50) == (ACQUIRED, 1, "b", False)
    assert h.fetch("c", max_records=7) == [(100, 106, 1)]
    assert cached_states(h.sp) == 3 and len(h.t.pending()) == 3


async def test_kafka_exact_setting_acquires_the_whole_batch():
    h = await make(sizes=(10_000,), start=0, fair_acquisition=False)
    assert h.fetch("a", max_records=50) == [(0, 9999, 1)]
    assert h.fetch("b", max_records=50) == []


async def test_small_batches_are_still_acquired_whole():
    # MaxRecords stays soft for batches of at most MaxRecords records: rounded up to the batch.
    h = await make(sizes=(20,) * 10, start=0)
    assert h.fetch("a", max_records=50) == [(0, 59, 1)]
    # A batch bigger than MaxRecords after small ones: only what is left of MaxRecords of it.
    h = await make(sizes=(30, 10_000), start=0)
    assert h.fetch("a", max_records=50) == [(0, 49, 1)]
    assert h.fetch("b", max_records=50) == [(50, 99, 1)]


async def test_the_record_locks_window_is_exact():
    h = await make(sizes=(30,) * 10, start=0, partition_max_record_locks=100)
    assert h.fetch("a", max_records=80) == [(0, 89, 1)]    # soft MaxRecords: three whole batches
    assert h.fetch("b", max_records=80) == [(90, 99, 1)]   # the window cuts the fourth batch exactly
    assert h.sp.in_flight_count == 100 and h.fetch("c") == []
    assert await h.ack("b", 90, 99, ACC) == 0
    assert h.fetch("c") == []                              # SPSO still 0: the window is full
    assert await h.ack("a", 0, 29, ACC) == 0
    assert h.sp.start_offset == 30 and h.fetch("c", max_records=500) == [(100, 129, 1)]
    # Kafka 4.4 takes the whole batch holding the last record the window allows.
    h = await make(sizes=(30,) * 10, start=0, partition_max_record_locks=100, fair_acquisition=False)
    assert h.fetch("a", max_records=80) == [(0, 89, 1)]
    assert h.fetch("b", max_records=80) == [(90, 119, 1)]


async def test_many_members_get_every_record_once_without_per_offset_state():
    h = await make(sizes=(10_000, 10_000), start=0, partition_max_record_locks=2000)
    members = [f"m{i}" for i in range(16)]
    held: dict[str, tuple[int, int]] = {}
    delivered = 0
    rounds = 0
    while delivered < 20_000:
        rounds += 1
        for m in members:
            if m in held:
                assert await h.ack(m, *held.pop(m), ACC) == 0
            got = h.fetch(m, max_records=50)
            if got:
                assert len(got) == 1 and got[0][1] - got[0][0] + 1 == 50 and got[0][2] == 1
                held[m] = got[0][:2]
                delivered += 50
            # Never more than 16 x 50 records in flight, no state per offset.
            assert h.sp.in_flight_count <= 16 * 50 and cached_states(h.sp) <= 16
    for m, rng in held.items():
        assert await h.ack(m, *rng, ACC) == 0
    assert h.sp.start_offset == 20_000 and h.sp.in_flight_count == 0
    assert rounds <= 20_000 // (16 * 50) + 1
    h.check_dcc()


async def test_released_and_expired_pieces_come_back_in_pieces():
    h = await make(sizes=(1000,), start=0)
    assert h.fetch("a", max_records=50) == [(0, 49, 1)]
    assert h.fetch("b", max_records=50) == [(50, 99, 1)]
    assert await h.ack("a", 0, 49, REL) == 0
    assert h.fetch("c", max_records=20) == [(0, 19, 2)]    # a redelivered piece is cut again
    h.t.advance(30_000)                                     # b's and c's locks run out
    await h.sp.drain()
    assert h.state(60) == (AVAILABLE, 1, "", False)
    assert h.fetch("d", max_records=50) == [(0, 19, 3), (20, 49, 2)]
    assert h.fetch("e", max_records=60) == [(50, 99, 2), (100, 109, 1)]


async def test_a_persisted_big_run_is_split_on_redelivery():
    # After a restart the persisted state holds one run 0-9999 AVAILABLE (released once).
    h = await make(sizes=(10_000,), start=0, batches=[(0, 9999, AVAILABLE, 1)])
    assert h.fetch("a", max_records=50) == [(0, 49, 2)]
    assert h.fetch("b", max_records=50) == [(50, 99, 2)]
    assert h.state(100) == (AVAILABLE, 1, "", False) and cached_states(h.sp) == 3
    h = await make(sizes=(10_000,), start=0, batches=[(0, 9999, AVAILABLE, 1)], fair_acquisition=False)
    assert h.fetch("a", max_records=50) == [(0, 9999, 2)]


async def test_per_offset_states_of_a_big_batch_are_taken_max_records_at_a_time():
    h = await make(sizes=(1000,), start=0, fair_acquisition=False)
    assert h.fetch("a") == [(0, 999, 1)]
    assert await h.ack("a", 0, 999, *([REL, ACC] * 500)) == 0    # every other record released
    h.sp.config.update(fair_acquisition=True)
    got = h.fetch("b", max_records=50)
    assert sum(hi - lo + 1 for lo, hi, _ in got) == 50 and got[0] == (0, 0, 2) and got[-1] == (98, 98, 2)


async def test_record_limit_mode_is_unchanged():
    h = await make(sizes=(1000,), start=0)
    assert h.fetch("a", max_records=50, mode=RECORD_LIMIT) == [(0, 49, 1)]
    assert h.sp.end_offset == 1000 and h.state(50) == (AVAILABLE, 0, "", False)   # Kafka: rest in flight


async def test_the_group_setting_applies_at_the_next_acquire():
    h = await make(sizes=(100, 100), start=0)
    assert h.fetch("a", max_records=10) == [(0, 9, 1)]
    h.sp.config.update(fair_acquisition=False)
    assert h.fetch("b", max_records=10) == [(10, 99, 1)]   # Kafka: up to the end of the batch


def test_last_new_to_acquire():
    batches = [Ref(0, 9), Ref(10, 109), Ref(110, 119)]
    # Kafka (piece 0): the end of the batch holding the last allowed record.
    assert last_new_to_acquire(batches, 0, 119, 15, 0, 10**9) == 109
    # Fair: a batch of more than `piece` records is cut; a small one is rounded up to its end.
    assert last_new_to_acquire(batches, 0, 119, 15, 50, 10**9) == 14
    assert last_new_to_acquire(batches, 0, 119, 15, 100, 10**9) == 109
    assert last_new_to_acquire(batches, 0, 119, 5, 50, 10**9) == 9
    # ... unless its end passes the window's last offset.
    assert last_new_to_acquire(batches, 0, 119, 15, 100, 50) == 14
    # A cut on a batch boundary, or in a hole between batches, is the cut itself.
    assert last_new_to_acquire(batches, 0, 119, 10, 50, 10**9) == 9
    assert last_new_to_acquire([Ref(0, 9), Ref(20, 29)], 0, 29, 15, 5, 10**9) == 14


def thinned(base: int, n: int, kept) -> Ref:
    """A batch of offsets base..base+n-1 of which the log cleaner kept the records at `kept` (deltas)."""
    full = R.build_batch([(b"k%d" % i, b"v%d" % i, []) for i in range(n)], base_offset=base, timestamp=1000)
    data = R.filter_batch(full, lambda sp: sp.offset_delta in kept)
    return Ref(base, base + n - 1, data)


def test_a_thinned_batch_is_cut_at_its_records():
    # 2,000 offsets, 150 records at their end (what compaction leaves of 2,000 updates of 150 keys):
    # at most 500 of them is still the whole batch, since it holds fewer records than a piece.
    tail = thinned(8000, 2000, set(range(1850, 2000)))
    assert last_new_to_acquire([tail], 8000, 9999, 500, 500, 10**9) == 9999
    # More records than a piece: a piece ends at a record and holds at least one, never only
    # offsets without records (librdkafka would not acknowledge such a range).
    spread = thinned(0, 1000, set(range(0, 1000, 10)) | {995})   # records at 0, 10, ..., 990, 995
    assert last_new_to_acquire([spread], 0, 999, 55, 50, 10**9) == 50     # records 0..50, not the gap 51..54
    assert last_new_to_acquire([spread], 51, 999, 5, 50, 10**9) == 60     # 51..55 holds none: to the next one
    assert last_new_to_acquire([spread], 991, 999, 5, 1, 10**9) == 999    # past the last record: the batch end
    assert last_new_to_acquire([spread], 991, 999, 5, 1, 996) == 996      # ... as far as the window allows
    # The cutting follows the records, so every piece of a fair hand-out holds records.
    first, pieces = 0, []
    while first <= 999:
        last = last_new_to_acquire([spread], first, 999, 50, 50, 10**9)
        pieces.append((first, last))
        first = last + 1
    kept = [o for o in range(1000) if o % 10 == 0 or o == 995]
    assert all(any(a <= o <= b for o in kept) for a, b in pieces)
    assert pieces[-1][1] == 999 and len(pieces) == 21


# ---------------------------------------------------------------- the records a response carries

class BatchRef:
    def __init__(self, data):
        info = R.read_header(data)
        self.base_offset, self.last_offset, self.data = info.base_offset, info.last_offset, data


def batch(n, base=0, codec=R.COMPRESSION_NONE):
    data = R.build_batch([(b"k%d" % i, b"v%d" % i, []) for i in range(n)], base_offset=base, timestamp=1000)
    if codec:
        info = R.read_header(data)
        data = R._assemble(info, info.attributes | codec, info.base_timestamp, info.max_timestamp,
                           info.records_count, compression.compress(codec, R.batch_body(data)))
    return BatchRef(data)


def offsets(data):
    return [r.offset for r in R.iter_records(data)]


def test_response_records_send_sub_batches_of_partly_acquired_batches():
    small, big, gz = batch(10, 0), batch(1000, 10), batch(1000, 1010, R.COMPRESSION_GZIP)
    out = ResponseRecords((b"t", 0), RecordIndexCache(), sub_batches=True)
    added = out.add([small, big, gz], [(0, 59, 1), (1010, 1019, 1)])
    assert out.batches[0] is small.data                        # wholly acquired: as stored
    assert offsets(out.batches[1]) == list(range(10, 60))       # partly: just the acquired records
    assert out.batches[2] is gz.data                            # compressed: whole, ranges filter it
    assert added == out.size == sum(len(r) for r in out.records) == sum(len(b) for b in out.batches)
    # the sub-batch is its new header, then the acquired records' bytes where they lie: not copied
    assert b"".join(out.records) == b"".join(out.batches) and len(out.records) == 4
    assert isinstance(out.records[2], memoryview) and out.records[2].obj is big.data
    # The same log batch met again in this request: one batch holding the union.
    out.add([big], [(100, 109, 2)])
    assert len(out.batches) == 3 and offsets(out.batches[1]) == list(range(10, 60)) + list(range(100, 110))
    assert out.size == sum(len(r) for r in out.records) and b"".join(out.records) == b"".join(out.batches)


def test_response_records_without_fair_acquisition_are_whole_batches():
    big = batch(1000)
    out = ResponseRecords((b"t", 0), RecordIndexCache(), sub_batches=False)
    out.add([big], [(0, 49, 1)])
    assert out.records == out.batches == [big.data]


def test_the_record_index_of_a_big_batch_is_cached_and_checked():
    cache = RecordIndexCache(max_records=2000)
    big = batch(1000)
    for k in range(0, 1000, 50):
        out = ResponseRecords((b"t", 0), cache, sub_batches=True)
        out.add([BatchRef(bytes(big.data))], [(k, k + 49, 1)])   # a fresh copy per read, as the log gives
        assert offsets(out.batches[0]) == list(range(k, k + 50))
    index = cache.get((b"t", 0, 0), big.data)
    assert len(cache) == 1 and index.walked == 1000               # walked once in all
    # A batch rewritten under the same base offset (log cleaner) is indexed again.
    other = batch(500)
    assert cache.get((b"t", 0, 0), other.data) is not index
    # At most max_records records indexed: the least recently used batch goes first.
    cache.get((b"t", 0, 1), batch(1000, 1).data)
    cache.get((b"t", 0, 2), batch(1000, 2).data)
    assert len(cache) == 2


async def test_long_polls_wake_only_when_a_fetch_may_acquire_more():
    # With many members at the max-record-locks cap, every acknowledgement used to wake every
    # waiting ShareFetch; only a moved SPSO (room in the window) or AVAILABLE records can help one.
    h = await make(sizes=(100,), start=0, partition_max_record_locks=100)
    for m in "abcd":
        assert h.fetch(m, max_records=25)
    woken = h.wakeups
    assert await h.ack("b", 25, 49, ACC) == 0 and await h.ack("c", 50, 74, ACC) == 0
    assert h.wakeups == woken                      # behind the head: the window stays full
    assert await h.ack("a", 0, 24, ACC) == 0
    assert h.wakeups == woken + 1 and h.sp.start_offset == 75
    assert await h.ack("d", 75, 79, REL) == 0      # released: available again
    assert h.wakeups == woken + 2


def test_the_batch_being_cut_is_kept_while_the_log_holds_it(tmp_path):
    from broker.log import PartitionLog
    from broker.log.refs import BatchRef
    from tests.unit.test_log import Clock

    plog = PartitionLog(str(tmp_path), "t", 0, {}, clock=Clock())
    data = R.build_batch([(None, b"v%d" % i, []) for i in range(1000)])
    plog.append(data, R.validate_records(data), 0)
    key, kept = (b"t", 0), OpenBatches()
    (ref,) = plog.read(0, 1 << 20)
    kept.put(key, [ref], [(0, 49, 1)])                        # records left: kept for the next piece
    (again,) = kept.get(key, plog, 50, 1000)
    assert bytes(again.data) == bytes(ref.data) and (again.base_offset, again.last_offset) == (0, 999)
    assert kept.get(key, plog, 50, 999) is None               # past the upper bound: read (and forgotten)
    kept.put(key, [ref], [(50, 99, 1)])
    kept.put(key, [ref], [(100, 999, 1)])                     # nothing left of it: forgotten
    assert len(kept) == 0 and kept.get(key, plog, 100, 1000) is None
    # The log holds another batch at that offset now (the cleaner rewrote it): read again.
    other = R.build_batch([(None, b"w%d" % i, []) for i in range(1000)])
    kept.put(key, [BatchRef(0, 999, memoryview(other))], [(0, 49, 1)])
    assert kept.get(key, plog, 50, 1000) is None and len(kept) == 0
    plog.close()
