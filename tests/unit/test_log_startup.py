"""Start-up cost bounded by live state: producer-state snapshots and lazily mapped indexes.

Kafka's ProducerStateManager: a snapshot at every roll and at close, start-up reads the
latest valid one and scans only the batches after it (``producer_state_load`` counts them),
a torn snapshot falls back to an older one or to a scan, snapshots go with their segments.
"""

import os

from broker.log import PartitionLog
from broker.log.producer_state import OUT_OF_ORDER_SEQUENCE_NUMBER
from protocol.records import build_batch, build_control_batch, iter_records, validate_records

T0 = 1_700_000_000_000
CFG = {"segment.bytes": 3000, "index.interval.bytes": 200}


class Clock:
    def __init__(self, now=T0):
        self.now = now

    def __call__(self):
        return self.now


def batch(n=2, pid=-1, seq=-1, epoch=0, ts=T0, txn=False):
    return build_batch([(b"k%d" % i, b"v" * 100, []) for i in range(n)], timestamp=ts, producer_id=pid,
                       producer_epoch=epoch if pid >= 0 else -1, base_sequence=seq, transactional=txn)


def append(plog, data):
    return plog.append(data, validate_records(data))


def open_log(path, clean=True, config=CFG):
    return PartitionLog(str(path), "t", 0, config, clock=Clock(), clean_shutdown=clean)


def kill9(plog):
    """What a SIGKILL leaves: files as written, nothing sealed, flushed or checkpointed at the end."""
    for seg in plog._segments:
        seg.close()


def snapshots(path):
    return sorted(int(n.split(".")[0]) for n in os.listdir(path) if n.endswith(".snapshot"))


def fill(path, batches=40, pid=7):
    """An idempotent producer writing ``batches`` 2-record batches (sequence 0, 2, 4...) over several segments."""
    plog = open_log(path, clean=True)
    for i in range(batches):
        append(plog, batch(pid=pid, seq=2 * i))
    assert plog.segment_count >= 4
    return plog


def check_sequence_state(plog, pid=7, batches=40):
    """The producer's state is exact: last batches are duplicates, the next sequence goes on, a gap fails."""
    last = 2 * (batches - 1)
    assert plog.check_producer(validate_records(batch(pid=pid, seq=last))) == (0, last, last + 1)
    assert plog.check_producer(validate_records(batch(pid=pid, seq=last - 8))) == (0, last - 8, last - 7)
    assert plog.check_producer(validate_records(batch(pid=pid, seq=last + 4)))[0] == OUT_OF_ORDER_SEQUENCE_NUMBER
    assert plog.check_producer(validate_records(batch(pid=pid, seq=last + 2))) == (0, -1, -1)


def test_snapshots_at_roll_and_close_and_a_clean_restart_scans_nothing(tmp_path):
    path = tmp_path / "t-0"
    plog = fill(path)
    bases = plog.segment_base_offsets
    assert snapshots(path) == bases[1:]  # one at each roll: the new segment's base offset
    plog.close()
    assert snapshots(path) == bases[1:] + [80]  # and one at the log end on close
    again = open_log(path, clean=True)
    assert again.producer_state_load == (80, 0)  # no batch header read
    check_sequence_state(again)
    assert snapshots(path) == bases[1:] + [80]  # nothing rewritten


def test_after_kill9_only_the_batches_after_the_last_snapshot_are_read(tmp_path):
    path = tmp_path / "t-0"
    plog = fill(path)
    active = plog.segment_base_offsets[-1]
    in_active = len(plog.read(active, 1 << 20))
    kill9(plog)
    again = open_log(path, clean=False)
    assert again.producer_state_load == (active, in_active)
    check_sequence_state(again)
    kill9(again)
    # that start wrote a snapshot at the log end: the next one after a crash reads nothing
    assert open_log(path, clean=False).producer_state_load == (80, 0)


def test_torn_snapshots_fall_back_to_older_ones_then_to_a_scan(tmp_path, caplog):
    path = tmp_path / "t-0"
    plog = fill(path)
    bases = plog.segment_base_offsets
    kill9(plog)
    newest = path / f"{bases[-1]:020d}.snapshot"
    newest.write_bytes(newest.read_bytes()[:-3])  # torn
    again = open_log(path, clean=False)
    assert again.producer_state_load.snapshot_offset == bases[-2]
    assert again.producer_state_load.batches_scanned == len(again.read(bases[-2], 1 << 20))
    assert "ignoring producer snapshot" in caplog.text and not newest.exists()
    check_sequence_state(again)
    kill9(again)
    for n in os.listdir(path):
        if n.endswith(".snapshot"):
            data = bytearray((path / n).read_bytes())
            data[-1] ^= 0xFF  # a flipped bit: the CRC finds it
            (path / n).write_bytes(bytes(data))
    again = open_log(path, clean=False)
    assert again.producer_state_load == (None, 40)  # no usable snapshot: the whole log
    check_sequence_state(again)


def test_snapshots_go_with_their_segments_and_strays_are_removed(tmp_path):
    path = tmp_path / "t-0"
    plog = fill(path)
    bases = plog.segment_base_offsets
    plog.delete_records(bases[2])
    assert snapshots(path) == bases[2:]
    plog.close()
    (path / f"{bases[2] + 1:020d}.snapshot").write_bytes(b"stray")  # matches no segment, below the last one
    again = open_log(path, clean=True)
    assert snapshots(path) == bases[2:] + [80]  # the stray went; the first segment keeps its snapshot
    assert again.producer_state_load == (80, 0)


def test_snapshot_above_the_recovered_log_end_is_not_used(tmp_path):
    path = tmp_path / "t-0"
    plog = fill(path)
    plog.close()
    last = max(p for p in path.iterdir() if p.suffix == ".log")
    os.truncate(last, last.stat().st_size - 30)  # the last batch is torn: the log end goes back to 78
    again = open_log(path, clean=True)
    assert again.log_end_offset == 78
    assert again.producer_state_load.snapshot_offset == again.segment_base_offsets[-1]
    check_sequence_state(again, batches=39)


def test_open_and_aborted_transactions_survive_restarts(tmp_path):
    path = tmp_path / "t-0"
    plog = open_log(path)
    append(plog, batch(pid=1, seq=0, txn=True))                     # 0-1, aborted below
    append(plog, batch(pid=2, seq=0))                               # 2-3
    plog.append_control(1, 0, commit=False)                         # 4: ABORT
    for i in range(30):
        append(plog, batch(pid=3, seq=2 * i))                       # rolls several times
    append(plog, batch(pid=5, seq=0, txn=True))                     # open at the crash
    lso, leo = plog.last_stable_offset, plog.log_end_offset
    assert lso < leo and plog.segment_count > 2
    expected = plog.aborted_transactions(0, leo)
    assert expected == [(1, 0)]
    kill9(plog)
    for clean in (False, True):
        again = open_log(path, clean=clean)
        assert again.producer_state_load.snapshot_offset is not None
        assert again.aborted_transactions(0, leo) == expected
        assert again.last_stable_offset == lso
        again.close()


def test_sealed_segment_indexes_are_mapped_on_first_lookup(tmp_path):
    path = tmp_path / "t-0"
    plog = open_log(path)
    for i in range(60):
        append(plog, batch(1 + i % 3, ts=T0 + i))
    end = plog.log_end_offset
    sealed = plog._segments[:-1]
    assert len(sealed) >= 3 and all(not s.loaded for s in sealed)  # entries left memory at the roll
    plog.close()
    again = open_log(path, clean=True)
    segs = again._segments
    assert all(s.idx_rel is None for s in segs[:-1]) and segs[-1].loaded  # start-up read no sealed index
    for off in range(end):  # every offset, through the mapped indexes
        [ref] = again.read(off, 1)
        assert ref.base_offset <= off <= ref.last_offset
    assert [r.offset for ref in again.read(0, 1 << 30) for r in iter_records(ref.data)] == list(range(end))
    assert all(s.idx_rel is not None and not s.loaded for s in segs[:-1])
    ts_of = {r.offset: r.timestamp for ref in again.read(0, 1 << 30) for r in iter_records(ref.data)}
    for i in (0, 17, 33, 59):
        off, ts = again.offset_for_timestamp(T0 + i)
        assert ts == T0 + i and ts_of[off] == T0 + i
    assert again.max_timestamp()[1] == T0 + 59


def test_a_control_batch_is_read_when_scanned(tmp_path):
    path = tmp_path / "t-0"
    plog = open_log(path)
    append(plog, batch(pid=9, seq=0, txn=True))
    plog.append_control(9, 0, commit=True)
    kill9(plog)
    again = open_log(path, clean=False)
    assert again.producer_state_load == (None, 2)
    assert again.last_stable_offset == again.log_end_offset == 3
    assert again.producer_state.producers[9].txn_first_offset is None
    data = build_control_batch(9, 0, False)
    assert again.append(data, validate_records(data, single_batch=False, client=False), check_producer=False)
