"""Off-loop file work of the log layer, in-place rewrite, quiet restarts, producer expiry, lazy registry."""

import asyncio
import os
import subprocess
import sys
import threading
import time

import pytest

from broker.log import LogManager, PartitionLog
from broker.log import fileio
from broker.log import segment as segment_mod
from broker.log.background import Background, Inline
from broker.log.producer_state import OUT_OF_ORDER_SEQUENCE_NUMBER
from protocol import records as R
from protocol.records import build_batch, validate_records
from tests.support import until_async as until

T0 = 1_700_000_000_000


class Clock:
    def __init__(self, now=T0):
        self.now = now

    def __call__(self):
        return self.now


def batch(n=3, ts=T0, **kw):
    return build_batch([(b"k%d" % i, b"v" * 100, []) for i in range(n)], timestamp=ts, **kw)


def idem(seq, n=2, pid=5, epoch=0, ts=T0):
    return batch(n, ts=ts, producer_id=pid, producer_epoch=epoch, base_sequence=seq)


def append(plog, data, now=None):
    return plog.append(data, validate_records(data), now)


def checkpoint(path):
    return (path / "checkpoint").read_text().split()


class GatedFsync:
    """Replaces the log's fsync (``fileio.fsync``): records calls and blocks until released."""

    def __init__(self, monkeypatch):
        self.calls = []
        self.gate = threading.Event()
        self.real = os.fsync
        self.threads = set()
        monkeypatch.setattr(fileio, "fsync", self)

    def __call__(self, fd):
        if threading.current_thread() is threading.main_thread():
            self.real(fd)  # start-up / close: synchronous by design
            return
        self.threads.add(threading.current_thread().name)
        self.calls.append(os.fstat(fd).st_ino)
        assert self.gate.wait(5)
        self.real(fd)


# ---------------------------------------------------------------- Background
def test_background_runs_jobs_in_order_with_callbacks_on_the_loop():
    async def main():
        bg = Background(asyncio.get_running_loop())
        order, cb_threads = [], []
        for i in range(50):
            bg.submit(lambda i=i: order.append(i) or i,
                      lambda r, exc: cb_threads.append((r, exc, threading.current_thread().name)))
        await bg.barrier()
        bg.close()
        assert order == list(range(50))
        assert [r for r, _e, _t in cb_threads] == list(range(50))
        assert {t for _r, _e, t in cb_threads} == {threading.current_thread().name}

        def boom():
            raise OSError("disk on fire")
        errors = []
        bg2 = Background(asyncio.get_running_loop())
        bg2.submit(boom, lambda r, exc: errors.append(exc))
        await bg2.barrier()
        bg2.close()
        assert isinstance(errors[0], OSError)
    asyncio.run(main())


def test_inline_runs_at_once():
    seen = []
    Inline().submit(lambda: 7, lambda r, exc: seen.append((r, exc)))
    assert seen == [(7, None)]


# ------------------------------------------------------- flush.messages off the loop
def test_background_flush_moves_recovery_point_only_after_fsync(tmp_path, monkeypatch):
    fs = GatedFsync(monkeypatch)

    async def main():
        plog = PartitionLog(str(tmp_path / "t-0"), "t", 0, {"flush.messages": 2}, clock=Clock())
        plog.set_background(Background(asyncio.get_running_loop()))
        assert append(plog, batch(1)).durable is None
        res = append(plog, batch(1))          # reaches flush.messages: fsync requested, not done
        assert res.durable is not None and not res.durable.done()
        res2 = append(plog, batch(1))         # appended while the fsync runs
        assert checkpoint(tmp_path / "t-0") == ["v1", "0", "0"]  # never ahead of fsynced data
        await until(lambda: fs.calls)         # the fsync runs on the worker thread
        assert fs.threads == {"log-sync"}
        fs.gate.set()
        await res.durable
        await until(lambda: checkpoint(tmp_path / "t-0") == ["v1", "0", "2"])
        assert plog._recovery_point == 2      # offset 2 was appended after the fsync was requested
        res3 = append(plog, batch(1))         # 4th message: flush.messages again
        await res3.durable
        assert res2.durable is None
        await until(lambda: checkpoint(tmp_path / "t-0") == ["v1", "0", "4"])
        plog._bg.close()
        plog.close()
    asyncio.run(main())


def test_requests_during_a_running_fsync_share_one_follow_up(tmp_path, monkeypatch):
    fs = GatedFsync(monkeypatch)

    async def main():
        plog = PartitionLog(str(tmp_path / "t-0"), "t", 0, {"flush.messages": 1}, clock=Clock())
        plog.set_background(Background(asyncio.get_running_loop()))
        first = append(plog, batch(1)).durable
        await until(lambda: fs.calls)
        later = [append(plog, batch(1)).durable for _ in range(5)]
        assert all(f is later[0] for f in later) and later[0] is not first
        fs.gate.set()
        await first
        await later[0]
        # one fsync of the segment for the first request, one for all five later ones
        log_ino = os.stat(tmp_path / "t-0" / ("%020d.log" % 0)).st_ino
        assert fs.calls.count(log_ino) == 2
        await until(lambda: checkpoint(tmp_path / "t-0") == ["v1", "0", "6"])
        plog._bg.close()
        plog.close()
    asyncio.run(main())


def test_rolled_segment_fsync_in_maintenance_and_delete_while_syncing(tmp_path, monkeypatch):
    fs = GatedFsync(monkeypatch)

    async def main():
        clock = Clock()
        cfg = {"segment.bytes": 2048, "index.interval.bytes": 512, "retention.ms": -1}
        plog = PartitionLog(str(tmp_path / "t-0"), "t", 0, cfg, clock=clock)
        plog.set_background(Background(asyncio.get_running_loop()))
        for _ in range(30):
            append(plog, batch(2))
        assert plog.segment_count > 2
        t0 = time.perf_counter()
        plog.maintenance()                     # submits the fsync of the rolled segments
        assert time.perf_counter() - t0 < 0.5  # did not wait for the gated fsync
        await until(lambda: fs.calls)
        assert checkpoint(tmp_path / "t-0") == ["v1", "0", "0"]
        # DeleteRecords past the first segments while their fsync is blocked: files go, no error
        plog.delete_records(plog._bases[2])
        fs.gate.set()
        await plog._bg.barrier()
        await until(lambda: checkpoint(tmp_path / "t-0")[2] == str(plog._bases[-1]))
        assert checkpoint(tmp_path / "t-0")[1] == str(plog.log_start_offset)
        names = os.listdir(tmp_path / "t-0")
        assert not any(n.startswith("%020d" % 0) for n in names)
        plog._bg.close()
        plog.close()
    asyncio.run(main())


def test_manager_background_close_drains_and_restart_is_clean(tmp_path):
    async def main():
        logs = LogManager(str(tmp_path), clock=Clock())
        logs.start_background()
        logs.create_topic("a", 2, {"flush.messages": "1"})
        plog = logs.get_log("a", 0)
        res = append(plog, batch(2))
        await res.durable
        logs.delete_topic("a")                 # directory removal runs on the worker
        logs.create_topic("a", 1)
        append(logs.get_log("a", 0), batch(3))
        await logs.barrier()
        logs.close()
    asyncio.run(main())
    logs = LogManager(str(tmp_path), clock=Clock())
    assert logs.get_log("a", 0).log_end_offset == 3 and logs.topic("a").partitions == 1
    assert not [n for n in os.listdir(tmp_path) if n.endswith("-delete")]
    logs.close()


# ------------------------------------------------------------ in-place rewrite
def test_append_rewrites_a_writable_view_in_place(tmp_path):
    plog = PartitionLog(str(tmp_path / "t-0"), "t", 0, {}, clock=Clock(), leader_epoch=3)
    append(plog, batch(2))
    frame = bytearray(b"\x00" * 7 + batch(3))  # records sit inside a bigger request frame
    view = memoryview(frame)[7:]
    res = plog.append(view, validate_records(view))
    assert res.base_offset == 2
    assert R.HEADER.unpack_from(frame, 7)[0] == 2              # baseOffset rewritten in the frame itself
    assert R.batch_crc_valid(view)
    [_, ref] = plog.read(0, 1 << 20)
    assert bytes(ref.data) == bytes(view)


def test_append_copies_read_only_input_and_leaves_it_alone(tmp_path):
    plog = PartitionLog(str(tmp_path / "t-0"), "t", 0, {"message.timestamp.type": "LogAppendTime"}, clock=Clock())
    append(plog, batch(1))
    data = batch(2)
    before = bytes(data)
    res = append(plog, data, now=T0 + 5)
    assert data == before and res.base_offset == 1 and res.log_append_time == T0 + 5
    [_, ref] = plog.read(0, 1 << 20)
    assert R.HEADER.unpack_from(ref.data, 0)[0] == 1 and R.batch_crc_valid(ref.data)


# --------------------------------------------------------------- quiet restarts
def test_clean_restart_rewrites_no_index_and_no_checkpoint(tmp_path):
    logs = LogManager(str(tmp_path), {"segment.bytes": "4096", "index.interval.bytes": "256"}, clock=Clock())
    logs.create_topic("x", 2)
    for p in (0, 1):
        for _ in range(30):
            append(logs.get_log("x", p), batch(2))
    logs.close()

    def snapshot():
        out = {}
        for p in (0, 1):
            d = tmp_path / f"x-{p}"
            for n in os.listdir(d):
                st = os.stat(d / n)
                out[(p, n)] = (st.st_ino, st.st_mtime_ns, st.st_size)
        return out
    before = snapshot()
    logs = LogManager(str(tmp_path), {"segment.bytes": "4096", "index.interval.bytes": "256"}, clock=Clock())
    assert snapshot() == before               # no file replaced, rewritten or grown
    assert logs.get_log("x", 0).log_end_offset == 60
    assert [r.base_offset for r in logs.get_log("x", 1).read(58, 1 << 20)] == [58]
    append(logs.get_log("x", 0), batch(2))
    logs.close()
    logs = LogManager(str(tmp_path), clock=Clock())
    assert logs.get_log("x", 0).log_end_offset == 62
    logs.close()


def test_sealed_time_index_survives_restart_unchanged(tmp_path):
    cfg = {"segment.bytes": 4096, "index.interval.bytes": 256}
    plog = PartitionLog(str(tmp_path / "t-0"), "t", 0, cfg, clock=Clock(), clean_shutdown=True)
    for i in range(10):
        append(plog, batch(2, ts=T0 + i))
    plog.close()
    seg = sorted(n for n in os.listdir(tmp_path / "t-0") if n.endswith(".timeindex"))[-1]
    raw = (tmp_path / "t-0" / seg).read_bytes()
    plog = PartitionLog(str(tmp_path / "t-0"), "t", 0, cfg, clock=Clock(), clean_shutdown=True)
    assert (tmp_path / "t-0" / seg).read_bytes() == raw
    assert plog.offset_for_timestamp(T0 + 9) == (18, T0 + 9)
    assert plog.max_timestamp() == (18, T0 + 9)
    plog.close()


# -------------------------------------------------------------- producer expiry
def test_producer_expiry_holds_across_restart(tmp_path):
    clock = Clock(T0 + 10_000)
    path = str(tmp_path / "t-0")
    plog = PartitionLog(path, "t", 0, {}, clock=clock, producer_id_expiration_ms=5_000)
    append(plog, idem(0, pid=1, ts=T0))           # idle since T0: expires
    append(plog, idem(0, pid=2, ts=T0 + 9_000))   # recent: stays
    assert plog.remove_expired_producers() == 1
    assert plog.check_producer(validate_records(idem(7, pid=1)))[0] == 0       # unknown: any sequence
    assert plog.check_producer(validate_records(idem(7, pid=2)))[0] == OUT_OF_ORDER_SEQUENCE_NUMBER
    plog.close()
    for clean in (True, False):
        plog = PartitionLog(path, "t", 0, {}, clock=clock, producer_id_expiration_ms=5_000, clean_shutdown=clean)
        assert set(plog.producer_state.producers) == {2}
        assert plog.check_producer(validate_records(idem(7, pid=1)))[0] == 0
        assert plog.check_producer(validate_records(idem(0, pid=2))) == (0, 2, 3)  # duplicate, same offsets
        assert plog.check_producer(validate_records(idem(2, pid=2)))[0] == 0
        plog.close()


def test_producer_expiry_uses_the_log_append_time_on_such_topics(tmp_path):
    clock = Clock(T0)
    plog = PartitionLog(str(tmp_path / "t-0"), "t", 0, {"message.timestamp.type": "LogAppendTime"}, clock=clock,
                        producer_id_expiration_ms=5_000)
    append(plog, idem(0, pid=1, ts=T0 - 3_600_000), now=T0)  # an old CreateTime; stored time is T0
    clock.now = T0 + 4_000
    assert plog.remove_expired_producers() == 0
    clock.now = T0 + 5_000
    assert plog.remove_expired_producers() == 1


def test_manager_expires_producers_on_the_check_interval(tmp_path):
    clock = Clock(T0)
    logs = LogManager(str(tmp_path), clock=clock, producer_id_expiration_ms=1_000,
                      producer_id_expiration_check_interval_ms=10_000)
    logs.create_topic("p", 1)
    plog = logs.get_log("p", 0)
    append(plog, idem(0, pid=9, ts=T0))
    clock.now = T0 + 5_000
    logs.maintenance()
    assert 9 in plog.producer_state.producers   # expired, but the check is not due yet
    clock.now = T0 + 10_000
    logs.maintenance()
    assert 9 not in plog.producer_state.producers
    append(plog, idem(0, pid=8, ts=T0 + 10_000))
    clock.now = T0 + 12_000
    assert logs.remove_expired_producers() == 1
    logs.close()


# ---------------------------------------------------------------- lazy registry
def test_registry_imports_message_modules_on_first_use():
    code = (
        "import sys\n"
        "from protocol.messages.registry import REQUESTS, RESPONSES, ApiKey, MODULES\n"
        "loaded = [m for m in sys.modules if m.startswith('protocol.messages.') and m != 'protocol.messages.registry']\n"
        "assert loaded == [], loaded\n"
        "assert ApiKey.FETCH == 1 and 1 in REQUESTS and 999 not in REQUESTS and REQUESTS.get(999) is None\n"
        "assert 'protocol.messages.fetch' not in sys.modules\n"
        "cls = REQUESTS[ApiKey.FETCH]\n"
        "assert cls.__name__ == 'FetchRequest' and 'protocol.messages.fetch' in sys.modules\n"
        "assert 'protocol.messages.produce' not in sys.modules\n"
        "assert RESPONSES[1].__name__ == 'FetchResponse' and REQUESTS[1] is cls\n"
        "assert sorted(REQUESTS) == sorted(MODULES) and len(RESPONSES) == len(MODULES)\n"
        "assert all(c.__name__.endswith('Request') for c in REQUESTS.values())\n"
        "assert dict(RESPONSES.items())[0].__name__ == 'ProduceResponse'\n"
    )
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    subprocess.run([sys.executable, "-c", code], check=True, cwd=root)


def test_generated_files_are_current():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    subprocess.run([sys.executable, "-m", "protocol.codegen", "--check"], check=True, cwd=root)


@pytest.mark.parametrize("n", [1, 3])
def test_background_barrier_after_checkpoint_sync(tmp_path, n):
    async def main():
        logs = LogManager(str(tmp_path), clock=Clock())
        logs.start_background()
        logs.create_topic("d", n)
        for p in range(n):
            append(logs.get_log("d", p), batch(4))
            assert logs.get_log("d", p).delete_records(2) == 2
            assert checkpoint(tmp_path / f"d-{p}")[1] == "2"  # renamed in place before the answer
        await logs.barrier()
        logs.close()
    asyncio.run(main())


# ------------------------------------------------------------- lazy reads / sendfile spans
def test_lazy_read_matches_eager_read_and_gives_file_spans(tmp_path):
    from broker.log.partition_log import file_spans

    cfg = {"segment.bytes": 4096, "index.interval.bytes": 300}
    plog = PartitionLog(str(tmp_path / "t-0"), "t", 0, cfg, clock=Clock())
    for i in range(40):
        append(plog, batch(1 + i % 3))
    hwm = plog.high_watermark
    for start in (0, 1, 7, 33, hwm - 1):
        for max_bytes in (1, 500, 3000, 1 << 20):
            for max_offset in (None, hwm - 2):
                for min_one in (True, False):
                    eager = plog.read(start, max_bytes, max_offset, min_one)
                    lazy = plog.read(start, max_bytes, max_offset, min_one, lazy=True)
                    assert [(r.base_offset, r.last_offset, r.position, r.size) for r in lazy] == \
                        [(r.base_offset, r.last_offset, r.position, r.size) for r in eager]
                    assert [(r.producer_id, r.records_count, r.max_timestamp, r.is_control) for r in lazy] == \
                        [(r.producer_id, r.records_count, r.max_timestamp, r.is_control) for r in eager]
                    assert [bytes(r.data) for r in lazy] == [bytes(r.data) for r in eager]
    refs = plog.read(0, 1 << 30, lazy=True)
    spans = file_spans(refs)
    assert len(spans) == plog.segment_count  # contiguous batches merge; one run per segment
    sent = b"".join(os.pread(fd, n, pos) for fd, pos, n in spans)
    assert sent == b"".join(bytes(r.data) for r in plog.read(0, 1 << 30))
    plog.close()


def test_roll_adopts_files_made_on_the_worker_and_leftovers_go_at_start(tmp_path, monkeypatch):
    async def main():
        cfg = {"segment.bytes": 2048, "index.interval.bytes": 512, "retention.ms": -1}
        plog = PartitionLog(str(tmp_path / "t-0"), "t", 0, cfg, clock=Clock())
        plog.set_background(Background(asyncio.get_running_loop()))
        created_on_loop = []
        real_create = segment_mod.Segment.create.__func__
        monkeypatch.setattr(segment_mod.Segment, "create", classmethod(
            lambda cls, *a: created_on_loop.append(a[1]) or real_create(cls, *a)))
        for _ in range(40):
            append(plog, batch(2))
            await plog._bg.barrier()          # the spare is ready before the next append rolls
        assert plog.segment_count > 3 and created_on_loop == []
        assert [r.base_offset for r in plog.read(0, 1 << 20)] == list(range(0, 80, 2))
        await until(lambda: plog._spare is not None)
        plog._bg.close()
        spare_paths = list(plog._spare.paths)
        plog.close()                          # a spare not used is removed
        assert not any(os.path.exists(p) for p in spare_paths)
        # a spare left by a crash is an empty *.tmp file: removed at start-up
        (tmp_path / "t-0" / "spare.log.tmp").write_bytes(b"")
        plog = PartitionLog(str(tmp_path / "t-0"), "t", 0, cfg, clock=Clock())
        assert not (tmp_path / "t-0" / "spare.log.tmp").exists() and plog.log_end_offset == 80
        plog.close()
    asyncio.run(main())
