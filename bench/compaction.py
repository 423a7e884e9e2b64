"""Log compaction: what __consumer_offsets keeps, how fast the cleaner cleans, what it costs the loop.

Three measurements (``all`` runs them in turn):

* ``offsets``: for each ``--root`` (a checkout of this repository; default: this one) start
  ``python -m broker`` on a fresh data directory, commit ``--commits`` offsets (1,000,000) over
  ``--partitions`` partitions (100) of one topic as 10,000 OffsetCommit requests of 100 partitions
  (what a consumer group's auto-commit does; pipelined over one socket), then report the size of
  ``__consumer_offsets`` on disk right away and, once the cleaner checkpoint of
  ``__consumer_offsets`` has reached its active segment (a root without a cleaner: at once),
  after cleaning; and the time to the first cleaning. Target: < 10 MB.
* ``cleaner``: the cleaner of this tree in this process, on one core: a compacted log of
  ``--mib`` MiB (``--value-bytes`` values over ``--keys`` keys, 16 KiB batches) per codec,
  timed from the offset map to the last swapped segment: MB/s and records/s.
* ``stall``: the broker's log layer and its cleaner (worker process) inside one event loop, as
  in the broker: a ``--stall-mib`` MiB dirty compacted log is cleaned while an appender appends
  16 KiB batches to another topic as fast as the loop lets it and a 1 ms ticker measures the
  loop's lag; then the same appends with the cleaner idle. Targets: worst tick lag < 5 ms,
  appends while cleaning >= 0.8x idle.

    python bench/compaction.py all --root main=/work/main --root this=.
    python bench/compaction.py cleaner --mib 256
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _dir_size(path: str) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(dirpath, f))
            except OSError:
                pass
    return total


# ------------------------------------------------------------------ offsets
def _commit_all(port: int, commits: int, partitions: int, topic: str) -> float:
    from protocol.messages.create_topics import CreateTopicsRequest as CT
    from protocol.messages.offset_commit import OffsetCommitRequest as OC
    from tests.wire import WireClient

    with WireClient(f"127.0.0.1:{port}", timeout=120) as w:
        w.request(CT(topics=[CT.CreatableTopic(name=topic, num_partitions=partitions, replication_factor=1)],
                     timeout_ms=30000), 5)
        t0 = time.perf_counter()
        rounds = commits // partitions
        window = 64
        inflight = 0
        for r in range(rounds):
            req = OC(group_id="bench-group", generation_id_or_member_epoch=-1, member_id="", topics=[
                OC.OffsetCommitRequestTopic(name=topic, partitions=[
                    OC.OffsetCommitRequestPartition(partition_index=p, committed_offset=r * 10 + p,
                                                    committed_leader_epoch=-1, committed_metadata="")
                    for p in range(partitions)])])
            w.send(req, 8)
            inflight += 1
            if inflight == window:
                w.receive(OC.API_KEY, 8)
                inflight -= 1
        for _ in range(inflight):
            w.receive(OC.API_KEY, 8)
        return time.perf_counter() - t0


def _offsets_checkpoint(data: str) -> int:
    try:
        with open(os.path.join(data, "cleaner-offset-checkpoint")) as f:
            for line in f.read().splitlines()[2:]:
                t, p, o = line.split()
                if t == "__consumer_offsets":
                    return int(o)
    except (FileNotFoundError, ValueError):
        pass
    return -1


def _active_base(seg_dir: str) -> int:
    bases = [int(n[:-4]) for n in os.listdir(seg_dir) if n.endswith(".log") and n[:-4].isdigit()]
    return max(bases) if bases else 0


def bench_offsets(args) -> None:
    print(f"__consumer_offsets after {args.commits:,} offset commits over {args.partitions} partitions "
          f"(OffsetCommit v8, 100 partitions per request)")
    print(f"{'root':>10} {'commit s':>9} {'size after':>11} {'after cleaning':>15} {'cleaned in s':>13}")
    for name, root in args.root:
        data = tempfile.mkdtemp(prefix="sb-bench-offsets-")
        port = _free_port()
        env = {**os.environ, "PYTHONPATH": os.path.abspath(root)}
        proc = subprocess.Popen([sys.executable, "-m", "broker", "--data-dir", data, "--listen",
                                 f"127.0.0.1:{port}"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                text=True)
        try:
            for line in proc.stderr:
                if "accepting connections" in line:
                    break
            secs = _commit_all(port, args.commits, args.partitions, "bench-offsets")
            seg_dir = os.path.join(data, "__consumer_offsets-0")
            before = _dir_size(seg_dir)
            t0 = time.monotonic()
            cleaned_in = "n/a"
            has_cleaner = os.path.isdir(os.path.join(root, "broker", "log", "cleaner"))
            while has_cleaner and time.monotonic() - t0 < args.settle_s:
                if _offsets_checkpoint(data) >= _active_base(seg_dir):
                    cleaned_in = f"{time.monotonic() - t0:.1f}"
                    break
                time.sleep(0.2)
            after = _dir_size(seg_dir)
            print(f"{name:>10} {secs:>9.1f} {before / 1e6:>9.1f}MB {after / 1e6:>13.1f}MB {cleaned_in:>13}")
        finally:
            proc.terminate()
            proc.wait(30)
            shutil.rmtree(data, ignore_errors=True)


# ------------------------------------------------------------------ cleaner throughput
def _fill(plog, mib: int, keys: int, value_bytes: int, codec: int) -> int:
    """Append ``mib`` MiB of 16 KiB batches of keyed records; returns the record count."""
    from protocol import compression
    from protocol.records import build_batch, uncompressed_batch, validate_records, HEADER_SIZE
    import struct
    from crc32c import crc32c

    per_batch = max(16384 // (value_bytes + 20), 1)
    value = os.urandom(value_bytes // 2).hex().encode()[:value_bytes]
    written, n, k = 0, 0, 0
    now = int(time.time() * 1000)
    while written < mib << 20:
        recs = [(b"key-%08d" % ((k + i) % keys), value, []) for i in range(per_batch)]
        k += per_batch
        data = build_batch(recs, timestamp=now)
        if codec:
            body = compression.compress(codec, data[HEADER_SIZE:])
            buf = bytearray(data[:HEADER_SIZE]) + body
            struct.pack_into(">i", buf, 8, len(buf) - 12)
            struct.pack_into(">h", buf, 21, codec)
            struct.pack_into(">I", buf, 17, crc32c(bytes(buf[21:])))
            data = bytes(buf)
        plog.append(data, validate_records(data), check_producer=False)
        written += per_batch * (value_bytes + 20)
        n += per_batch
    plog.roll()
    del uncompressed_batch
    return n


def bench_cleaner(args) -> None:
    from broker.log import LogManager
    from broker.log.cleaner import LogCleaner
    from protocol import compression

    print(f"cleaner throughput, one core: {args.mib} MiB per run ({args.value_bytes}-byte values, "
          f"{args.keys:,} keys, 16 KiB batches), offset map + rewrite + swap")
    print(f"{'codec':>7} {'records':>10} {'MB read':>8} {'seconds':>8} {'MB/s':>7} {'records/s':>10} {'kept':>6}")
    for codec in (0, 1, 2, 3, 4):
        if codec and not compression.available(codec):
            continue
        data = tempfile.mkdtemp(prefix="sb-bench-cleaner-")
        try:
            logs = LogManager(data, default_configs={"segment.bytes": str(64 << 20)})
            logs.create_topic("c", 1, {"cleanup.policy": "compact"})
            plog = logs.get_log("c", 0)
            n = _fill(plog, args.mib, args.keys, args.value_bytes, codec)
            size = plog.size_bytes
            cleaner = LogCleaner(logs, {"log.cleaner.dedupe.buffer.size": str(512 << 20)})
            t0 = time.process_time()
            cleaner.clean_now(plog)
            secs = time.process_time() - t0
            kept = plog.size_bytes / size
            print(f"{compression.NAMES[codec]:>7} {n:>10,} {size / 1e6:>8.1f} {secs:>8.2f} {size / 1e6 / secs:>7.1f} "
                  f"{n / secs:>10,.0f} {kept:>5.1%}")
            logs.close()
        finally:
            shutil.rmtree(data, ignore_errors=True)


# ------------------------------------------------------------------ loop stall
_CALLBACKS: list[float] = []  # durations of the cleaner's callbacks on the loop in the current run, ms


def _timed(cls, name: str, out: list) -> None:
    """Record the duration of every call of ``cls.name`` (a cleaner callback on the loop) in ``out``."""
    fn = getattr(cls, name)

    def wrapper(*a, **kw):
        t = time.perf_counter()
        try:
            return fn(*a, **kw)
        finally:
            out.append((time.perf_counter() - t) * 1000)
    setattr(cls, name, wrapper)


async def _stall_run(args, clean: bool, append: bool = True) -> dict:
    from broker.log import LogManager, PartitionLog
    from broker.log.cleaner import LogCleaner
    from broker.log.cleaner.worker import WorkerProcess
    from protocol.records import build_batch, validate_records

    if not _CALLBACKS:  # time every cleaner callback on the loop (once per process)
        for cls, name in ((LogCleaner, "_tick"), (LogCleaner, "_done"), (WorkerProcess, "_readable"),
                          (PartitionLog, "replace_segments")):
            _timed(cls, name, _CALLBACKS)
    del _CALLBACKS[:]
    _CALLBACKS.append(0.0)

    data = tempfile.mkdtemp(prefix="sb-bench-stall-")
    logs = LogManager(data, default_configs={"segment.bytes": str(args.segment_mib << 20)})
    logs.create_topic("dirty", 1, {"cleanup.policy": "compact"})
    logs.create_topic("other", 1, {"retention.bytes": str(256 << 20)})  # the maintenance timer keeps it bounded
    records = _fill(logs.get_log("dirty", 0), args.stall_mib, args.keys, args.value_bytes, 0) if clean else 0
    logs.start_background()
    cleaner = LogCleaner(logs, {"log.cleaner.backoff.ms": "100",
                                "log.cleaner.io.max.bytes.per.second": str(args.io_max_mbs * 1e6 or 1.7e308)})
    loop = asyncio.get_running_loop()
    other = logs.get_log("other", 0)
    batch = build_batch([(None, os.urandom(1024), [])], timestamp=int(time.time() * 1000))  # CPU-bound appends
    infos = validate_records(batch)
    lags: list[float] = []
    appended = 0
    stop = False

    async def ticker():
        while not stop:
            t = loop.time()
            await asyncio.sleep(0.001)
            lags.append((loop.time() - t - 0.001) * 1000)

    async def appender():
        nonlocal appended
        while not stop:
            other.append(batch, infos)
            appended += len(batch)
            await asyncio.sleep(0)

    async def maintenance():  # as the broker's log.retention.check.interval.ms timer
        while not stop:
            await asyncio.sleep(1)
            logs.maintenance()

    t0 = time.monotonic()
    tasks = [asyncio.create_task(ticker()), asyncio.create_task(maintenance())]
    if append:
        tasks.append(asyncio.create_task(appender()))
    if clean:
        cleaner.start(loop)
        dirty = logs.get_log("dirty", 0)
        end = dirty.segments[-1].base_offset
        while cleaner.checkpoints.get(("dirty", 0), -1) < end:
            await asyncio.sleep(0.05)
    else:
        await asyncio.sleep(args.idle_s)
    secs = time.monotonic() - t0
    stop = True
    await asyncio.gather(*tasks)
    cleaner.close()
    logs.close()
    shutil.rmtree(data, ignore_errors=True)
    lags.sort()
    return {"secs": secs, "records": records, "appends": appended / len(batch) / secs, "max": lags[-1],
            "callback_max": max(_CALLBACKS),
            "p99": lags[int(len(lags) * 0.99)], "median": statistics.median(lags)}


def bench_stall(args) -> None:
    try:
        import uvloop  # the broker's loop when installed
        runner = uvloop.run
    except ImportError:
        runner = asyncio.run
    print(f"event loop while the cleaner (worker process, io max {args.io_max_mbs or 'unlimited'} MB/s) cleans "
          f"{args.stall_mib} MiB, vs the cleaner idle: "
          f"a 1 ms ticker alone, then with an appender appending 1 KiB batches to another topic as fast as "
          f"the loop lets it")
    rows = [("cleaning", runner(_stall_run(args, True, append=False)))]
    args.idle_s = rows[0][1]["secs"]
    rows.append(("idle", runner(_stall_run(args, False, append=False))))
    busy = runner(_stall_run(args, True))
    args.idle_s = busy["secs"]
    idle = runner(_stall_run(args, False))
    rows += [("cleaning+appends", busy), ("idle+appends", idle)]
    print(f"{'':>17} {'seconds':>8} {'tick lag max':>13} {'p99':>7} {'median':>7} {'appends/s':>10} "
          f"{'longest cleaner callback':>25}")
    for name, r in rows:
        print(f"{name:>17} {r['secs']:>8.1f} {r['max']:>11.2f}ms {r['p99']:>5.2f}ms {r['median']:>5.2f}ms "
              f"{r['appends']:>10,.0f} {r['callback_max']:>23.2f}ms")
    print(f"appends while cleaning / idle: {busy['appends'] / idle['appends']:.2f}x "
          f"({busy['records']:,} records cleaned)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=("offsets", "cleaner", "stall", "all"))
    ap.add_argument("--root", action="append", type=lambda s: tuple(s.split("=", 1)) if "=" in s else (s, s),
                    default=[], metavar="NAME=PATH", help="a checkout to run the offsets bench against (repeat)")
    ap.add_argument("--commits", type=int, default=1_000_000)
    ap.add_argument("--partitions", type=int, default=100)
    ap.add_argument("--settle-s", type=float, default=90.0, help="how long to wait for the cleaning")
    ap.add_argument("--mib", type=int, default=128, help="log size of the cleaner throughput runs")
    ap.add_argument("--stall-mib", type=int, default=1024, help="log size cleaned in the stall run")
    ap.add_argument("--segment-mib", type=int, default=64)
    ap.add_argument("--io-max-mbs", type=float, default=0.0,
                    help="stall: log.cleaner.io.max.bytes.per.second in MB/s (default: unlimited, Kafka's)")
    ap.add_argument("--keys", type=int, default=10_000)
    ap.add_argument("--value-bytes", type=int, default=1024)
    args = ap.parse_args()
    if not args.root:
        args.root = [("this", ROOT)]
    if args.what in ("offsets", "all"):
        bench_offsets(args)
    if args.what in ("cleaner", "all"):
        bench_cleaner(args)
    if args.what in ("stall", "all"):
        bench_stall(args)


if __name__ == "__main__":
    main()
