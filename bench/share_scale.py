"""Share groups that scale with their consumers: records/s against the ideal N x rate (issue 19).

N confluent-kafka ShareConsumers (``max.poll.records=50``, implicit acknowledgement) each spend
``--work-ms`` (1 ms) per record, so N consumers can at best deliver N x 1000 records/s. For each
scenario the script starts the consumers (``--procs`` worker processes, threads inside them, so the
GIL does not bind), waits until the share group has converged (ShareGroupDescribe: N members, every one
at the group's assignment epoch with partitions; a member that joined first keeps its larger, older
assignment until its next heartbeat, up to ``share.heartbeat.interval.ms`` = 5 s, and meanwhile
fetches the others' partitions too), then produces the records at full speed with one Producer and measures
from the first delivery to the last:

    scenario       partitions  consumers  producer batching
    p1-n{1,4,16,64}-small   1  1..64  batch.num.messages=20
    p1-n{1,4,16,64}-large   1  1..64  librdkafka's defaults at full speed (up to 10,000 records)
    p16-n64                16     64  librdkafka's defaults
    p1000-n8             1000      8  librdkafka's defaults

It prints records/s, the ideal N x rate, their ratio, the bound that ``share.partition.max.record.locks``
puts on one partition (locks / (max.poll.records x work): records locked at once, each for about one
poll's work), the largest poll (records one member held at once), duplicates and missing records,
and the broker's CPU per delivered record (utime + stime from /proc/PID/stat).

Brokers (``--brokers``, run one after the other): ``ours`` (fair acquisition, the default),
``exact`` (ours with ``group.share.fair.acquisition.enable=false``: Kafka 4.4's whole-batch
acquisition, as main was before issue 19), ``kfake`` (franz-go's kfake, one broker; build it as
bench/README.md says and pass ``--kfake-bin``), ``kafka`` (Apache Kafka 4.4.0 from the tests'
launcher, ``bench/peers.py``), or ``--bootstrap`` for a running broker.

    python bench/share_scale.py --brokers ours,exact --only 'p1-*'
    python bench/share_scale.py --brokers ours,kafka --only 'p1-n1*,p1-n4-*,p16-n64' --seconds 3
    python bench/share_scale.py --brokers ours,exact,kfake --kfake-bin /tmp/kfake --seconds 6
"""
from __future__ import annotations

import argparse
import fnmatch
import multiprocessing as mp
import os
import socket
import struct
import sys
import tempfile
import threading
import time

try:  # run as `python bench/x.py` or as `python -m bench.x`
    from . import _common as C  # type: ignore[import-not-found]
    from . import peers  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover
    import _common as C  # type: ignore[no-redef]
    import peers  # type: ignore[no-redef]

sys.path.insert(0, str(peers.REPO_ROOT))

SIZE = 100
MAX_POLL = 50

SCENARIOS = ([(f"p1-n{n}-{b}", 1, n, b) for b in ("small", "large") for n in (1, 4, 16, 64)]
             + [("p16-n64", 16, 64, "large"), ("p1000-n8", 1000, 8, "large")])
PRODUCER = {"small": {"batch.num.messages": 20}, "large": {}}


# ------------------------------------------------------------------ consumers (worker processes)
def worker(bootstrap: str, group: str, topic: str, threads: int, work_s: float, total: int,
           counter, stop, out_q, ready) -> None:
    """``threads`` ShareConsumers polling until ``stop``; puts (offsets, poll sizes, first delivery,
    end of the last poll's work) of each."""
    from confluent_kafka import ShareConsumer

    results = []
    lock = threading.Lock()

    def run() -> None:
        c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "max.poll.records": MAX_POLL,
                           "log_level": 3})
        c.subscribe([topic])
        seen, sizes, first, last = [], [], None, None
        ready.release()
        try:
            while not stop.is_set():
                batch = [m for m in c.poll(0.2) or () if m.error() is None]
                if not batch:
                    continue
                first = first or time.monotonic()
                sizes.append(len(batch))
                seen += [(m.partition(), m.offset()) for m in batch]
                time.sleep(work_s * len(batch))
                last = time.monotonic()  # this poll's records are processed
                with counter.get_lock():
                    counter.value += len(batch)
                    if counter.value >= total:
                        stop.set()
            c.commit_sync(30)
        finally:
            c.close()
            with lock:
                results.append((seen, sizes, first, last))

    ts = [threading.Thread(target=run, daemon=True) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    for r in results:
        out_q.put(r)


# ------------------------------------------------------------------ group membership over the wire
def _request(bootstrap: str, req, version: int):
    from protocol.messages.registry import RESPONSES
    from protocol.messages.request_header import RequestHeader
    from protocol.messages.response_header import ResponseHeader

    host, port = bootstrap.rsplit(":", 1)
    cls = type(req)
    flexible = cls.FLEXIBLE_VERSION is not None and version >= cls.FLEXIBLE_VERSION
    body = RequestHeader(request_api_key=cls.API_KEY, request_api_version=version, correlation_id=1,
                         client_id="share-scale").encode(2 if flexible else 1) + req.encode(version)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(struct.pack(">i", len(body)) + body)
        size = struct.unpack(">i", _recv(s, 4))[0]
        frame = memoryview(_recv(s, size))
    _, pos = ResponseHeader.decode_from(frame, 0, 1 if flexible else 0)
    return RESPONSES[cls.API_KEY].decode_from(frame, pos, version)[0]


def _recv(s: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return bytes(buf)


def group_converged(bootstrap: str, group: str, n: int) -> tuple[bool, str]:
    """(converged, why not): ``n`` members, the target assignment computed for the group's epoch, and
    every member at that assignment epoch with partitions -- not only "every member has partitions":
    a member that joined first holds all partitions (or its share of fewer members) until its next
    heartbeat brings its new assignment, and a run started before that measures the stale member
    fetching the others' partitions and then the backlog of its own (the intermittent 3 s tail)."""
    from protocol.messages.share_group_describe import ShareGroupDescribeRequest

    (g,) = _request(bootstrap, ShareGroupDescribeRequest(group_ids=[group]), 1).groups
    epochs = sorted(m.member_epoch for m in g.members)
    assigned = sum(1 for m in g.members if m.assignment.topic_partitions)
    ok = (len(g.members) == n and g.assignment_epoch == g.group_epoch and assigned == n
          and all(e == g.assignment_epoch for e in epochs))
    return ok, (f"{len(g.members)} members, {assigned} assigned, group epoch {g.group_epoch}, "
                f"assignment epoch {g.assignment_epoch}, member epochs {epochs}")


# ------------------------------------------------------------------ one run
def set_group_configs(bootstrap: str, group: str, **configs: str) -> None:
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    res = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()])
    admin = AdminClient({"bootstrap.servers": bootstrap})  # referenced until the result is in
    for fut in admin.incremental_alter_configs([res]).values():
        fut.result(30)


def produce(bootstrap: str, topic: str, n: int, partitions: int, batching: str) -> dict:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "delivery.report.only.error": True, **PRODUCER[batching]})
    value = b"x" * SIZE
    for i in range(n):
        while True:
            try:
                p.produce(topic, value, partition=i % partitions)
                break
            except BufferError:
                p.poll(0.01)
    left = p.flush(120)
    return {"unflushed": left}


def run_one(bp, scenario, args) -> dict:
    name, partitions, n, batching = scenario
    rate = 1000.0 / args.work_ms
    total = max(args.min_records, int(n * rate * args.seconds))
    topic, group = C.unique(f"scale-{name}"), C.unique(f"g-{name}")
    C.create_topic(bp.bootstrap, topic, partitions)
    set_group_configs(bp.bootstrap, group, **{"share.auto.offset.reset": "earliest", **args.group_config})
    ctx = mp.get_context("spawn")
    counter, stop, out_q = ctx.Value("q", 0), ctx.Event(), ctx.Queue()
    procs = min(n, args.procs)
    ready = ctx.Semaphore(0)
    per = [n // procs + (1 if i < n % procs else 0) for i in range(procs)]
    ps = [ctx.Process(target=worker, daemon=True, args=(bp.bootstrap, group, topic, k, args.work_ms / 1000.0,
                                                        total, counter, stop, out_q, ready)) for k in per]
    for p in ps:
        p.start()
    try:
        for _ in range(n):
            if not ready.acquire(timeout=120):
                raise RuntimeError("consumers did not start")
        deadline = time.monotonic() + 120
        while not (state := group_converged(bp.bootstrap, group, n))[0]:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the share group did not converge: {state[1]}")
            time.sleep(0.2)
        cpu0 = bp.cpu()
        t0 = time.monotonic()
        prod = produce(bp.bootstrap, topic, total, partitions, batching)
        produced_s = time.monotonic() - t0
        stop.wait(args.max_seconds)
        cpu1 = bp.cpu()
        stop.set()
        results = [out_q.get(timeout=120) for _ in range(n)]
    finally:
        stop.set()
        for p in ps:
            p.join(60)
            if p.is_alive():
                p.kill()
    seen = [o for r in results for o in r[0]]
    firsts = [r[2] for r in results if r[2]]
    lasts = [r[3] for r in results if r[3]]
    distinct = len(set(seen))
    secs = max(lasts) - min(firsts) if firsts else float("nan")
    ideal = n * rate
    lock_bound = partitions * args.locks * rate / MAX_POLL
    sizes = [s for r in results for s in r[1]]
    got_any = sum(1 for r in results if r[1])
    per_member = sorted(len(r[0]) for r in results)
    return {"scenario": name, "broker": bp.name, "records": distinct, "secs": secs,
            "rec/s": distinct / secs if secs > 0 else float("nan"), "ideal": ideal,
            "ratio": distinct / secs / ideal if secs > 0 else float("nan"),
            "lock_bound": min(ideal, lock_bound), "binds": "locks" if lock_bound < ideal else "clients",
            "max_poll": max(sizes) if sizes else 0, "members_fed": f"{got_any}/{n}",
            "member_recs": f"{per_member[0]}-{per_member[-1]}",
            "dups": len(seen) - distinct, "missing": total - distinct,
            "cpu_us/rec": 1e6 * (cpu1 - cpu0) / distinct if distinct else float("nan"),
            "produce_s": produced_s, **prod}


# ------------------------------------------------------------------ brokers
def brokers(args):
    for kind in args.brokers:
        if kind in ("ours", "exact"):
            extra = ["--set", f"group.share.fair.acquisition.enable={'true' if kind == 'ours' else 'false'}",
                     *args.broker_arg]
            bp = peers.start_ours(extra_args=extra, keep=args.keep_data)
        elif kind == "kfake":
            if not args.kfake_bin:
                raise SystemExit("--kfake-bin is needed for kfake (see bench/README.md)")
            port = peers.free_port()
            workdir = tempfile.mkdtemp(prefix="kfake-bench-")
            bp = peers._spawn("kfake", [args.kfake_bin, "-port", str(port)], port, workdir, workdir, None,
                              args.keep_data, 30)
        elif kind == "kafka":
            bp = peers.start_kafka(keep=args.keep_data)
        else:
            raise SystemExit(f"unknown broker {kind!r}")
        bp.name = kind
        try:
            yield bp
        finally:
            bp.stop()
    for i, bs in enumerate(args.bootstrap):
        yield peers.external(bs, args.name[i] if i < len(args.name) else bs)


COLS = ["scenario", "broker", "records", "secs", "rec/s", "ideal", "ratio", "lock_bound", "binds",
        "max_poll", "members_fed", "member_recs", "dups", "missing", "cpu_us/rec"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--brokers", default="ours,exact", type=lambda s: [x for x in s.split(",") if x],
                    help="ours, exact, kfake, kafka (comma-separated, run one after the other)")
    ap.add_argument("--bootstrap", action="append", default=[], help="a running broker on 127.0.0.1 as well")
    ap.add_argument("--name", action="append", default=[])
    ap.add_argument("--kfake-bin", default=os.environ.get("KFAKE_BIN"))
    ap.add_argument("--only", default="*", help="glob(s) of scenario names, comma-separated")
    ap.add_argument("--seconds", type=float, default=6.0, help="records = N x rate x seconds (at least --min-records)")
    ap.add_argument("--min-records", type=int, default=20_000)
    ap.add_argument("--work-ms", type=float, default=1.0, help="time each consumer spends per record")
    ap.add_argument("--procs", type=int, default=8, help="worker processes for the consumers (threads inside)")
    ap.add_argument("--locks", type=int, default=2000, help="share.partition.max.record.locks of the groups")
    ap.add_argument("--max-seconds", type=float, default=180.0, help="give up waiting for the records after this")
    ap.add_argument("--broker-arg", action="append", default=[], help="an argument for ours (e.g. --log-level=DEBUG)")
    ap.add_argument("--keep-data", action="store_true")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    args.group_config = {"share.partition.max.record.locks": str(args.locks)} if args.locks != 2000 else {}
    globs = args.only.split(",")
    scenarios = [s for s in SCENARIOS if any(fnmatch.fnmatch(s[0], g) for g in globs)]
    peers.terminate_on_sigterm()
    rows = []
    print(f"== share_scale: {len(scenarios)} scenario(s), work {args.work_ms} ms/record, max.poll.records "
          f"{MAX_POLL}, {args.procs} consumer processes at most; load {os.getloadavg()[0]:.2f}", flush=True)
    for bp in brokers(args):
        print(f"== {bp.name} at {bp.bootstrap} (pid {bp.pid})", flush=True)
        for sc in scenarios:
            try:
                row = run_one(bp, sc, args)
            except Exception as e:  # noqa: BLE001 -- report and go on
                print(f"!! {bp.name} {sc[0]}: {e!r}", file=sys.stderr, flush=True)
                continue
            rows.append(row)
            C.table([row], COLS)
    print("\n== summary (load %.2f)" % os.getloadavg()[0])
    C.table(rows, COLS)
    C.write_json(args.json, {"rows": rows, "args": {k: v for k, v in vars(args).items() if k != "group_config"}})
    return 0


if __name__ == "__main__":
    sys.exit(main())
