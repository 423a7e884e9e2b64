"""Damage at rest (broker/log/damage.py): recovery keeps the segments after a damaged one, reads step
over damaged batches of sealed segments and notice a segment cut under the running broker."""

import asyncio
import os

from broker.log import PartitionLog
from broker.log.background import Background
from broker.log.damage import check_segment
from protocol.records import build_batch, iter_records, validate_records

T0 = 1_700_000_000_000
SMALL = {"segment.bytes": 4096, "index.interval.bytes": 512}


def batch(n=2, seq=-1, pid=-1):
    return build_batch([(b"k%d" % i, b"v" * 100, []) for i in range(n)], timestamp=T0, producer_id=pid,
                       producer_epoch=0 if pid >= 0 else -1, base_sequence=seq)


def append(plog, data):
    return plog.append(data, validate_records(data), T0)


def open_log(path, **kw):
    return PartitionLog(str(path), "t", 0, SMALL, clock=lambda: T0, **kw)


def offsets(plog, start=None, lazy=False):
    refs = plog.read(plog.log_start_offset if start is None else start, 1 << 30, lazy=lazy)
    return [r.offset for ref in refs for r in iter_records(ref.data)]


def fill(path, n=30, pid=-1, clean=True):
    plog = open_log(path)
    for i in range(n):
        append(plog, batch(seq=2 * i if pid >= 0 else -1, pid=pid))
    if clean:
        plog.close()
    else:
        for seg in plog._segments:  # kill -9: nothing sealed, no final checkpoint
            seg.close()
    return plog.segment_base_offsets


def seg_file(path, base):
    return path / f"{base:020d}.log"


def flip(file, position):
    data = bytearray(file.read_bytes())
    data[position] ^= 0xFF
    file.write_bytes(bytes(data))


def test_recovery_keeps_later_segments_and_the_producer_state(tmp_path, caplog):
    path = tmp_path / "t-0"
    bases = fill(path, pid=7, clean=False)
    assert len(bases) >= 3
    (path / "checkpoint").write_text("v1 0 0\n")  # nothing flushed: every segment is recovered
    flip(seg_file(path, bases[1]), 300)  # inside the segment's second batch
    plog = open_log(path)
    assert plog.segment_base_offsets == bases
    assert plog.log_end_offset == 60
    cut = bases[1] + 2  # the first batch of the damaged segment survives
    assert offsets(plog) == [o for o in range(60) if not cut <= o < bases[2]]
    assert f"offsets {cut}..{bases[2] - 1} are a gap" in caplog.text
    assert str(seg_file(path, bases[1])) in caplog.text
    # a fetch inside the gap answers the next batch; the idempotent producer goes on where it was
    assert plog.read(cut, 1)[0].base_offset == bases[2]
    assert plog.read(cut, 1, lazy=True)[0].base_offset == bases[2]
    assert append(plog, batch(seq=60, pid=7)).base_offset == 60
    dup = append(plog, batch(seq=60, pid=7))
    assert dup.duplicate and dup.base_offset == 60
    plog.close()
    again = open_log(path)  # stable across a further restart
    assert again.segment_base_offsets == bases and again.log_end_offset == 62


def test_damage_in_the_active_segment_truncates_only_that_segment(tmp_path):
    path = tmp_path / "t-0"
    bases = fill(path, clean=False)
    last = seg_file(path, bases[-1])
    flip(last, 300)
    plog = open_log(path)
    assert plog.segment_base_offsets == bases
    assert plog.log_end_offset == bases[-1] + 2
    assert offsets(plog) == list(range(bases[-1] + 2))
    assert append(plog, batch()).base_offset == bases[-1] + 2


def test_a_flushed_segment_is_not_rescanned_and_reads_step_over_its_damage(tmp_path, caplog):
    """As Kafka, start-up does not re-read segments below the recovery point; the first read of the
    sealed segment checks it, logs the damaged batch and counts it; reads then skip it."""
    path = tmp_path / "t-0"
    bases = fill(path, clean=True)
    flip(seg_file(path, bases[1]), 300)
    plog = open_log(path, clean_shutdown=True)
    assert plog.segment_base_offsets == bases and plog.log_end_offset == 60
    assert plog.damage.corrupt_batches == 0  # not re-scanned at start-up
    bad = bases[1] + 2
    expected = [o for o in range(60) if o not in (bad, bad + 1)]
    assert offsets(plog) == expected
    assert offsets(plog, lazy=True) == expected
    assert plog.damage.corrupt_batches == 1
    assert f"damaged batch in {seg_file(path, bases[1])} at position" in caplog.text
    assert f"(offset {bad})" in caplog.text and "CRC32C mismatch" in caplog.text
    assert [r.base_offset for r in plog.read(bad, 1)] == [bad + 2]
    assert [r.base_offset for r in plog.read(bad + 1, 1, lazy=True)] == [bad + 2]
    offsets(plog)
    assert plog.damage.corrupt_batches == 1  # found, logged and counted once


def test_a_damaged_batch_length_is_stepped_over_by_finding_the_next_batch(tmp_path):
    path = tmp_path / "t-0"
    bases = fill(path, clean=True)
    file = seg_file(path, bases[1])
    walk, _size = check_segment(str(file), bases[1])
    assert not walk.damage and walk.batches == (bases[2] - bases[1]) // 2
    size = len(batch())
    data = bytearray(file.read_bytes())
    data[size + 8:size + 12] = (12345678).to_bytes(4, "big")  # second batch's length field
    file.write_bytes(bytes(data))
    walk, _size = check_segment(str(file), bases[1])
    assert [(d.position, d.resume, d.offset) for d in walk.damage] == [(size, 2 * size, bases[1] + 2)]
    plog = open_log(path, clean_shutdown=True)
    assert offsets(plog) == [o for o in range(60) if o not in (bases[1] + 2, bases[1] + 3)]


def test_a_segment_cut_under_the_running_log_is_noticed_and_reads_go_on(tmp_path, caplog):
    path = tmp_path / "t-0"
    fill(path, clean=True)
    plog = open_log(path, clean_shutdown=True)
    bases = plog.segment_base_offsets
    assert offsets(plog) == list(range(60))  # checked: clean
    size = len(batch())
    os.truncate(seg_file(path, bases[1]), 3 * size + 50)  # mid-batch: 3 whole batches left
    cut = bases[1] + 6
    assert offsets(plog) == [o for o in range(60) if not cut <= o < bases[2]]
    assert [r.base_offset for r in plog.read(cut, 1)] == [bases[2]]
    assert [r.base_offset for r in plog.read(cut, 1, lazy=True)] == [bases[2]]
    assert plog.damage.truncated_segments == 1
    assert "was truncated under the running broker" in caplog.text


def test_while_the_check_runs_on_the_worker_reads_check_what_they_serve(tmp_path):
    """The check of a sealed segment runs on the worker; until it is done, a read computes the CRC32C
    of the batches it serves from that segment, so no damaged batch goes out even before the check."""
    path = tmp_path / "t-0"
    bases = fill(path, clean=True)
    flip(seg_file(path, bases[1]), 300)
    size = len(batch())
    data = bytearray(seg_file(path, bases[1]).read_bytes())
    data[5 * size + 8:5 * size + 12] = (12345678).to_bytes(4, "big")  # the 6th batch's length field too
    seg_file(path, bases[1]).write_bytes(bytes(data))
    bad, lost = bases[1] + 2, bases[1] + 10

    async def main():
        bg = Background(asyncio.get_running_loop())
        plog = open_log(path, clean_shutdown=True, background=bg)
        try:
            first = [r.base_offset for r in plog.read(bases[1], 1 << 30, lazy=True)]
            counted = plog.damage.corrupt_batches
            await bg.barrier()
            return first, counted, offsets(plog, bases[1], lazy=True), plog.damage.corrupt_batches
        finally:
            bg.close()
            plog.close()

    first, counted, after, count = asyncio.run(main())
    # served while checking: the flipped batch left out, the answer ends before the unreadable length
    assert first == [o for o in range(bases[1], lost, 2) if o != bad] and counted == 1
    assert count == 2  # the check found both, the first once
    assert after == [o for o in range(bases[1], 60) if o not in (bad, bad + 1, lost, lost + 1)]


def test_a_checked_segment_written_under_the_running_log_is_checked_again(tmp_path, caplog):
    path = tmp_path / "t-0"
    bases = fill(path, clean=True)
    plog = open_log(path, clean_shutdown=True)
    assert offsets(plog) == list(range(60)) and plog.damage.corrupt_batches == 0  # checked: clean
    file = seg_file(path, bases[1])
    before = file.stat().st_mtime_ns
    flip(file, 300)
    os.utime(file, ns=(before + 10**9, before + 10**9))  # (a coarse clock may not have moved yet)
    assert offsets(plog) == [o for o in range(60) if o not in (bases[1] + 2, bases[1] + 3)]
    assert plog.damage.corrupt_batches == 1
    assert "was written under the running broker; checking it again" in caplog.text


def test_a_negative_batch_length_never_sends_a_read_backwards(tmp_path):
    """A damaged length field that is negative: reads (eager and lazy) and timestamp look-ups end
    there instead of walking backwards for ever; once checked, reads step over the batch."""
    path = tmp_path / "t-0"
    bases = fill(path, clean=True)
    size = len(batch())
    data = bytearray(seg_file(path, bases[1]).read_bytes())
    data[2 * size + 8:2 * size + 12] = (-300).to_bytes(4, "big", signed=True)
    seg_file(path, bases[1]).write_bytes(bytes(data))
    plog = open_log(path, clean_shutdown=True)
    seg = plog.segments[1]
    assert plog.segments[1].check is None
    seg.check = "checked"  # as if checked before the damage: the walkers meet it unprepared
    seg.check_mtime = os.fstat(seg.fd).st_mtime_ns
    assert [r.base_offset for r in plog.read(bases[1], 1 << 30)] == [bases[1], bases[1] + 2]
    assert [r.base_offset for r in plog.read(bases[1], 1 << 30, lazy=True)] == [bases[1], bases[1] + 2]
    seg.check = None
    bad = bases[1] + 4
    assert offsets(plog, bases[1]) == [o for o in range(bases[1], 60) if o not in (bad, bad + 1)]


def test_after_a_clean_start_the_active_segment_is_checked_on_first_read(tmp_path, caplog):
    """A clean start re-reads only the active segment's tail (after its last index entry); damage
    before it is found by the check the first read starts, and stepped over; appends go on."""
    path = tmp_path / "t-0"
    bases = fill(path, n=13, clean=True)
    assert bases == [0]
    flip(seg_file(path, 0), 300)
    plog = open_log(path, clean_shutdown=True)
    assert plog.log_end_offset == 26 and plog.damage.corrupt_batches == 0
    assert offsets(plog, lazy=True) == [o for o in range(26) if o not in (2, 3)]
    assert plog.damage.corrupt_batches == 1 and "(offset 2)" in caplog.text
    assert append(plog, batch()).base_offset == 26
    assert offsets(plog) == [o for o in range(28) if o not in (2, 3)]
