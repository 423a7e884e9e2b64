"""Storage fault torture: real disk-full, open-file-limit, read-only and I/O-error faults, and modelled power
cuts, under a running broker while real clients write, read, share and commit; five invariants checked
after every fault.

The data directory is on a small ``tmpfs`` this harness mounts (root only), on an ext4 image on a loop
device inside it when the machine allows (``mount -o loop``), else on the tmpfs itself. Faults, all
real, at seeded random moments while the workload runs:

- ``enospc``: a filler file takes every free block but 0-512 KiB, which the broker's own writes use up
  (``fallocate``, then 4 KiB writes); lifted by deleting it, with the broker running.
- ``emfile``: ``prlimit`` lowers the broker's RLIMIT_NOFILE to what it has open -4..+2; lifted by
  restoring the limit, with the broker running.
- ``readonly`` (ext4 only): the filesystem is frozen (FIFREEZE: every acknowledged byte reaches the
  image, writers wait), an ext4 error is triggered (``/sys/fs/ext4/DEV/trigger_fs_error`` with
  ``errors=remount-ro``: it turns read-only as after a real error) and thawed: writes fail with EROFS.
- ``eio`` (ext4 only): EXT4_IOC_SHUTDOWN (flags 0: the filesystem is synced first): every later read,
  write, open and fsync fails with EIO, as on a failed disk.
- ``powercut``: random EIO or ENOSPC on 0.2-5 % of the broker's writes and/or fsyncs (or none) for a
  while, then a power cut: kill -9, and every file of the data directory made what a power cut leaves,
  from the broker's sync journal (``PowerCut``: what no successful fsync covered is gone, what a failed
  fsync covered reads as zeros; directories are not modelled). The journal and the errors are a
  test-only mode of the broker's file layer (``broker/log/fileio.py``); no mount is needed for them.
  With ``--set sharebroker.durability=page-cache`` (Kafka's acks from the page cache) the ``acked``
  invariant fails at the first cut: the test can fail.

A read-only or failed filesystem cannot be made writable under a running process: the fault is lifted
as an operator would, by stopping the broker, ``umount``, ``e2fsck -fy``, ``mount`` and starting it
again. Live faults are lifted first and the broker restarted afterwards. Restarts alternate between
SIGTERM and kill -9. Because the faults that need a repair are taken after a sync, nothing an
acknowledged client was told may be lost in any case.

Workload (all over 127.0.0.1, bounded in records and time): two idempotent producers (acks=all) on
``data`` (2 partitions, 1 MiB segments, an index entry per batch; one writes bursts of ~2 KB records,
the other one ~20-byte record per batch), a transactional producer
committing or aborting (seeded) on ``txn``; a share group (explicit acknowledgement, ``commit_sync``)
and a consumer group (KIP-848, synchronous commits) on ``data``; an exactly-once pipeline (``Pipeline``:
a read_committed classic-group consumer of ``txn``, a transactional producer to ``pipe-out`` committing
the consumer's position with ``send_offsets_to_transaction``; with ``--pipeline`` only, see ``Pipeline``).

Invariants (what is checked, exactly):

1. ``acked``: every record whose delivery report succeeded (idempotent producers; a transactional
   producer's records once ``commit_transaction`` returned) is at its offset with its value for a
   read_uncommitted consumer, and every committed transaction's record for a read_committed one.
2. ``offsets``: the batch headers a raw Fetch returns from the log start cover every offset up to the
   high watermark once (each batch starts right after the previous one); a read_uncommitted consumer
   reads exactly the offsets of the non-control batches, in order, none twice (so ``data``, which holds
   no control batch, reads 0..HW-1 without a gap); no value is stored twice; a read_committed consumer
   of ``txn`` reads no record of a transaction whose ``abort_transaction`` returned.
3. ``share``: no record whose acknowledgement (ACCEPT, then ``commit_sync`` answered no error for its
   partition) succeeded is delivered again to the share group.
4. ``committed``: the group's committed offset of a partition (as ListConsumerGroupOffsets answers) is
   never below the highest offset a synchronous commit succeeded with (the pipeline's group: a
   ``commit_transaction`` that returned).
5. ``exactly_once`` (with the pipeline): every record of ``txn`` a read_committed consumer reads below the pipeline group's
   committed offset is in ``pipe-out``, read_committed, exactly once and with its value.

Also counted, not an invariant: ``stalls`` (after a fault is lifted, nothing was acknowledged again
within the recovery deadline) and unclean stops (SIGTERM answered with an exit code other than 0).

Run the long form: ``sudo python -m tests.integration.storage_torture --cycles 40 --seed 1`` (from the
repository root; ``--kinds powercut`` for power cuts only); it prints every fault and check, then the
faults by kind, the number of cycles run and the violations of each invariant, and exits 1 when there
was one (or a stall, or a traceback in the broker's log).
"""
from __future__ import annotations

import argparse
import faulthandler
import os
import random
import resource
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

from broker.testing import BrokerProcess

INVARIANTS = ("acked", "offsets", "share", "committed", "exactly_once")

DATA, TXN, PIPE_OUT = "data", "txn", "pipe-out"
DATA_PARTITIONS = 2
GROUP, SHARE_GROUP, TXN_ID = "torture-group", "torture-share", "torture-txn"
PIPE_GROUP, PIPE_TXN_ID = "torture-pipeline", "torture-pipeline-txn"
TOPIC_CONFIGS = {"segment.bytes": str(1 << 20), "index.interval.bytes": "1"}  # 1 MiB: the least allowed
PAD = b"." * 2000  # ~2 KB values: a partition's 1 MiB segment rolls every ~500 records (~5 s)
DISK_BUDGET = 0.6  # the run ends early once the data fill this share of the filesystem
STALL_LOG_LINES = 40  # of the broker's log, printed with a stall (what the coordinators were doing)
BROKER_CONFIG = {
    # small internal segments: their rolls happen during the faults too
    "offsets.topic.segment.bytes": str(64 << 10),
    "transaction.state.log.segment.bytes": str(64 << 10),
    "share.coordinator.state.topic.segment.bytes": str(64 << 10),
    "group.consumer.heartbeat.interval.ms": "500",
    "group.consumer.min.heartbeat.interval.ms": "500",
    "group.share.heartbeat.interval.ms": "500",
    "group.share.min.heartbeat.interval.ms": "500",
    "group.initial.rebalance.delay.ms": "0",
}
CLIENT = {"log_level": 2, "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 500,
          "retry.backoff.ms": 50, "retry.backoff.max.ms": 500}

from tests.integration.torture_faults import (LIVE_KINDS, POWERCUT, REPAIR_KINDS, Disk, MountRefused, PowerCut,  # noqa: F401
                                             child_pids, limit_open_files, wait_gone)

class Ledger:
    """What the clients were told (the truth the invariants hold the broker to), and the violations."""

    def __init__(self):
        # re-entrant: a client's callback may run in whatever thread polls it (and a finalizer anywhere)
        self.lock = threading.RLock()
        self.acked: dict[tuple[str, int, int], bytes] = {}  # (topic, partition, offset) -> value
        self.txn_committed: dict[int, list[tuple[int, int, bytes]]] = {}  # txn -> [(partition, offset, value)]
        self.txn_aborted: set[bytes] = set()  # values of transactions whose abort returned
        self.share_acked: dict[tuple[str, int, int], str] = {}  # record -> when it was acknowledged
        self.committed: dict[tuple[str, int], int] = {}  # highest successfully committed offset
        self.pipe_committed = 0  # the pipeline's highest input offset committed with a transaction that returned
        self.violations: dict[str, list[str]] = {k: [] for k in INVARIANTS}
        self._seen: set[str] = set()
        self.counts = {"produced": 0, "delivery_errors": 0, "fatal_producers": 0, "txn_committed": 0,
                       "txn_aborted": 0, "txn_uncertain": 0, "share_delivered": 0, "share_acked": 0,
                       "share_ack_failed": 0, "group_commits": 0, "group_commit_failed": 0, "pipe_committed": 0,
                       "pipe_failed": 0}
        self.context = "before the first fault"  # the fault running or last lifted, for violation reports
        self.errors: list[str] = []  # unexpected exceptions in workload threads

    def count(self, key: str, n: int = 1) -> None:
        with self.lock:
            self.counts[key] += n

    def violate(self, invariant: str, what: str, key: str | None = None) -> None:
        with self.lock:
            if (key or what) in self._seen:  # a lost record is reported once, not at every later check
                return
            self._seen.add(key or what)
            self.violations[invariant].append(f"[{self.context}] {what}")
        print(f"VIOLATION {invariant}: [{self.context}] {what}", flush=True)


# ------------------------------------------------------------------------------------------ workload
class Role(threading.Thread):
    """One client's loop, until ``stop``; every client it makes is closed before it ends."""

    def __init__(self, name: str, bootstrap: str, ledger: Ledger, stop: threading.Event, rng: random.Random,
                 budget: int):
        super().__init__(name=name, daemon=True)
        self.bootstrap, self.ledger, self.stop_event, self.rng = bootstrap, ledger, stop, rng
        self.budget = budget  # records this role produces / handles at most
        self.progress = 0  # records acknowledged / committed, for the recovery check

    def run(self) -> None:
        try:
            self.work()
        except BaseException as e:  # reported by the harness, with where it was raised
            import traceback
            where = "; ".join(f"{f.name}:{f.lineno}" for f in traceback.extract_tb(e.__traceback__)[-3:])
            self.ledger.errors.append(f"{self.name}: {type(e).__name__}: {e} (at {where})")


class IdempotentWriter(Role):
    """``small``: one ~20-byte record per batch, every 10 ms (appends that fit in a block's last bytes on a
    full disk while an index write does not); else bursts of 10 ~2 KB records every 50 ms (400 KB/s)."""
    small = False

    def make(self):
        from confluent_kafka import Producer
        return Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True, "acks": "all",
                         "linger.ms": 0 if self.small else 5, "message.timeout.ms": 20000,
                         "request.timeout.ms": 5000,
                         "client.id": self.name, **CLIENT})

    def work(self) -> None:
        from confluent_kafka import KafkaException
        p, seq, failed = self.make(), 0, []

        def delivered(err, msg):
            if err is None:  # one dict store: atomic, no lock taken in a callback
                self.ledger.acked[(msg.topic(), msg.partition(), msg.offset())] = msg.value()
                self.progress += 1
            else:
                self.ledger.count("delivery_errors")
                if err.fatal():
                    failed.append(err)

        try:
            while not self.stop_event.is_set() and seq < self.budget:
                burst = 1 if self.small else 10
                for _ in range(burst):
                    try:
                        p.produce(DATA, value=b"%s-%08d-%s" % (self.name.encode(), seq, b"" if self.small else PAD),
                                  partition=seq % DATA_PARTITIONS, on_delivery=delivered)
                        seq += 1
                    except BufferError:
                        break
                    except KafkaException as e:
                        if not e.args[0].fatal():
                            raise
                        failed.append(e.args[0])
                        break
                self.ledger.count("produced", burst)
                p.poll(0)
                self.stop_event.wait(0.01 if self.small else 0.05)  # pacing, not a wait for a result
                if failed:  # a fatal idempotence error: a new producer (a new producer id) goes on
                    self.ledger.count("fatal_producers")
                    print(f"{self.name}: fatal producer error {failed[0]}; new producer", flush=True)
                    p.purge()
                    p.flush(1)
                    p.close()
                    p, failed[:] = self.make(), []
                while len(p) > 400 and not self.stop_event.is_set():  # a bounded window in flight
                    p.poll(0.05)
        finally:
            p.flush(10)
            p.close()


class TransactionalWriter(Role):
    def _producer(self, txn_id: str = TXN_ID):
        from confluent_kafka import Producer
        return Producer({"bootstrap.servers": self.bootstrap, "transactional.id": txn_id, "acks": "all",
                         "linger.ms": 5, "transaction.timeout.ms": 20000, "message.timeout.ms": 15000,
                         "client.id": self.name, **CLIENT})

    def make(self, txn_id: str = TXN_ID):
        """A producer with its transactions initialised (which ends whatever the previous one left open)."""
        from confluent_kafka import KafkaException
        p = TransactionalWriter._producer(self, txn_id)
        while not self.stop_event.is_set():
            try:
                p.init_transactions(10)
                return p
            except KafkaException as e:
                if e.args[0].fatal():
                    p.close()
                    p = TransactionalWriter._producer(self, txn_id)
                self.stop_event.wait(0.2)  # retry pacing
        p.close()
        return None

    def work(self) -> None:
        from confluent_kafka import KafkaException
        p = self.make()
        n = 0
        try:
            while p is not None and not self.stop_event.is_set() and n < self.budget:
                n += 1
                commit = self.rng.random() < 0.7
                values = [b"txn-%06d-%d" % (n, j) for j in range(5)]
                delivered: list[tuple[int, int, bytes]] = []

                def report(err, m, delivered=delivered):
                    if err is None:
                        delivered.append((m.partition(), m.offset(), m.value()))
                try:
                    p.begin_transaction()
                    for v in values:
                        p.produce(TXN, value=v, partition=0, on_delivery=report)
                    if commit:
                        p.commit_transaction(15)
                        p.poll(0)  # delivery reports still queued
                        with self.ledger.lock:
                            self.ledger.txn_committed[n] = list(delivered)
                            for part, off, v in delivered:
                                self.ledger.acked[(TXN, part, off)] = v
                        self.ledger.count("txn_committed")
                    else:
                        p.abort_transaction(15)
                        with self.ledger.lock:
                            self.ledger.txn_aborted.update(values)
                        self.ledger.count("txn_aborted")
                    self.progress += 1
                    self.stop_event.wait(0.02)  # pacing, not a wait for a result
                except KafkaException:  # the outcome is unknown: a new producer (InitProducerId ends it)
                    self.ledger.count("txn_uncertain")
                    p.close()
                    p = self.make()
        finally:
            if p is not None:
                p.close()


class ShareReader(Role):
    def work(self) -> None:
        from confluent_kafka import AcknowledgeType, KafkaException, ShareConsumer
        c = ShareConsumer({"bootstrap.servers": self.bootstrap, "group.id": SHARE_GROUP,
                           "share.acknowledgement.mode": "explicit", "client.id": self.name, **CLIENT})
        try:
            c.subscribe([DATA])
            handled = 0
            while not self.stop_event.is_set() and handled < self.budget:
                msgs = [m for m in (c.poll(0.3) or []) if m.error() is None]
                if not msgs:
                    continue
                self.ledger.count("share_delivered", len(msgs))
                for m in msgs:
                    key = (m.topic(), m.partition(), m.offset())
                    with self.ledger.lock:
                        when = self.ledger.share_acked.get(key)
                    if when is not None:
                        self.ledger.violate("share", f"{key} value {short(m.value())} delivered again (delivery count "
                                            f"{m.delivery_count()}) after its acknowledgement succeeded {when}",
                                            key=f"share {key} {m.delivery_count()}")
                    c.acknowledge(m, AcknowledgeType.ACCEPT)
                handled += len(msgs)
                try:
                    result = c.commit_sync(10) or {}
                except KafkaException:
                    self.ledger.count("share_ack_failed", len(msgs))
                    continue
                ok = {(tp.topic, tp.partition) for tp, err in result.items() if err is None} if isinstance(
                    result, dict) else set()
                with self.ledger.lock:
                    for m in msgs:
                        if (m.topic(), m.partition()) in ok:
                            self.ledger.share_acked[(m.topic(), m.partition(), m.offset())] = self.ledger.context
                            self.progress += 1
                acked = sum((m.topic(), m.partition()) in ok for m in msgs)
                self.ledger.count("share_acked", acked)
                self.ledger.count("share_ack_failed", len(msgs) - acked)
        finally:
            c.close()


class Pipeline(Role):
    """Exactly once from ``txn`` to ``pipe-out``: a read_committed consumer (classic protocol) and a
    transactional producer; each poll's records are copied (value prefixed with the input offset) in one
    transaction that also commits the consumer's position (``send_offsets_to_transaction``). On any error
    the transaction is aborted (or the producer replaced, which aborts it) and a new consumer starts
    again from the committed offset, as an exactly-once application does.

    librdkafka's ``send_offsets_to_transaction`` can block for good, past its timeout, when the group
    coordinator it cached went down (confluentinc/librdkafka#5456, #5511; seen here after a restart).
    So no pipeline transaction spans a restart: the harness holds ``between`` (taken for each
    transaction) while it stops and starts the broker and bumps ``broker_starts``, and the pipeline then
    makes new clients. Transactions cut by a restart are the transactional writer's. Even so a call
    still hangs now and then after a restart or under I/O errors (a stall, then "still running after
    the end"): the pipeline runs only when asked for (``--pipeline``), not in the bounded test."""
    between = threading.Lock()
    broker_starts = [0]

    def _consumer(self):
        from confluent_kafka import Consumer
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": PIPE_GROUP, "group.protocol": "classic",
                      "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                      "enable.auto.commit": False, "session.timeout.ms": 10000, "client.id": self.name, **CLIENT})
        c.subscribe([TXN])
        return c

    def work(self) -> None:
        from confluent_kafka import KafkaException
        c, p = self._consumer(), TransactionalWriter.make(self, PIPE_TXN_ID)
        starts = self.broker_starts[0]
        try:
            while p is not None and not self.stop_event.is_set() and self.progress < self.budget:
                if starts != self.broker_starts[0]:  # new clients: nothing cached from before the restart
                    starts = self.broker_starts[0]
                    c.close()
                    p.close()
                    c, p = self._consumer(), TransactionalWriter.make(self, PIPE_TXN_ID)
                    continue
                msgs = [m for m in c.consume(100, 0.3) if m.error() is None]
                if not msgs:
                    continue
                with self.between:
                    ok = self.transaction(c, p, msgs)
                if not ok:  # outside ``between``: with the coordinator offline this waits for a restart
                    try:
                        p.abort_transaction(10)
                    except KafkaException as e:  # e.g. fenced or the outcome unknown: a new producer ends it
                        print(f"{self.name}: abort failed: {e}; new producer", flush=True)
                        try:
                            p.close()
                        except KafkaException:  # a producer in a fatal state
                            pass
                        p = TransactionalWriter.make(self, PIPE_TXN_ID)
                    c.close()
                    c = self._consumer()  # from the committed offset again
        finally:
            c.close()
            if p is not None:
                p.close()

    def transaction(self, c, p, msgs):
        """Copy ``msgs`` and commit the consumer's position in one transaction; False if it failed."""
        from confluent_kafka import KafkaException
        try:
            p.begin_transaction()
            for m in msgs:
                p.produce(PIPE_OUT, value=b"%d:%s" % (m.offset(), m.value()), partition=0)
            positions = c.position(c.assignment())
            p.send_offsets_to_transaction(positions, c.consumer_group_metadata(), 10)
            p.commit_transaction(15)
        except KafkaException as e:
            self.ledger.count("pipe_failed")
            print(f"{self.name}: transaction of {TXN} [{msgs[0].offset()}, {msgs[-1].offset()}] failed: {e}", flush=True)
            return False
        with self.ledger.lock:
            for tp in positions:
                if tp.topic == TXN and tp.offset >= 0:
                    self.ledger.pipe_committed = max(self.ledger.pipe_committed, tp.offset)
        self.ledger.count("pipe_committed")
        self.progress += 1
        return True


class GroupReader(Role):
    def work(self) -> None:
        from confluent_kafka import Consumer, KafkaException, TopicPartition
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": GROUP, "group.protocol": "consumer",
                      "auto.offset.reset": "earliest", "enable.auto.commit": False, "client.id": self.name,
                      **CLIENT})
        try:
            c.subscribe([DATA])
            position: dict[int, int] = {}
            handled, last_commit = 0, time.monotonic()
            while not self.stop_event.is_set() and handled < self.budget:
                m = c.poll(0.2)
                if m is not None and m.error() is None:
                    position[m.partition()] = m.offset() + 1
                    handled += 1
                if position and (time.monotonic() - last_commit > 0.5):
                    last_commit = time.monotonic()
                    offsets = [TopicPartition(DATA, p, o) for p, o in position.items()]
                    try:
                        result = c.commit(offsets=offsets, asynchronous=False) or []
                    except KafkaException:
                        self.ledger.count("group_commit_failed")
                        continue
                    for tp in result:
                        if tp.error is None:
                            with self.ledger.lock:
                                key = (tp.topic, tp.partition)
                                self.ledger.committed[key] = max(self.ledger.committed.get(key, -1), tp.offset)
                            self.ledger.count("group_commits")
                            self.progress += 1
                        else:
                            self.ledger.count("group_commit_failed")
        finally:
            c.close()


# ------------------------------------------------------------------------------------------ checks
def short(value: bytes | None) -> str:
    """A value for a report: the workload's values are unique by their first 24 bytes."""
    return repr(value if value is None or len(value) <= 24 else value[:24] + b"...")


def raw_batches(bootstrap: str, topic: str, partition: int, deadline_s: float = 30.0):
    """(log start, high watermark, last stable offset, [(base, last, is_control)]) of a partition, by raw
    Fetch v12 requests from the log start (read_uncommitted), as stored."""
    from protocol.messages.fetch import FetchRequest
    from protocol.records import read_header
    from tests.wire import WireClient

    out: list[tuple[int, int, bool]] = []
    end = time.monotonic() + deadline_s
    with WireClient(bootstrap) as w:
        def fetch(offset):
            req = FetchRequest(max_wait_ms=0, min_bytes=1, isolation_level=0, topics=[FetchRequest.FetchTopic(
                topic=topic, partitions=[FetchRequest.FetchPartition(partition=partition, fetch_offset=offset,
                                                                     partition_max_bytes=1 << 20)])])
            return w.request(req, 12).responses[0].partitions[0]

        first = fetch(0)
        while first.error_code == 1 and first.log_start_offset > 0:  # OFFSET_OUT_OF_RANGE: start at the log start
            first = fetch(first.log_start_offset)
        if first.error_code:
            raise AssertionError(f"Fetch {topic}-{partition}: error code {first.error_code}")
        start, hw, lso = first.log_start_offset, first.high_watermark, first.last_stable_offset
        offset, part = start, first
        while offset < hw:
            if part is None:
                part = fetch(offset)
                if part.error_code:
                    raise AssertionError(f"Fetch {topic}-{partition} at {offset}: error code {part.error_code}")
            blob, pos, moved = memoryview(part.records or b""), 0, False
            while pos + 61 <= len(blob):
                info = read_header(blob, pos)
                if pos + info.size > len(blob):
                    break  # cut by partition_max_bytes: fetched again from its base
                if info.base_offset >= hw:
                    offset = hw  # written after the high watermark was read: not part of this check
                    break
                # every batch as returned, none skipped: one the log holds twice shows as an overlap
                out.append((info.base_offset, info.last_offset, info.is_control))
                if info.last_offset >= offset:
                    offset, moved = info.last_offset + 1, True
                pos += info.size
            part = None
            if not moved:
                if time.monotonic() > end:
                    raise AssertionError(f"Fetch {topic}-{partition} returns nothing at {offset} < HW {hw}")
                time.sleep(0.05)
    return start, hw, lso, out


def read_records(bootstrap: str, topic: str, partition: int, start: int, end: int, isolation: str,
                 deadline_s: float = 30.0) -> list[tuple[int, bytes]]:
    """(offset, value) of every record a consumer with ``isolation`` reads from ``start`` until it passes ``end``
    (for read_committed: until its position reaches ``end``)."""
    from confluent_kafka import Consumer, TopicPartition
    out: list[tuple[int, bytes]] = []
    if end <= start:
        return out
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "torture-checker", "enable.auto.commit": False, "log_level": 2,
                  "isolation.level": isolation, "check.crcs": True, "enable.partition.eof": True})
    try:
        c.assign([TopicPartition(topic, partition, start)])
        stop = time.monotonic() + deadline_s
        while time.monotonic() < stop:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error() is not None:
                if m.error().code() == -191:  # _PARTITION_EOF
                    if c.position([TopicPartition(topic, partition)])[0].offset >= end:
                        return out
                    continue
                raise AssertionError(f"reading {topic}-{partition}: {m.error()}")
            if m.offset() < end:
                out.append((m.offset(), m.value()))
            if m.offset() >= end - 1:
                return out
        raise AssertionError(f"reading {topic}-{partition} [{start}, {end}) {isolation}: stuck at "
                             f"{out[-1][0] if out else start} after {deadline_s} s")
    finally:
        c.close()


def check(bootstrap: str, ledger: Ledger, pipeline: bool = False) -> str:
    """Check the five invariants against what the clients were told so far; returns a one-line summary."""
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient

    with ledger.lock:  # taken before anything is read: all of it must be in what is read
        acked = dict(ledger.acked)
        committed_txns = {n: list(v) for n, v in ledger.txn_committed.items()}
        aborted = set(ledger.txn_aborted)
        committed = dict(ledger.committed)
        pipe_committed = ledger.pipe_committed
    summary = []
    values_seen: dict[bytes, tuple[str, int, int]] = {}
    for topic, parts in ((DATA, DATA_PARTITIONS), (TXN, 1)):
        for p in range(parts):
            start, hw, lso, batches = raw_batches(bootstrap, topic, p)
            nxt = start
            for base, last, _ in batches:
                if base != nxt:
                    ledger.violate("offsets", f"{topic}-{p}: batch [{base}, {last}] follows one ending at {nxt - 1} "
                                   f"({'gap' if base > nxt else 'overlap'})", key=f"batch {topic} {p} {base} {nxt}")
                nxt = max(nxt, last + 1)
            if nxt != hw and batches:
                ledger.violate("offsets", f"{topic}-{p}: batches end at {nxt - 1}, high watermark {hw}",
                               key=f"hw {topic} {p} {nxt} {hw}")
            expected = [o for base, last, control in batches if not control for o in range(base, last + 1)]
            records = read_records(bootstrap, topic, p, start, hw, "read_uncommitted")
            offsets = [o for o, _ in records]
            if offsets != expected:
                extra = sorted(set(offsets) - set(expected))[:5]
                missing = sorted(set(expected) - set(offsets))[:5]
                dup = sorted(o for o, k in Counter(offsets).items() if k > 1)[:5]
                ledger.violate("offsets", f"{topic}-{p}: a read_uncommitted consumer read offsets that are not the "
                               f"data batches' ones: repeated {dup}, not in a data batch {extra}, skipped {missing}",
                               key=f"read {topic} {p} {dup} {extra} {missing}")
            got = dict(records)
            for o, v in records:
                if v in values_seen and values_seen[v] != (topic, p, o):
                    ledger.violate("offsets", f"value {short(v)} stored twice: {values_seen[v]} and {(topic, p, o)}",
                                   key=f"dup {short(v)}")
                values_seen.setdefault(v, (topic, p, o))
            for (t, part, o), v in acked.items():
                if t != topic or part != p:
                    continue
                if o not in got:
                    ledger.violate("acked", f"acknowledged record {t}-{part}@{o} value {short(v)} is not readable "
                                   f"(log [{start}, {hw}))", key=f"lost {t} {part} {o}")
                elif got[o] != v:
                    ledger.violate("acked", f"acknowledged record {t}-{part}@{o} value {short(v)} reads as {short(got[o])}",
                                   key=f"changed {t} {part} {o}")
            summary.append(f"{topic}-{p} [{start},{hw})")
            if topic == TXN:
                # up to the last stable offset as the raw Fetch saw it: a transaction still open
                # there holds a read_committed reader back, and every committed one is below it
                rc = {v for _, v in read_records(bootstrap, TXN, p, start, lso, "read_committed")}
                for n, recs in committed_txns.items():
                    for _, o, v in recs:
                        if o < lso and v not in rc:
                            ledger.violate("acked", f"committed transaction {n}: {TXN}-{p}@{o} value {short(v)} not "
                                           "read by a read_committed consumer", key=f"txn lost {short(v)}")
                for v in sorted(rc & aborted):
                    ledger.violate("offsets", f"aborted transaction's record {short(v)} read by a read_committed "
                                   "consumer", key=f"txn aborted {short(v)}")
    if committed:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        req = ConsumerGroupTopicPartitions(GROUP, [TopicPartition(DATA, p) for p in range(DATA_PARTITIONS)])
        res = admin.list_consumer_group_offsets([req], request_timeout=15)[GROUP].result(20)
        del admin
        now = {(tp.topic, tp.partition): tp.offset for tp in res.topic_partitions}
        for key, off in committed.items():
            if now.get(key, -1) < off:
                ledger.violate("committed", f"group {GROUP} {key[0]}-{key[1]}: committed offset {now.get(key)} "
                               f"below {off}, which a commit succeeded with", key=f"commit {key} {now.get(key)} {off}")
    if pipeline:
        summary.append(check_pipeline(bootstrap, ledger, pipe_committed))
    return ", ".join(summary)


def check_pipeline(bootstrap: str, ledger: Ledger, pipe_committed: int) -> str:
    """``committed`` for the pipeline's group, and ``exactly_once``: every record of ``txn`` a read_committed
    consumer reads below the pipeline's committed offset is in ``pipe-out`` (read_committed) exactly once."""
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    req = ConsumerGroupTopicPartitions(PIPE_GROUP, [TopicPartition(TXN, 0)])
    res = admin.list_consumer_group_offsets([req], request_timeout=15)[PIPE_GROUP].result(20)
    del admin
    upto = max(res.topic_partitions[0].offset, 0)  # read first: the output read after holds all below it
    if upto < pipe_committed:
        ledger.violate("committed", f"group {PIPE_GROUP} {TXN}-0: committed offset {upto} below {pipe_committed}, "
                       "which a committed transaction moved it to", key=f"pipe commit {upto} {pipe_committed}")
    inputs = dict(read_records(bootstrap, TXN, 0, 0, upto, "read_committed"))
    start, _hw, lso, _ = raw_batches(bootstrap, PIPE_OUT, 0)
    copies: dict[int, list[bytes]] = {}
    for _, v in read_records(bootstrap, PIPE_OUT, 0, start, lso, "read_committed"):
        o, _, value = v.partition(b":")
        copies.setdefault(int(o), []).append(value)
    for o, v in inputs.items():
        got = copies.get(o, [])
        if len(got) != 1 or got[0] != v:
            ledger.violate("exactly_once", f"{TXN}-0@{o} value {short(v)} (below the committed offset {upto}) is in "
                           f"{PIPE_OUT} {len(got)} times {[short(g) for g in got[:3]]}", key=f"pipe {o} {len(got)}")
    for o, got in copies.items():
        if len(got) > 1 and o not in inputs:
            ledger.violate("exactly_once", f"{TXN}-0@{o} is in {PIPE_OUT} {len(got)} times", key=f"pipe {o} {len(got)}")
    return f"{PIPE_OUT}-0 [{start},{lso}) holds {sum(map(len, copies.values()))} copies, {TXN}-0 committed to {upto}"


# ------------------------------------------------------------------------------------------ the run
def whole_tracebacks(lines: list[str]) -> list[str]:
    """Each Python traceback in a broker's log, from its first line to the exception it ends with."""
    out = []
    for i, line in enumerate(lines):
        if "Traceback" in line:
            j = i + 1
            while j < len(lines) and (lines[j].startswith(" ") or lines[j].startswith("During handling")
                                      or not lines[j].strip() or "Traceback" in lines[j]):
                j += 1
            out.append("\n".join(lines[max(i - 1, 0):j + 1]))
    return out


def log_digest(lines: list[str]) -> str:
    """How many lines of each level a broker logged, and the first warning or error."""
    levels = {lvl: sum(f" {lvl} " in line for line in lines) for lvl in ("WARNING", "ERROR", "CRITICAL")}
    first = next((line for line in lines if " WARNING " in line or " ERROR " in line or "Traceback" in line), "")
    tb = sum("Traceback" in line for line in lines)
    return (", ".join(f"{k} {v}" for k, v in levels.items()) + f", tracebacks {tb}"
            + (f"; first: {first[:300]}" if first else ""))


class Torture:
    def __init__(self, root: Path, seed: int, cycles: int, budget: int = 1_000_000,
                 hold_s: tuple[float, float] = (1.0, 4.0), run_s: tuple[float, float] = (0.5, 3.0),
                 recovery_s: float = 30.0, kinds: tuple[str, ...] | None = None, out=print,
                 config: dict[str, str] | None = None, pipeline: bool = False):
        self.root, self.seed, self.cycles = Path(root), seed, cycles
        self.config = {**BROKER_CONFIG, **(config or {})}
        self.pipeline = pipeline  # run the exactly-once pipeline too (``Pipeline``: why it is optional)
        self.powercut: PowerCut | None = None
        self.kinds_run: Counter = Counter()  # fault kinds, and the I/O errors armed in power-cut cycles
        self.rng = random.Random(seed)
        self.budget, self.hold_s, self.run_s, self.recovery_s = budget, hold_s, run_s, recovery_s
        self.out, self.only_kinds = out, kinds
        self.ledger = Ledger()
        self.disk = Disk(self.root)
        self.broker: BrokerProcess | None = None
        self.stop = threading.Event()
        self.roles: list[Role] = []
        self.cycles_run = 0
        self.stalls: list[str] = []
        self.unclean_stops: list[str] = []
        self.faults: list[str] = []
        self.quiet = False  # Pipeline.between is held: no pipeline transaction runs (restart to start)

    def log(self, msg: str) -> None:
        self.out(f"[torture seed={self.seed}] {msg}", flush=True)

    def plan(self) -> list[str]:
        """The fault kinds of the cycles: every kind the disk allows in each round of len(kinds) cycles."""
        kinds = [k for k in self.disk.kinds + (POWERCUT,) if not self.only_kinds or k in self.only_kinds]
        out = []
        while len(out) < self.cycles:
            self.rng.shuffle(kinds)
            out += kinds
        return out[:self.cycles]

    def setup(self) -> None:
        self.disk.mount()
        if self.disk.note:
            self.log(self.disk.note)
        self.powercut = PowerCut(self.root / "sync.journal")  # beside the tmpfs: it outlives a repair
        self.broker = BrokerProcess(self.disk.data_dir, config=self.config, env=self.powercut.env).start()
        bs = self.broker.bootstrap
        from confluent_kafka.admin import NewTopic
        from tests.support import set_group_configs
        from confluent_kafka.admin import AdminClient
        admin = AdminClient({"bootstrap.servers": bs})
        fs = admin.create_topics([NewTopic(DATA, DATA_PARTITIONS, 1, config=TOPIC_CONFIGS),
                                  NewTopic(TXN, 1, 1, config=TOPIC_CONFIGS),
                                  NewTopic(PIPE_OUT, 1, 1, config=TOPIC_CONFIGS)])
        for f in fs.values():
            f.result(15)
        del admin
        set_group_configs(bs, SHARE_GROUP, share_auto_offset_reset="earliest")
        per = self.budget
        self.roles = [IdempotentWriter("idem-a", bs, self.ledger, self.stop, random.Random(self.rng.random()), per),
                      IdempotentWriter("idem-b", bs, self.ledger, self.stop, random.Random(self.rng.random()), per),
                      TransactionalWriter("txn", bs, self.ledger, self.stop, random.Random(self.rng.random()), per),
                      ShareReader("share", bs, self.ledger, self.stop, random.Random(self.rng.random()), per),
                      GroupReader("group", bs, self.ledger, self.stop, random.Random(self.rng.random()), per)]
        if self.pipeline:
            self.roles.append(Pipeline("pipeline", bs, self.ledger, self.stop, random.Random(self.rng.random()), per))
        self.roles[1].small = True
        for r in self.roles:
            r.start()

    def wait_progress(self, what: str) -> bool:
        """After a fault is lifted: every role that is not done acknowledges something again."""
        base = {r.name: r.progress for r in self.roles}
        end = time.monotonic() + self.recovery_s
        while time.monotonic() < end:
            if all(r.progress > base[r.name] or not r.is_alive() or r.progress >= r.budget for r in self.roles):
                return True
            time.sleep(0.05)
        stuck = [r.name for r in self.roles if r.is_alive() and r.progress <= base[r.name]]
        self.stalls.append(f"{what}: no progress within {self.recovery_s} s for {stuck}")
        self.log(f"STALL {self.stalls[-1]}; the broker's last log lines:")
        for line in (self.broker.log_lines[-STALL_LOG_LINES:] if self.broker else []):
            self.log(f"  | {line}")
        return False

    def restart(self, mode: str) -> None:
        """Stop the broker (``mode``: SIGTERM or kill -9) between two pipeline transactions (``Pipeline``);
        ``start`` lets the pipeline go on."""
        self.quiet = Pipeline.between.acquire(timeout=20)
        if not self.quiet:
            self.log("the pipeline is stuck in a transaction: stopping the broker anyway")
        b = self.broker
        if b.proc is None:  # it died during the fault
            return
        if mode == "kill9":
            b.kill9()
        else:
            code = b.stop(timeout=20)
            if code != 0:
                self.unclean_stops.append(f"[{self.ledger.context}] SIGTERM: exit code {code}")
                self.log(f"unclean stop: exit code {code}")

    def start(self) -> None:
        try:
            self.broker.start()
        finally:
            Pipeline.broker_starts[0] += 1
            if self.quiet:
                self.quiet = False
                Pipeline.between.release()

    def cycle(self, n: int, kind: str) -> None:
        rng, b = self.rng, self.broker
        mode = ("stop", "kill9")[n % 2]
        run = rng.uniform(*self.run_s)
        hold = rng.uniform(*self.hold_s)
        time.sleep(run)  # the workload runs for a random time: the fault comes at a random moment
        ctx = f"cycle {n} fault {kind} seed {self.seed}"
        self.ledger.context = f"{ctx} (injected)"
        if kind == "enospc":
            detail = self.disk.fill(rng.choice((0, rng.randrange(1, 512) << 10)))
        elif kind == "emfile":
            detail, restore = limit_open_files(b.proc.pid, rng)
        elif kind == "readonly":
            detail = self.disk.make_readonly()
        elif kind == POWERCUT:  # random I/O errors on writes and fsyncs (or none) until the cut
            error = rng.choice((None, "EIO", "ENOSPC"))
            self.kinds_run[f"{POWERCUT} with {error or 'no'} I/O errors"] += 1
            detail = (self.powercut.faults(error, rng.choice((0.002, 0.01, 0.05)),
                                           rng.choice(("write", "fsync", "write,fsync")))
                      if error else "no I/O errors")
        else:
            detail = self.disk.shut_down()
        self.faults.append(f"{ctx}: {detail}")
        self.kinds_run[kind] += 1
        if kind == POWERCUT:
            mode = "power cut"
        self.log(f"cycle {n}: {kind} after {run:.2f} s for {hold:.2f} s ({detail}), then {mode}")
        log_mark = len(b.log_lines)
        time.sleep(hold)  # the fault lasts a random time while the workload goes on
        self.log(f"cycle {n}: broker log during the fault: {log_digest(b.log_lines[log_mark:])}")
        if kind in LIVE_KINDS:
            if kind == "enospc":
                self.disk.unfill()
            elif b.proc is not None and b.proc.poll() is None:
                resource.prlimit(b.proc.pid, resource.RLIMIT_NOFILE, restore)
            self.ledger.context = f"{ctx} (lifted)"
            if b.proc is None or b.proc.poll() is not None:
                self.log(f"cycle {n}: the broker died during the fault, exit code {b.proc and b.proc.returncode}")
                b.proc = None
            else:
                self.wait_progress(f"{ctx} after lifting")
                self.log(f"cycle {n}: check after lifting: {check(b.bootstrap, self.ledger, self.pipeline)}")
            self.restart(mode)
        elif kind == POWERCUT:
            children = child_pids(b.proc.pid) if b.proc is not None else []
            self.restart("kill9")
            wait_gone(children)  # the cleaner worker dies with the broker: no write after the cut
            self.powercut.lift()
            self.log(f"cycle {n}: {self.powercut.cut(self.disk.data_dir)}")
        else:
            self.restart(mode)
            self.log(f"cycle {n}: repair: {self.disk.repair()}")
            self.ledger.context = f"{ctx} (repaired)"
        self.ledger.context = f"{ctx} ({mode} restart)"
        self.start()
        self.wait_progress(f"{ctx} after the restart")
        self.log(f"cycle {n}: check after the restart: {check(b.bootstrap, self.ledger, self.pipeline)}")
        self.cycles_run += 1

    def run(self) -> dict:
        self.log(f"seed {self.seed}, {self.cycles} cycles")
        # every wait has a deadline; should a client call hang anyway, the stacks say where
        faulthandler.dump_traceback_later(120 + 90 * self.cycles, exit=False)
        try:
            self.setup()
            for n, kind in enumerate(self.plan()):
                st = os.statvfs(self.disk.fs)
                if st.f_bavail < (1 - DISK_BUDGET) * st.f_blocks:  # a disk the data filled is a fault never lifted
                    self.log(f"the data fill {DISK_BUDGET:.0%} of the disk: ending after {n} cycles")
                    break
                self.cycle(n, kind)
                if self.ledger.errors:
                    break
        finally:
            try:
                self.stop.set()
                for r in self.roles:
                    r.join(30)
                    if r.is_alive():
                        self.ledger.errors.append(f"{r.name}: still running 30 s after the end")
                b = self.broker
                if b is not None and b.proc is not None and b.proc.poll() is None and self.roles:
                    self.log(f"final check: {check(b.bootstrap, self.ledger, self.pipeline)}")
            finally:
                try:
                    if self.broker is not None:
                        self.broker.stop()
                finally:
                    self.disk.unmount()
                    faulthandler.cancel_dump_traceback_later()
        return self.report()

    def report(self) -> dict:
        v = self.ledger.violations
        rep = {"seed": self.seed, "cycles": self.cycles_run, "violations": {k: len(v[k]) for k in INVARIANTS},
               "stalls": len(self.stalls), "unclean_stops": len(self.unclean_stops), "counts": dict(self.ledger.counts),
               "acked": len(self.ledger.acked), "errors": list(self.ledger.errors),
               "tracebacks": sum("Traceback" in line for line in (self.broker.log_lines if self.broker else [])),
               "faults": dict(self.kinds_run)}
        kinds = Counter(tb.splitlines()[-1][:160] for tb in whole_tracebacks(self.broker.log_lines if self.broker else []))
        rep["traceback_kinds"] = dict(kinds)
        for line, k in kinds.most_common(8):
            self.log(f"broker traceback x{k}: {line}")
        self.log(f"faults: {dict(self.kinds_run)}")
        self.log(f"cycles run {rep['cycles']}; violations: "
                 + ", ".join(f"{k} {len(v[k])}" for k in INVARIANTS)
                 + f"; stalls {rep['stalls']}; unclean stops {rep['unclean_stops']}; broker tracebacks {rep['tracebacks']}; "
                 f"acknowledged records {rep['acked']}; {rep['counts']}")
        return rep

    def failure_text(self) -> str:
        lines = [f"seed {self.seed}, {self.cycles_run} cycles; faults:"] + [f"  {f}" for f in self.faults]
        for k in INVARIANTS:
            for msg in self.ledger.violations[k][:10]:
                lines.append(f"  {k}: {msg}")
            if len(self.ledger.violations[k]) > 10:
                lines.append(f"  {k}: ... {len(self.ledger.violations[k]) - 10} more")
        lines += [f"  stall: {s}" for s in self.stalls] + [f"  unclean stop: {s}" for s in self.unclean_stops]
        lines += [f"  workload error: {e}" for e in self.ledger.errors]
        return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.integration.storage_torture", description=__doc__.split("\n")[0])
    ap.add_argument("--cycles", type=int, default=20)
    ap.add_argument("--seed", type=int, default=None, help="default: random (printed)")
    ap.add_argument("--kinds", default=None,
                    help="comma-separated subset of " + ",".join(LIVE_KINDS + REPAIR_KINDS + (POWERCUT,)))
    ap.add_argument("--pipeline", action="store_true",
                    help="run the exactly-once pipeline too (the exactly_once invariant; see Pipeline)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a broker setting, e.g. sharebroker.durability=page-cache (power cuts then lose "
                         "acknowledged records: the acked invariant fails)")
    ap.add_argument("--dir", default=None, help="where to mount the tmpfs (default: a new temporary directory)")
    args = ap.parse_args(argv)
    seed = args.seed if args.seed is not None else random.randrange(1 << 31)
    root = Path(args.dir or tempfile.mkdtemp(prefix="sharebroker-torture-"))
    t = Torture(root, seed, args.cycles, kinds=tuple(args.kinds.split(",")) if args.kinds else None,
                config=dict(kv.split("=", 1) for kv in args.set), pipeline=args.pipeline)
    try:
        rep = t.run()
    except MountRefused as e:
        print(f"cannot run: {e}", file=sys.stderr)
        return 2
    finally:
        if args.dir is None:
            shutil.rmtree(root, ignore_errors=True)
    bad = sum(rep["violations"].values()) or rep["errors"] or rep["stalls"] or rep["tracebacks"]
    if bad:
        print(t.failure_text())
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
