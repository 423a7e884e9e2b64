"""Restart time and memory against retained data, before and after, in one run.

For each ``--sizes`` entry (default 100MB,1GB,5GB of record values) a data directory is
written once, in this process with this checkout's log code: a topic of ``--partitions``
(10) partitions holding 1 KiB records in ``--batch-records`` (1,000) record batches, one
idempotent producer per partition (so producer state matters), Kafka's 1 GiB segments
(``--segment-bytes``), closed cleanly. Free space is checked first (``df``); every
directory is deleted at the end.

Then for each root (``--root``, a checkout), shutdown kind and repeat the broker is started on
that directory and the bench measures, from spawn:

* ``restart_ms``: until the port accepts a TCP connection (partition logs are loaded,
  producer state rebuilt, the last segments' tails checked before the listener opens);
* ``rss_MiB`` / ``anon_MiB``: VmRSS and RssAnon (heap, not page cache) once idle.

``clean``: the previous run stopped with SIGTERM. ``kill9``: the broker is started, then
killed with SIGKILL as soon as it accepts, and the restart after that is measured
(unclean: every active segment is re-read with CRC32C, as Kafka's recovery does).
After each restart the log end offsets are checked with ListOffsets.

    python bench/restart_retained.py --root main=/tmp/main --root this=. --sizes 100MB,1GB --repeat 3
    python bench/restart_retained.py --sizes 1GB --repeat 2 --peer kafka   # beside Kafka 4.4

``--peer kafka`` also writes each size to Apache Kafka 4.4 (``peers.KafkaOnDisk``) through an idempotent
librdkafka producer (``batch.num.messages`` = ``--batch-records``, 1 MiB batches), stops it with SIGTERM and
restarts it on that directory (``kill9``: a start, SIGKILL once it serves the log ends, the measured start);
``restart_ms`` is then spawn to ListOffsets answering every partition's log end offset (``accept_ms``:
the first TCP connection, ``answer_ms``: the first Metadata answer, before its partitions are led).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import struct
import sys
import tempfile
import time

try:
    from . import _common as C  # type: ignore[import-not-found]
    from . import peers  # type: ignore[import-not-found]
    from .restart_offsets import drop_bytecode, restart, stop, use_bytecode  # type: ignore[import-not-found]
except ImportError:  # run as a script
    import _common as C  # type: ignore[no-redef]
    import peers  # type: ignore[no-redef]
    from restart_offsets import drop_bytecode, restart, stop, use_bytecode  # type: ignore[no-redef]

from broker.log import LogManager  # noqa: E402  (restart_offsets put the checkout on sys.path)
from protocol.messages.list_offsets import ListOffsetsRequest  # noqa: E402
from tests.wire import WireClient  # noqa: E402
from protocol.records import BASE_SEQUENCE_OFFSET, CRC_OFFSET, ATTRIBUTES_OFFSET, build_batch, validate_records  # noqa: E402

TOPIC = "retained"
RECORD = 1024
_U32 = struct.Struct(">I")
_I32 = struct.Struct(">i")


def parse_size(text: str) -> int:
    units = {"KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}
    text = text.strip().upper()
    for unit, mult in units.items():
        if text.endswith(unit):
            return int(float(text[:-len(unit)]) * mult)
    return int(text)


def generate(size: int, partitions: int, batch_records: int, segment_bytes: int) -> tuple[str, dict[int, int]]:
    """A data dir with ``size`` bytes of 1 KiB record values; returns it and the log end offset per partition."""
    from crc32c import crc32c

    data = tempfile.mkdtemp(prefix="sb-retained-")
    logs = LogManager(data, {"segment.bytes": str(segment_bytes)})
    info = logs.create_topic(TOPIC, partitions)
    batches = max(size // (RECORD * batch_records), partitions)
    value = os.urandom(RECORD)
    now = int(time.time() * 1000)
    templates = [build_batch([(b"k%d" % i, value, []) for i in range(batch_records)], timestamp=now,
                             producer_id=1000 + p, producer_epoch=0, base_sequence=0) for p in range(partitions)]
    seqs = [0] * partitions
    t0 = time.perf_counter()
    for n in range(batches):
        p = n % partitions
        buf = bytearray(templates[p])
        _I32.pack_into(buf, BASE_SEQUENCE_OFFSET, seqs[p])
        _U32.pack_into(buf, CRC_OFFSET, crc32c(memoryview(buf)[ATTRIBUTES_OFFSET:]))
        seqs[p] += batch_records
        info.logs[p].append(buf, validate_records(buf))
    ends = {p: info.logs[p].log_end_offset for p in range(partitions)}
    logs.close()
    print(f"   {batches:,} batches ({batches * batch_records * RECORD / 1e9:.2f} GB of values) written in "
          f"{time.perf_counter() - t0:.1f} s", flush=True)
    return data, ends


def rss(pid: int) -> tuple[float, float]:
    """(VmRSS, RssAnon) in MiB."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "RssAnon"):
                out[key] = int(rest.split()[0]) / 1024
    return out.get("VmRSS", 0.0), out.get("RssAnon", 0.0)


def check_ends(port: int, ends: dict[int, int], wait: float = 0.0) -> None:
    """ListOffsets (latest) of every partition equals ``ends``; with ``wait``, asked again until it does
    (Kafka answers Metadata before its partitions are led again: -1 and NOT_LEADER_OR_FOLLOWER meanwhile)."""
    T, P = ListOffsetsRequest.ListOffsetsTopic, ListOffsetsRequest.ListOffsetsPartition
    deadline = time.monotonic() + wait
    with WireClient(f"127.0.0.1:{port}", client_id="bench") as w:
        while True:
            r = w.request(ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[
                T(name=TOPIC, partitions=[P(partition_index=p, timestamp=-1) for p in ends])]), 7)
            got = {p.partition_index: p.offset for t in r.topics for p in t.partitions}
            if got == ends or time.monotonic() > deadline:
                break
            time.sleep(0.01)
    assert got == ends, f"log end offsets after restart {got} != {ends}"


def measure(root: str, data: str, ends: dict[int, int], kill9: bool, settle: float) -> tuple[float, float, float]:
    p, port, _t0, secs = restart(root, data, kill9)
    try:
        check_ends(port, ends)
        time.sleep(settle)  # idle: background work of the start-up done
        vm, anon = rss(p.pid)
    finally:
        stop(p)
    return secs, vm, anon


def kafka_generate(k, size: int, partitions: int, batch_records: int) -> dict[int, int]:
    """``size`` bytes of 1 KiB values produced to Kafka; returns the log end offset per partition."""
    from confluent_kafka import Producer

    C.create_topic(k.bootstrap, TOPIC, partitions)
    p = Producer({"bootstrap.servers": k.bootstrap, "enable.idempotence": True, "linger.ms": 20,
                  "batch.num.messages": batch_records, "batch.size": 2 << 20, "message.max.bytes": 2 << 20,
                  "delivery.report.only.error": True, "compression.type": "none"})
    n = max(size // RECORD, partitions)
    value = os.urandom(RECORD)
    t0 = time.perf_counter()
    for i in range(n):
        while True:
            try:
                p.produce(TOPIC, value, key=b"k%d" % (i % batch_records), partition=i % partitions)
                break
            except BufferError:
                p.poll(0.005)
    assert p.flush(300) == 0, "kafka: records left unsent"
    print(f"   kafka: {n:,} records ({n * RECORD / 1e9:.2f} GB of values) produced in "
          f"{time.perf_counter() - t0:.1f} s", flush=True)
    return {q: n // partitions + (1 if q < n % partitions else 0) for q in range(partitions)}


def kafka_peer(label: str, size: int, args) -> list[dict]:
    k = peers.KafkaOnDisk()
    samples: dict[str, list] = {}
    try:
        k.start()
        ends = kafka_generate(k, size, args.partitions, args.batch_records)
        k.stop()
        for rep in range(args.repeat):
            for mode in [m for m in args.modes.split(",") if m]:
                if mode == "kill9":
                    k.respawn()
                    k.wait_answering()
                    check_ends(k.node.port, ends, wait=120)
                    k.stop(kill=True)
                t0 = k.respawn()
                try:
                    accept = k.wait_accepting() - t0
                    answer = k.wait_answering() - t0
                    check_ends(k.node.port, ends, wait=120)
                    serving = time.perf_counter() - t0
                    time.sleep(args.settle)
                    vm, anon = rss(k.pid)
                finally:
                    k.stop()
                samples.setdefault(mode, []).append((serving, vm, anon, accept, answer))
                print(f"rep {rep + 1} {label:>6} {mode:>5}    kafka: {serving * 1000:7.0f} ms (accepting "
                      f"{accept * 1000:.0f}, Metadata {answer * 1000:.0f}), RSS {vm:6.1f} MiB (anon {anon:6.1f})",
                      flush=True)
    finally:
        k.close()
    return [{"retained": label, "shutdown": mode, "root": "kafka", "n": len(vals),
             "restart_ms": 1000 * statistics.median(v[0] for v in vals),
             "max_ms": 1000 * max(v[0] for v in vals),
             "accept_ms": 1000 * statistics.median(v[3] for v in vals),
             "answer_ms": 1000 * statistics.median(v[4] for v in vals),
             "rss_MiB": statistics.median(v[1] for v in vals),
             "anon_MiB": statistics.median(v[2] for v in vals)} for mode, vals in samples.items()]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", action="append", default=[], metavar="[NAME=]DIR")
    ap.add_argument("--sizes", default="100MB,1GB,5GB")
    ap.add_argument("--partitions", type=int, default=10)
    ap.add_argument("--batch-records", type=int, default=1000)
    ap.add_argument("--segment-bytes", type=int, default=1 << 30)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--modes", default="clean,kill9")
    ap.add_argument("--settle", type=float, default=1.0)
    ap.add_argument("--bytecode", choices=("cached", "nocache"), default="cached")
    ap.add_argument("--peer", choices=("kafka",), default=None, help="also Apache Kafka 4.4, after the roots")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    roots = C.roots(args.root)
    use_bytecode(roots, args.bytecode)
    rows = []
    try:
        for label in [s for s in args.sizes.split(",") if s]:
            size = parse_size(label)
            free = shutil.disk_usage(tempfile.gettempdir()).free
            if size * 1.3 > free:
                print(f"!! skipping {label}: {free / 1e9:.1f} GB free in {tempfile.gettempdir()}", file=sys.stderr)
                continue
            print(f"== {label}: generating ({free / 1e9:.0f} GB free)", flush=True)
            data, ends = generate(size, args.partitions, args.batch_records, args.segment_bytes)
            samples: dict[tuple, list] = {}
            try:
                for name, root in roots:  # warm-up (page cache, bytecode)
                    measure(root, data, ends, False, 0)
                for rep in range(args.repeat):
                    for mode in [m for m in args.modes.split(",") if m]:
                        for name, root in roots:
                            r = measure(root, data, ends, mode == "kill9", args.settle)
                            samples.setdefault((mode, name), []).append(r)
                            print(f"rep {rep + 1} {label:>6} {mode:>5} {name:>8}: {r[0] * 1000:7.0f} ms, "
                                  f"RSS {r[1]:6.1f} MiB (anon {r[2]:6.1f})", flush=True)
            finally:
                shutil.rmtree(data, ignore_errors=True)
            for (mode, name), vals in samples.items():
                rows.append({"retained": label, "shutdown": mode, "root": name, "n": len(vals),
                             "restart_ms": 1000 * statistics.median(v[0] for v in vals),
                             "max_ms": 1000 * max(v[0] for v in vals),
                             "rss_MiB": statistics.median(v[1] for v in vals),
                             "anon_MiB": statistics.median(v[2] for v in vals)})
            if args.peer == "kafka":
                print(f"== {label}: kafka", flush=True)
                rows += kafka_peer(label, size, args)
    finally:
        drop_bytecode()
    print(f"\n# restart (spawn -> accepting connections) and idle memory against retained data: "
          f"{args.partitions} partitions, 1 KiB records, {args.batch_records}-record batches, "
          f"{args.segment_bytes >> 20} MiB segments (medians)")
    C.table(rows, ["retained", "shutdown", "root", "n", "restart_ms", "max_ms",
                   *(["accept_ms", "answer_ms"] if args.peer else []), "rss_MiB", "anon_MiB"])
    C.write_json(args.json, {"bench": "restart_retained", "rows": rows})
    return 0


if __name__ == "__main__":
    peers.terminate_on_sigterm()
    sys.exit(main())
