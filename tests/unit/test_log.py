"""Partition logs and the log manager: append/read, roll, retention, recovery, producer state."""

import os
import subprocess
import sys
import uuid

import pytest

from broker.log import ConfigError, DataDirLockedError, LogError, LogManager, PartitionLog
from broker.log import fileio
from broker.log.producer_state import INVALID_PRODUCER_EPOCH, INVALID_TXN_STATE, OUT_OF_ORDER_SEQUENCE_NUMBER
from protocol import records as R
from protocol.records import build_batch, iter_records, validate_records

T0 = 1_700_000_000_000


class Clock:
    def __init__(self, now=T0):
        self.now = now

    def __call__(self):
        return self.now


SMALL = {"segment.bytes": 4096, "index.interval.bytes": 512}


def batch(n=3, value=b"v" * 100, ts=T0, **kw):
    return build_batch([(b"k%d" % i, value, [("h", b"x")]) for i in range(n)], timestamp=ts, **kw)


def append(plog, data, now=None):
    return plog.append(data, validate_records(data), now)


def open_log(path, config=None, clock=None, **kw):
    return PartitionLog(str(path), "t", 0, SMALL if config is None else config, clock=clock or Clock(), **kw)


def stored_form(data: bytes, base_offset: int, epoch: int = 0) -> bytes:
    buf = bytearray(data)
    R.set_base_offset(buf, 0, base_offset)
    R.set_partition_leader_epoch(buf, 0, epoch)
    return bytes(buf)


def all_offsets(plog):
    return [r.offset for ref in plog.read(plog.log_start_offset, 1 << 30) for r in iter_records(ref.data)]


# ------------------------------------------------------------------ append / read
def test_append_read_byte_identical(tmp_path):
    plog = open_log(tmp_path / "t-0", {})
    sent = [batch(n, ts=T0 + n) for n in (1, 3, 2)]
    results = [append(plog, b) for b in sent]
    assert [(r.base_offset, r.last_offset, r.log_append_time) for r in results] == [(0, 0, -1), (1, 3, -1), (4, 5, -1)]
    assert plog.log_end_offset == plog.high_watermark == plog.last_stable_offset == 6
    refs = plog.read(0, 1 << 20)
    assert [(r.base_offset, r.last_offset) for r in refs] == [(0, 0), (1, 3), (4, 5)]
    for ref, data, res in zip(refs, sent, results):
        assert bytes(ref.data) == stored_form(data, res.base_offset)
        assert R.batch_crc_valid(ref.data)
    assert plog.size_bytes == sum(map(len, sent))


def test_read_limits(tmp_path):
    plog = open_log(tmp_path / "t-0", {})
    sizes = []
    for _ in range(5):
        b = batch(2)
        sizes.append(len(b))
        append(plog, b)
    assert [r.base_offset for r in plog.read(0, 1)] == [0]  # min_one: first batch even if too big
    assert plog.read(0, 1, min_one=False) == []
    assert [r.base_offset for r in plog.read(0, sizes[0] + sizes[1])] == [0, 2]
    assert [r.base_offset for r in plog.read(0, sizes[0] + sizes[1] - 1)] == [0]
    assert [r.base_offset for r in plog.read(3, 1 << 20)] == [2, 4, 6, 8]  # starts with the containing batch
    assert [r.base_offset for r in plog.read(0, 1 << 20, max_offset=6)] == [0, 2, 4]
    assert [r.base_offset for r in plog.read(0, 1 << 20, max_offset=5)] == [0, 2]  # never a batch reaching it
    assert plog.read(10, 100) == []
    for bad in (-1, 11):
        with pytest.raises(LogError) as exc:
            plog.read(bad, 100)
        assert exc.value.code == 1


def test_read_every_offset_with_sparse_index(tmp_path):
    clock = Clock()
    plog = open_log(tmp_path / "t-0", {"segment.bytes": 8000, "index.interval.bytes": 300}, clock)
    for i in range(80):
        append(plog, batch(1 + i % 4, value=b"x" * (10 + 37 * (i % 5))))
    end = plog.log_end_offset
    assert plog.segment_count > 3

    def check(p):
        for off in range(end):
            refs = p.read(off, 1)
            assert len(refs) == 1 and refs[0].base_offset <= off <= refs[0].last_offset
            assert R.batch_crc_valid(refs[0].data)
        assert all_offsets(p) == list(range(end))
    check(plog)
    plog.close()
    check(open_log(tmp_path / "t-0", {"segment.bytes": 8000, "index.interval.bytes": 300}, clock,
                   clean_shutdown=True))


def test_segment_roll_by_size_and_time(tmp_path):
    clock = Clock()
    plog = open_log(tmp_path / "t-0", {"segment.bytes": 1000, "segment.ms": 60_000}, clock)
    b = batch(2)  # ~300 bytes
    for _ in range(3):
        append(plog, b)
    assert plog.segment_count == 1
    append(plog, b)  # would exceed 1000 bytes
    assert plog.segment_base_offsets == [0, 6]
    append(plog, batch(1, ts=T0 + 60_001))  # record time advanced past segment.ms since the first batch
    assert plog.segment_base_offsets == [0, 6, 8]
    assert all_offsets(plog) == list(range(9))
    assert sorted(os.listdir(tmp_path / "t-0"))[:3] == [
        "00000000000000000000.index", "00000000000000000000.log", "00000000000000000000.timeindex"]


def test_log_append_time(tmp_path):
    clock = Clock(T0 + 777)
    plog = open_log(tmp_path / "t-0", {"message.timestamp.type": "LogAppendTime"}, clock)
    res = append(plog, batch(2, ts=5))
    assert res.log_append_time == T0 + 777
    [ref] = plog.read(0, 1 << 20)
    info = ref.header()
    assert info.timestamp_type == R.LOG_APPEND_TIME and info.max_timestamp == T0 + 777
    assert R.batch_crc_valid(ref.data)
    assert plog.offset_for_timestamp(T0) == (0, T0 + 777)


# ---------------------------------------------------------------------- timestamps
def test_offset_for_timestamp(tmp_path):
    plog = open_log(tmp_path / "t-0", {"segment.bytes": 2000, "index.interval.bytes": 200})
    for i in range(30):
        recs = [(b"k", b"v" * 50, [], T0 + 10 * i), (b"k", b"v" * 50, [], T0 + 10 * i + 5)]
        append(plog, build_batch(recs))
    assert plog.segment_count > 2
    assert plog.offset_for_timestamp(T0) == (0, T0)
    assert plog.offset_for_timestamp(T0 + 1) == (1, T0 + 5)  # record-level inside the batch
    assert plog.offset_for_timestamp(T0 + 6) == (2, T0 + 10)
    assert plog.offset_for_timestamp(T0 + 205) == (41, T0 + 205)
    assert plog.offset_for_timestamp(T0 + 296) == (-1, -1)
    assert plog.offset_for_timestamp(-2) == (0, -1)
    assert plog.offset_for_timestamp(-1) == (60, -1)
    assert plog.offset_for_timestamp(-3) == (59, T0 + 295)
    plog.delete_records(7)
    assert plog.offset_for_timestamp(T0) == (7, T0 + 35)
    # out-of-order record timestamps: max timestamp inside an earlier batch
    other = open_log(tmp_path / "o-0", {})
    append(other, build_batch([(b"a", b"1", [], T0 + 50), (b"b", b"2", [], T0 + 999), (b"c", b"3", [], T0)]))
    append(other, build_batch([(b"d", b"4", [], T0 + 100)]))
    assert other.offset_for_timestamp(-3) == (1, T0 + 999)
    assert other.offset_for_timestamp(T0 + 60) == (1, T0 + 999)


# ------------------------------------------------------------------------ retention
def test_retention_by_time_moves_log_start(tmp_path):
    clock = Clock()
    cfg = dict(SMALL, **{"retention.ms": 1000})
    plog = open_log(tmp_path / "t-0", cfg, clock)
    for i in range(40):
        append(plog, batch(2, ts=T0 + i))
    assert plog.segment_base_offsets == [0, 28, 56]  # 14 batches per segment, newest at T0+13, T0+27
    clock.now = T0 + 1000 + 13
    assert plog.maintenance() is False  # not older than retention.ms yet
    clock.now += 1
    assert plog.maintenance() is True
    assert plog.log_start_offset == 28 and plog.segment_base_offsets == [28, 56]
    assert all(b >= plog.log_start_offset for b in plog.segment_base_offsets)
    with pytest.raises(LogError):
        plog.read(0, 100)
    # everything expired, active segment included: a new empty segment keeps the log end offset
    clock.now = T0 + 10_000
    assert plog.maintenance() is True
    assert plog.log_start_offset == plog.log_end_offset == 80
    assert plog.segment_base_offsets == [80] and plog.read(80, 100) == []
    assert append(plog, batch(1, ts=clock.now)).base_offset == 80
    assert plog.maintenance() is False


def test_retention_by_size(tmp_path):
    plog = open_log(tmp_path / "t-0", dict(SMALL, **{"retention.bytes": 5000, "retention.ms": -1}))
    for i in range(60):
        append(plog, batch(2))
    assert plog.size_bytes > 5000
    plog.apply_retention()
    assert plog.size_bytes <= 5000 + 4096
    assert plog.log_start_offset == plog.segment_base_offsets[0] > 0
    assert all_offsets(plog) == list(range(plog.log_start_offset, 120))


def test_compact_policy_disables_deletion(tmp_path):
    clock = Clock()
    plog = open_log(tmp_path / "t-0", dict(SMALL, **{"retention.ms": 1, "cleanup.policy": "compact"}), clock)
    for i in range(30):
        append(plog, batch(2))
    clock.now += 10_000
    assert plog.maintenance() is False and plog.log_start_offset == 0
    plog.update_config(dict(SMALL, **{"retention.ms": 1, "cleanup.policy": "compact,delete"}))
    assert plog.maintenance() is True


def test_delete_records(tmp_path):
    clock = Clock()
    plog = open_log(tmp_path / "t-0", SMALL, clock)
    for _ in range(40):
        append(plog, batch(2))
    first_segments = plog.segment_count
    assert plog.delete_records(31) == 31
    assert plog.segment_count < first_segments
    assert plog.segment_base_offsets[0] <= 31
    assert plog.read(31, 1)[0].base_offset == 30  # the batch containing 31
    with pytest.raises(LogError):
        plog.read(30, 1)
    assert plog.delete_records(5) == 31  # never moves backwards
    with pytest.raises(LogError) as exc:
        plog.delete_records(81)
    assert exc.value.code == 1
    for seg in plog._segments:  # crash right after: the answer was already durable
        seg.close()
    again = open_log(tmp_path / "t-0", SMALL, clock)
    assert again.log_start_offset == 31 and again.log_end_offset == 80
    assert again.delete_records(-1) == 80
    assert again.read(80, 10) == []
    assert append(again, batch(1)).base_offset == 80


# ------------------------------------------------------------------------- recovery
def _fill(path, n=30, clean=True, config=None):
    plog = open_log(path, config)
    for _ in range(n):
        append(plog, batch(2))
    if clean:
        plog.close()
    else:
        for seg in plog._segments:  # simulate kill -9: nothing sealed, no final checkpoint
            seg.close()
    return plog


def _last_log_file(path):
    return max(p for p in path.iterdir() if p.suffix == ".log")


@pytest.mark.parametrize("clean", [True, False])
def test_recovery_truncates_torn_tail(tmp_path, clean, caplog):
    path = tmp_path / "t-0"
    _fill(path, clean=clean)
    last = _last_log_file(path)
    size = last.stat().st_size
    os.truncate(last, size - 25)  # half-written last batch
    plog = open_log(path, clean_shutdown=clean)
    assert plog.log_end_offset == 58
    assert "truncating" in caplog.text
    assert append(plog, batch(2)).base_offset == 58  # continues without a gap
    assert all_offsets(plog) == list(range(60))


@pytest.mark.parametrize("clean", [True, False])
def test_recovery_drops_garbage_and_corrupt_tail(tmp_path, clean):
    path = tmp_path / "t-0"
    _fill(path, clean=clean)
    last = _last_log_file(path)
    with open(last, "ab") as f:
        f.write(os.urandom(300))
    plog = open_log(path, clean_shutdown=clean)
    assert plog.log_end_offset == 60
    plog.close()
    # flip a byte inside the last batch: CRC mismatch -> that batch is dropped
    data = bytearray(last.read_bytes())
    data[-10] ^= 0xFF
    last.write_bytes(bytes(data))
    plog = open_log(path, clean_shutdown=True)
    assert plog.log_end_offset == 58
    assert append(plog, batch(1)).base_offset == 58
    assert all_offsets(plog) == list(range(59))


def test_recovery_rebuilds_missing_and_corrupt_indexes(tmp_path):
    path = tmp_path / "t-0"
    cfg = {"segment.bytes": 20000, "index.interval.bytes": 100}
    _fill(path, n=60, config=cfg)
    for p in path.iterdir():
        if p.suffix == ".index":
            p.unlink()
        elif p.suffix == ".timeindex":
            p.write_bytes(b"\x01\x02\x03")
    plog = open_log(path, cfg)  # unclean start: everything after the recovery point is re-scanned
    for off in range(0, 120, 7):
        assert plog.read(off, 1)[0].base_offset == off - off % 2
    assert plog.offset_for_timestamp(T0) == (0, T0)
    assert (path / "00000000000000000000.index").stat().st_size > 0
    assert all(p.stat().st_size % 12 == 0 for p in path.iterdir() if p.suffix == ".timeindex")


def test_index_entries_written_in_batches_and_rebuilt_after_a_crash(tmp_path):
    """The active segment writes index entries INDEX_WRITE_BATCH at a time; a kill -9 leaves the
    files short, and recovery adds what is missing (lookups exact, files complete)."""
    from broker.log.segment import INDEX_WRITE_BATCH, OFFSET_ENTRY

    path = tmp_path / "t-0"
    cfg = {"segment.bytes": 1 << 20, "index.interval.bytes": 100}
    plog = open_log(path, cfg)
    n = INDEX_WRITE_BATCH + 10
    for _ in range(n):
        append(plog, batch(2))
    seg = plog._segments[-1]
    on_disk = (path / "00000000000000000000.index").stat().st_size // OFFSET_ENTRY.size
    assert on_disk == INDEX_WRITE_BATCH < len(seg.idx_rel)  # the last ones are pending
    seg.drop_descriptors()  # kill -9: nothing more is written
    again = open_log(path, cfg)
    for off in range(0, 2 * n, 5):
        assert again.read(off, 1)[0].base_offset == off - off % 2
    assert (path / "00000000000000000000.index").stat().st_size // OFFSET_ENTRY.size == len(
        again._segments[-1].idx_rel)
    entries = len(again._segments[-1].idx_rel)  # (a sealed segment's entries leave memory)
    again.close()  # a clean close writes what is pending
    assert (path / "00000000000000000000.index").stat().st_size // OFFSET_ENTRY.size == entries


def test_unclean_recovery_of_middle_segment_keeps_later_segments(tmp_path, caplog):
    """Kafka's LogLoader drops every segment after a damaged one; here the later ones are kept
    (their offsets are above the cut) and the lost offsets are a gap (more in test_log_damage.py)."""
    path = tmp_path / "t-0"
    plog = _fill(path, n=30, clean=False)
    bases = plog.segment_base_offsets
    assert len(bases) >= 3
    (path / "checkpoint").write_text("v1 0 0\n")  # nothing was ever flushed
    middle = path / f"{bases[1]:020d}.log"
    data = bytearray(middle.read_bytes())
    data[200] ^= 0xFF
    middle.write_bytes(bytes(data))
    plog = open_log(path)
    assert plog.segment_base_offsets == bases
    assert plog.log_end_offset == 60
    assert all_offsets(plog) == [o for o in range(60) if not bases[1] <= o < bases[2]]
    assert "damaged segment" in caplog.text and f"offsets {bases[1]}..{bases[2] - 1} are a gap" in caplog.text


# -------------------------------------------------------------------- producer state
def idem(seq, epoch=0, pid=1000, n=2, **kw):
    return batch(n, producer_id=pid, producer_epoch=epoch, base_sequence=seq, **kw)


def test_idempotent_duplicate_gap_and_epochs(tmp_path):
    plog = open_log(tmp_path / "t-0", {})
    r0 = append(plog, idem(0))
    r1 = append(plog, idem(2))
    assert (r0.base_offset, r1.base_offset) == (0, 2)
    dup = append(plog, idem(0))  # retried batch: original offsets, nothing written
    assert dup.duplicate and (dup.base_offset, dup.last_offset) == (0, 1)
    assert plog.log_end_offset == 4
    assert plog.check_producer(validate_records(idem(2))) == (0, 2, 3)
    for data, code in ((idem(5), OUT_OF_ORDER_SEQUENCE_NUMBER),      # gap
                       (idem(3), OUT_OF_ORDER_SEQUENCE_NUMBER),      # overlaps, not an exact duplicate
                       (idem(4, epoch=1), OUT_OF_ORDER_SEQUENCE_NUMBER)):  # new epoch must start at 0
        with pytest.raises(LogError) as exc:
            append(plog, data)
        assert exc.value.code == code
    assert append(plog, idem(4)).base_offset == 4
    assert append(plog, idem(0, epoch=1)).base_offset == 6  # epoch bump
    with pytest.raises(LogError) as exc:
        append(plog, idem(2, epoch=0))
    assert exc.value.code == INVALID_PRODUCER_EPOCH
    assert append(plog, idem(0, epoch=1)).duplicate  # the new epoch's first batch again
    assert append(plog, idem(77, pid=2000)).base_offset == 8  # unknown producer: any sequence
    assert append(plog, batch(1)).base_offset == 10  # non-idempotent batches are not checked


def test_sequence_wraps_around(tmp_path):
    plog = open_log(tmp_path / "t-0", {})
    append(plog, idem(R.INT32_MAX - 1, n=2))  # sequences MAX-1, MAX
    assert append(plog, idem(0, n=2)).base_offset == 2
    with pytest.raises(LogError):
        append(plog, idem(5))


def test_duplicate_window_is_five_batches(tmp_path):
    plog = open_log(tmp_path / "t-0", {})
    for i in range(6):
        append(plog, idem(2 * i))
    assert append(plog, idem(2)).duplicate  # batch 2 of 6 is within the last five
    with pytest.raises(LogError) as exc:
        append(plog, idem(0))  # evicted: no longer recognised, and out of sequence
    assert exc.value.code == OUT_OF_ORDER_SEQUENCE_NUMBER


@pytest.mark.parametrize("clean", [True, False])
def test_producer_state_rebuilt_at_startup(tmp_path, clean):
    path = tmp_path / "t-0"
    clock = Clock()
    plog = open_log(path, SMALL, clock)
    for i in range(20):
        append(plog, idem(2 * i, ts=clock.now))
    if clean:
        plog.close()
    else:
        for seg in plog._segments:
            seg.close()
    plog = open_log(path, SMALL, clock, clean_shutdown=clean)
    dup = append(plog, idem(38, ts=clock.now))
    assert dup.duplicate and dup.base_offset == 38
    with pytest.raises(LogError):
        append(plog, idem(41, ts=clock.now))
    assert append(plog, idem(40, ts=clock.now)).base_offset == 40


def test_producer_expiry(tmp_path):
    clock = Clock()
    plog = open_log(tmp_path / "t-0", {}, clock, producer_id_expiration_ms=1000)
    append(plog, idem(0, ts=clock.now))
    clock.now += 1000
    plog.maintenance()
    assert append(plog, idem(9)).base_offset == 2  # state gone: any sequence accepted


def test_transactions_hold_back_lso(tmp_path):
    path = tmp_path / "t-0"
    plog = open_log(path, {})
    append(plog, batch(2))
    append(plog, idem(0, pid=7, transactional=True))  # offsets 2-3
    append(plog, batch(2))                             # 4-5
    assert plog.high_watermark == 6 and plog.last_stable_offset == 2
    assert [r.base_offset for r in plog.read(0, 1 << 20, max_offset=plog.last_stable_offset)] == [0]
    with pytest.raises(LogError) as exc:
        append(plog, idem(2, pid=7))  # non-transactional write inside the open transaction
    assert exc.value.code == INVALID_TXN_STATE
    marker = plog.append_control(7, 0, commit=False)
    assert marker.base_offset == 6
    assert plog.last_stable_offset == plog.high_watermark == 7
    assert plog.aborted_transactions(0, 7) == [(7, 2)]
    assert plog.aborted_transactions(7, 10) == []
    [ref] = plog.read(6, 100)
    assert ref.is_control and ref.is_transactional and ref.producer_id == 7
    with pytest.raises(LogError) as exc:
        plog.append_control(7, -1, commit=True)  # stale epoch
    assert exc.value.code == INVALID_PRODUCER_EPOCH
    append(plog, idem(2, pid=7, transactional=True))  # 7-8: a second transaction stays open
    plog.close()
    plog = open_log(path, {}, clean_shutdown=True)
    assert plog.aborted_transactions(0, 100) == [(7, 2)]
    assert plog.last_stable_offset == 7 and plog.high_watermark == 9
    assert plog.append_control(7, 0, commit=True).base_offset == 9
    assert plog.last_stable_offset == 10 and plog.aborted_transactions(0, 100) == [(7, 2)]


# --------------------------------------------------------------------- durability
def test_flush_messages_advances_recovery_point(tmp_path):
    plog = open_log(tmp_path / "t-0", {"flush.messages": 4})
    append(plog, batch(2))
    assert (tmp_path / "t-0" / "checkpoint").read_text().split() == ["v1", "0", "0"]
    append(plog, batch(2))
    assert (tmp_path / "t-0" / "checkpoint").read_text().split() == ["v1", "0", "4"]


def test_checkpoint_rename_is_made_durable(tmp_path, monkeypatch):
    """Regression (issue 18): PartitionLog wrote its checkpoint with a copy of atomic_write that
    never fsynced the directory, so the rename itself could be lost by a power failure."""
    plog = open_log(tmp_path / "t-0", {"flush.messages": 1})
    synced = []
    real_fsync = os.fsync

    def fsync(fd):
        synced.append(os.path.realpath(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(fileio, "fsync", fsync)
    append(plog, batch(2))
    assert (tmp_path / "t-0" / "checkpoint").read_text().split() == ["v1", "0", "2"]
    assert str(tmp_path / "t-0") in synced


def test_flush_ms_and_rolled_segments_in_maintenance(tmp_path):
    clock = Clock()
    plog = open_log(tmp_path / "t-0", dict(SMALL, **{"flush.ms": 5000, "retention.ms": -1}), clock)
    for _ in range(20):
        append(plog, batch(2))
    ckpt = tmp_path / "t-0" / "checkpoint"
    plog.maintenance()  # rolled segments are fsynced; recovery point = active segment base
    assert ckpt.read_text().split()[2] == str(plog.segment_base_offsets[-1])
    clock.now += 5000
    plog.maintenance()
    assert ckpt.read_text().split()[2] == "40"


# ------------------------------------------------------------------------ manager
def test_manager_topics_persist(tmp_path):
    clock = Clock()
    mgr = LogManager(str(tmp_path), {"retention.ms": "1000"}, clock=clock)
    cid = mgr.cluster_id
    assert len(cid) == 22
    info = mgr.create_topic("orders", 3, {"segment.bytes": "1048576", "cleanup.policy": "compact"})
    assert info.partitions == 3 and isinstance(info.topic_id, uuid.UUID)
    assert mgr.topic_by_id(info.topic_id.bytes) is info
    plog = mgr.get_log("orders", 2)
    append(plog, batch(2))
    assert plog.config.segment_bytes == 1048576 and plog.config.retention_ms == 1000
    assert mgr.get_log("orders", 3) is None and mgr.get_log("nope", 0) is None
    for bad, code in (("orders", 36), ("bad/name", 17), ("..", 17)):
        with pytest.raises(LogError) as exc:
            mgr.create_topic(bad, 1)
        assert exc.value.code == code
    with pytest.raises(LogError) as exc:
        mgr.create_topic("zero", 0)
    assert exc.value.code == 37
    with pytest.raises(ConfigError):
        mgr.create_topic("x", 1, {"no.such.config": "1"})
    with pytest.raises(ConfigError):
        mgr.create_topic("x", 1, {"retention.ms": "-7"})
    assert "x" not in mgr.topics
    mgr.add_partitions("orders", 5)
    mgr.set_topic_configs("orders", {"retention.ms": "5"})
    assert mgr.get_log("orders", 4).config.retention_ms == 5
    assert mgr.get_log("orders", 0).config.cleanup_policy == ["delete"]
    mgr.close()

    mgr = LogManager(str(tmp_path), {"retention.ms": "1000"}, clock=clock)
    assert mgr.cluster_id == cid
    again = mgr.topics["orders"]
    assert again.topic_id == info.topic_id and again.partitions == 5
    assert again.configs == {"retention.ms": "5"}
    assert mgr.get_log("orders", 2).log_end_offset == 2
    mgr.delete_topic("orders")
    assert not any(p.name.startswith("orders-") for p in tmp_path.iterdir())
    assert mgr.topic_by_id(info.topic_id) is None
    mgr.create_topic("orders", 1)
    assert mgr.get_log("orders", 0).log_end_offset == 0  # no data resurrected
    mgr.close()


def test_manager_maintenance_and_orphans(tmp_path):
    clock = Clock()
    mgr = LogManager(str(tmp_path), {"retention.ms": "1000", "segment.bytes": "4096"}, clock=clock)
    mgr.create_topic("a", 2)
    for _ in range(30):
        append(mgr.get_log("a", 1), batch(2, ts=clock.now))
    clock.now += 2000
    moved = mgr.maintenance()
    assert moved == [("a", 1, 60)]
    mgr.close()
    (tmp_path / "ghost-0").mkdir()
    (tmp_path / "ghost-0" / "00000000000000000000.log").write_bytes(b"")
    mgr = LogManager(str(tmp_path), clock=clock)
    assert not (tmp_path / "ghost-0").exists()
    assert mgr.get_log("a", 1).log_start_offset == 60
    mgr.close()


def test_data_dir_lock_held_by_other_process(tmp_path):
    code = ("import sys; from broker.log import LogManager; m = LogManager(sys.argv[1]); "
            "print('locked', flush=True); sys.stdin.readline(); m.close()")
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout.readline().strip() == "locked"
        with pytest.raises(DataDirLockedError, match="in use by another broker process"):
            LogManager(str(tmp_path))
    finally:
        proc.stdin.close()
        assert proc.wait(timeout=30) == 0
    LogManager(str(tmp_path)).close()  # free again once the other process is gone


def test_validate_with_topic_config_and_closed_log(tmp_path):
    clock = Clock()
    plog = open_log(tmp_path / "t-0", {"max.message.bytes": 200}, clock)
    with pytest.raises(R.RecordsError) as exc:
        plog.validate(batch(2))
    assert exc.value.code == R.RECORD_TOO_LARGE
    plog.update_config({})
    assert plog.validate(batch(2, ts=clock.now + 3_600_000))
    with pytest.raises(R.RecordsError) as exc:
        plog.validate(batch(2, ts=clock.now + 3_600_001))  # message.timestamp.after.max.ms = 1 h
    assert exc.value.code == R.INVALID_TIMESTAMP
    plog.close()
    for op in (lambda: plog.read(0, 10), lambda: append(plog, batch(1))):
        with pytest.raises(LogError) as exc:
            op()
        assert exc.value.code == 3
