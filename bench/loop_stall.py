"""Event-loop stalls caused by the log layer while segments roll, synchronous vs background fsync.

Runs the broker's log layer (``broker.log.LogManager``) inside an asyncio loop
(uvloop when installed), the way the broker does, without sockets: a writer
appends ``--batch-kib`` batches as fast as the loop lets it (one append per loop
iteration) to a topic with a small ``segment.bytes``, so segments roll every
few dozen appends, and a timer calls ``maintenance()`` every ``--maintenance-ms``
(the broker does so every ``log.retention.check.interval.ms``), which fsyncs
the rolled segments. Optionally ``flush.messages`` makes appends request fsyncs.

For each mode it reports the longest single loop callback spent in the log
layer (the roll itself: sealing the old segment and creating the new files; an
append that rolled, including its write; any append; a maintenance pass) and
the largest lag of a 1 ms ticker, which is what every other connection waits.

* ``sync``: ``LogManager`` as the unit tests use it: fsyncs on the loop (the
  behaviour before the background worker existed);
* ``background``: after ``logs.start_background()``: fsyncs, checkpoint syncs
  and file removal run on the worker thread.

    python bench/loop_stall.py --mib 512 --segment-mib 16
    python bench/loop_stall.py --root before=/tmp/baseline   # (sync only: an older log layer)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402


async def run(mode: str, args) -> dict:
    from broker.log import LogManager
    from protocol.records import build_batch, validate_records

    data_dir = tempfile.mkdtemp(prefix="sb-stall-", dir=args.dir)
    logs = LogManager(data_dir)
    if mode == "background":
        logs.start_background()
    cfg = {"segment.bytes": str(args.segment_mib << 20), "retention.ms": "-1"}
    if args.flush_messages:
        cfg["flush.messages"] = str(args.flush_messages)
    logs.create_topic("stall", 1, cfg)
    plog = logs.get_log("stall", 0)
    recs = [(None, os.urandom(1024), [])] * args.batch_kib
    data = build_batch(recs, timestamp=int(time.time() * 1000))
    infos = validate_records(data)
    n = (args.mib << 20) // len(data)
    loop = asyncio.get_running_loop()
    worst = {"append+roll": 0.0, "append": 0.0, "maintenance": 0.0}
    tick = C.LagTicker()
    lags = tick.lags

    def maintenance():
        if not tick.running:
            return
        t = time.perf_counter()
        logs.maintenance()
        worst["maintenance"] = max(worst["maintenance"], time.perf_counter() - t)
        loop.call_later(args.maintenance_ms / 1000, maintenance)

    real_roll = plog.roll

    def timed_roll(*a, **kw):  # the roll itself: seal the old segment, create the new files
        t = time.perf_counter()
        real_roll(*a, **kw)
        worst["roll"] = max(worst.get("roll", 0.0), time.perf_counter() - t)
    plog.roll = timed_roll
    loop.call_later(args.maintenance_ms / 1000, maintenance)
    rolls = 0
    t_start = time.perf_counter()
    for _ in range(n):
        segs = plog.segment_count
        t = time.perf_counter()
        res = plog.append(data, infos)
        dt = time.perf_counter() - t
        rolled = plog.segment_count != segs
        rolls += rolled
        key = "append+roll" if rolled else "append"
        worst[key] = max(worst[key], dt)
        if res.durable is not None:
            await res.durable
        else:
            await asyncio.sleep(0)
    await asyncio.sleep(2 * args.maintenance_ms / 1000)  # let the last rolled segments be synced
    elapsed = time.perf_counter() - t_start
    await tick.stop()
    t = time.perf_counter()
    await logs.barrier()
    logs.close()
    close_s = time.perf_counter() - t
    shutil.rmtree(data_dir, ignore_errors=True)
    return {"mode": mode, "MiB": args.mib, "rolls": rolls, "secs": elapsed,
            "max_roll_ms": 1000 * worst.get("roll", 0.0), "max_append+roll_ms": 1000 * worst["append+roll"], "max_append_ms": 1000 * worst["append"],
            "max_maintenance_ms": 1000 * worst["maintenance"],
            "max_tick_lag_ms": 1000 * max(lags or [0]),
            "p99_tick_lag_ms": 1000 * (statistics.quantiles(lags, n=100)[98] if len(lags) > 100 else max(lags or [0])),
            "close_ms": 1000 * close_s}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mib", type=int, default=512, help="MiB appended per mode")
    ap.add_argument("--segment-mib", type=int, default=16)
    ap.add_argument("--batch-kib", type=int, default=1024)
    ap.add_argument("--maintenance-ms", type=int, default=100)
    ap.add_argument("--flush-messages", type=int, default=0, help="also set flush.messages (0: not set)")
    ap.add_argument("--modes", default="sync,background")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", default=None, help="where to put the data (default: the temp dir)")
    ap.add_argument("--root", default=ROOT, help="repository checkout whose broker.log to use")
    args = ap.parse_args(argv)
    sys.path.insert(0, os.path.abspath(args.root.partition("=")[2] or args.root))
    try:
        import uvloop
        runner = uvloop.run
    except ImportError:
        runner = asyncio.run

    rows = []
    for _ in range(args.repeat):
        for mode in [m for m in args.modes.split(",") if m]:
            row = runner(run(mode, args))
            rows.append(row)
            print(" ".join(f"{k}={C.fmt(v)}" for k, v in row.items()), flush=True)
    print("\n# longest loop callbacks in the log layer and ticker lag (ms), per run")
    C.table(rows, list(rows[0].keys()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
