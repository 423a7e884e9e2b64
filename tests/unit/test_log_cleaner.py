"""The log cleaner's logic, in the spirit of Kafka's ``LogCleanerTest`` / ``LogCleanerManagerTest``.

The cleaner runs in this process here (``LogCleaner.clean_now``: the job, swap and checkpoint of a
real pass, without the worker process); records are read back with kafka-python's own batch
decoder, so what the cleaner writes is checked by an independent implementation."""

import asyncio
import os

import pytest
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from broker.log import LogManager, PartitionLog
from broker.log.cleaner import (CHECKPOINT_FILE, CleanerConfig, LogCleaner, LogToClean, OffsetMap,
                                group_segments_by_size, read_checkpoints)
from broker.log.cleaner.transactions import CleanedTransactionMetadata, CONTROL_ABORT, CONTROL_COMMIT
from protocol import compression
from protocol import records as R
from protocol.records import validate_records

from tests.missing_inputs import missing_input
from tests.support import until_async
from tests.unit.test_log import T0, Clock

DAY = 86_400_000


COMPACT = {"cleanup.policy": "compact", "internal.segment.bytes": 2048, "index.interval.bytes": 256,
           "min.cleanable.dirty.ratio": "0.01"}


def make(tmp_path, config=None, clock=None, cleaner=None):
    clock = clock or Clock()
    logs = LogManager(str(tmp_path / "data"), clock=clock)
    logs.create_topic("t", 1, {**COMPACT, **(config or {})})
    return logs, logs.get_log("t", 0), LogCleaner(logs, cleaner, clock=clock), clock


def append(plog, records, codec=0, pid=-1, epoch=-1, seq=-1, txn=False, ts=None):
    """Append one batch built by kafka-python; ``records`` are (key, value) pairs."""
    b = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=txn, producer_id=pid,
                                  producer_epoch=epoch, base_sequence=seq, batch_size=1 << 30)
    now = plog.clock() if ts is None else ts
    for i, (k, v) in enumerate(records):
        b.append(i, timestamp=now, key=k, value=v, headers=[])
    data = bytes(b.build())
    return plog.append(data, validate_records(data), check_producer=pid >= 0)


def put(plog, key: int, value: int | None, **kw):
    return append(plog, [(b"k%d" % key, None if value is None else b"v%d" % value)], **kw)


def read_all(plog):
    """(offset, key, value) of every record from the log start, decoded by kafka-python."""
    out = []
    for ref in plog.read(plog.log_start_offset, 1 << 30):
        kb = DefaultRecordBatch(bytes(ref.data))
        assert kb.validate_crc()
        if not kb.is_control_batch:
            out.extend((r.offset, r.key, r.value) for r in kb)
    return out


def batches(plog):
    return [R.read_header(bytes(ref.data)) for ref in plog.read(plog.log_start_offset, 1 << 30)]


def latest(records):
    out = {}
    for off, k, v in records:
        out[k] = (off, v)
    return out


# ------------------------------------------------------------------ offset map
def test_offset_map_latest_offset_per_key_and_capacity():
    m = OffsetMap(128 * 10, load_factor=0.5)
    assert (m.slots, m.capacity) == (10, 5)
    for i in range(5):
        m.put(b"k%d" % i, i)
    m.put(b"k1", 9)
    assert m.get(b"k1") == 9 and m.get(b"k0") == 0 and m.get(b"nope") == -1
    assert m.latest_offset == 9 and m.full and m.utilization == 0.5
    long_a, long_b = b"x" * 40 + b"a", b"x" * 40 + b"b"  # hashed keys stay distinct
    m.clear()
    m.put(long_a, 1)
    m.put(long_b, 2)
    assert (m.get(long_a), m.get(long_b), m.latest_offset) == (1, 2, 2)
    with pytest.raises(ValueError):
        OffsetMap(10)


# ------------------------------------------------------------ segment grouping
def test_group_segments_by_size():
    segs = [(0, 600), (10, 600), (20, 600), (30, 100), (40, 1500), (50, 0)]
    groups = group_segments_by_size(segs, 1300, 1 << 20, 1, 60)
    assert [[b for b, _ in g] for g in groups] == [[0, 10], [20, 30], [40], [50]]
    # index entries (estimated from sizes) bound a group too
    groups = group_segments_by_size(segs, 1 << 30, 700, 1, 60)
    assert [[b for b, _ in g] for g in groups] == [[0], [10], [20, 30], [40], [50]]
    # a group never spans more than 2^31 offsets
    far = [(0, 10), (1 << 31, 10), ((1 << 31) + 5, 10)]
    assert [[b for b, _ in g] for g in group_segments_by_size(far, 1 << 30, 1 << 30, 1, (1 << 32))] == \
        [[0], [1 << 31, (1 << 31) + 5]]


# --------------------------------------------------------- transactional state
def test_cleaned_transaction_metadata():
    t = CleanedTransactionMetadata([(5, 7)])  # producer 7 aborted a transaction starting at 5
    assert not t.on_batch_read(1, True, 3)         # producer 1: a committed transaction
    assert t.on_batch_read(7, True, 6)             # producer 7's aborted data may go
    assert not t.on_control_batch_read(7, 8, CONTROL_ABORT)  # marker kept: its data was seen
    assert not t.on_control_batch_read(1, 9, CONTROL_COMMIT)  # committed data seen: kept
    assert t.on_control_batch_read(1, 12, CONTROL_COMMIT)     # nothing of that transaction seen
    assert t.on_control_batch_read(7, 13, CONTROL_ABORT)      # no aborted data seen any more
    assert t.on_control_batch_read(3, 14, None)               # an emptied marker


# ------------------------------------------------------------- choosing logs
def test_dirty_section_ratio_and_dirtiest_first(tmp_path):
    logs, plog, cleaner, clock = make(tmp_path, {"min.cleanable.dirty.ratio": "0.5"})
    logs.create_topic("u", 1, {**COMPACT, "min.cleanable.dirty.ratio": "0.5"})
    other = logs.get_log("u", 0)
    assert cleaner.grab_filthiest() is None  # empty logs
    for i in range(60):
        put(plog, i % 3, i)
        put(other, i % 3, i)
    ltc = LogToClean(plog, None, clock())
    assert ltc.first_dirty == 0 and ltc.first_uncleanable == plog.segments[-1].base_offset
    assert ltc.clean_bytes == 0 and ltc.cleanable_ratio == 1.0
    assert cleaner.clean_now(other) == other.segments[-1].base_offset
    # ``other`` is clean now: ``t`` is the dirtiest
    assert cleaner.grab_filthiest().log is plog
    # checkpoint file in Kafka's format
    assert read_checkpoints(os.path.join(logs.data_dir, CHECKPOINT_FILE)) == {("u", 0): other.segments[-1].base_offset}
    with open(os.path.join(logs.data_dir, CHECKPOINT_FILE)) as f:
        assert f.read().splitlines()[:3] == ["0", "1", f"u 0 {other.segments[-1].base_offset}"]


def test_ratio_threshold_and_max_compaction_lag(tmp_path):
    logs, plog, cleaner, clock = make(tmp_path, {"min.cleanable.dirty.ratio": "0.99",
                                                 "max.compaction.lag.ms": str(DAY)})
    for i in range(40):
        put(plog, i % 2, i)
    cleaner.clean_now(plog)
    for i in range(6):
        put(plog, i % 2, i)
    plog.roll()
    ltc = LogToClean(plog, cleaner.checkpoints[("t", 0)], clock())
    assert 0 < ltc.cleanable_ratio < 0.99 and not ltc.need_compaction_now
    assert cleaner.grab_filthiest() is None
    clock.now += DAY + 1  # the dirty segment's first batch is now older than max.compaction.lag.ms
    ltc = cleaner.grab_filthiest()
    assert ltc is not None and ltc.need_compaction_now and ltc.compaction_delay_ms == 1


def test_min_compaction_lag_and_lso_bound_the_dirty_section(tmp_path):
    logs, plog, cleaner, clock = make(tmp_path, {"min.compaction.lag.ms": "1000"})
    for i in range(30):
        put(plog, i % 2, i, ts=T0 - 5000)
    first_recent = plog.log_end_offset
    for i in range(30):
        put(plog, i % 2, i)
    ltc = LogToClean(plog, None, clock())
    seg_of_recent = max(s.base_offset for s in plog.segments if s.base_offset <= first_recent)
    assert ltc.first_uncleanable == seg_of_recent
    # an open transaction holds the last stable offset: nothing from its segment on is cleanable
    logs2, plog2, cleaner2, clock2 = make(tmp_path / "b")
    for i in range(10):
        put(plog2, i, i)
    open_at = plog2.log_end_offset
    put(plog2, 99, 1, pid=5, epoch=0, seq=0, txn=True)
    for i in range(30):
        put(plog2, i, i)
    ltc = LogToClean(plog2, None, clock2())
    assert plog2.last_stable_offset == open_at
    assert ltc.first_uncleanable == max(s.base_offset for s in plog2.segments if s.base_offset <= open_at)


def test_checkpoint_outside_the_log_is_reset(tmp_path):
    logs, plog, cleaner, clock = make(tmp_path)
    for i in range(30):
        put(plog, i % 4, i)
    cleaner.checkpoints[("t", 0)] = 10 ** 9
    ltc = cleaner.grab_filthiest()
    assert ltc.first_dirty == 0 and cleaner.checkpoints[("t", 0)] == 0


# --------------------------------------------------------------- the cleaning
def test_latest_value_per_key_offsets_unchanged(tmp_path):
    logs, plog, cleaner, clock = make(tmp_path)
    for i in range(200):
        put(plog, i % 10, i)
    before = read_all(plog)
    segs_before = plog.segment_count
    end = cleaner.clean_now(plog)
    after = read_all(plog)
    active = plog.segments[-1].base_offset
    assert end == active
    cleaned = [r for r in after if r[0] < active]
    want = {k: v for k, v in latest([r for r in before if r[0] < active]).items()}
    assert latest(cleaned) == want and len(cleaned) == len(want)   # exactly one record per key
    assert [r for r in after if r[0] >= active] == [r for r in before if r[0] >= active]
    assert all(r in before for r in after)  # offsets (and values) unchanged
    assert plog.log_end_offset == 200
    # nothing dirty, nothing to do
    assert cleaner.grab_filthiest() is None
    # the next pass regroups the small cleaned segments (groups are sized by their size before cleaning)
    for i in range(100):
        put(plog, i % 10, 1000 + i)
    cleaner.clean_now(plog)
    assert plog.segment_count < segs_before
    assert sorted(v for _o, _k, v in read_all(plog))[-10:] == sorted(b"v%d" % (1090 + i) for i in range(10))


def test_tombstones_kept_until_delete_horizon(tmp_path):
    logs, plog, cleaner, clock = make(tmp_path, {"delete.retention.ms": "1000"})
    for i in range(20):
        put(plog, i, i)
    for i in range(0, 20, 2):
        put(plog, i, None)          # tombstones for the even keys
    for i in range(40):
        put(plog, 100 + i % 3, i)   # more data so the tombstones are in closed segments
    cleaner.clean_now(plog)
    recs = read_all(plog)
    tomb = [r for r in recs if r[2] is None]
    assert sorted(r[1] for r in tomb) == sorted(b"k%d" % i for i in range(0, 20, 2))
    assert {r[1] for r in recs if r[2] is not None and r[0] < 20} == {b"k%d" % i for i in range(1, 20, 2)}
    hdrs = [h for h in batches(plog) if h.attributes & R.DELETE_HORIZON_MASK]
    assert hdrs and all(h.base_timestamp == clock.now + 1000 for h in hdrs)  # KIP-534 delete horizon
    # not yet past the horizon: another pass keeps them
    for i in range(40):
        put(plog, 100 + i % 3, i)
    cleaner.clean_now(plog)
    assert len([r for r in read_all(plog) if r[2] is None]) == 10
    clock.now += 1001
    for i in range(40):
        put(plog, 100 + i % 3, i)
    cleaner.clean_now(plog)
    recs = read_all(plog)
    assert [r for r in recs if r[2] is None] == []
    assert {r[1] for r in recs if r[0] < 20} == {b"k%d" % i for i in range(1, 20, 2)}


@pytest.mark.parametrize("codec", [R.COMPRESSION_GZIP, R.COMPRESSION_SNAPPY, R.COMPRESSION_LZ4, R.COMPRESSION_ZSTD])
def test_compressed_batches_rewritten_with_their_codec(tmp_path, codec):
    if not compression.available(codec):
        missing_input("the optional extra sharebroker[compression] (in the test extra)")
    logs, plog, cleaner, clock = make(tmp_path, {"internal.segment.bytes": 4096})
    for i in range(60):
        append(plog, [(b"k%d" % ((i + j) % 7), b"v%d-%d" % (i, j) * 40) for j in range(4)], codec=codec)
    before = read_all(plog)
    cleaner.clean_now(plog)
    active = plog.segments[-1].base_offset
    after = read_all(plog)
    assert latest([r for r in after if r[0] < active]) == latest([r for r in before if r[0] < active])
    assert len([r for r in after if r[0] < active]) == 7
    assert {h.compression for h in batches(plog)} == {codec}


def test_unavailable_codec_kept_whole(tmp_path, monkeypatch, caplog):
    logs, plog, cleaner, clock = make(tmp_path)
    if not compression.available(R.COMPRESSION_ZSTD):
        missing_input("the optional extra sharebroker[compression], to write the zstd batches")
    for i in range(30):
        append(plog, [(b"k%d" % (i % 3), b"z%d" % i * 50)], codec=R.COMPRESSION_ZSTD)
        put(plog, i % 3, i)
    before = read_all(plog)
    monkeypatch.setattr(compression, "_cramjam", None)  # as without the extra
    with caplog.at_level("WARNING"):
        cleaner.clean_now(plog)
        cleaner.clean_now(plog)
    after = read_all(plog)
    active = plog.segments[-1].base_offset
    zstd = [h for h in batches(plog) if h.compression == R.COMPRESSION_ZSTD]
    assert len([h for h in zstd if h.base_offset < active]) == len([r for r in before if r[0] < active]) // 2
    assert all(r in before for r in after)
    warnings = [r for r in caplog.records if "sharebroker[compression]" in r.getMessage()]
    assert len(warnings) == 1 and "zstd" in warnings[0].getMessage()


def test_keyless_records_removed(tmp_path):
    logs, plog, cleaner, clock = make(tmp_path)
    for i in range(30):
        append(plog, [(None, b"nokey%d" % i), (b"k%d" % (i % 2), b"v%d" % i)])
    cleaner.clean_now(plog)
    active = plog.segments[-1].base_offset
    assert all(k is not None for off, k, v in read_all(plog) if off < active)


def test_idempotent_producer_last_batch_kept_empty(tmp_path):
    logs, plog, cleaner, clock = make(tmp_path)
    seq = 0
    for i in range(20):
        put(plog, 1, i, pid=42, epoch=3, seq=seq)
        seq += 1
    last_pid_offset = plog.log_end_offset - 1
    for i in range(40):
        put(plog, 1, 100 + i)  # the same key from another writer makes producer 42's records obsolete
    cleaner.clean_now(plog)
    mine = [h for h in batches(plog) if h.producer_id == 42]
    assert len(mine) == 1 and mine[0].records_count == 0
    assert mine[0].base_offset == last_pid_offset and mine[0].base_sequence == 19
    # the producer state survives a restart and the next sequence is accepted
    logs.close()
    logs = LogManager(str(tmp_path / "data"), clock=clock)
    plog = logs.get_log("t", 0)
    put(plog, 1, 7, pid=42, epoch=3, seq=20)
    with pytest.raises(Exception):
        put(plog, 1, 8, pid=42, epoch=3, seq=25)  # out of sequence: the state was kept


def test_aborted_transaction_removed_committed_kept_markers_after_horizon(tmp_path):
    logs, plog, cleaner, clock = make(tmp_path, {"delete.retention.ms": "500"})
    put(plog, 1, 1, pid=7, epoch=0, seq=0, txn=True)
    put(plog, 2, 1, pid=7, epoch=0, seq=1, txn=True)
    plog.append_control(7, 0, commit=False)
    put(plog, 3, 1, pid=8, epoch=0, seq=0, txn=True)
    plog.append_control(8, 0, commit=True)
    put(plog, 1, 2, pid=9, epoch=0, seq=0, txn=True)
    plog.append_control(9, 0, commit=True)
    put(plog, 4, 1, pid=7, epoch=0, seq=2, txn=True)
    plog.append_control(7, 0, commit=True)

    def filler():
        for i in range(40):
            put(plog, 100 + i % 2, i)

    def markers():
        return [(h.producer_id, h.records_count) for h in batches(plog) if h.is_control]
    filler()
    cleaner.clean_now(plog)
    active = plog.segments[-1].base_offset
    values = {(k, v) for off, k, v in read_all(plog) if off < active and not k.startswith(b"k10")}
    assert values == {(b"k3", b"v1"), (b"k1", b"v2"), (b"k4", b"v1")}  # pid 7's aborted k1, k2 are gone
    assert markers() == [(7, 1), (8, 1), (9, 1), (7, 1)]
    assert plog.aborted_transactions(0, plog.log_end_offset) == [(7, 0)]
    filler()
    cleaner.clean_now(plog)  # the abort marker's transaction is empty now: it gets a delete horizon
    abort = [h for h in batches(plog) if h.is_control and h.base_offset == 2]
    assert abort and abort[0].attributes & R.DELETE_HORIZON_MASK and abort[0].base_timestamp == clock.now + 500
    clock.now += 501
    filler()
    cleaner.clean_now(plog)  # past its horizon: the abort marker and the aborted entry go
    assert markers() == [(8, 1), (9, 1), (7, 1)]
    assert plog.aborted_transactions(0, plog.log_end_offset) == []
    # the log reads the same after a restart
    logs.close()
    logs = LogManager(str(tmp_path / "data"), clock=clock)
    plog = logs.get_log("t", 0)
    assert plog.aborted_transactions(0, plog.log_end_offset) == []
    assert plog.last_stable_offset == plog.log_end_offset


def test_aborted_transaction_of_a_live_producer_keeps_its_marker(tmp_path):
    """Kafka keeps a producer's last batch (emptied) and so the abort marker after it, until the
    producer id expires."""
    logs, plog, cleaner, clock = make(tmp_path, {"delete.retention.ms": "0"})
    put(plog, 1, 1, pid=7, epoch=0, seq=0, txn=True)
    plog.append_control(7, 0, commit=False)
    for _ in range(3):
        for i in range(40):
            put(plog, 100 + i % 2, i)
        cleaner.clean_now(plog)
        clock.now += 1
    hdrs = [h for h in batches(plog) if h.producer_id == 7]
    assert [(h.base_offset, h.is_control, h.records_count) for h in hdrs] == [(0, False, 0), (1, True, 1)]
    assert plog.aborted_transactions(0, plog.log_end_offset) == [(7, 0)]


def test_an_old_abort_does_not_keep_the_producers_later_records_out_of_the_map(tmp_path):
    """A transactional producer that aborted before the dirty section: its committed records in the
    dirty section still supersede older values (Kafka maps with the aborted transactions of the dirty
    section only). Mapping them as aborted kept the old value beside the tombstone, and once the
    tombstone's horizon passed the deleted key came back."""
    logs, plog, cleaner, clock = make(tmp_path, {"delete.retention.ms": "1000"})

    def filler():
        for i in range(40):
            put(plog, 100 + i % 2, i)
    put(plog, 1, 1, pid=7, epoch=0, seq=0, txn=True)
    plog.append_control(7, 0, commit=False)
    filler()
    cleaner.clean_now(plog)  # the abort is below the checkpoint now
    put(plog, 5, 5, pid=7, epoch=0, seq=1, txn=True)
    plog.append_control(7, 0, commit=True)
    put(plog, 5, None, pid=7, epoch=0, seq=2, txn=True)  # the key is deleted
    plog.append_control(7, 0, commit=True)
    filler()
    cleaner.clean_now(plog)
    assert [v for _o, k, v in read_all(plog) if k == b"k5"] == [None]  # the tombstone superseded v5
    clock.now += 1001
    filler()
    cleaner.clean_now(plog)
    assert [v for _o, k, v in read_all(plog) if k == b"k5"] == []  # past its horizon: the key is gone


def test_map_full_cleans_in_several_passes(tmp_path):
    logs, plog, cleaner, clock = make(tmp_path, cleaner={"log.cleaner.dedupe.buffer.size": str(128 * 8),
                                                         "log.cleaner.io.buffer.load.factor": "0.5"})
    for i in range(150):
        put(plog, i % 12, i)
    before = read_all(plog)
    active = plog.segments[-1].base_offset
    first = cleaner.clean_now(plog)
    assert 0 < first < active  # four keys per pass
    ends = [first]
    while ends[-1] < active:
        ends.append(cleaner.clean_now(plog))
    assert ends == sorted(ends) and ends[-1] == active
    after = read_all(plog)
    assert latest([r for r in after if r[0] < active]) == latest([r for r in before if r[0] < active])


def test_swap_refused_when_segments_left_the_log(tmp_path):
    logs, plog, cleaner, clock = make(tmp_path)
    for i in range(60):
        put(plog, i % 3, i)
    ltc = cleaner.grab_filthiest()
    job = cleaner.make_job(ltc)
    from broker.log.cleaner.cleaner import Cleaner
    from broker.log.segment import CLEANED_SUFFIX, Segment
    c = Cleaner(*CleanerConfig().worker_settings())
    gen = c.clean(job)
    group = next(gen)
    plog.delete_records(plog.segments[2].base_offset)  # the group's first segments go
    seg = Segment.open(plog.dir, group.base, 1 << 20, 256, clock(), suffix=CLEANED_SUFFIX)
    old = [s for s in ltc.segments if s.base_offset in group.old_bases]
    assert not plog.replace_segments(seg, old)
    seg.delete()
    assert not [n for n in os.listdir(plog.dir) if n.endswith(CLEANED_SUFFIX)]


# ---------------------------------------------------------- crash recovery
@pytest.mark.parametrize("phase", ["cleaned", "swap", "deleted", "done"])
def test_interrupted_swap_recovered(tmp_path, phase):
    """A crash at each step of the swap: start-up rolls back or completes it; no record is lost."""
    logs, plog, cleaner, clock = make(tmp_path)
    for i in range(120):
        put(plog, i % 5, i)
    before = read_all(plog)
    ltc = cleaner.grab_filthiest()
    job = cleaner.make_job(ltc)
    from broker.log.cleaner.cleaner import Cleaner
    from broker.log.segment import CLEANED_SUFFIX, Segment
    gen = Cleaner(*CleanerConfig().worker_settings()).clean(job)
    group = next(gen)

    class Crash(Exception):
        pass

    def on_phase(p):
        if p == phase:
            raise Crash

    seg = Segment.open(plog.dir, group.base, 1 << 20, 256, clock(), suffix=CLEANED_SUFFIX)
    old = [s for s in ltc.segments if s.base_offset in group.old_bases]
    if phase == "cleaned":
        pass
    else:
        with pytest.raises(Crash):
            plog.replace_segments(seg, old, on_phase)
    # the process dies: reopen the directory without a clean shutdown
    for s in plog.segments:
        s.close()
    seg.close()
    os.close(logs._lock_fd)
    logs._lock_fd = None
    reopened = PartitionLog(plog.dir, "t", 0, COMPACT, clock=clock)
    names = os.listdir(plog.dir)
    assert not [n for n in names if n.endswith((".cleaned", ".swap", ".deleted"))]
    after = read_all(reopened)
    assert all(r in before for r in after)
    assert latest(after) == latest(before)
    committed = phase != "cleaned"
    assert (reopened.segments[0].base_offset == group.base and len(after) < len(before)) == committed \
        or not committed and after == before
    assert reopened.log_end_offset == 120


def test_replaced_segments_take_their_producer_snapshots_with_them(tmp_path):
    """As Kafka's ``UnifiedLog.replaceSegments``: a segment the cleaner merged away leaves no producer
    snapshot behind (they were kept until the next restart, one file per merged segment)."""
    logs, plog, cleaner, clock = make(tmp_path)
    for i in range(200):
        put(plog, i % 10, i)
    cleaner.clean_now(plog)
    segments = plog.segment_count
    for i in range(100):
        put(plog, i % 10, 1000 + i)
    cleaner.clean_now(plog)  # regroups the small cleaned segments

    def snapshots():
        return sorted(int(n.split(".")[0]) for n in os.listdir(plog.dir) if n.endswith(".snapshot"))
    bases = [s.base_offset for s in plog.segments]
    assert len(bases) < segments  # the cleaning merged segments
    assert set(snapshots()) <= set(bases)


# ---------------------------------------------------------- worker processes
async def test_a_worker_that_cannot_start_leaves_the_log_to_the_next_tick(tmp_path, monkeypatch, caplog):
    """Starting the worker failed (out of file descriptors, processes) after the log was marked in
    progress: it stayed marked, never to be cleaned again, and the failure was logged as a traceback."""
    from broker.log.cleaner import worker

    logs, plog, cleaner, clock = make(tmp_path)
    for i in range(60):
        put(plog, i % 3, i)

    def refuse(*_a, **_k):
        raise OSError(24, "Too many open files")
    monkeypatch.setattr(worker, "WorkerProcess", refuse)  # the manager imports it when it first starts one
    cleaner._loop = asyncio.get_running_loop()
    cleaner._tick()
    cleaner.close()
    assert cleaner.in_progress == {} and cleaner.grab_filthiest() is not None
    assert not [r for r in caplog.records if r.exc_info]


async def test_a_worker_that_died_is_reaped(tmp_path):
    """A worker process that exits is waited for and its pipes closed (it stayed a zombie, with two
    descriptors open, until garbage collection)."""
    logs, plog, cleaner, clock = make(tmp_path)
    for i in range(60):
        put(plog, i % 3, i)
    cleaner.start(asyncio.get_running_loop())
    try:
        await until_async(lambda: cleaner.checkpoints.get(("t", 0), 0) > 0, 30, "a pass done")
        worker = cleaner._slots[0].worker
        worker.proc.kill()
        await until_async(lambda: cleaner._slots[0].worker is None, 30, "the worker's exit noticed")
        assert worker.proc.returncode is not None and worker.proc.stdout.closed and worker.proc.stdin.closed
        assert cleaner.metrics()["dead_thread_count"] == 1
    finally:
        cleaner.close()
        logs.close()



def test_a_corrupt_segment_fails_the_pass_and_loses_nothing(tmp_path):
    """A batch whose length runs past its sealed segment (a damaged disk block): the pass fails and
    the partition is marked uncleanable, as Kafka's "Log segment may be corrupt"; the cleaned copy
    ended at the damage instead, and the swap dropped every record after it."""
    logs, plog, cleaner, clock = make(tmp_path)
    for i in range(120):
        put(plog, i % 5, i)
    seg = plog.segments[1]
    with open(seg.log_path, "r+b") as f:
        first = R.read_header(f.read(R.HEADER_SIZE)).size
        f.seek(first + 8)
        f.write((1 << 20).to_bytes(4, "big"))  # the second batch now claims 1 MiB
    files = {n: open(os.path.join(plog.dir, n), "rb").read() for n in os.listdir(plog.dir) if n.endswith(".log")}
    with pytest.raises(R.RecordsError):
        cleaner.clean_now(plog)
    assert ("t", 0) in cleaner.uncleanable and cleaner.grab_filthiest() is None
    assert {n: open(os.path.join(plog.dir, n), "rb").read() for n in os.listdir(plog.dir)
            if n.endswith(".log")} == files


def test_segments_deleted_during_a_pass_abort_it_without_marking_the_partition(tmp_path, monkeypatch):
    """Retention (``compact,delete``) or DeleteRecords removed segments of the job while the worker
    mapped the dirty section: opening them failed and the partition was marked uncleanable until the
    next restart. Kafka aborts such a pass (its deletions never race the cleaner); here the next pass
    cleans what is left."""
    from broker.log.cleaner.cleaner import Cleaner

    logs, plog, cleaner, clock = make(tmp_path)
    for i in range(200):
        put(plog, i % 10, i)
    mapped = Cleaner.build_offset_map

    def retention_runs_meanwhile(self, job, stats):
        mapped(self, job, stats)
        plog.delete_records(plog.segments[2].base_offset)
    monkeypatch.setattr(Cleaner, "build_offset_map", retention_runs_meanwhile)
    with pytest.raises(FileNotFoundError):
        cleaner.clean_now(plog)
    monkeypatch.undo()
    assert cleaner.uncleanable == set() and cleaner.in_progress == {}
    assert cleaner.grab_filthiest() is not None
    before = read_all(plog)
    assert cleaner.clean_now(plog) == plog.segments[-1].base_offset
    assert latest(read_all(plog)) == latest(before)


def test_worker_stops_quietly_when_the_broker_is_gone(monkeypatch):
    """A kill -9 of the broker while its worker finishes a pass: the result pipe is broken. The worker
    sent an "error" frame about it, broke the pipe again and died with a traceback on the broker's
    stderr; it now stops (main() returns) without writing anything more."""
    import pickle
    from types import SimpleNamespace

    from broker.log.cleaner import worker

    class Stats:
        def as_dict(self):
            return {}

    class FakeCleaner:
        unavailable_codecs: set = set()

        def __init__(self, *settings):
            pass

        def clean(self, job):
            yield ["a group"]
            return 7, Stats()

    monkeypatch.setattr(worker, "Cleaner", FakeCleaner)
    jobs_r, jobs_w = os.pipe()
    out_r, out_w = os.pipe()
    os.close(out_r)  # the broker is gone
    data = pickle.dumps((SimpleNamespace(job_id=1), (1, 2, 3)))
    os.write(jobs_w, worker._LEN.pack(len(data)) + data)
    os.close(jobs_w)
    try:
        with pytest.raises(BrokenPipeError):
            worker._serve(jobs_r, out_w)
    finally:
        os.close(jobs_r)
        os.close(out_w)
