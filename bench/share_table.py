"""Share consume beside Apache Kafka 4.4 in one run, one table (issue 33).

Per round, each peer is started fresh (ours from this checkout, Apache Kafka 4.4.0 as ``peers.py``
starts it: ``-Xmx512m``, or ours from another checkout, ``NAME=DIR``), the peers one after the other
and the rounds interleaved (round 1 of every peer, then round 2, ...). On each:

* a 1-partition and a 16-partition topic, ``--records`` records of 1 KiB each (default producer);
* ``plain``: a Consumer in assign mode reads the 1-partition topic (the CPU per MB that share consume
  is held against);
* ``share pP xK``: K ShareConsumers (threads of this process, default settings, implicit
  acknowledgement, a fresh group at ``share.auto.offset.reset=earliest``) read every record, with
  ``max.poll.records`` at its default and at 2000: 1, 4 and 16 consumers on one partition, 64 on 16;
* ``first record``: seconds from ``subscribe()`` to the first record of a new consumer
  (``share_first_record.py``'s join, median of ``--first-trials``);
* ``share_scale p1-n16-large``: 16 slow members (1 ms a record, ``max.poll.records=50``) on big
  producer batches, records/s as a part of the ideal (``share_scale.py``).

Metrics: ``rec/s sub`` (from subscribe / assign to the last new record), ``rec/s 1st`` (from the first
record), ``cpu ms/MB`` (the broker's utime + stime per MB of values), ``cpu/plain`` (that over the
same round's plain consume), ``of ideal``, ``seconds``. The table gives the median over the rounds
and the ratio of the first peer to the second. The figures are indicative on a shared machine: the
load average is printed with them.

    python -m bench.share_table --peers ours,kafka --rounds 2 --records 100000
    python -m bench.share_table --peers tree=.,main=/work/main --rounds 3   # two checkouts of ours
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from types import SimpleNamespace

try:  # run as `python bench/x.py` or as `python -m bench.x`
    from . import _common as C  # type: ignore[import-not-found]
    from . import peers, share_first_record, share_scale, share_throughput  # type: ignore[import-not-found]
    from .cpu_per_mb import start_root  # type: ignore[import-not-found]
    from .throughput import consume, produce  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover
    import _common as C  # type: ignore[no-redef]
    import peers  # type: ignore[no-redef]
    import share_first_record  # type: ignore[no-redef]
    import share_scale  # type: ignore[no-redef]
    import share_throughput  # type: ignore[no-redef]
    from cpu_per_mb import start_root  # type: ignore[no-redef]
    from throughput import consume, produce  # type: ignore[no-redef]

SIZE = share_throughput.SIZE
SHARE_RUNS = [(1, 1), (1, 4), (1, 16), (16, 64)]  # (partitions, consumers)
MAX_POLL = ["default", "2000"]
SCALE = ("p1-n16-large", 1, 16, "large")


def start_peer(spec: str) -> peers.BrokerProc:
    name, sep, root = spec.partition("=")
    bp = start_root(root, name) if sep else peers.start_broker(name)
    bp.name = name
    return bp


def one_round(bp: peers.BrokerProc, args) -> dict[tuple[str, str], float]:
    """{(row, metric): value} of one fresh broker."""
    out: dict[tuple[str, str], float] = {}
    n = args.records
    topics = {}
    for partitions in sorted({p for p, _ in SHARE_RUNS}):
        topics[partitions] = topic = C.unique(f"table-p{partitions}")
        C.create_topic(bp.bootstrap, topic, partitions)
        pr = produce(bp.bootstrap, topic, n, SIZE, {}, 120)
        if pr["unflushed"] or pr["errors"]:
            print(f"!! {bp.name} produce: {pr}", file=sys.stderr, flush=True)
    cpu0 = bp.cpu()
    cr = consume(bp.bootstrap, topics[1], 1, {}, args.idle_timeout, want=n)
    plain_cpu = 1000 * (bp.cpu() - cpu0) / (cr["got"] * SIZE / 1e6)
    out["plain p1", "rec/s sub"] = cr["got"] / cr["secs"]
    out["plain p1", "cpu ms/MB"] = plain_cpu
    for partitions, k in SHARE_RUNS:
        for mpr in MAX_POLL:
            ns = SimpleNamespace(skip_set_earliest=False, idle_timeout=args.idle_timeout, max_seconds=args.max_seconds,
                                 sconf={} if mpr == "default" else {"max.poll.records": mpr})
            row = f"share p{partitions} x{k} mpr={mpr}"
            try:
                r = share_throughput.share_run(bp, topics[partitions], n, k, ns)
            except Exception as e:  # noqa: BLE001 -- report and go on
                print(f"!! {bp.name} {row}: {e!r}", file=sys.stderr, flush=True)
                continue
            if r["records"] < n:
                continue  # share_run said so on stderr; a partial read is no rate
            out[row, "rec/s sub"], out[row, "rec/s 1st"] = r["rec/s"], r["rec/s_after_1st"]
            out[row, "cpu ms/MB"] = r["cpu_ms/MB"]
            out[row, "cpu/plain"] = r["cpu_ms/MB"] / plain_cpu
    joins = [share_first_record.trial(bp.bootstrap, 30.0)["join"] for _ in range(args.first_trials)]
    joins = [j for j in joins if j == j]
    if joins:
        out["first record after subscribe()", "seconds"] = statistics.median(joins)
    scale_args = SimpleNamespace(work_ms=1.0, min_records=20_000, seconds=args.scale_seconds, group_config={},
                                 procs=8, locks=2000, max_seconds=60.0)
    try:
        s = share_scale.run_one(bp, SCALE, scale_args)
        out[f"share_scale {SCALE[0]}", "of ideal"] = s["ratio"]
    except Exception as e:  # noqa: BLE001
        print(f"!! {bp.name} share_scale: {e!r}", file=sys.stderr, flush=True)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--peers", default="ours,kafka",
                    help="comma-separated: ours, kafka, or NAME=DIR (ours from another checkout); ratio = first / second")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--records", type=int, default=100_000, help="1 KiB records per topic (default 100000)")
    ap.add_argument("--first-trials", type=int, default=3)
    ap.add_argument("--scale-seconds", type=float, default=2.0, help="share_scale's --seconds")
    ap.add_argument("--idle-timeout", type=float, default=20.0)
    ap.add_argument("--max-seconds", type=float, default=120.0, help="cap on one share run")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    names = [p.partition("=")[0] for p in args.peers.split(",") if p]
    specs = [p for p in args.peers.split(",") if p]
    peers.terminate_on_sigterm()
    values: dict[tuple[str, str], dict[str, list[float]]] = {}
    loads = [os.getloadavg()[0]]
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    for rnd in range(1, args.rounds + 1):
        for spec in specs:
            bp = start_peer(spec)
            print(f"== round {rnd}: {bp.name} at {bp.bootstrap} (pid {bp.pid}), load {os.getloadavg()[0]:.2f}",
                  flush=True)
            try:
                for key, v in one_round(bp, args).items():
                    values.setdefault(key, {}).setdefault(bp.name, []).append(v)
            except Exception as e:  # noqa: BLE001 -- report and go on with the next peer
                print(f"!! {bp.name} round {rnd}: {e!r}", file=sys.stderr, flush=True)
            finally:
                bp.stop()
            loads.append(os.getloadavg()[0])
    rows = []
    for (row, metric), per in values.items():
        r = {"row": row, "metric": metric}
        for name in names:
            vals = per.get(name, [])
            r[name] = statistics.median(vals) if vals else float("nan")
            r[f"{name} rounds"] = vals
        if len(names) >= 2:
            r[f"{names[0]}/{names[1]}"] = C.ratio(r[names[0]], r[names[1]])
        rows.append(r)
    print(f"\n# share consume, {args.records} x {SIZE} B per topic, medians of {args.rounds} round(s), started "
          f"{started}, {os.cpu_count()} CPUs, load average {min(loads):.1f}-{max(loads):.1f}")
    cols = ["row", "metric", *names] + ([f"{names[0]}/{names[1]}"] if len(names) >= 2 else [])
    C.table(rows, cols)
    C.write_json(args.json, {"bench": "share_table", "args": vars(args), "loads": loads, "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
