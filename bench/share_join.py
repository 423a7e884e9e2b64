"""The join alone: what N share consumers joining one group cost the broker.

Per run: start the broker (ours, with ``--metrics``; or ``--root DIR`` for each source tree to
compare, runs interleaved), create an empty topic of P partitions, then start N
confluent_kafka.ShareConsumers (one thread each) that, once all are made, subscribe and poll (so they join
within ``group.share.initial.assignment.delay.ms`` of each other, in one assignment round, as a
deployment starting together does; without that, how many join late varies from run to run).  The join is over when
ShareGroupDescribe shows N members that each hold an assignment; the script then lets them poll
``--settle`` seconds more (their first ShareFetches, long polls on the empty topic).

Prints per run the broker's CPU (utime+stime of /proc/PID/stat, ms, in 10 ms ticks; and the finer
run time of its threads from /proc/PID/task/*/schedstat) at the end of the join and after the settle time, the join's wall time, and the broker's request counts by API over the run
(``kafka_network_requestmetrics_requests_total``; the script's own ShareGroupDescribe polls, one per
``--describe-every`` seconds, are among them); then the median per tree.

    python bench/share_join.py --runs 5
    python bench/share_join.py --root . --root /work/main --runs 5     # interleaved A/B
    python bench/share_join.py --bootstrap 127.0.0.1:9092 --metrics 127.0.0.1:9404
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import subprocess
import tempfile
import sys
import threading
import time
import urllib.request

try:
    from . import _common as C  # type: ignore[import-not-found]
    from . import peers  # type: ignore[import-not-found]
except ImportError:  # run as a script
    import _common as C  # type: ignore[no-redef]
    import peers  # type: ignore[no-redef]

from confluent_kafka import KafkaException, ShareConsumer

if str(peers.REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(peers.REPO_ROOT))
from admin.client import AdminClient  # noqa: E402
from admin.share_groups import describe_group  # noqa: E402

REQUESTS = re.compile(r'^kafka_network_requestmetrics_requests_total\{[^}]*request="([^"]+)"[^}]*\}\s+(\S+)', re.M)


def request_counts(metrics: str) -> dict[str, int]:
    with urllib.request.urlopen(f"http://{metrics}/metrics", timeout=10) as r:
        text = r.read().decode()
    counts: dict[str, int] = {}
    for api, value in REQUESTS.findall(text):
        counts[api] = counts.get(api, 0) + int(float(value))
    return counts


def run_ns(pid: int) -> int:
    """The broker's threads' time on a CPU in ns (/proc/PID/task/*/schedstat): utime+stime come in
    10 ms ticks, too coarse for a join of ~100 ms (a thread that ended meanwhile is not counted)."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except OSError:
            pass
    return total


def start(root: str, keep: bool) -> tuple[peers.BrokerProc, str]:
    """Our broker from the source tree ``root``, its metrics on a free port."""
    port, mport = peers.free_port(), peers.free_port()
    workdir = tempfile.mkdtemp(prefix="sharebroker-join-")
    data = os.path.join(workdir, "data")
    os.makedirs(data)
    argv = [sys.executable, "-m", "broker", "--listen", f"{peers.LOOPBACK}:{port}", "--data-dir", data,
            "--metrics", f"{peers.LOOPBACK}:{mport}"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
    return peers._spawn("ours", argv, port, workdir, root, env, keep, 30.0), f"{peers.LOOPBACK}:{mport}"


def worker(bootstrap: str, group: str, topic: str, ready: threading.Barrier, stop: threading.Event,
           errors: list[str]) -> None:
    try:
        sc = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "log_level": 4})
        try:
            ready.wait(60)  # every consumer made: they subscribe together, in one assignment round
        except threading.BrokenBarrierError:
            pass
        sc.subscribe([topic])
        while not stop.is_set():
            try:
                sc.poll(0.2)
            except KafkaException as e:
                errors.append(str(e))
                time.sleep(0.1)
        sc.close()
    except Exception as e:  # noqa: BLE001
        errors.append(repr(e))


def all_assigned(admin: AdminClient, group: str, n: int) -> bool:
    desc = describe_group(admin, group)
    members = desc.members or []
    return len(members) == n and all(any(m.assignment.values()) for m in members)


def py_spy(pid: int, out: str, gil: bool) -> subprocess.Popen:
    """py-spy sampling the broker at 200 Hz into ``out`` (raw, collapsed stacks) until SIGINT."""
    argv = ["py-spy", "record", "-r", "200", "-f", "raw", "-o", out, "--pid", str(pid)] + (["--gil"] if gil else [])
    spy = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)  # attached before the consumers start
    return spy


def one_run(bp: peers.BrokerProc, metrics: str, args, run: str) -> dict:
    topic, group = C.unique("join"), C.unique("join-group")
    C.create_topic(bp.bootstrap, topic, args.partitions)
    stop, errors, ready = threading.Event(), [], threading.Barrier(args.consumers)
    spy = py_spy(bp.pid, f"{args.py_spy}.{run}", args.gil) if args.py_spy else None
    admin = AdminClient(bp.bootstrap)
    counts0, cpu0, ns0 = request_counts(metrics), bp.cpu(), run_ns(bp.pid)
    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker, args=(bp.bootstrap, group, topic, ready, stop, errors), daemon=True)
               for _ in range(args.consumers)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + args.timeout
    while not all_assigned(admin, group, args.consumers):
        if time.monotonic() > deadline:
            stop.set()
            raise RuntimeError(f"not every member assigned after {args.timeout}s; errors: {errors[:3]}")
        time.sleep(args.describe_every)
    join_s, cpu_join, ns_join = time.perf_counter() - t0, bp.cpu(), run_ns(bp.pid)
    time.sleep(args.settle)
    cpu_settled, ns_settled = bp.cpu(), run_ns(bp.pid)
    counts1 = request_counts(metrics)
    if spy:
        spy.send_signal(signal.SIGINT)
        spy.wait(30)
    stop.set()
    for t in threads:
        t.join(30)
    admin.close()
    if errors:
        print(f"!! errors: {errors[:3]}", file=sys.stderr)
    return {"join_s": join_s, "cpu_join_ms": 1000 * (cpu_join - cpu0), "cpu_settled_ms": 1000 * (cpu_settled - cpu0),
            "run_join_ms": (ns_join - ns0) / 1e6, "run_settled_ms": (ns_settled - ns0) / 1e6,
            "requests": {k: counts1.get(k, 0) - counts0.get(k, 0) for k in counts1 if counts1.get(k, 0) != counts0.get(k, 0)}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", action="append", default=[],
                    help="source tree of the broker to start (repeat to compare; default: this tree)")
    ap.add_argument("--bootstrap", default=None, help="an already running broker instead (needs --metrics)")
    ap.add_argument("--metrics", default=None, metavar="HOST:PORT", help="its metrics listener")
    ap.add_argument("--pid", type=int, default=None, help="its pid (default: found from the port)")
    ap.add_argument("--runs", type=int, default=3, help="runs per tree, interleaved (default 3)")
    ap.add_argument("--consumers", type=int, default=64)
    ap.add_argument("--partitions", type=int, default=16)
    ap.add_argument("--settle", type=float, default=1.0, help="seconds of polling counted after the join")
    ap.add_argument("--describe-every", type=float, default=0.1, help="seconds between ShareGroupDescribe polls")
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--keep-data", action="store_true")
    ap.add_argument("--py-spy", metavar="PREFIX", default=None,
                    help="profile each run's join and settle time with py-spy into PREFIX.N (raw format)")
    ap.add_argument("--gil", action="store_true", help="with --py-spy: only samples holding the GIL")
    args = ap.parse_args(argv)
    if args.bootstrap and not args.metrics:
        ap.error("--bootstrap needs --metrics")
    roots = [os.path.abspath(r) for r in args.root] or [str(peers.REPO_ROOT)]
    results: dict[str, list[dict]] = {r: [] for r in roots}
    for i in range(args.runs):
        for root in ([args.bootstrap] if args.bootstrap else roots):
            if args.bootstrap:
                bp, metrics = peers.external(args.bootstrap, "ours", args.pid), args.metrics
                results.setdefault(root, [])
            else:
                bp, metrics = start(root, args.keep_data)
            try:
                row = one_run(bp, metrics, args, f"{os.path.basename(root.rstrip('/'))}.{i + 1}")
            finally:
                bp.stop()
            results[root].append(row)
            reqs = " ".join(f"{k}={v}" for k, v in sorted(row["requests"].items()))
            print(f"run {i + 1} {root}: join {row['join_s']:.2f}s cpu {row['cpu_join_ms']:.0f} ms "
                  f"(+settle {row['cpu_settled_ms']:.0f} ms) schedstat {row['run_join_ms']:.1f} ms "
                  f"(+settle {row['run_settled_ms']:.1f} ms) requests {sum(row['requests'].values())}: {reqs}",
                  flush=True)
    for root, rows in results.items():
        if rows:
            med = {k: statistics.median(r[k] for r in rows)
                   for k in ("join_s", "cpu_join_ms", "cpu_settled_ms", "run_join_ms", "run_settled_ms")}
            print(f"median of {len(rows)} {root}: join {med['join_s']:.2f}s cpu {med['cpu_join_ms']:.0f} ms "
                  f"(+settle {med['cpu_settled_ms']:.0f} ms) schedstat {med['run_join_ms']:.1f} ms "
                  f"(+settle {med['run_settled_ms']:.1f} ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
