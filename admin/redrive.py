"""``sharebroker-dlq-redrive``: move the records of a share group's dead-letter queue (KIP-1191)
back to the topics they came from. No Kafka release has this command.

    --dlq-topic T (--dry-run | --execute) [--group G]
        [--source-topic T[,T]] [--source-partition P[,P]]
        [--from-offset N] [--to-offset N] [--from-time DT] [--to-time DT]

A DLQ record written by Kafka 4.4 (``ShareGroupDLQStateManager``) carries the headers
``__dlq.errors.topic`` / ``.partition`` / ``.offset`` / ``.group`` / ``.delivery.count`` /
``.message`` (UTF-8 text; numbers in decimal) and, only when the group had
``errors.deadletterqueue.copy.record.enable=true``, the original key and value. For each record
of the DLQ topic this command:

- reads the source topic, partition and offset from those headers (a record without them is
  refused: ``not_dlq_record``); the topic header may hold the topic id instead of its name (Kafka
  writes the id when it cannot look the name up), which is resolved through Metadata;
- applies the filters: source topic, source partition, source offset range (``--from-offset`` /
  ``--to-offset``, inclusive) and the DLQ record's timestamp (``--from-time`` / ``--to-time``,
  inclusive; the DLQ write time). A record not selected is *passed over*;
- refuses a record with neither key nor value (``headers_only``: written with copy-record off, so
  there is nothing to redrive) and a record whose source topic no longer exists (``unknown_topic``);
- otherwise produces it to the source topic with its key, value and headers minus every ``__dlq.``
  header, a new CreateTime (now), to the header's source partition, or, when the topic no longer
  has that partition, to ``murmur2(key) % partitions`` (Kafka's default partitioner) or
  ``source partition % partitions`` for a record without a key.

Requests: Metadata, ListOffsets (earliest/latest of the DLQ partitions), OffsetFetch (progress),
Fetch (read_committed, aborted transactions skipped), InitProducerId (no transactional id) and
Produce (acks=all, sequence numbers per partition: the idempotent producer, so a retried batch is
written once), OffsetCommit (generation -1, no member: an admin commit, as Kafka's
``alterConsumerGroupOffsets``).

Progress is one committed offset per DLQ partition in the consumer group ``--group`` (default
``sharebroker-dlq-redrive-<dlq topic>``): the next DLQ offset to examine. A run examines each
partition from there (from the log start when nothing is committed) up to the end offset seen when
it starts, and with ``--execute`` commits after each produced chunk is acknowledged, past every
record it examined (moved, refused or passed over). A second run therefore moves nothing.

Exit codes: 0 success; 1 the broker answered with an error, or records were refused (the others
were moved and committed); 2 bad usage; 3 no broker reachable or no answer within ``--timeout``.
"""
from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from dataclasses import dataclass, field

from admin.client import AdminClient, AdminError, BrokerUnreachable, Node, error_text, uuid_str
from admin.common import (
    EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, Failed, add_common_options, eprint, parse_datetime, print_json,
    print_table, run, warn)
from admin.consumer_groups import committed_offsets, describe_group
from protocol import dlq_headers as H
from protocol import records as rb
from protocol.errors import Errors
from protocol.messages.fetch import FetchRequest
from protocol.messages.init_producer_id import InitProducerIdRequest
from protocol.messages.list_offsets import ListOffsetsRequest
from protocol.messages.offset_commit import OffsetCommitRequest
from protocol.messages.produce import ProduceRequest

PROG = "sharebroker-dlq-redrive"
COMMIT_METADATA = PROG
READ_COMMITTED = 1
FETCH_PARTITION_BYTES = 1 << 20
MAX_BATCH_BYTES = 512 * 1024  # below the default max.message.bytes (1 MiB), headers removed
HEADERS_ONLY, NOT_DLQ_RECORD, UNKNOWN_TOPIC = "headers_only", "not_dlq_record", "unknown_topic"
REFUSAL_TEXT = {
    HEADERS_ONLY: "headers-only DLQ record{s} (no key and no value: written with "
                  "errors.deadletterqueue.copy.record.enable=false, so there is nothing to redrive)",
    NOT_DLQ_RECORD: "record{s} without valid __dlq.errors.topic/partition/offset headers",
    UNKNOWN_TOPIC: "DLQ record{s} whose source topic does not exist",
}
RETRIABLE_PRODUCE_ERRORS = frozenset({
    Errors.UNKNOWN_TOPIC_OR_PARTITION, Errors.LEADER_NOT_AVAILABLE, Errors.NOT_LEADER_OR_FOLLOWER,
    Errors.REQUEST_TIMED_OUT, Errors.NETWORK_EXCEPTION, Errors.NOT_ENOUGH_REPLICAS,
    Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND, Errors.KAFKA_STORAGE_ERROR, Errors.UNKNOWN_TOPIC_ID,
    Errors.COORDINATOR_LOAD_IN_PROGRESS, Errors.CONCURRENT_TRANSACTIONS})


# ----------------------------------------------------------------------------- arguments
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, description="Move the records of a share group dead-letter queue topic back to the "
                               "topics they came from (their __dlq.errors.* headers).")
    add_common_options(p)
    a = p.add_argument
    a("--dlq-topic", metavar="TOPIC", help="REQUIRED: The dead-letter queue topic to read.")
    a("--dry-run", action="store_true", help="Only show what would be moved.")
    a("--execute", action="store_true", help="Move the records and record the progress.")
    a("--group", metavar="GROUP", help="The consumer group whose committed offsets on the DLQ topic record the "
                                       "progress (default sharebroker-dlq-redrive-<dlq topic>).")
    a("--source-topic", metavar="T[,T]", help="Only records that came from these topics.")
    a("--source-partition", metavar="P[,P]", help="Only records that came from these source partitions.")
    a("--from-offset", type=int, metavar="N", help="Only records whose source offset is >= N.")
    a("--to-offset", type=int, metavar="N", help="Only records whose source offset is <= N.")
    a("--from-time", metavar="DT", help="Only DLQ records written at or after DT "
                                        "(YYYY-MM-DDThh:mm:ss[.sss][Z|+hh:mm] or epoch milliseconds).")
    a("--to-time", metavar="DT", help="Only DLQ records written at or before DT.")
    return p


def parse_time(text: str) -> int:
    text = text.strip()
    return int(text) if text.isdigit() else parse_datetime(text)


def parse_partitions(text: str) -> frozenset[int]:
    out = set()
    for item in text.split(","):
        item = item.strip()
        if not item.isdigit():
            raise ValueError(f"Invalid partition '{item}' in --source-partition '{text}'")
        out.add(int(item))
    return frozenset(out)


def validate(args) -> str | None:
    if not args.dlq_topic:
        return "Missing required argument \"[dlq-topic]\""
    if args.dry_run == args.execute:
        return "Command must include exactly one of --dry-run or --execute"
    if args.source_topic is not None and not [t for t in args.source_topic.split(",") if t.strip()]:
        return "--source-topic needs at least one topic"
    try:
        if args.source_partition is not None:
            parse_partitions(args.source_partition)
        times = [parse_time(t) if t is not None else None for t in (args.from_time, args.to_time)]
    except ValueError as e:
        return str(e)
    for name in ("from_offset", "to_offset"):
        if getattr(args, name) is not None and getattr(args, name) < 0:
            return f"--{name.replace('_', '-')} must not be negative"
    if args.from_offset is not None and args.to_offset is not None and args.from_offset > args.to_offset:
        return "--from-offset must not be greater than --to-offset"
    if None not in times and times[0] > times[1]:
        return "--from-time must not be later than --to-time"
    return None


@dataclass(frozen=True)
class Filters:
    topics: frozenset[str] | None = None
    partitions: frozenset[int] | None = None
    from_offset: int | None = None
    to_offset: int | None = None
    from_time: int | None = None
    to_time: int | None = None

    @classmethod
    def from_args(cls, args) -> "Filters":
        return cls(
            topics=frozenset(t.strip() for t in args.source_topic.split(",") if t.strip()) if args.source_topic else None,
            partitions=parse_partitions(args.source_partition) if args.source_partition else None,
            from_offset=args.from_offset, to_offset=args.to_offset,
            from_time=parse_time(args.from_time) if args.from_time else None,
            to_time=parse_time(args.to_time) if args.to_time else None)

    def selects(self, rec: "DlqRecord") -> bool:
        return ((self.topics is None or rec.source_topic in self.topics)
                and (self.partitions is None or rec.source_partition in self.partitions)
                and (self.from_offset is None or rec.source_offset >= self.from_offset)
                and (self.to_offset is None or rec.source_offset <= self.to_offset)
                and (self.from_time is None or rec.timestamp >= self.from_time)
                and (self.to_time is None or rec.timestamp <= self.to_time))


# ----------------------------------------------------------------------------- records
def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` (32-bit, seed 0x9747b28c), as a signed int32."""
    m, mask = 0x5BD1E995, 0xFFFFFFFF
    length = len(data)
    h = (0x9747B28C ^ length) & mask
    tail = length & ~3
    for i in range(0, tail, 4):
        k = int.from_bytes(data[i:i + 4], "little")
        k = (k * m) & mask
        k ^= k >> 24
        k = (k * m) & mask
        h = ((h * m) & mask) ^ k
    rest = length & 3
    if rest == 3:
        h ^= data[tail + 2] << 16
    if rest >= 2:
        h ^= data[tail + 1] << 8
    if rest >= 1:
        h ^= data[tail]
        h = (h * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for_key(key: bytes, partitions: int) -> int:
    """Kafka's ``BuiltInPartitioner.partitionForKey``: ``toPositive(murmur2(key)) % partitions``."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


@dataclass
class DlqRecord:
    offset: int                # in the DLQ partition
    timestamp: int             # DLQ write time
    key: bytes | None
    value: bytes | None
    headers: list              # the original headers: every "__dlq." header removed
    source_topic: str | None
    source_partition: int | None
    source_offset: int | None

    @property
    def is_dlq_record(self) -> bool:
        return self.source_topic is not None and self.source_partition is not None and self.source_offset is not None

    @property
    def headers_only(self) -> bool:
        return self.key is None and self.value is None

    @property
    def size(self) -> int:
        return (len(self.key or b"") + len(self.value or b"")
                + sum(len(k) + len(v or b"") + 4 for k, v in self.headers) + 24)


def _int_header(raw: bytes | None) -> int | None:
    try:
        value = int(raw.decode("utf-8"))
    except (AttributeError, UnicodeDecodeError, ValueError):
        return None
    return value if value >= 0 else None


def parse_dlq_record(rec: rb.Record) -> DlqRecord:
    dlq = {k: v for k, v in rec.headers if k.startswith(H.PREFIX)}
    try:
        topic = dlq[H.TOPIC].decode("utf-8") or None
    except (KeyError, AttributeError, UnicodeDecodeError):
        topic = None
    return DlqRecord(rec.offset, rec.timestamp, rec.key, rec.value,
                     [(k, v) for k, v in rec.headers if not k.startswith(H.PREFIX)],
                     topic, _int_header(dlq.get(H.PARTITION)), _int_header(dlq.get(H.OFFSET)))


def committed_records(blob, aborted, start: int, end: int) -> tuple[list[rb.Record], int]:
    """The records at offsets ``[start, end)`` of a fetched records blob as a read_committed
    consumer sees them (Kafka's ``CompletedFetch``: control batches and batches of aborted
    transactions skipped), and the offset after the last complete batch examined (at most ``end``)."""
    mv = memoryview(blob or b"")
    aborted = sorted((a.first_offset, a.producer_id) for a in aborted or ())
    aborted_pids: set[int] = set()
    out, next_pos, pos = [], start, 0
    while pos + rb.HEADER_SIZE <= len(mv):
        info = rb.read_header(mv, pos)
        if pos + info.size > len(mv) or info.size < rb.HEADER_SIZE:
            break
        pos += info.size
        if info.last_offset < start:
            continue
        if info.base_offset >= end:
            break
        while aborted and aborted[0][0] <= info.last_offset:
            aborted_pids.add(aborted.pop(0)[1])
        next_pos = min(info.last_offset + 1, end)
        try:
            if info.is_control:
                batch = mv[info.position:info.position + info.size]
                if info.is_transactional and rb.control_record_type(batch) == rb.CONTROL_ABORT:
                    aborted_pids.discard(info.producer_id)
            elif not (info.is_transactional and info.producer_id in aborted_pids):
                batch = mv[info.position:info.position + info.size]
                out.extend(r for r in rb.iter_records(batch) if start <= r.offset < end)
        except rb.RecordsError as e:
            if e.code == rb.UNSUPPORTED_COMPRESSION_TYPE:  # snappy / lz4 / zstd without the optional extra
                raise AdminError(f"the batch at offset {info.base_offset} cannot be read: {e}", e.code) from None
            raise AdminError(f"the batch at offset {info.base_offset} cannot be decoded: {e}",
                             Errors.CORRUPT_MESSAGE) from None
        except (UnicodeDecodeError, IndexError) as e:
            raise AdminError(f"the batch at offset {info.base_offset} cannot be decoded: {e}",
                             Errors.CORRUPT_MESSAGE) from None
    return out, next_pos


# ----------------------------------------------------------------------------- client side
class RedriveClient(AdminClient):
    """The admin client, plus what a long-running copy needs: a deadline per step (``--timeout``
    bounds each request and its retries, not the whole run) and reconnecting after a broken
    connection (so an idempotent batch can be sent again)."""

    def step(self) -> None:
        self.deadline = time.monotonic() + self.timeout

    def drop(self, node: Node) -> None:
        conn = self._conns.pop(node.address, None)
        if conn is not None:
            conn.close()


@dataclass
class TopicInfo:
    name: str
    topic_id: bytes
    leaders: dict[int, Node | None]


class Topics:
    """Metadata of the source topics, looked up once each (again after a leader error)."""

    def __init__(self, client: RedriveClient):
        self.client = client
        self._cache: dict[str, TopicInfo | None] = {}

    def get(self, name: str, refresh: bool = False) -> TopicInfo | None:
        if refresh or name not in self._cache:
            md = self.client.metadata([name])
            nodes = {b.node_id: Node(b.node_id, b.host, b.port) for b in md.brokers}
            t = md.topics[0]
            if t.error_code == Errors.UNKNOWN_TOPIC_OR_PARTITION:
                self._cache[name] = None
            elif t.error_code != Errors.NONE:
                raise AdminError(f"describing topic '{name}' failed: {error_text(t.error_code)}", t.error_code)
            else:
                self._cache[name] = TopicInfo(name, t.topic_id,
                                              {p.partition_index: nodes.get(p.leader_id) for p in t.partitions})
        return self._cache[name]

    def resolve(self, name: str) -> TopicInfo | None:
        """The topic named ``name``, or the one whose id prints as ``name``: Kafka's DLQ writes the
        topic id into ``__dlq.errors.topic`` when it cannot look the name up."""
        topic = self.get(name)
        if topic is None and len(name) == 22:
            for t in self.client.metadata().topics:
                if t.error_code == Errors.NONE and uuid_str(t.topic_id) == name:
                    return self.get(t.name)
        return topic


def destination_partition(rec: DlqRecord, topic: TopicInfo) -> int:
    if rec.source_partition in topic.leaders:
        return rec.source_partition
    count = len(topic.leaders)
    return partition_for_key(rec.key, count) if rec.key is not None else rec.source_partition % count


class IdempotentProducer:
    """InitProducerId without a transactional id, then one sequence per partition: a batch sent
    again after a lost answer is answered with its first offset, not written twice
    (``broker/log/producer_state.py``, Kafka's ``ProducerStateManager``)."""

    def __init__(self, client: RedriveClient, topics: Topics):
        self.client, self.topics = client, topics
        self.producer_id = self.epoch = -1
        self.sequences: dict[tuple[str, int], int] = {}

    def _init(self) -> None:
        def attempt():
            resp = self.client.request(InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000,
                                                             producer_id=-1, producer_epoch=-1))
            if resp.error_code in (Errors.COORDINATOR_LOAD_IN_PROGRESS, Errors.COORDINATOR_NOT_AVAILABLE,
                                   Errors.NOT_COORDINATOR):
                return None
            if resp.error_code != Errors.NONE:
                raise AdminError(f"InitProducerId failed: {error_text(resp.error_code)}", resp.error_code)
            return resp

        resp = self.client.retry("a producer id", attempt)
        self.producer_id, self.epoch = resp.producer_id, resp.producer_epoch

    def send(self, topic_name: str, partition: int, records: list[DlqRecord]) -> None:
        if self.producer_id < 0:
            self._init()
        key = (topic_name, partition)
        sequence = self.sequences.get(key, 0)
        now = int(time.time() * 1000)
        batch = rb.build_batch([(r.key, r.value, r.headers, now) for r in records], producer_id=self.producer_id,
                               producer_epoch=self.epoch, base_sequence=sequence)
        state = {"refresh": False}

        def attempt():
            topic = self.topics.get(topic_name, refresh=state["refresh"])
            node = topic.leaders.get(partition) if topic else None
            state["refresh"] = True
            if node is None:
                return None
            req = ProduceRequest(transactional_id=None, acks=-1, timeout_ms=self.client.timeout_ms, topic_data=[
                ProduceRequest.TopicProduceData(name=topic_name, topic_id=topic.topic_id, partition_data=[
                    ProduceRequest.PartitionProduceData(index=partition, records=batch)])])
            try:
                resp = self.client.request(req, node=node)
            except BrokerUnreachable:
                self.client.drop(node)
                return None
            p = resp.responses[0].partition_responses[0]
            if p.error_code in (Errors.NONE, Errors.DUPLICATE_SEQUENCE_NUMBER):
                return True
            if p.error_code in RETRIABLE_PRODUCE_ERRORS:
                return None
            raise AdminError(f"producing to {topic_name}-{partition} failed: "
                             f"{error_text(p.error_code, p.error_message)}", p.error_code)

        self.client.step()
        self.client.retry(f"the produce to {topic_name}-{partition}", attempt)
        self.sequences[key] = rb.increment_sequence(sequence, len(records))


# ----------------------------------------------------------------------------- the run
@dataclass
class PartitionReport:
    partition: int
    start_offset: int
    end_offset: int
    examined: int = 0
    moved: int = 0
    refused: int = 0
    passed_over: int = 0
    committed_offset: int | None = None

    def as_json(self) -> dict:
        return dict(self.__dict__)


@dataclass
class Report:
    dlq_topic: str
    group: str
    executed: bool
    partitions: list[PartitionReport] = field(default_factory=list)
    destinations: Counter = field(default_factory=Counter)            # (topic, partition) -> records
    refusals: dict[str, list[tuple[int, int]]] = field(default_factory=dict)  # reason -> [(dlq partition, offset)]

    def refuse(self, reason: str, partition: int, offset: int) -> None:
        self.refusals.setdefault(reason, []).append((partition, offset))

    def total(self, name: str) -> int:
        return sum(getattr(p, name) for p in self.partitions)

    def as_json(self) -> dict:
        return {"dlq_topic": self.dlq_topic, "group": self.group, "executed": self.executed,
                "examined": self.total("examined"), "moved": self.total("moved"),
                "refused": {reason: len(self.refusals.get(reason, ())) for reason in REFUSAL_TEXT},
                "passed_over": self.total("passed_over"),
                "partitions": [p.as_json() for p in self.partitions],
                "destinations": [{"topic": t, "partition": p, "records": n}
                                 for (t, p), n in sorted(self.destinations.items())],
                "refused_records": [{"partition": p, "offset": o, "reason": reason}
                                    for reason, recs in self.refusals.items() for p, o in recs]}


class Redrive:
    def __init__(self, client: RedriveClient, args):
        self.client = client
        self.dlq_topic = args.dlq_topic
        self.group = args.group or f"{PROG}-{args.dlq_topic}"
        self.execute = args.execute
        self.filters = Filters.from_args(args)
        self.topics = Topics(client)
        self.producer = IdempotentProducer(client, self.topics)
        self.report = Report(self.dlq_topic, self.group, self.execute)

    # -------------------------------------------------------- progress
    def check_group(self) -> None:
        desc = describe_group(self.client, self.group)
        if desc.state not in ("Empty", "Dead"):
            raise AdminError(f"Consumer group '{self.group}' is in state {desc.state}: the redrive records its progress "
                             "in this group, which must have no active members (choose another --group).")

    def commit(self, part: PartitionReport, offset: int) -> None:
        if not self.execute or offset == part.committed_offset:
            return
        topic = OffsetCommitRequest.OffsetCommitRequestTopic(name=self.dlq_topic, partitions=[
            OffsetCommitRequest.OffsetCommitRequestPartition(partition_index=part.partition, committed_offset=offset,
                                                             committed_leader_epoch=-1,
                                                             committed_metadata=COMMIT_METADATA)])
        self.client.step()
        node = self.client.coordinator(self.group)
        version = self.client.connection(node).version_for(OffsetCommitRequest, 2, 9)
        resp, _ = self.client.group_request(
            self.group, lambda: OffsetCommitRequest(group_id=self.group, generation_id_or_member_epoch=-1,
                                                    member_id="", topics=[topic]),
            lambda r: r.topics[0].partitions[0].error_code, version=version)
        code = resp.topics[0].partitions[0].error_code
        if code != Errors.NONE:
            raise AdminError(f"committing offset {offset} of {self.dlq_topic}-{part.partition} for group "
                             f"'{self.group}' failed: {error_text(code)}", code)
        part.committed_offset = offset

    # -------------------------------------------------------- reading the DLQ
    def fetch(self, dlq: TopicInfo, partition: int, offset: int):
        node = dlq.leaders.get(partition)
        if node is None:
            raise AdminError(f"partition {self.dlq_topic}-{partition} has no leader", Errors.LEADER_NOT_AVAILABLE)
        req = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=FETCH_PARTITION_BYTES,
                           isolation_level=READ_COMMITTED, session_id=0, session_epoch=-1, topics=[
                               FetchRequest.FetchTopic(topic=self.dlq_topic, topic_id=dlq.topic_id, partitions=[
                                   FetchRequest.FetchPartition(partition=partition, fetch_offset=offset,
                                                               partition_max_bytes=FETCH_PARTITION_BYTES)])])
        self.client.step()
        resp = self.client.request(req, node=node)
        if resp.error_code != Errors.NONE:
            raise AdminError(f"Fetch from {self.dlq_topic}-{partition} failed: {error_text(resp.error_code)}",
                             resp.error_code)
        return resp.responses[0].partitions[0]

    def run(self) -> Report:
        dlq = self.topics.get(self.dlq_topic)
        if dlq is None:
            raise AdminError(f"DLQ topic '{self.dlq_topic}' does not exist", Errors.UNKNOWN_TOPIC_OR_PARTITION)
        if self.execute:
            self.check_group()
        starts = self.offsets(dlq, EARLIEST_TIMESTAMP)
        ends = self.offsets(dlq, LATEST_TIMESTAMP)
        committed = committed_offsets(self.client, self.group, self.client.coordinator(self.group))
        for p in sorted(dlq.leaders):
            done = committed.get((self.dlq_topic, p))
            if done is not None and done < starts[p]:
                self.deleted_warning(p, done, starts[p])
            part = PartitionReport(p, max(starts[p], done or 0), ends[p], committed_offset=done)
            self.report.partitions.append(part)
            self.scan(dlq, part)
        return self.report

    def offsets(self, dlq: TopicInfo, timestamp: int) -> dict[int, int]:
        """ListOffsets earliest / latest of every DLQ partition, read_committed (the latest is the
        last stable offset), sent to each partition's leader."""
        by_leader: dict[Node, list[int]] = {}
        for p, node in sorted(dlq.leaders.items()):
            if node is None:
                raise AdminError(f"partition {self.dlq_topic}-{p} has no leader", Errors.LEADER_NOT_AVAILABLE)
            by_leader.setdefault(node, []).append(p)
        out = {}
        for node, parts in by_leader.items():
            req = ListOffsetsRequest(replica_id=-1, isolation_level=READ_COMMITTED, timeout_ms=self.client.timeout_ms,
                                     topics=[ListOffsetsRequest.ListOffsetsTopic(name=self.dlq_topic, partitions=[
                                         ListOffsetsRequest.ListOffsetsPartition(partition_index=p, timestamp=timestamp)
                                         for p in parts])])
            for p in self.client.request(req, node=node, min_version=2).topics[0].partitions:
                if p.error_code != Errors.NONE:
                    raise AdminError(f"ListOffsets for {self.dlq_topic}-{p.partition_index} failed: "
                                     f"{error_text(p.error_code)}", p.error_code)
                out[p.partition_index] = p.offset
        return out

    def deleted_warning(self, partition: int, first: int, log_start: int) -> None:
        warn(f"{self.dlq_topic}-{partition}: offsets {first} to {log_start - 1} were deleted from the DLQ topic "
             "before they were redriven")

    def scan(self, dlq: TopicInfo, part: PartitionReport) -> None:
        pos = part.start_offset
        while pos < part.end_offset:
            data = self.fetch(dlq, part.partition, pos)
            if data.error_code == Errors.OFFSET_OUT_OF_RANGE and data.log_start_offset > pos:
                self.deleted_warning(part.partition, pos, data.log_start_offset)
                pos = data.log_start_offset
                continue
            if data.error_code != Errors.NONE:
                raise AdminError(f"Fetch from {self.dlq_topic}-{part.partition} at offset {pos} failed: "
                                 f"{error_text(data.error_code)}", data.error_code)
            recs, next_pos = committed_records(data.records, data.aborted_transactions, pos, part.end_offset)
            if next_pos == pos:
                raise AdminError(f"no progress reading {self.dlq_topic}-{part.partition} at offset {pos} "
                                 f"(end offset {part.end_offset})")
            self.chunk(part, [parse_dlq_record(r) for r in recs])
            self.commit(part, next_pos)
            pos = next_pos

    def chunk(self, part: PartitionReport, recs: list[DlqRecord]) -> None:
        """Classify one fetched chunk; with --execute, produce its records in DLQ order, one batch per
        run of records going to the same partition, committing after each acknowledged batch."""
        run: list[DlqRecord] = []
        run_dest, run_bytes = None, 0
        for rec in recs:
            part.examined += 1
            dest = self.decide(part, rec)
            if dest is None:
                continue
            if run and (dest != run_dest or run_bytes + rec.size > MAX_BATCH_BYTES):
                self.flush(part, run_dest, run, next_offset=rec.offset)
                run, run_bytes = [], 0
            run_dest = dest
            run.append(rec)
            run_bytes += rec.size
        if run:
            self.flush(part, run_dest, run, next_offset=run[-1].offset + 1)

    def decide(self, part: PartitionReport, rec: DlqRecord) -> tuple[str, int] | None:
        """The destination of a record to move, or None (refused or passed over; counted)."""
        reason = None
        if not rec.is_dlq_record:
            reason = NOT_DLQ_RECORD
        elif not self.filters.selects(rec):
            part.passed_over += 1
            return None
        elif rec.headers_only:
            reason = HEADERS_ONLY
        else:
            topic = self.topics.resolve(rec.source_topic)
            if topic is None or not topic.leaders:
                reason = UNKNOWN_TOPIC
            else:
                return topic.name, destination_partition(rec, topic)
        part.refused += 1
        self.report.refuse(reason, part.partition, rec.offset)
        return None

    def flush(self, part: PartitionReport, dest: tuple[str, int], run: list[DlqRecord], next_offset: int) -> None:
        if self.execute:
            self.producer.send(dest[0], dest[1], run)
            self.commit(part, next_offset)
        part.moved += len(run)
        self.report.destinations[dest] += len(run)


# ----------------------------------------------------------------------------- output
def print_report(report: Report, as_json: bool) -> None:
    if as_json:
        print_json(report.as_json())
    else:
        moved = "MOVED" if report.executed else "TO-MOVE"
        print_table(["DLQ-TOPIC", "PARTITION", "START-OFFSET", "END-OFFSET", "EXAMINED", moved, "REFUSED", "PASSED-OVER"],
                    [(report.dlq_topic, p.partition, p.start_offset, p.end_offset, p.examined, p.moved, p.refused,
                      p.passed_over) for p in report.partitions], [15, 9, 12, 10, 8, 5, 7, 11])
        if report.destinations:
            print_table(["TOPIC", "PARTITION", moved],
                        [(t, p, n) for (t, p), n in sorted(report.destinations.items())], [15, 9, 5])
    total = report.total("moved")
    if report.executed:
        eprint(f"Moved {total} record{'s' if total != 1 else ''} from DLQ topic '{report.dlq_topic}'; progress "
               f"committed in consumer group '{report.group}'.")
    else:
        eprint(f"Dry run: {total} record{'s' if total != 1 else ''} would be moved from DLQ topic "
               f"'{report.dlq_topic}'; nothing was produced or committed.")
    passed = report.total("passed_over")
    if passed and report.executed:
        warn(f"{passed} record{'s' if passed != 1 else ''} not selected by the filters were passed over: group "
             f"'{report.group}' will not examine them again (they stay in the DLQ topic; use another --group "
             "to redrive them).")
    for reason, recs in report.refusals.items():
        shown = ", ".join(f"{report.dlq_topic}-{p}@{o}" for p, o in recs[:10]) + (", ..." if len(recs) > 10 else "")
        eprint(f"Error: refused {len(recs)} {REFUSAL_TEXT[reason].format(s='' if len(recs) == 1 else 's')}: {shown}")


def command(args) -> None:
    with RedriveClient(args.bootstrap_server, timeout_ms=args.timeout, client_id=PROG) as client:
        report = Redrive(client, args).run()
    print_report(report, args.json)
    if report.refusals:
        raise Failed()


def main(argv=None) -> int:
    return run(build_parser(), validate, command, argv)


if __name__ == "__main__":
    sys.exit(main())
