"""Share-group (KIP-932) consume throughput with confluent_kafka.ShareConsumer.

Per broker (ours by default; tansu has no share groups):
  1. create a 1-partition topic and produce N records of 1 KiB;
  2. plain consume of all of them (Consumer, assign mode) as the baseline;
  3. for each consumer count (1 and 4 by default): a fresh share group whose
     share.auto.offset.reset is set to earliest first (AdminClient
     incremental_alter_configs on a GROUP ConfigResource), then that many
     ShareConsumers (one thread each, implicit acknowledgement, default
     settings) subscribe and poll until every offset has been delivered.

Prints records/s (from subscribe to the last new record, i.e. including the
group join, and from the first record to the last), duplicates, broker CPU
ms per MB, and the ratio share/plain on the same data and broker.

    python bench/share_throughput.py --start ours
    python bench/share_throughput.py --bootstrap 127.0.0.1:9092 --records 20000 --consumers 1,4
"""

from __future__ import annotations

import argparse
import sys
import threading
import time

try:
    from . import _common as C  # type: ignore[import-not-found]
    from .throughput import consume, produce  # type: ignore[import-not-found]
except ImportError:  # run as a script
    import _common as C  # type: ignore[no-redef]
    from throughput import consume, produce  # type: ignore[no-redef]

from confluent_kafka import KafkaException, ShareConsumer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

SIZE = 1024


def set_earliest(bootstrap: str, group: str, timeout: float = 30.0) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    res = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    for fut in admin.incremental_alter_configs([res], request_timeout=timeout).values():
        fut.result(timeout)


class Shared:
    def __init__(self, n: int):
        self.n = n
        self.offsets: set[tuple[int, int]] = set()
        self.delivered = 0
        self.first: float | None = None
        self.last_new = 0.0
        self.done = threading.Event()
        self.errors: list[str] = []
        self.lock = threading.Lock()


def share_worker(bootstrap: str, group: str, topic: str, st: Shared, idx: int, per: list,
                 idle_timeout: float, extra: dict) -> None:
    delivered = 0
    try:
        sc = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, **extra})
    except Exception as e:  # noqa: BLE001
        st.errors.append(f"consumer {idx}: {e!r}")
        return
    try:
        sc.subscribe([topic])
        last_progress = time.monotonic()
        while not st.done.is_set():
            try:
                batch = sc.poll(0.5)
            except KafkaException as e:
                if len(st.errors) < 10:
                    st.errors.append(f"consumer {idx} poll: {e}")
                time.sleep(0.1)
                batch = ()
            now = time.perf_counter()
            if not batch:
                if time.monotonic() - last_progress > idle_timeout:
                    st.errors.append(f"consumer {idx}: nothing new for {idle_timeout}s")
                    break
                continue
            good = [(m.partition(), m.offset()) for m in batch if m.error() is None]
            if len(good) != len(batch) and len(st.errors) < 10:
                st.errors += [f"consumer {idx}: {m.error()}" for m in batch if m.error() is not None][:3]
            delivered += len(good)
            with st.lock:
                if st.first is None and good:
                    st.first = now
                before = len(st.offsets)
                st.offsets.update(good)
                st.delivered += len(good)
                if len(st.offsets) > before:
                    st.last_new = now
                    last_progress = time.monotonic()
                if len(st.offsets) >= st.n:
                    st.done.set()
    finally:
        per[idx] = delivered
        try:
            # librdkafka 2.16's close() does not accept the last poll's records in implicit mode:
            # they would be released and redelivered to the other consumers. Commit them first.
            sc.commit_sync(30)
            sc.close()
        except Exception as e:  # noqa: BLE001
            st.errors.append(f"consumer {idx} close: {e!r}")


def share_run(bp, topic: str, n: int, k: int, args) -> dict:
    group = C.unique(f"bench-share{k}")
    if not args.skip_set_earliest:
        try:
            set_earliest(bp.bootstrap, group)
        except KafkaException as e:
            raise RuntimeError(f"setting share.auto.offset.reset=earliest on group {group} "
                               f"(IncrementalAlterConfigs, GROUP resource = type 32) failed: {e}") from None
    st = Shared(n)
    per = [0] * k
    cpu0, ccpu0 = bp.cpu(), C.client_cpu()
    t0 = time.perf_counter()
    threads = [threading.Thread(target=share_worker, daemon=True, name=f"share-{i}",
                                args=(bp.bootstrap, group, topic, st, i, per, args.idle_timeout, args.sconf))
               for i in range(k)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + args.max_seconds
    while not st.done.is_set() and time.monotonic() < deadline and any(t.is_alive() for t in threads):
        st.done.wait(0.2)
    st.done.set()
    cpu1, ccpu1 = bp.cpu(), C.client_cpu()  # before close(): closing is not part of the rate
    for t in threads:
        t.join(60)
    got = len(st.offsets)
    end = st.last_new or time.perf_counter()
    secs = end - t0
    steady = end - st.first if st.first else float("nan")
    mb = got * SIZE / 1e6
    if got < n or st.errors:
        print(f"!! {bp.name} share x{k}: {got} of {n} offsets; errors: {st.errors[:5]}", file=sys.stderr, flush=True)
    return {"broker": bp.name, "mode": f"share x{k}", "records": got, "secs": secs,
            "rec/s": got / secs if secs > 0 else float("nan"),
            "rec/s_after_1st": got / steady if steady and steady > 0 else float("nan"),
            "MB/s": mb / secs if secs > 0 else float("nan"),
            "dups": st.delivered - got, "per_consumer": "/".join(map(str, per)),
            "cpu_ms/MB": 1000 * (cpu1 - cpu0) / mb if mb else float("nan"), "client_cpu_s": ccpu1 - ccpu0}


def run(bp, args) -> list[dict]:
    n = args.records
    topic = C.unique("bench-share")
    C.create_topic(bp.bootstrap, topic, args.partitions)
    pr = produce(bp.bootstrap, topic, n, SIZE, {}, 120)
    if pr["unflushed"] or pr["errors"]:
        print(f"!! {bp.name} produce: {pr}", file=sys.stderr)
    print(f"   produced {n} x {SIZE} B in {pr['secs']:.2f}s", flush=True)

    rows = []
    cpu0, ccpu0 = bp.cpu(), C.client_cpu()
    cr = consume(bp.bootstrap, topic, args.partitions, {}, args.idle_timeout, want=n)
    cpu1, ccpu1 = bp.cpu(), C.client_cpu()
    got, mb = cr["got"], cr["got"] * SIZE / 1e6
    if got != n:
        print(f"!! {bp.name} plain consume got {got} of {n}", file=sys.stderr)
    plain = got / cr["secs"]
    # plain consume has no join phase: its "after 1st" equals its overall rate (assign -> last record)
    rows.append({"broker": bp.name, "mode": "plain", "records": got, "secs": cr["secs"], "rec/s": plain,
                 "rec/s_after_1st": plain, "MB/s": mb / cr["secs"], "dups": 0, "per_consumer": str(got),
                 "cpu_ms/MB": 1000 * (cpu1 - cpu0) / mb if mb else float("nan"), "client_cpu_s": ccpu1 - ccpu0})
    C.table(rows[-1:], COLS)
    for k in args.consumers:
        try:
            row = share_run(bp, topic, n, k, args)
        except Exception as e:  # noqa: BLE001
            print(f"!! {bp.name} share x{k} failed: {e!r}", file=sys.stderr, flush=True)
            continue
        row["share/plain"] = C.ratio(row["rec/s"], plain)
        rows.append(row)
        C.table(rows[-1:], COLS)
    return rows


COLS = ["broker", "mode", "records", "secs", "rec/s", "rec/s_after_1st", "MB/s", "share/plain", "dups",
        "per_consumer", "cpu_ms/MB", "client_cpu_s"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    C.add_target_args(ap, default_start="ours", choices=("ours", "tansu", "kafka", "ours+kafka"))
    ap.add_argument("--records", type=int, default=200_000, help="1 KiB records (default 200000)")
    ap.add_argument("--partitions", type=int, default=1, help="partitions of the topic (default 1)")
    ap.add_argument("--consumers", default="1,4", help="comma-separated consumer counts (default 1,4)")
    ap.add_argument("--idle-timeout", type=float, default=20.0, help="give up after this long with nothing new")
    ap.add_argument("--max-seconds", type=float, default=300.0, help="cap on one share run")
    ap.add_argument("--skip-set-earliest", action="store_true",
                    help="do not set share.auto.offset.reset=earliest (only if the broker already starts share"
                         " groups at the earliest offset)")
    ap.add_argument("--share-config", action="append", default=[], metavar="K=V",
                    help="extra ShareConsumer setting (default: none, implicit acks)")
    args = ap.parse_args(argv)
    args.consumers = [int(x) for x in args.consumers.split(",") if x.strip()]
    args.sconf = dict(kv.split("=", 1) for kv in args.share_config)

    rows: list[dict] = []
    for bp in C.each_broker(args):
        try:
            rows += run(bp, args)
        except Exception as e:  # noqa: BLE001
            print(f"!! {bp.name} failed: {e!r}", file=sys.stderr, flush=True)

    print(f"\n# share-group consume of {args.records} x {SIZE} B records, {args.partitions} partition(s), implicit acks"
          " (rec/s counts from subscribe/assign to the last new record; share/plain = ratio of those)")
    C.table(rows, COLS)
    C.write_json(args.json, {"bench": "share_throughput", "records": args.records, "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
