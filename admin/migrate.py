"""``sharebroker-migrate``: move a running sharebroker, queues and all, onto an Apache Kafka cluster.

Both sides are reached only over the Kafka protocol: records, topics, consumer-group offsets and
ACLs through confluent-kafka (the ``migrate`` extra), share groups and group configs through the
project's own admin client (``admin.client``), since confluent-kafka has no AlterShareGroupOffsets.

    plan     --source S --target T          what would be created and copied; writes nothing
    sync     --source S --target T          create missing topics, copy what is new (repeatable)
    cutover  --source S --target T          groups' positions and configs, ACLs (groups must be empty)
    verify   --source S --target T          counts and digests per partition, groups' positions

The copy. Every user topic (names not starting with ``__``) is created on the target with the
source's partition count and dynamic topic configs (replication factor ``--replication-factor``,
default the target's). Each partition is read ``read_committed`` (aborted records and
transaction markers stay behind) and produced, in order, to the same partition through an
idempotent producer, with key, value, headers and timestamp, plus a header
``sharebroker.source.offset`` holding the record's offset on the source. For a compacted topic only
the live records of the range read are copied (the last record of each key; tombstones only when
the target already holds records they delete).

The offset map. Target offsets differ from source offsets (no markers, no aborted or compacted
records). Per partition, a record keyed ``topic:partition`` in the compacted target topic
``__sharebroker_migrate_offsets`` holds the boundaries ``[source offset, target offset]`` of each
copied chunk and the source offset the copy has reached. ``translate`` finds the chunk a source
offset falls in and reads the target from that chunk's start until the first record whose source
offset header is at or above it. The resume point of a sync is not taken from the map but from the
target itself: the source offset header of the partition's last record, so a sync killed at any
point (SIGKILL included) and run again continues after the last record that reached the target,
without duplicates (the idempotent producer writes a prefix of what it was given, in order); a map
that lags behind the data is repaired from the headers.

Cutover. Only groups that are empty on the source are moved (a group with members is named and
the command stops: stop the consumers first). Consumer groups: committed offsets translated, then
AlterConsumerGroupOffsets (OffsetCommit) on the target. Share groups: the start offset of each
share-partition translated, then AlterShareGroupOffsets; their dynamic group configs
(``share.auto.offset.reset``, delivery-count limit, lock duration, DLQ name, isolation level) by
IncrementalAlterConfigs (resource GROUP). Records a share group had acknowledged above its start
offset cannot be expressed through Kafka's API: they will be delivered once more on the target
(counted, from ReadShareGroupStateSummary's DeliveryCompleteCount). Records in flight were released
when the consumers left, so nothing unacknowledged is skipped (at-least-once across the move).

Exit codes as the other operator commands (``admin.common``); ``verify`` exits 1 on any mismatch.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
import uuid
from dataclasses import dataclass, field

from admin.client import AdminClient as WireAdmin, AdminError, error_text
from admin.common import Failed, eprint, list_groups, print_table, run, state_name, tp_str
from admin.consumer_groups import committed_offsets
from admin.share_groups import alter_offsets, describe_group as describe_share_group, describe_offsets
from protocol.errors import Errors
from protocol.messages.alter_client_quotas import AlterClientQuotasRequest as AlterQuotas
from protocol.messages.describe_client_quotas import DescribeClientQuotasRequest as DescribeQuotas
from protocol.messages.describe_configs import DescribeConfigsRequest as DescribeConfigs
from protocol.messages.incremental_alter_configs import IncrementalAlterConfigsRequest as AlterConfigs
from protocol.messages.read_share_group_state_summary import ReadShareGroupStateSummaryRequest as Summary

SOURCE_OFFSET_HEADER = "sharebroker.source.offset"
MAP_TOPIC = "__sharebroker_migrate_offsets"
GROUP_RESOURCE = 32  # ConfigResource.Type.GROUP
DYNAMIC_GROUP_CONFIG = 8  # DescribeConfigs ConfigSource
NOT_CARRIED = [
    ("internal topics (__consumer_offsets, __transaction_state, ...)", "the target keeps its own"),
    ("open transactions", "only committed records are copied; producers start new transactions"),
    ("producer ids and sequence numbers", "the target assigns its own; idempotence starts afresh"),
    ("a share group's acknowledged records above its start offset",
     "Kafka's API sets only the start offset: they are delivered once more (counted)"),
    ("per-record delivery counts of share groups", "records start again at delivery count 0"),
    ("superseded records of compacted topics", "only each key's latest record (the live one) is copied"),
    ("SCRAM credentials", "listed (SCRAM USERS) to be re-created with their passwords: see below"),
]
SCRAM_WHY = ("SCRAM credentials cannot be carried: DescribeUserScramCredentials answers a user's mechanisms and "
             "iteration counts only, never the salt or keys; AlterUserScramCredentials takes a salted password, "
             "from which the target derives its keys, and neither sharebroker's store nor Kafka keeps it (only the "
             "keys derived from it, one-way): re-create each user on the target with its password")


def _ck():
    try:
        import confluent_kafka
        import confluent_kafka.admin
    except ImportError:  # pragma: no cover - the extra is missing
        raise AdminError("sharebroker-migrate needs confluent-kafka: pip install 'sharebroker[migrate]'") from None
    return confluent_kafka


# ----------------------------------------------------------------------------- one side
class Side:
    """One cluster: a confluent-kafka admin client and the project's wire admin client."""

    def __init__(self, bootstrap: str, timeout: float):
        ck = _ck()
        self.bootstrap = bootstrap
        self.timeout = timeout
        self.admin = ck.admin.AdminClient({"bootstrap.servers": bootstrap})
        self._wire = None

    @property
    def wire(self) -> WireAdmin:
        if self._wire is None:
            self._wire = WireAdmin(self.bootstrap, timeout_ms=int(self.timeout * 1000), client_id="sharebroker-migrate")
        return self._wire

    def close(self) -> None:
        if self._wire is not None:
            self._wire.close()

    def topics(self) -> dict[str, int]:
        """User topics (not ``__``-prefixed) and their partition counts."""
        md = self.admin.list_topics(timeout=self.timeout)
        return {n: len(t.partitions) for n, t in md.topics.items() if not n.startswith("__") and t.error is None}

    def topic_configs(self, topics: list[str]) -> dict[str, dict[str, str]]:
        """The dynamic (per-topic) configs of ``topics``."""
        ck = _ck()
        if not topics:
            return {}
        res = [ck.admin.ConfigResource(ck.admin.ResourceType.TOPIC, t) for t in topics]
        out = {}
        for r, fut in self.admin.describe_configs(res, request_timeout=self.timeout).items():
            entries = fut.result()
            out[r.name] = {k: e.value for k, e in entries.items()
                           if e.source == ck.admin.ConfigSource.DYNAMIC_TOPIC_CONFIG.value and e.value is not None}
        return out

    def offsets(self, tps: list[tuple[str, int]], spec: str, committed: bool) -> dict[tuple[str, int], int]:
        """ListOffsets ``earliest`` / ``latest`` (latest read_committed: the last stable offset)."""
        ck = _ck()
        if not tps:
            return {}
        a = ck.admin
        want = {ck.TopicPartition(t, p): (a.OffsetSpec.earliest() if spec == "earliest" else a.OffsetSpec.latest())
                for t, p in tps}
        level = ck.IsolationLevel.READ_COMMITTED if committed else ck.IsolationLevel.READ_UNCOMMITTED
        deadline = time.monotonic() + self.timeout
        while True:  # a topic just created is not yet known everywhere, leaders move: ask again
            futs = self.admin.list_offsets(want, isolation_level=level, request_timeout=self.timeout)
            try:
                return {(tp.topic, tp.partition): f.result().offset for tp, f in futs.items()}
            except ck.KafkaException as e:
                transient = e.args[0].retriable() or e.args[0].code() in (
                    ck.KafkaError.UNKNOWN_TOPIC_OR_PART, ck.KafkaError.NOT_LEADER_FOR_PARTITION,
                    ck.KafkaError.LEADER_NOT_AVAILABLE, ck.KafkaError.UNKNOWN_LEADER_EPOCH,
                    ck.KafkaError.FENCED_LEADER_EPOCH)  # all retriable in Kafka; not all in librdkafka
                if not transient or time.monotonic() > deadline:
                    raise AdminError(f"ListOffsets on {self.bootstrap} failed: {e.args[0].str()}") from None
                time.sleep(0.2)
                self.admin = ck.admin.AdminClient({"bootstrap.servers": self.bootstrap})  # fresh metadata

    def consumer(self, committed: bool):
        ck = _ck()
        return ck.Consumer({"bootstrap.servers": self.bootstrap, "group.id": f"sharebroker-migrate-{uuid.uuid4().hex}",
                            "enable.auto.commit": False, "enable.auto.offset.store": False,
                            "enable.partition.eof": True, "auto.offset.reset": "earliest",
                            "isolation.level": "read_committed" if committed else "read_uncommitted",
                            "fetch.max.bytes": 16 * 1024 * 1024})

    def read(self, ranges: dict[tuple[str, int], tuple[int, int]], committed: bool, idle: float | None = None):
        """Yield the records of each partition's ``[start, end)``, in order per partition."""
        ck = _ck()
        todo = {tp: r for tp, r in ranges.items() if r[0] < r[1]}
        if not todo:
            return
        c = self.consumer(committed)
        try:
            c.assign([ck.TopicPartition(t, p, s) for (t, p), (s, _) in todo.items()])
            idle = self.timeout if idle is None else idle
            last = time.monotonic()
            while todo:
                msg = c.poll(0.5)
                if msg is None:
                    if time.monotonic() - last > idle:
                        raise AdminError("no records from " + self.bootstrap + " for "
                                         + ", ".join(tp_str(*tp) for tp in sorted(todo)) + f" within {idle:g} s")
                    continue
                last = time.monotonic()
                tp = (msg.topic(), msg.partition())
                if msg.error() is not None:
                    if msg.error().code() == ck.KafkaError._PARTITION_EOF:
                        if tp in todo and msg.offset() >= todo[tp][0]:
                            del todo[tp]
                        continue
                    raise AdminError(f"reading {tp_str(*tp)} from {self.bootstrap}: {msg.error()}")
                if tp not in todo:
                    continue
                if msg.offset() >= todo[tp][1]:
                    del todo[tp]
                    continue
                yield msg
                if msg.offset() >= todo[tp][1] - 1:
                    del todo[tp]
        finally:
            c.close()


def source_offset(msg) -> int | None:
    for k, v in msg.headers() or ():
        if k == SOURCE_OFFSET_HEADER and v is not None:
            return int(v)
    return None


# ----------------------------------------------------------------------------- the offset map
@dataclass
class PartitionMap:
    boundaries: list[list[int]] = field(default_factory=list)  # [source offset, target offset] per chunk
    source_next: int = 0   # the source offset the copy has reached (exclusive)
    target_next: int = 0   # the target's end offset at that point

    def to_json(self) -> bytes:
        return json.dumps({"boundaries": self.boundaries, "source_next": self.source_next,
                           "target_next": self.target_next}, separators=(",", ":")).encode()


def map_key(topic: str, partition: int) -> str:
    return f"{topic}:{partition}"  # ':' cannot occur in a topic name


def read_map(target: Side) -> dict[tuple[str, int], PartitionMap]:
    ends = target.offsets([(MAP_TOPIC, 0)], "latest", False) if MAP_TOPIC in target.admin.list_topics(
        timeout=target.timeout).topics else {}
    out: dict[tuple[str, int], PartitionMap] = {}
    if not ends:
        return out
    for msg in target.read({(MAP_TOPIC, 0): (0, ends[(MAP_TOPIC, 0)])}, committed=False):
        topic, _, part = msg.key().decode().rpartition(":")
        if msg.value() is None:
            out.pop((topic, int(part)), None)
            continue
        d = json.loads(msg.value())
        out[(topic, int(part))] = PartitionMap(d["boundaries"], d["source_next"], d["target_next"])
    return out


def ensure_map_topic(target: Side) -> None:
    ck = _ck()
    if MAP_TOPIC in target.admin.list_topics(timeout=target.timeout).topics:
        return
    fut = target.admin.create_topics([ck.admin.NewTopic(MAP_TOPIC, 1, config={"cleanup.policy": "compact"})],
                                     request_timeout=target.timeout)[MAP_TOPIC]
    try:
        fut.result()
    except ck.KafkaException as e:
        if e.args[0].code() != ck.KafkaError.TOPIC_ALREADY_EXISTS:
            raise AdminError(f"creating {MAP_TOPIC} failed: {e.args[0].str()}") from None


def translate(target: Side, pmap: PartitionMap | None, tp: tuple[str, int], src: int, target_end: int) -> int:
    """The target offset from which a reader sees every copied record at or after source offset ``src``."""
    if pmap is None or not pmap.boundaries:
        return target_end
    if src >= pmap.source_next:
        return target_end
    start = pmap.boundaries[0][1]
    for b_src, b_tgt in pmap.boundaries:
        if b_src <= src:
            start = b_tgt
        else:
            break
    if src <= pmap.boundaries[0][0]:
        return start
    for msg in target.read({tp: (start, target_end)}, committed=False):
        so = source_offset(msg)
        if so is not None and so >= src:
            return msg.offset()
    return target_end


# ----------------------------------------------------------------------------- plan
@dataclass
class TopicPlan:
    name: str
    partitions: int
    configs: dict[str, str]
    records: int
    target_partitions: int | None

    @property
    def compacted(self) -> bool:
        return "compact" in self.configs.get("cleanup.policy", "")

    @property
    def action(self) -> str:
        if self.target_partitions is None:
            return "create"
        if self.target_partitions != self.partitions:
            return f"CONFLICT: target has {self.target_partitions} partitions"
        return "exists"


def plan_topics(source: Side, target: Side) -> list[TopicPlan]:
    src = source.topics()
    names = sorted(src)
    configs = source.topic_configs(names)
    tps = [(t, p) for t in names for p in range(src[t])]
    lo, hi = source.offsets(tps, "earliest", True), source.offsets(tps, "latest", True)
    tgt = target.topics()
    return [TopicPlan(t, src[t], configs.get(t, {}), sum(hi[(t, p)] - lo[(t, p)] for p in range(src[t])), tgt.get(t))
            for t in names]


@dataclass
class GroupPlan:
    group: str
    kind: str  # consumer / share
    state: str
    partitions: int
    redeliveries: int = 0


def source_groups(source: Side) -> list[GroupPlan]:
    out = []
    for g in list_groups(source.wire, ["consumer", "classic"]):
        node = source.wire.coordinator(g.group_id)
        offs = committed_offsets(source.wire, g.group_id, node)
        out.append(GroupPlan(g.group_id, "consumer", state_name(g.group_state) or "-", len(offs)))
    for g in list_groups(source.wire, ["share"]):
        offs = share_start_offsets(source, g.group_id)
        redeliver = sum(share_delivery_complete(source, g.group_id, offs).values())
        out.append(GroupPlan(g.group_id, "share", state_name(g.group_state) or "-", len(offs), redeliver))
    return out


def share_start_offsets(side: Side, group: str) -> dict[tuple[str, int], int]:
    return {(r.topic, r.partition): r.start_offset for r in describe_offsets(side.wire, group)
            if r.start_offset is not None}


def share_delivery_complete(source: Side, group: str, tps) -> dict[tuple[str, int], int]:
    """Records in a terminal state (acknowledged, archived) above each share-partition's start
    offset (ReadShareGroupStateSummary's DeliveryCompleteCount; 0 where the source cannot say)."""
    tps = list(tps)
    if not tps:
        return {}
    md = source.wire.metadata(sorted({t for t, _ in tps}))
    ids = {t.name: t.topic_id for t in md.topics if t.error_code == Errors.NONE}
    by_id = {v: k for k, v in ids.items()}
    req = Summary(group_id=group, topics=[
        Summary.ReadStateSummaryData(topic_id=ids[t], partitions=[
            Summary.PartitionData(partition=p, leader_epoch=0) for tt, p in tps if tt == t])
        for t in sorted({t for t, _ in tps}) if t in ids])
    try:
        resp = source.wire.request(req)
    except AdminError:
        return {tp: 0 for tp in tps}
    return {(by_id[r.topic_id], p.partition): max(p.delivery_complete_count, 0)
            for r in resp.results for p in r.partitions if p.error_code == Errors.NONE}


def cmd_plan(source: Side, target: Side, args) -> None:
    topics = plan_topics(source, target)
    print("TOPICS")
    print_table(["TOPIC", "PARTITIONS", "RECORDS", "CONFIGS", "ON TARGET"],
                [[t.name, t.partitions, t.records, ",".join(f"{k}={v}" for k, v in sorted(t.configs.items())) or "-",
                  t.action] for t in topics], [30, 10, 10, 40, 12])
    groups = source_groups(source)
    print("\nGROUPS")
    print_table(["GROUP", "TYPE", "STATE", "PARTITIONS", "REDELIVERED"],
                [[g.group, g.kind, g.state, g.partitions, g.redeliveries if g.kind == "share" else "-"] for g in groups],
                [30, 8, 10, 10, 11])
    busy = [g.group for g in groups if g.state not in ("Empty", "Dead")]
    if busy:
        print(f"\nnot empty (stop their consumers before cutover): {', '.join(busy)}")
    print("\nNOT CARRIED")
    print_table(["WHAT", "WHY"], NOT_CARRIED, [60, 10])
    users = scram_users(source)
    if users:
        print("\nSCRAM USERS (to re-create on the target)")
        print_table(["USER", "MECHANISMS"], [[u, m] for u, m in sorted(users.items())], [30, 40])
        print(SCRAM_WHY)


# ----------------------------------------------------------------------------- sync
@dataclass
class Progress:
    records: int = 0
    bytes: int = 0


class Meter:
    """The progress of a ``sync``, per topic: records copied, records to copy, rate, and the lag to
    the source's end (its last stable offset now, asked again at most once a second, minus how far
    the copy has read). On a terminal one live line per topic, rewritten in place with a bar; when
    the output is not a terminal (a log, a pipe), a plain ``progress`` line every ``interval``
    seconds. "To copy" counts offsets, so for a transactional or compacted topic (markers,
    aborted or superseded records stay behind) it ends above the records copied."""

    BAR = 24

    def __init__(self, source: "Side", out, interval: float, tty: bool | None = None):
        self.source, self.out = source, out
        self.tty = out.isatty() if tty is None else tty
        self.interval = min(interval, 0.5) if self.tty else interval
        self.all = Progress()

    def begin(self, topic: str, starts: dict, ends: dict) -> None:
        self.topic, self.tps = topic, sorted(starts)
        self.start, self.pos, self.end = dict(starts), dict(starts), dict(ends)
        self.to_copy = sum(max(ends[tp] - starts[tp], 0) for tp in self.tps)
        self.done = Progress()
        self.began = self.shown = self.asked = time.monotonic()

    def copied(self, tp, offset: int, nbytes: int) -> None:
        """A record at source ``offset`` handed to the producer."""
        self.pos[tp] = offset + 1
        self.done.records += 1
        self.done.bytes += nbytes
        now = time.monotonic()
        if now - self.shown >= self.interval:
            self.show(now)

    def reached(self, tp, offset: int) -> None:
        """The copy of ``tp`` has read up to ``offset`` (exclusive), records copied or not."""
        self.pos[tp] = max(self.pos[tp], offset)

    def lag(self) -> int:
        return sum(max(self.end[tp] - self.pos[tp], 0) for tp in self.tps)

    def line(self, now: float) -> str:
        took = max(now - self.began, 1e-9)
        pct = 100.0 * self.done.records / self.to_copy if self.to_copy else 100.0
        text = (f"{self.topic}: {self.done.records}/{self.to_copy} records ({pct:.0f}%), "
                f"{self.done.records / took:.0f} records/s, {self.done.bytes / 1e6 / took:.2f} MB/s, "
                f"lag {self.lag()}, total {self.all.records + self.done.records} records")
        if not self.tty:
            return "progress " + text
        filled = int(self.BAR * min(pct, 100.0) / 100)
        return "\r\x1b[K[" + "#" * filled + "." * (self.BAR - filled) + "] " + text

    def show(self, now: float) -> None:
        self.shown = now
        if now - self.asked >= 1.0:  # the source's end moves while producers run
            self.asked = now
            self.end.update(self.source.offsets(self.tps, "latest", True))
        self.out.write(self.line(now) + ("" if self.tty else "\n"))
        self.out.flush()

    def finish(self) -> None:
        self.all.records += self.done.records
        self.all.bytes += self.done.bytes
        self.out.write(("\r\x1b[K" if self.tty else "") + f"{self.topic}: {self.done.records} records, "
                       f"{self.done.bytes / 1e6:.2f} MB copied\n")
        self.out.flush()


def create_topics(target: Side, topics: list[TopicPlan], replication_factor: int) -> list[str]:
    ck = _ck()
    new = [t for t in topics if t.target_partitions is None]
    conflicts = [t for t in topics if t.target_partitions is not None and t.target_partitions != t.partitions]
    if conflicts:
        raise AdminError("partition counts differ on the target: "
                         + ", ".join(f"{t.name} ({t.partitions} on the source, {t.target_partitions} on the target)"
                                     for t in conflicts))
    if not new:
        return []
    futs = target.admin.create_topics([ck.admin.NewTopic(t.name, t.partitions, replication_factor, config=t.configs)
                                       for t in new], request_timeout=target.timeout)
    for name, fut in futs.items():
        try:
            fut.result()
        except ck.KafkaException as e:
            if e.args[0].code() != ck.KafkaError.TOPIC_ALREADY_EXISTS:
                raise AdminError(f"creating topic '{name}' on the target failed: {e.args[0].str()}") from None
    deadline = time.monotonic() + target.timeout
    while not all(n.name in target.topics() for n in new):  # metadata propagates to every broker
        if time.monotonic() > deadline:
            raise AdminError("created topics did not appear in the target's metadata")
        time.sleep(0.2)
    return [t.name for t in new]


def target_tail(target: Side, tps: list[tuple[str, int]]) -> tuple[dict, dict]:
    """Each target partition's end offset and the source offset of its last record (None: empty)."""
    ends = target.offsets(tps, "latest", False)
    starts = target.offsets(tps, "earliest", False)
    last = {tp: None for tp in tps}
    ranges = {tp: (ends[tp] - 1, ends[tp]) for tp in tps if ends[tp] > starts[tp]}
    for msg in target.read(ranges, committed=False):
        last[(msg.topic(), msg.partition())] = source_offset(msg)
    return ends, last


def repair_map(target: Side, tp, pmap: PartitionMap, end: int, last_src: int | None) -> bool:
    """Bring a partition's map up to the data after a sync was killed between data and map."""
    if end <= pmap.target_next:
        return False
    first = None
    for msg in target.read({tp: (pmap.target_next, pmap.target_next + 1)}, committed=False):
        first = source_offset(msg)
    if first is not None:
        pmap.boundaries.append([first, pmap.target_next])
    pmap.target_next = end
    pmap.source_next = (last_src + 1) if last_src is not None else pmap.source_next
    return True


def live_only(records: list, target_has_records: bool) -> list:
    """A compacted topic's live records in the range: the last record of each key; tombstones only
    when the target may hold an earlier record of the key."""
    last = {}
    for i, m in enumerate(records):
        last[m.key()] = i
    return [m for i, m in enumerate(records)
            if last[m.key()] == i and (m.value() is not None or target_has_records)]


def cmd_sync(source: Side, target: Side, args) -> None:
    ck = _ck()
    topics = plan_topics(source, target)
    created = create_topics(target, topics, args.replication_factor)
    if created:
        print(f"created on the target: {', '.join(created)}")
    ensure_map_topic(target)
    maps = read_map(target)
    producer = ck.Producer({"bootstrap.servers": target.bootstrap, "enable.idempotence": True, "acks": "all",
                            "linger.ms": 20, "batch.size": 1024 * 1024, "compression.type": "none"})
    meter, t0 = Meter(source, sys.stdout, args.progress_interval), time.monotonic()
    try:
        for t in topics:
            tps = [(t.name, p) for p in range(t.partitions)]
            lo, hi = source.offsets(tps, "earliest", True), source.offsets(tps, "latest", True)
            ends, last = target_tail(target, tps)
            starts = {}
            for tp in tps:
                pmap = maps.setdefault(tp, PartitionMap())
                if repair_map(target, tp, pmap, ends[tp], last[tp]):
                    write_map(producer, tp, pmap)
                starts[tp] = lo[tp] if last[tp] is None else max(last[tp] + 1, lo[tp])
                if pmap.target_next == ends[tp]:  # the map is in step with the data: skip what it read past
                    starts[tp] = max(starts[tp], pmap.source_next)
            meter.begin(t.name, starts, hi)
            for tp in tps:
                copy_partition(source, target, producer, tp, starts[tp], hi[tp], ends[tp], maps[tp], t.compacted,
                               meter, args)
            producer.flush(target.timeout)
            meter.finish()
    finally:
        left = producer.flush(target.timeout)
        if left:
            raise AdminError(f"{left} records not acknowledged by the target")
    took, total = max(time.monotonic() - t0, 1e-9), meter.all
    print(f"total: {total.records} records, {total.bytes / 1e6:.2f} MB in {took:.1f} s "
          f"({total.records / took:.0f} records/s, {total.bytes / 1e6 / took:.2f} MB/s)")


def write_map(producer, tp, pmap: PartitionMap) -> None:
    producer.produce(MAP_TOPIC, key=map_key(*tp).encode(), value=pmap.to_json(), partition=0)


def copy_partition(source: Side, target: Side, producer, tp, start: int, end: int, target_end: int,
                   pmap: PartitionMap, compacted: bool, meter: Meter, args) -> None:
    if start >= end:
        return
    chunk: list = []
    delivered: list[int] = []
    errors: list[str] = []

    def on_delivery(err, msg):
        if err is not None:
            errors.append(str(err))
        else:
            delivered.append(msg.offset())

    def flush_chunk() -> None:
        if not chunk:
            return
        first_src = chunk[0].offset()
        delivered.clear()
        for m in chunk:
            headers = list(m.headers() or []) + [(SOURCE_OFFSET_HEADER, str(m.offset()).encode())]
            while True:
                try:
                    producer.produce(tp[0], key=m.key(), value=m.value(), partition=tp[1], headers=headers,
                                     timestamp=m.timestamp()[1], on_delivery=on_delivery)
                    break
                except BufferError:
                    producer.poll(0.1)
            meter.copied(tp, m.offset(), len(m.key() or b"") + len(m.value() or b""))
        if producer.flush(target.timeout) or errors or not delivered:
            raise AdminError(f"copying {tp_str(*tp)} failed: {errors[0] if errors else 'not acknowledged'}")
        pmap.boundaries.append([first_src, min(delivered)])
        pmap.source_next, pmap.target_next = chunk[-1].offset() + 1, max(delivered) + 1
        write_map(producer, tp, pmap)
        producer.flush(target.timeout)
        chunk.clear()

    records = list(source.read({tp: (start, end)}, committed=True)) if compacted else None
    if compacted:
        records = live_only(records, target_end > 0)
    rate = args.max_records_per_second
    began = time.monotonic()
    for n, m in enumerate(records if compacted else source.read({tp: (start, end)}, committed=True)):
        chunk.append(m)
        if len(chunk) >= args.chunk:
            flush_chunk()
        if rate and n % 50 == 0:
            ahead = n / rate - (time.monotonic() - began)
            if ahead > 0:
                time.sleep(ahead)
    flush_chunk()
    meter.reached(tp, end)
    if pmap.source_next < end:  # the range ended in records not copied (aborted, markers, compacted)
        pmap.source_next = end
        write_map(producer, tp, pmap)


# ----------------------------------------------------------------------------- cutover
@dataclass
class Translation:
    target: Side
    maps: dict
    ends: dict
    cache: dict = field(default_factory=dict)  # groups often stand at the same offsets

    def __call__(self, tp, src: int) -> int:
        if (tp, src) not in self.cache:
            self.cache[(tp, src)] = translate(self.target, self.maps.get(tp), tp, src, self.ends[tp])
        return self.cache[(tp, src)]


def translation(source: Side, target: Side) -> Translation:
    """Check the copy is complete, and return the translator of source offsets."""
    topics = source.topics()
    tps = [(t, p) for t, n in topics.items() for p in range(n)]
    hi = source.offsets(tps, "latest", True)
    maps = read_map(target)
    behind = [tp for tp in tps if hi[tp] > 0 and (tp not in maps or maps[tp].source_next < hi[tp])]
    if behind:
        raise AdminError("the target is behind the source for " + ", ".join(tp_str(*tp) for tp in behind[:10])
                         + ": run sync again (with producers stopped)")
    return Translation(target, maps, target.offsets(tps, "latest", False))


def group_configs(side: Side, group: str) -> dict[str, str]:
    resp = side.wire.request(DescribeConfigs(resources=[DescribeConfigs.DescribeConfigsResource(
        resource_type=GROUP_RESOURCE, resource_name=group)]))
    out = {}
    for r in resp.results:
        if r.error_code != Errors.NONE:
            raise AdminError(f"describing the configs of group '{group}' failed: "
                             f"{error_text(r.error_code, r.error_message)}", r.error_code)
        out.update({c.name: c.value for c in r.configs if c.config_source == DYNAMIC_GROUP_CONFIG and c.value is not None})
    return out


def set_group_configs(target: Side, group: str, configs: dict[str, str]) -> None:
    if not configs:
        return
    req = AlterConfigs(resources=[AlterConfigs.AlterConfigsResource(
        resource_type=GROUP_RESOURCE, resource_name=group,
        configs=[AlterConfigs.AlterableConfig(name=k, config_operation=0, value=v) for k, v in sorted(configs.items())])])
    resp = target.wire.request(req)
    for r in resp.responses:
        if r.error_code != Errors.NONE:
            raise AdminError(f"setting the configs of group '{group}' on the target failed: "
                             f"{error_text(r.error_code, r.error_message)}", r.error_code)


def cmd_cutover(source: Side, target: Side, args) -> None:
    groups = source_groups(source)
    busy = [f"{g.group} ({g.state})" for g in groups if g.state not in ("Empty", "Dead")]
    if busy:
        eprint("these groups are not empty on the source; stop their consumers and run cutover again: "
               + ", ".join(busy))
        raise Failed()
    tr = translation(source, target)
    moved = set(source.topics())
    rows = []
    for g in groups:
        if g.kind == "consumer":
            offs = committed_offsets(source.wire, g.group, source.wire.coordinator(g.group))
            new = {tp: tr(tp, o) for tp, o in offs.items() if tp[0] in moved}
            if new:
                alter_consumer_offsets(target, g.group, new)
            rows.append([g.group, "consumer", len(new), "-", "-"])
        else:
            offs = share_start_offsets(source, g.group)
            new = {tp: tr(tp, o) for tp, o in offs.items() if tp[0] in moved}
            if new:
                alter_offsets(target.wire, g.group, new)
            configs = group_configs(source, g.group)
            set_group_configs(target, g.group, configs)
            rows.append([g.group, "share", len(new), g.redeliveries, ",".join(sorted(configs)) or "-"])
    print_table(["GROUP", "TYPE", "PARTITIONS", "REDELIVERED", "CONFIGS"], rows, [30, 8, 10, 11, 20])
    carry_quotas(source, target)
    carry_acls(source, target)
    list_scram_users(source)


def alter_consumer_offsets(target, group: str, offsets: dict[tuple[str, int], int]) -> None:
    """AlterConsumerGroupOffsets on the target until every partition is written: its answer carries an
    error per partition (not raised by the client), and a cluster's new group coordinator answers
    retriable ones (COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR) for a while; others are fatal."""
    ck = _ck()
    deadline = time.monotonic() + target.timeout * 4
    while True:
        req = ck.ConsumerGroupTopicPartitions(group, [ck.TopicPartition(t, p, o) for (t, p), o in sorted(offsets.items())])
        try:
            res = target.admin.alter_consumer_group_offsets([req], request_timeout=target.timeout)[group].result()
            failed = [tp for tp in res.topic_partitions if tp.error is not None]
        except ck.KafkaException as e:
            failed = [e.args[0]]
        if not failed:
            return
        err = failed[0] if isinstance(failed[0], ck.KafkaError) else failed[0].error
        # librdkafka marks few group errors retriable; these are, in Kafka (RetriableException)
        transient = err.retriable() or err.code() in (
            ck.KafkaError.COORDINATOR_LOAD_IN_PROGRESS, ck.KafkaError.COORDINATOR_NOT_AVAILABLE,
            ck.KafkaError.NOT_COORDINATOR, ck.KafkaError.REQUEST_TIMED_OUT, ck.KafkaError._TIMED_OUT)
        if not transient or time.monotonic() > deadline:
            raise AdminError(f"writing group {group}'s offsets on the target failed: {err.str()}")
        time.sleep(0.5)


def client_quotas(client: WireAdmin) -> dict[tuple, dict[str, float]]:
    """Every client quota: {((entity type, name or None for the default), ...): {key: value}}
    (DescribeClientQuotas with no component filter, strict false: all entities)."""
    resp = client.request(DescribeQuotas(components=[], strict=False))
    if resp.error_code != Errors.NONE:
        raise AdminError(f"DescribeClientQuotas on {client.bootstrap.address} failed: "
                         f"{error_text(resp.error_code, resp.error_message)}", resp.error_code)
    return {tuple((e.entity_type, e.entity_name) for e in entry.entity): {v.key: v.value for v in entry.values}
            for entry in resp.entries}


def carry_quotas(source: Side, target: Side) -> None:
    quotas = client_quotas(source.wire)
    if not quotas:
        print("client quotas: none on the source")
        return
    req = AlterQuotas(entries=[AlterQuotas.EntryData(
        entity=[AlterQuotas.EntityData(entity_type=t, entity_name=n) for t, n in entity],
        ops=[AlterQuotas.OpData(key=k, value=v, remove=False) for k, v in sorted(values.items())])
        for entity, values in sorted(quotas.items(), key=repr)])
    resp = target.wire.request(req)
    failed = [f"{[(e.entity_type, e.entity_name) for e in r.entity]}: {error_text(r.error_code, r.error_message)}"
              for r in resp.entries if r.error_code != Errors.NONE]
    if failed:
        eprint("client quotas NOT carried: " + "; ".join(failed))
        raise Failed()
    print(f"client quotas: {len(quotas)} entities set on the target")


def carry_acls(source: Side, target: Side) -> None:
    ck = _ck()
    a = ck.admin
    flt = a.AclBindingFilter(a.ResourceType.ANY, None, a.ResourcePatternType.ANY, None, None,
                             a.AclOperation.ANY, a.AclPermissionType.ANY)
    try:
        acls = source.admin.describe_acls(flt, request_timeout=source.timeout).result()
    except ck.KafkaException as e:
        print(f"ACLs: none read from the source ({e.args[0].str()})")
        return
    if not acls:
        print("ACLs: none on the source")
        return
    try:
        for fut in target.admin.create_acls(acls, request_timeout=target.timeout).values():
            fut.result()
        print(f"ACLs: {len(acls)} created on the target")
    except ck.KafkaException as e:
        eprint(f"ACLs: {len(acls)} on the source NOT carried: {e.args[0].str()}")
        raise Failed() from None


def scram_users(source: Side) -> dict[str, str]:
    """The source's SCRAM users and their mechanisms with iteration counts (all the protocol tells)."""
    ck = _ck()
    try:
        users = source.admin.describe_user_scram_credentials(request_timeout=source.timeout).result()
    except ck.KafkaException:  # no SCRAM on the source
        return {}
    return {u: ", ".join(f"{i.mechanism.name.replace('_', '-')}: {i.iterations} iterations"
                         for i in d.scram_credential_infos) for u, d in users.items()}


def list_scram_users(source: Side) -> None:
    users = scram_users(source)
    if users:
        print("SCRAM users to re-create on the target: "
              + "; ".join(f"{u} ({m})" for u, m in sorted(users.items())))
        print(SCRAM_WHY)


# ----------------------------------------------------------------------------- verify
def digest_partition(side: Side, tp, start: int, end: int, committed: bool, compacted: bool) -> tuple[int, str]:
    h = hashlib.sha256()
    if compacted:
        live: dict = {}
        for m in side.read({tp: (start, end)}, committed=committed):
            if m.value() is None:
                live.pop(m.key(), None)
            else:
                live[m.key()] = m.value()
        items = sorted(live.items(), key=lambda kv: kv[0] or b"")
    else:
        items = [(m.key(), m.value()) for m in side.read({tp: (start, end)}, committed=committed)]
    for k, v in items:
        for part in (k, v):
            h.update(b"\xff" if part is None else len(part).to_bytes(4, "big") + part)
    return len(items), h.hexdigest()[:16]


def cmd_verify(source: Side, target: Side, args) -> None:
    topics = plan_topics(source, target)
    rows, bad = [], 0
    for t in topics:
        tps = [(t.name, p) for p in range(t.partitions)]
        slo, shi = source.offsets(tps, "earliest", True), source.offsets(tps, "latest", True)
        if t.target_partitions != t.partitions:
            rows.append([t.name, "-", "-", "-", "MISSING ON TARGET"])
            bad += 1
            continue
        tlo, thi = target.offsets(tps, "earliest", False), target.offsets(tps, "latest", False)
        for tp in tps:
            s = digest_partition(source, tp, slo[tp], shi[tp], True, t.compacted)
            d = digest_partition(target, tp, tlo[tp], thi[tp], False, t.compacted)
            ok = s == d
            bad += not ok
            rows.append([tp_str(*tp), s[0], d[0], s[1] if ok else f"{s[1]} != {d[1]}", "ok" if ok else "MISMATCH"])
    print_table(["PARTITION", "SOURCE", "TARGET", "DIGEST", "RESULT"], rows, [30, 8, 8, 36, 8])
    tr = translation(source, target)
    grows = []
    for g in source_groups(source):
        if g.kind == "consumer":
            src = committed_offsets(source.wire, g.group, source.wire.coordinator(g.group))
            dst = committed_offsets(target.wire, g.group, target.wire.coordinator(g.group))
        else:
            src = share_start_offsets(source, g.group)
            dst = share_start_offsets(target, g.group) if describe_share_group(target.wire, g.group).state != "Dead" else {}
        for tp, o in sorted(src.items()):
            want, got = tr(tp, o), dst.get(tp)
            ok = want == got
            bad += not ok
            grows.append([g.group, tp_str(*tp), o, want, "-" if got is None else got, "ok" if ok else "MISMATCH"])
    print()
    print_table(["GROUP", "PARTITION", "SOURCE", "TRANSLATED", "TARGET", "RESULT"], grows, [24, 24, 8, 10, 8, 8])
    if bad:
        eprint(f"verify: {bad} mismatch(es)")
        raise Failed()
    print("verify: source and target match")


# ----------------------------------------------------------------------------- main
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sharebroker-migrate",
                                description="Move a sharebroker's topics, records and groups onto a Kafka cluster.")
    sub = p.add_subparsers(dest="command", required=True)
    for name, text in (("plan", "show what would be created and copied; write nothing"),
                       ("sync", "create missing topics and copy new committed records (repeatable)"),
                       ("cutover", "move the positions and configs of the (empty) groups, and ACLs"),
                       ("verify", "compare counts and digests per partition and the groups' positions")):
        s = sub.add_parser(name, help=text, description=text)
        s.add_argument("--source", required=True, metavar="HOST:PORT", help="the sharebroker (bootstrap)")
        s.add_argument("--target", required=True, metavar="HOST:PORT[,...]", help="the Kafka cluster (bootstrap)")
        s.add_argument("--timeout", type=float, default=30.0, metavar="S", help="per-request time limit (s)")
        if name == "sync":
            s.add_argument("--replication-factor", type=int, default=-1,
                           help="of the topics created on the target (default: the target's default)")
            s.add_argument("--chunk", type=int, default=10000,
                           help="records per chunk: the offset map holds one boundary per chunk")
            s.add_argument("--max-records-per-second", type=float, default=0,
                           help="per partition, to spare a busy source (0: no limit)")
            s.add_argument("--progress-interval", type=float, default=10.0, metavar="S",
                           help="seconds between progress lines when the output is not a terminal "
                                "(on a terminal a live line per topic)")
    return p


COMMANDS = {"plan": cmd_plan, "sync": cmd_sync, "cutover": cmd_cutover, "verify": cmd_verify}


def main(argv=None) -> int:
    def command(args) -> None:
        source, target = Side(args.source, args.timeout), Side(args.target, args.timeout)
        try:
            COMMANDS[args.command](source, target, args)
        finally:
            source.close()
            target.close()

    return run(build_parser(), lambda args: None, command, argv)


if __name__ == "__main__":
    sys.exit(main())
