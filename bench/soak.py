"""Mixed-workload soak: produce latency per window, the broker's longest event-loop stall, share-state disk use.

Starts the broker of this checkout (``--root`` another) with ``sharebroker.loop.stall.log.ms`` (the
broker's own stall watch, ``broker/loop_watch.py``) and runs for ``--minutes``:

* this process: an idempotent producer sending ``--rate`` records/s (``--size`` bytes) to a
  4-partition topic, paced by a schedule; each delivery's latency is librdkafka's own
  (``Message.latency()``: from ``produce()`` to the broker's answer), so the harness's Python threads
  do not add to it; a sampler reads the disk use of each internal topic every window;
* a child process (so its clients' Python work does not share this one's GIL): a transactional
  producer (a transaction of 20 records every 0.5 s to a 2-partition topic, every 5th aborted),
  ``--consumers`` consumers of one consumer group that each leave after 10-30 s and are replaced
  (rebalances, offset commits), and ``--share-consumers`` share consumers of one share group on the
  main topic that each leave after 15-45 s and are replaced (share-state writes, snapshots,
  pruning, acquisition locks released on close); with ``--fresh-groups`` every replacement joins a
  new group, so groups, committed offsets and share state pile up as on a long-lived cluster.

Prints one line per ``--window`` seconds (deliveries, p50 / p99 / max produce latency, the broker's
stalls in that window, ``__share_group_state`` on disk), then a summary: window p99s, the longest
stall and the logged stalls grouped by where the loop thread was.  ``--set K=V`` passes broker
settings (e.g. ``share.coordinator.state.topic.segment.bytes``).

    python bench/soak.py --minutes 4
    python /tmp/before/bench/soak.py --minutes 4      # a checkout of the version before, back to back
"""

from __future__ import annotations

import argparse
import collections
import multiprocessing
import os
import random
import re
import shutil
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402
import peers  # noqa: E402

from confluent_kafka import Consumer, Producer, ShareConsumer  # noqa: E402

INTERNAL = ("__share_group_state", "__consumer_offsets", "__transaction_state")
STALL = re.compile(r"^(\S+ \S+).*event loop stalled (\d+) ms \(loop thread: on CPU (\d+) ms, waiting for a CPU "
                   r"(\d+) ms, blocked (\d+) ms; process CPU (\d+) ms(?:; garbage collection (\d+) ms \(generation "
                   r"\d\))?\): (.*)$")


def disk_bytes(data_dir: str, topic: str) -> int:
    """Bytes on disk (allocated blocks) of a topic's partition directories."""
    total = 0
    for name in os.listdir(data_dir):
        if name.rpartition("-")[0] == topic:
            d = os.path.join(data_dir, name)
            for f in os.listdir(d):
                try:
                    total += os.stat(os.path.join(d, f)).st_blocks * 512
                except FileNotFoundError:
                    pass
    return total


# --------------------------------------------------------------------------- the child's clients

def _txn_producer(bs: str, topic: str, stop) -> None:
    p = Producer({"bootstrap.servers": bs, "transactional.id": C.unique("soak-txn"), "linger.ms": 5})
    p.init_transactions(30)
    n = 0
    while not stop.is_set():
        p.begin_transaction()
        for i in range(20):
            p.produce(topic, key=str(i).encode(), value=os.urandom(100))
        n += 1
        if n % 5 == 0:
            p.abort_transaction(30)
        else:
            p.commit_transaction(30)
        stop.wait(0.5)
    p.flush(10)


def _consumer_churn(bs: str, topic: str, group: str, fresh: bool, stop) -> None:
    while not stop.is_set():
        c = Consumer({"bootstrap.servers": bs, "group.id": C.unique(group) if fresh else group,
                      "auto.offset.reset": "latest",
                      "auto.commit.interval.ms": 1000, "isolation.level": "read_committed"})
        c.subscribe([topic])
        end = time.monotonic() + random.uniform(10, 30)
        while time.monotonic() < end and not stop.is_set():
            c.poll(0.2)
        c.close()


def _share_churn(bs: str, topic: str, group: str, fresh: bool, stop) -> None:
    while not stop.is_set():
        c = ShareConsumer({"bootstrap.servers": bs, "group.id": C.unique(group) if fresh else group})
        c.subscribe([topic])
        end = time.monotonic() + random.uniform(15, 45)
        while time.monotonic() < end and not stop.is_set():
            c.poll(0.2)
        c.close()


def _child(bs: str, topic: str, txn_topic: str, consumers: int, share_consumers: int, fresh: bool, stop) -> None:
    tag = C.unique("soak")
    threads = [threading.Thread(target=_txn_producer, args=(bs, txn_topic, stop), daemon=True)]
    threads += [threading.Thread(target=_consumer_churn, args=(bs, topic, tag + "-cg", fresh, stop), daemon=True)
                for _ in range(consumers)]
    threads += [threading.Thread(target=_share_churn, args=(bs, topic, tag + "-sg", fresh, stop), daemon=True)
                for _ in range(share_consumers)]
    for t in threads:
        t.start()
        time.sleep(0.3)
    for t in threads:
        t.join()


# --------------------------------------------------------------------------- this process

Stall = collections.namedtuple("Stall", "t ms on_cpu wait blocked process gc where")


def stalls_in(log_path: str) -> list[Stall]:
    """Every stall the broker logged (ms: the stall; on_cpu, wait, blocked: the loop thread's time in
    it on a CPU, waiting for one, asleep; process: the broker's CPU time in it; gc: garbage collection in it)."""
    out = []
    with open(log_path, encoding="utf-8", errors="replace") as f:
        for line in f:
            m = STALL.match(line)
            if m:
                t = time.mktime(time.strptime(m.group(1).split(",")[0], "%Y-%m-%d %H:%M:%S"))
                out.append(Stall(t, *map(int, m.group(2, 3, 4, 5, 6)), int(m.group(7) or 0), m.group(8)))
    return out


def cause(s: Stall) -> str:
    """The larger part of a stall: work on the loop, the machine's other processes, or the loop asleep."""
    return max((s.on_cpu, "on CPU"), (s.wait, "waiting for a CPU"), (s.blocked, "blocked"))[1]


def run(args) -> int:
    extra = ["--set", f"sharebroker.loop.stall.log.ms={args.stall_ms}"]
    for kv in args.set:
        extra += ["--set", kv]
    bp = peers.start_ours(extra_args=extra, keep=True)  # its log is read after it stopped
    data_dir = os.path.join(bp.workdir, "data")
    if args.broker_nice:  # the loop thread only (Linux: a thread's nice value), to take the machine's noise out
        os.setpriority(os.PRIO_PROCESS, bp.pid, args.broker_nice)
    print(f"== broker {bp.bootstrap} (pid {bp.pid}), data {data_dir}, log {bp.log_path}", flush=True)
    topic, txn_topic = C.unique("soak"), C.unique("soak-txn")
    C.create_topic(bp.bootstrap, topic, 4)
    C.create_topic(bp.bootstrap, txn_topic, 2)
    stop = multiprocessing.Event()
    child = multiprocessing.Process(target=_child, args=(bp.bootstrap, topic, txn_topic, args.consumers,
                                                         args.share_consumers, args.fresh_groups, stop), daemon=True)
    child.start()
    window: list[float] = []
    failed = [0]

    def on_delivery(err, msg):
        if err is not None:
            failed[0] += 1
        else:
            window.append(msg.latency() * 1000)

    p = Producer({"bootstrap.servers": bp.bootstrap, "enable.idempotence": True, "linger.ms": 5})
    value = os.urandom(args.size)
    rows, share_sizes = [], []
    t0 = time.monotonic()
    end = t0 + args.minutes * 60
    next_window = t0 + args.window
    sent = 0
    wall0 = time.time()
    try:
        while True:
            now = time.monotonic()
            due = int((now - t0) * args.rate)
            while sent < due:
                p.produce(topic, value=value, key=str(sent % 1000).encode(), on_delivery=on_delivery)
                sent += 1
            p.poll(0)
            if now >= next_window:
                p.poll(0)
                lat, window = sorted(window), []
                disk = {t: disk_bytes(data_dir, t) for t in INTERNAL}
                share_sizes.append(disk["__share_group_state"])
                row = {"t_s": round(now - t0), "delivered": len(lat),
                       "p50_ms": C.percentile(lat, 50) if lat else float("nan"),
                       "p99_ms": C.percentile(lat, 99) if lat else float("nan"),
                       "max_ms": lat[-1] if lat else float("nan"),
                       "share_state_MB": disk["__share_group_state"] / 1e6,
                       "offsets_MB": disk["__consumer_offsets"] / 1e6, "txn_state_MB": disk["__transaction_state"] / 1e6}
                rows.append(row)
                print(" ".join(f"{k}={C.fmt(v)}" for k, v in row.items()), flush=True)
                next_window += args.window
                if now >= end:
                    break
            time.sleep(max(0.0, min(0.002, (sent + 1) / args.rate - (time.monotonic() - t0))))
    finally:
        stop.set()
        p.flush(10)
        child.join(60)
        if child.is_alive():
            child.terminate()
        bp.stop()  # SIGTERM: the broker logs its longest stall at shutdown
    stalls = [st for st in stalls_in(bp.log_path) if st.t >= int(wall0) + args.window]  # after the first window
    if not args.keep_data:
        shutil.rmtree(bp.workdir, ignore_errors=True)
    p99s = sorted(r["p99_ms"] for r in rows[1:] if r["p99_ms"] == r["p99_ms"])
    print(f"\n# load average at the end {os.getloadavg()[1]:.1f} (1 min), {os.cpu_count()} CPUs")
    print(f"# {args.minutes} min, {args.rate} rec/s, {len(rows)} windows of {args.window} s (first left out"
          f" of the summary: warm-up); failed deliveries {failed[0]}")
    if p99s:
        over = [v for v in p99s if v >= args.spike_ms]
        print(f"window p99 ms: min {p99s[0]:.1f}, median {p99s[len(p99s) // 2]:.1f}, max {p99s[-1]:.1f};"
              f" {len(over)} of {len(p99s)} windows >= {args.spike_ms} ms")
        print(f"worst delivery {max(r['max_ms'] for r in rows[1:]):.1f} ms")
    print(f"__share_group_state on disk: max {max(share_sizes) / 1e6:.2f} MB, last {share_sizes[-1] / 1e6:.2f} MB")
    print(f"event-loop stalls >= {args.stall_ms} ms: {len(stalls)}; longest "
          f"{max((st.ms for st in stalls), default=0)} ms")
    own = max(stalls, key=lambda st: st.on_cpu + st.blocked, default=None)
    if own is not None:
        print(f"  the broker's own part (on CPU + blocked; not waiting for a CPU): longest {own.on_cpu + own.blocked} ms"
              f" (on CPU {own.on_cpu}, blocked {own.blocked}, in a {own.ms} ms stall); longest on CPU "
              f"{max(st.on_cpu for st in stalls)} ms, blocked {max(st.blocked for st in stalls)} ms, "
              f"garbage collection {max(st.gc for st in stalls)} ms")
    for kind in ("on CPU", "waiting for a CPU", "blocked"):
        these = [st for st in stalls if cause(st) == kind]
        print(f"  mostly {kind}: {len(these)}, longest {max((st.ms for st in these), default=0)} ms")
    by_where: dict[str, list[Stall]] = collections.defaultdict(list)
    for st in stalls:
        by_where[st.where.split(";")[0].split(" x ", 1)[-1]].append(st)
    print("# where the loop thread was (first sample), longest stall first")
    for where, v in sorted(by_where.items(), key=lambda kv: -max(st.ms for st in kv[1]))[:args.top]:
        st = max(v, key=lambda x: x.ms)
        print(f"  {len(v)} at {where}; longest {st.ms} ms (on CPU {st.on_cpu}, waiting {st.wait}, blocked {st.blocked})")
    print("# the longest stalls")
    for st in sorted(stalls, key=lambda x: -x.ms)[:args.top]:
        print(f"  {st.ms} ms (on CPU {st.on_cpu}, waiting for a CPU {st.wait}, blocked {st.blocked}; "
              f"process CPU {st.process}, gc {st.gc}): {st.where}")
    C.write_json(args.json, {"windows": rows, "stalls": [st._asdict() for st in stalls]})
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=4)
    ap.add_argument("--rate", type=int, default=2000, help="records/s of the idempotent producer")
    ap.add_argument("--size", type=int, default=200)
    ap.add_argument("--window", type=float, default=10.0)
    ap.add_argument("--consumers", type=int, default=2)
    ap.add_argument("--share-consumers", type=int, default=3)
    ap.add_argument("--fresh-groups", action="store_true",
                    help="each replacement consumer joins a new group (groups and share state pile up)")
    ap.add_argument("--broker-nice", type=int, default=0,
                    help="nice value for the broker's loop thread (negative needs root): less waiting for a CPU")
    ap.add_argument("--stall-ms", type=int, default=20, help="the broker logs stalls of this many ms or more")
    ap.add_argument("--spike-ms", type=float, default=50.0, help="a window p99 at or over this counts as a spike")
    ap.add_argument("--top", type=int, default=8, help="stall locations listed")
    ap.add_argument("--set", action="append", default=[], metavar="K=V", help="a broker setting")
    ap.add_argument("--keep-data", action="store_true")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    peers.terminate_on_sigterm()
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
