"""Event-loop stall of the share coordinator's cold-snapshot pass, by the number of share-partitions.

Runs the share coordinator on a real ``__share_group_state`` partition (``broker.log.LogManager`` with
its background worker, 4 MiB segments) inside an asyncio loop (uvloop when installed), without
sockets: ``--keys`` share-partitions (100 per group) are initialized and written once, then the clock
jumps past ``share.coordinator.cold.partition.snapshot.interval.ms`` and one cold-snapshot pass
re-snapshots every one of them (what the broker's timer does every 5 minutes on a long-lived cluster
whose share groups come and go). Prints the pass's time, the largest lag of a 1 ms ticker (the
longest the loop went without a turn) and the largest CPU time the loop thread spent between two
ticks (the same without waiting for a CPU: the figure to compare on a busy machine); ``gc`` says
whether garbage collection was on.

    python bench/share_state_stall.py --root before=/tmp/before --root after=. --keys 2000,10000,30000
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402


async def run(keys: int) -> dict:
    from broker.internal_topics import PartitionRecordLog
    from broker.log import LogManager
    from coordinator.share_state import ShareCoordinator
    from protocol.messages.initialize_share_group_state import InitializeShareGroupStateRequest as Init
    from protocol.messages.write_share_group_state import WriteShareGroupStateRequest as Write

    class Config(dict):
        def get_int(self, name, default):
            return int(self.get(name, default))

    now = [1_000]
    data_dir = tempfile.mkdtemp(prefix="sb-share-stall-")
    logs = LogManager(data_dir)
    logs.start_background()
    logs.create_topic("__share_group_state", 1, {"segment.bytes": str(4 << 20)})
    c = ShareCoordinator(PartitionRecordLog(logs.get_log("__share_group_state", 0)), Config(), lambda: now[0])
    await c.load()
    tid = bytes(range(16))
    for i in range(keys):
        group, part = f"g{i // 100}", i % 100
        await c.initialize_state(Init(group, [Init.InitializeStateData(tid, [Init.PartitionData(part, 0, 0)])]))
        await c.write_state(Write(group, [Write.WriteStateData(tid, [Write.PartitionData(
            part, 0, 0, 0, -1, [Write.StateBatch(0, 9, 2, 1)])])]))
    tick = C.LagTicker()
    await asyncio.sleep(0.05)
    tick.lags.clear()
    tick.cpu.clear()
    now[0] += 10 ** 9
    t = time.perf_counter()
    written = await c.snapshot_cold_partitions()
    secs = time.perf_counter() - t
    await asyncio.sleep(0.01)
    await tick.stop()
    await logs.barrier()
    logs.close()
    shutil.rmtree(data_dir, ignore_errors=True)
    return {"keys": keys, "snapshots": written, "pass_ms": secs * 1000, "max_loop_lag_ms": max(tick.lags) * 1000,
            "max_loop_cpu_ms": max(tick.cpu) * 1000,
            "gc": gc.isenabled()}


def child(args) -> int:
    sys.path.insert(0, args.child_root)
    try:
        import uvloop
        runner = uvloop.run
    except ImportError:
        runner = asyncio.run
    if args.no_gc:
        gc.disable()
    row = runner(run(args.child_keys))
    print(" ".join(f"{k}={v:.1f}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()), flush=True)
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", action="append", default=[], metavar="[NAME=]DIR",
                    help="a checkout to measure (repeatable; default: this one)")
    ap.add_argument("--keys", default="2000,10000")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-gc", action="store_true", help="with garbage collection off (what the pass itself costs)")
    ap.add_argument("--child-root", help=argparse.SUPPRESS)
    ap.add_argument("--child-keys", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child_root:
        return child(args)
    roots = [(r.partition("=")[0] if "=" in r else r, os.path.abspath(r.partition("=")[2] or r))
             for r in args.root] or [("this", ROOT)]
    for keys in [int(k) for k in args.keys.split(",")]:
        for rep in range(args.repeat):
            for name, root in roots:  # interleaved: every root once, then again
                cmd = [sys.executable, os.path.abspath(__file__), "--child-root", root, "--child-keys", str(keys)]
                if args.no_gc:
                    cmd.append("--no-gc")
                out = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=600)
                line = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else out.stderr.strip()[-300:]
                print(f"{name} run {rep + 1}: {line}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
