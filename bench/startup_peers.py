"""Start-up time and idle memory of sharebroker beside Apache Kafka 4.4 (or tansu), same machine.

For each broker kind, ``--repeat`` times: start it on an empty data directory (peers.start_broker),
measure the wall time from spawning the process to the broker accepting connections (ours, tansu:
the port accepts; Kafka: its first Metadata answer, the launcher's readiness probe, after
``kafka-storage format``, which is reported on its own), then ``--idle`` seconds later its RSS; stop it.

    python bench/startup_peers.py                          # ours and kafka, 3 times each
    python bench/startup_peers.py --kind ours --kind kafka --repeat 5 --idle 5
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time

try:
    from . import _common as C  # type: ignore[import-not-found]
    from . import peers  # type: ignore[import-not-found]
except ImportError:  # run as a script
    import _common as C  # type: ignore[no-redef]
    import peers  # type: ignore[no-redef]


def once(kind: str, idle: float) -> dict:
    t0 = time.monotonic()
    bp = peers.start_broker(kind)
    try:
        total = time.monotonic() - t0
        ready = bp.startup_seconds if bp.startup_seconds is not None else total
        time.sleep(idle)  # idle on purpose: the figure is the memory of a broker nobody uses
        rss, _ = bp.rss()
        return {"ready_s": ready, "spawn_to_ready_s": total, "idle_rss_mib": rss}
    finally:
        bp.stop()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kind", action="append", choices=peers.KINDS, help="broker kind (default: ours and kafka)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--idle", type=float, default=5.0, help="seconds between ready and the RSS reading")
    ap.add_argument("--json", metavar="FILE", default=None)
    args = ap.parse_args(argv)
    peers.terminate_on_sigterm()
    rows = []
    for kind in args.kind or ["ours", "kafka"]:
        runs = [once(kind, args.idle) for _ in range(args.repeat)]
        row = {"broker": kind, "runs": len(runs)}
        for key in ("ready_s", "spawn_to_ready_s", "idle_rss_mib"):
            row[f"{key} (median)"] = statistics.median(r[key] for r in runs)
        rows.append(row)
    print("start-up on an empty data directory (kafka: ready = JVM start to the first Metadata answer; "
          "spawn_to_ready adds kafka-storage format) and RSS after idling")
    C.table(rows, list(rows[0]))
    C.write_json(args.json, {"bench": "startup_peers", "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
