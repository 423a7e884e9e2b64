"""Differential conformance, behaviour level: the same scenario with real clients against the
reference Apache Kafka 4.4.0 and against sharebroker, outcomes compared.

Each scenario drives librdkafka (confluent-kafka's ``ShareConsumer``, ``Consumer``, ``Producer``), or
Kafka 4.4's own Java ``KafkaShareConsumer`` (java/ShareStory.java, compiled with ``javac`` against the
launcher's Maven classpath into its cache), through one story and returns what a user can observe:
the records each poll gave (offset, delivery count, key, value), what acknowledgements and commits
answered, the rebalance callbacks, errors and throttle times the client saw, and after each step the
answers of the admin APIs (DescribeShareGroupOffsets v1 with KIP-1226 lag, ShareGroupDescribe,
OffsetFetch, ConsumerGroupDescribe, DescribeGroups, OffsetDelete, DeleteGroups, DescribeConfigs,
Alter/DescribeClientQuotas, Create/Describe/DeleteAcls; sent with our codec, normalised by
``harness.plain``); a streams group
(KIP-1071) is driven over the wire as a Kafka Streams client drives it (``streams_group``).
Timings are not compared. Our deliberate improvements are turned to Kafka's behaviour on our side
(``share.fair.acquisition.enable=false``; redelivery backoff is 0 by default; the shorter heartbeat
interval while partitions are pending changes timings only). As in test_protocol.py, every remaining
difference must be listed in ``EXPECTED`` with its reason, and a listed one that went away fails too.
"""
from __future__ import annotations

import os
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import (OFFSET_BEGINNING, AcknowledgeType, Consumer, KafkaError, KafkaException, Producer,
                             ShareConsumer, TopicPartition)
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType, AdminClient,
                                  AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourcePatternType,
                                  ResourceType, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion)

from broker.configs import _DYNAMIC_BROKER_KEYS, kafka_configs
from broker.testing import BrokerProcess
from protocol.messages.alter_client_quotas import AlterClientQuotasRequest as QuotaAlter
from protocol.messages.alter_share_group_offsets import AlterShareGroupOffsetsRequest as AlterReq
from protocol.messages.consumer_group_describe import ConsumerGroupDescribeRequest
from protocol.messages.create_acls import CreateAclsRequest
from protocol.messages.delete_acls import DeleteAclsRequest
from protocol.messages.delete_share_group_offsets import DeleteShareGroupOffsetsRequest as DeleteReq
from protocol.messages.delete_groups import DeleteGroupsRequest
from protocol.messages.describe_acls import DescribeAclsRequest
from protocol.messages.describe_client_quotas import DescribeClientQuotasRequest as QuotaDescribe
from protocol.messages.describe_configs import DescribeConfigsRequest
from protocol.messages.describe_groups import DescribeGroupsRequest
from protocol.messages.describe_share_group_offsets import DescribeShareGroupOffsetsRequest as DescReq
from protocol.messages.metadata import MetadataRequest
from protocol.messages.offset_commit import OffsetCommitRequest
from protocol.messages.offset_delete import OffsetDeleteRequest
from protocol.messages.offset_fetch import OffsetFetchRequest
from protocol.messages.share_group_describe import ShareGroupDescribeRequest
from tests.differential.harness import assert_as_expected, differences, plain, run_on_both
from tests.kafka_ref.launcher import KafkaRef
from tests.reference import skip_without_kafka
from tests.support import until
from tests.wire import WireClient

# Both brokers accept acquisition locks down to 1 s (the launcher sets the same minimum on Kafka).
# (and the classic groups' initial rebalance delay of 0, which the launcher sets on Kafka too)
OURS_CONFIG = {"group.share.min.record.lock.duration.ms": "1000", "group.initial.rebalance.delay.ms": "0"}
LOCK_MS = 2000
# Our group configs that turn our improvements to Kafka's behaviour (Kafka refuses them: unknown keys)
OURS_GROUP_EXTRA = {"share.fair.acquisition.enable": "false"}
ACCEPT, RELEASE, REJECT = AcknowledgeType.ACCEPT, AcknowledgeType.RELEASE, AcknowledgeType.REJECT


@pytest.fixture(scope="module")
def ours_behaviour(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("differential-behaviour"), config=OURS_CONFIG) as b:
        yield b


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


class Side:
    """One broker under comparison (``label`` 'kafka' or 'ours'); ``names`` are shared by both sides."""

    def __init__(self, label: str, bootstrap: str, names: dict, scram: str | None = None):
        self.label, self.bootstrap, self.names = label, bootstrap, names
        self.scram = scram  # a SASL_PLAINTEXT (SCRAM) listener's address, for acl_decisions
        self.admin = AdminClient({"bootstrap.servers": bootstrap})
        self._wire: WireClient | None = None

    @property
    def wire(self) -> WireClient:
        if self._wire is None:
            self._wire = WireClient(self.bootstrap, client_id="differential-behaviour")
        return self._wire

    def close(self) -> None:
        if self._wire is not None:
            self._wire.close()

    def create_topic(self, name: str, partitions: int = 1, config: dict[str, str] | None = None) -> None:
        self.admin.create_topics([NewTopic(name, partitions, 1, config=config or {})])[name].result(30)

        def led():
            md = self.wire.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=name)],
                                                   allow_auto_topic_creation=False), 12).topics[0]
            return md.error_code == 0 and md.partitions and all(p.leader_id >= 0 for p in md.partitions)
        until(led, 30, f"topic {name} on {self.label}", 0.05)

    def group_configs(self, group: str, configs: dict[str, str]) -> None:
        if self.label == "ours":
            configs = {**configs, **OURS_GROUP_EXTRA}
        res = ConfigResource(ConfigResource.Type.GROUP, group, incremental_configs=[
            ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()])
        self.admin.incremental_alter_configs([res])[res].result(30)

    def produce(self, topic: str, n: int, start: int = 0) -> None:
        """``n`` records in one batch (values ``v<i>``)."""
        p = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 200})
        for i in range(start, start + n):
            p.produce(topic, key=b"k%d" % i, value=b"v%d" % i, partition=0)
        assert p.flush(30) == 0

    def share_offsets(self, group: str) -> dict:
        g = self.wire.request(DescReq(groups=[DescReq.DescribeShareGroupOffsetsRequestGroup(group_id=group)]), 1)
        return plain(g.groups[0])

    def share_describe(self, group: str) -> dict:
        g = plain(self.wire.request(ShareGroupDescribeRequest(group_ids=[group]), 1).groups[0])
        for m in g.get("members") or []:
            m["client_host"] = "<client-host>"  # Kafka's '/127.0.0.1', ours the same without the slash
        return g


def _records(msgs) -> list:
    return [(m.offset(), m.delivery_count(), m.value().decode()) for m in msgs]


def _poll_until(c, n: int, timeout: float, on_record=None) -> list:
    got: list = []
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        for m in c.poll(0.2) or []:
            assert m.error() is None, m.error()
            got.append(m)
            if on_record:
                on_record(m)
    return sorted(got, key=lambda m: m.offset())


def _settle(fn, done, timeout: float = 20.0):
    """``fn()`` until ``done(value)`` or the deadline; returns the last value either way (the
    comparison then shows where the brokers differ)."""
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if done(value) or time.monotonic() > deadline:
            return value
        time.sleep(0.1)


def _share_consumer(s: Side, group: str, topic: str) -> ShareConsumer:
    c = ShareConsumer({"bootstrap.servers": s.bootstrap, "group.id": group, "share.acknowledgement.mode": "explicit"})
    c.subscribe([topic])
    return c


def _all_assigned(g: dict) -> bool:
    return bool(g["members"]) and all(m["assignment"]["topic_partitions"] for m in g["members"])


def _lag(offsets: dict) -> list:
    return [(p["partition_index"], p["start_offset"], p["lag"]) for t in offsets.get("topics") or []
            for p in t["partitions"]]


def _commit(c) -> dict:
    """commit_sync's answer per partition: None, or the error's name."""
    return {tp.partition: (None if e is None else e.args[0].name()) for tp, e in (c.commit_sync(30) or {}).items()}


# ------------------------------------------------------------------------------------ scenarios

def _share_story_setup(s: Side, lock_ms: int = LOCK_MS) -> tuple[str, str]:
    """A topic with ten records in one batch and a share group reading it from the earliest offset,
    with ``lock_ms`` locks (2 s) and a delivery-count limit of 2; returns (topic, group)."""
    topic, group = s.names["topic"], s.names["group"]
    s.create_topic(topic)
    s.group_configs(group, {"share.auto.offset.reset": "earliest", "share.record.lock.duration.ms": str(lock_ms),
                            "share.delivery.count.limit": "2"})
    s.produce(topic, 10)
    return topic, group


def share_group_life(s: Side) -> dict:
    """Ten records in one batch; ShareConsumer ``a`` in explicit mode: ACCEPT 0-3, RELEASE 4-5, REJECT 6-7,
    nothing for 8-9 (``a`` polls no more: their 2 s locks expire); a second member ``b`` gets 4, 5 and 8, 9
    at delivery count 2 = the group's limit: RELEASE 4 and 8 (archived at the limit), ACCEPT 5 and 9.
    Lag after each step; describe; then, with the group empty, AlterShareGroupOffsets to 3 and a new
    consumer reads 3-9 again; DeleteShareGroupOffsets."""
    topic, group = _share_story_setup(s)
    out: dict = {"offsets_before_join": s.share_offsets(group)}

    a = _share_consumer(s, group, topic)
    b = None
    try:
        first = _poll_until(a, 10, 60)
        out["acquired"] = _records(first)
        out["offsets_acquired"] = s.share_offsets(group)
        out["describe_one_member"] = _settle(lambda: s.share_describe(group), _all_assigned)
        for m in first:  # 8, 9 unacknowledged: their locks expire while ``a`` polls no more
            ack = {0: ACCEPT, 1: ACCEPT, 2: ACCEPT, 3: ACCEPT, 4: RELEASE, 5: RELEASE, 6: REJECT, 7: REJECT}
            if m.offset() in ack:
                a.acknowledge(m, ack[m.offset()])
        out["commit_acks"] = _commit(a)
        out["offsets_after_acks"] = s.share_offsets(group)

        b = _share_consumer(s, group, topic)
        second_acks = {4: RELEASE, 5: ACCEPT, 8: RELEASE, 9: ACCEPT}  # 4 and 8 reach the limit (2): archived
        second = _poll_until(b, 4, 60, lambda m: b.acknowledge(m, second_acks[m.offset()]))
        out["redelivered"] = _records(second)
        out["commit_second"] = _commit(b)
        out["offsets_end"] = _settle(lambda: s.share_offsets(group), lambda o: _lag(o) == [(0, 10, 0)])
        out["describe_two_members"] = _settle(lambda: s.share_describe(group), _all_assigned)
        out["describe_two_members"]["members"].sort(key=lambda m: m["member_epoch"])
    finally:
        a.close()
        if b is not None:
            b.close()
    out["describe_empty"] = _settle(lambda: s.share_describe(group), lambda g: g["group_state"] == "Empty")

    alter = AlterReq(group_id=group, topics=[AlterReq.AlterShareGroupOffsetsRequestTopic(topic_name=topic, partitions=[
        AlterReq.AlterShareGroupOffsetsRequestPartition(partition_index=0, start_offset=3)])])
    out["alter"] = plain(s.wire.request(alter, 0))
    out["offsets_altered"] = s.share_offsets(group)
    c2 = _share_consumer(s, group, topic)
    try:
        again = _poll_until(c2, 7, 60, lambda m: c2.acknowledge(m, ACCEPT))
        out["after_alter"] = _records(again)
        out["commit_after_alter"] = _commit(c2)
        out["offsets_after_alter"] = s.share_offsets(group)
    finally:
        c2.close()
    _settle(lambda: s.share_describe(group), lambda g: g["group_state"] == "Empty")
    delete = DeleteReq(group_id=group, topics=[DeleteReq.DeleteShareGroupOffsetsRequestTopic(topic_name=topic)])
    out["delete"] = plain(s.wire.request(delete, 0))
    out["offsets_deleted"] = s.share_offsets(group)
    return out


def share_offsets_unacknowledged(s: Side) -> dict:
    """What ``kafka-share-groups --describe --offsets`` and ``--state`` show (issue 35): a two-partition
    topic, five records on partition 0 only, one explicit-mode ShareConsumer accepts them all; then
    DescribeShareGroupOffsets of every partition (partition 1 never had a record, so none acknowledged)
    and ShareGroupDescribe once the consumer left."""
    topic, group = s.names["topic"], s.names["group"]
    s.create_topic(topic, partitions=2)
    s.group_configs(group, {"share.auto.offset.reset": "earliest"})
    s.produce(topic, 5)
    every = DescReq.DescribeShareGroupOffsetsRequestGroup(group_id=group)
    every.topics = None  # every initialized partition (the constructor turns None into [])
    c = _share_consumer(s, group, topic)
    try:
        out: dict = {"acquired": _records(_poll_until(c, 5, 60, lambda m: c.acknowledge(m, ACCEPT)))}
        out["commit"] = _commit(c)
        out["offsets"] = _settle(lambda: plain(s.wire.request(DescReq(groups=[every]), 1).groups[0]),
                                 lambda o: o["topics"] and len(o["topics"][0]["partitions"]) == 2
                                 and o["topics"][0]["partitions"][0]["lag"] == 0)
    finally:
        c.close()
    out["describe_empty"] = _settle(lambda: s.share_describe(group), lambda g: g["group_state"] == "Empty")
    return out


def consumer_group(s: Side) -> dict:
    """KIP-848 (``group.protocol=consumer``): consume ten records, commit after the seventh, close;
    OffsetFetch and ConsumerGroupDescribe while it is a member and after it left."""
    n = s.names
    topic, group = n["topic"], n["group"]
    s.create_topic(topic)
    s.produce(topic, 10)
    c = Consumer({"bootstrap.servers": s.bootstrap, "group.id": group, "group.protocol": "consumer",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    out: dict = {}
    try:
        c.subscribe([topic])
        got = []
        deadline = time.monotonic() + 60
        while len(got) < 10 and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None:
                assert m.error() is None, m.error()
                got.append(m)
        out["consumed"] = [(m.partition(), m.offset(), m.value().decode()) for m in got]
        committed = c.commit(message=got[6], asynchronous=False)
        out["commit"] = [(tp.partition, tp.offset, tp.error) for tp in committed]
        out["committed"] = [(tp.partition, tp.offset) for tp in c.committed([TopicPartition(topic, 0)], 30)]
        d = plain(s.wire.request(ConsumerGroupDescribeRequest(group_ids=[group]), 1).groups[0])
        for m in d.get("members") or []:
            m["client_host"], m["client_id"] = "<client-host>", "<client-id>"
        out["describe_member"] = d
    finally:
        c.close()
    out["describe_left"] = _settle(
        lambda: plain(s.wire.request(ConsumerGroupDescribeRequest(group_ids=[group]), 1).groups[0]),
        lambda g: g["group_state"] == "Empty")
    out["offset_fetch"] = plain(s.wire.request(OffsetFetchRequest(groups=[OffsetFetchRequest.OffsetFetchRequestGroup(
        group_id=group, topics=None)]), 9))
    return out


def _describe_groups(s: Side, group: str) -> dict:
    """DescribeGroups v5 of ``group``: members sorted by instance id, client host normalised."""
    g = plain(s.wire.request(DescribeGroupsRequest(groups=[group], include_authorized_operations=False), 5).groups[0])
    for m in g.get("members") or []:
        m["client_host"] = "<client-host>"  # Kafka's '/127.0.0.1', ours the same without the slash
    g["members"] = sorted(g.get("members") or [], key=lambda m: (m["group_instance_id"] or "", m["client_id"]))
    return g


class _ClassicMember:
    """A librdkafka consumer in a classic group (range assignor) that records its rebalance callbacks
    and the errors it is told."""

    def __init__(self, s: Side, topic: str, group: str, label: str, instance: str | None):
        self.label, self.events, self.errors = label, [], []
        conf = {"bootstrap.servers": s.bootstrap, "group.id": group, "group.protocol": "classic",
                "client.id": label, "session.timeout.ms": 10000, "heartbeat.interval.ms": 300,
                "partition.assignment.strategy": "range", "enable.auto.commit": False,
                "error_cb": lambda e: self.errors.append((e.name(), e.fatal(), e.str()))}
        if instance:
            conf["group.instance.id"] = instance
        self.consumer = Consumer(conf)
        self.consumer.subscribe([topic], on_assign=lambda c, ps: self._event("assign", ps),
                                on_revoke=lambda c, ps: self._event("revoke", ps))
        self.assigned: list = []

    def _event(self, kind: str, partitions) -> None:
        parts = sorted(p.partition for p in partitions)
        self.events.append((kind, parts))
        self.assigned = parts if kind == "assign" else []

    def poll(self) -> None:
        m = self.consumer.poll(0.05)
        if m is not None and m.error():
            self.errors.append((m.error().name(), m.error().fatal(), m.error().str()))


def _poll_members(members, done, timeout: float = 30.0) -> None:
    """Poll each of ``members`` in turn until ``done()`` or the deadline (the comparison then shows it)."""
    deadline = time.monotonic() + timeout
    while not done() and time.monotonic() < deadline:
        for m in members:
            m.poll()


def classic_group(s: Side) -> dict:
    """A classic group (librdkafka, ``group.protocol=classic``, range assignor, static members) on a
    two-partition topic: ``a`` (instance ``ia``) joins alone; ``b`` (instance ``ib``) joins, an eager
    rebalance; ``a`` closes (a static member sends no LeaveGroup) and ``a2`` with ``ia`` comes back
    within the session timeout: it is given ``a``'s partitions and ``b`` sees no rebalance; ``a3``
    with ``ia`` joins while ``a2`` is a member: ``a2`` is fenced (FENCED_INSTANCE_ID, fatal for
    librdkafka). The callbacks each member saw and DescribeGroups after each step."""
    topic, group = s.names["topic"], s.names["group"]
    s.create_topic(topic, 2)
    out: dict = {}
    a = _ClassicMember(s, topic, group, "a", "ia")
    b = a2 = a3 = None
    try:
        _poll_members([a], lambda: a.assigned == [0, 1])
        out["describe_one"] = _settle(lambda: _describe_groups(s, group), lambda g: g["group_state"] == "Stable")
        b = _ClassicMember(s, topic, group, "b", "ib")
        _poll_members([a, b], lambda: sorted(a.assigned + b.assigned) == [0, 1] and b.assigned)
        out["describe_two"] = _settle(lambda: _describe_groups(s, group),
                                      lambda g: g["group_state"] == "Stable" and len(g["members"]) == 2)
        a.consumer.close()
        out["a_events"], out["a_errors"] = a.events, a.errors
        out["describe_a_closed"] = _describe_groups(s, group)  # ``a`` is still a member until its session ends
        a2 = _ClassicMember(s, topic, group, "a2", "ia")
        _poll_members([a2, b], lambda: bool(a2.assigned))
        out["a2_assigned"] = a2.assigned
        out["describe_a2"] = _settle(lambda: _describe_groups(s, group), lambda g: g["group_state"] == "Stable")
        a3 = _ClassicMember(s, topic, group, "a3", "ia")
        _poll_members([a2, a3, b], lambda: bool(a2.errors) and bool(a3.assigned))
        out["a2_events"], out["a2_errors"] = a2.events, a2.errors
        out["a3_events"], out["a3_errors"] = a3.events, a3.errors
        out["b_events"], out["b_errors"] = b.events, b.errors
        out["describe_a3"] = _settle(lambda: _describe_groups(s, group), lambda g: g["group_state"] == "Stable")
    finally:
        for m in (a2, a3, b):
            if m is not None:
                m.consumer.close()
    return out


def _to_end(c: Consumer, timeout: float = 30.0) -> list:
    """The messages an assigned consumer (``enable.partition.eof``) polls until the end of its partition."""
    got = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        m = c.poll(0.2)
        if m is None:
            continue
        if m.error():
            assert m.error().code() == KafkaError._PARTITION_EOF, m.error()
            break
        got.append(m)
    return got


def _read_all(s: Side, topic: str) -> list:
    """Every record of ``topic``-0 from the beginning to its end: (offset, key, value or None)."""
    c = Consumer({"bootstrap.servers": s.bootstrap, "group.id": s.names["group"], "enable.partition.eof": True,
                  "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        return [(m.offset(), m.key().decode(), None if m.value() is None else m.value().decode()) for m in _to_end(c)]
    finally:
        c.close()


def compacted_topic(s: Side) -> dict:
    """A ``cleanup.policy=compact`` topic (``segment.ms`` 500, ``min.cleanable.dirty.ratio`` 0.01,
    ``delete.retention.ms`` at its default of a day) gets one batch: ``k0``-``k9``, then new values for
    ``k0``-``k4`` and tombstones for ``k5``-``k7``. A ``tick`` record is produced until a read from the
    beginning shows the batch cleaned (each tick after 500 ms rolls the segment, so the batch's segment
    becomes cleanable; the cleaner looks every ``log.cleaner.backoff.ms``, 15 s on both). What a
    consumer then reads (offset, key, value; ticks left out: how many the cleaner kept depends on
    timing), and the watermarks."""
    topic = s.names["topic"]
    s.create_topic(topic, config={"cleanup.policy": "compact", "segment.ms": "500",
                                  "min.cleanable.dirty.ratio": "0.01", "min.compaction.lag.ms": "0"})
    p = Producer({"bootstrap.servers": s.bootstrap, "linger.ms": 200})
    for i in range(10):
        p.produce(topic, key=b"k%d" % i, value=b"a%d" % i, partition=0)
    for i in range(5):
        p.produce(topic, key=b"k%d" % i, value=b"b%d" % i, partition=0)
    for i in range(5, 8):
        p.produce(topic, key=b"k%d" % i, value=None, partition=0)
    assert p.flush(30) == 0
    out: dict = {"before_cleaning": _read_all(s, topic)}

    def tick_and_read() -> list:
        p.produce(topic, key=b"tick", value=b"t", partition=0)
        assert p.flush(30) == 0
        return [r for r in _read_all(s, topic) if r[1] != "tick"]
    out["after_cleaning"] = _settle(tick_and_read, lambda rs: len(rs) < 18, timeout=60)
    c = Consumer({"bootstrap.servers": s.bootstrap, "group.id": s.names["group"]})
    try:
        out["low_watermark"] = c.get_watermark_offsets(TopicPartition(topic, 0), 10)[0]
    finally:
        c.close()
    return out


def _alter_quotas(s: Side, client: str, ops: dict, validate_only: bool = False) -> dict:
    """AlterClientQuotas v1 for the client id ``client``: {key: value, or None to remove it}."""
    req = QuotaAlter(validate_only=validate_only, entries=[QuotaAlter.EntryData(
        entity=[QuotaAlter.EntityData(entity_type="client-id", entity_name=client)],
        ops=[QuotaAlter.OpData(key=k, value=v or 0.0, remove=v is None) for k, v in ops.items()])])
    return plain(s.wire.request(req, 1))


def _describe_quotas(s: Side, client: str) -> dict:
    """DescribeClientQuotas v1 of exactly the client id ``client`` (match type EXACT)."""
    req = QuotaDescribe(components=[QuotaDescribe.ComponentData(entity_type="client-id", match_type=0, match=client)])
    d = plain(s.wire.request(req, 1))
    for entry in d["entries"] or []:
        entry["values"].sort(key=lambda v: v["key"])
    return d


def _magnitude(ms: int) -> str:
    """A throttle time as what the comparison keeps: zero, or its order of magnitude."""
    return "0" if ms <= 0 else f"~1e{len(str(int(ms))) - 1} ms"


def client_quotas(s: Side) -> dict:
    """AlterClientQuotas / DescribeClientQuotas for a client id (validate-only, set, an unknown key, a
    negative rate, remove); a librdkafka producer of that client id sends 50 KB while its
    ``producer_byte_rate`` is 1024: the throttle time its ProduceResponse carries (librdkafka's
    ``throttle_cb``), compared as present and its order of magnitude (Kafka's formula
    ``(rate - quota) / quota x window``, the window 10-11 s for a new client: some tens of seconds)."""
    client = s.names["client"]
    topic = s.names["topic"]
    s.create_topic(topic)
    out: dict = {"validate_only": _alter_quotas(s, client, {"producer_byte_rate": 1024.0}, validate_only=True),
                 "described_after_validate_only": _describe_quotas(s, client),
                 "unknown_key": _alter_quotas(s, client, {"no_such_rate": 10.0}),
                 "negative": _alter_quotas(s, client, {"producer_byte_rate": -5.0}),
                 "set": _alter_quotas(s, client, {"producer_byte_rate": 1024.0, "consumer_byte_rate": 2048.0})}
    # Kafka's broker learns the quota from the controller's metadata log a moment after the change
    out["described"] = _settle(lambda: _describe_quotas(s, client), lambda d: bool(d["entries"]))
    throttles: list = []
    p = Producer({"bootstrap.servers": s.bootstrap, "client.id": client, "linger.ms": 100,
                  "throttle_cb": lambda ev: throttles.append(int(ev.throttle_time * 1000))})
    try:
        for i in range(50):
            p.produce(topic, value=b"x" * 1000, partition=0)
        assert p.flush(30) == 0
        deadline = time.monotonic() + 10
        while not [t for t in throttles if t > 0] and time.monotonic() < deadline:
            p.poll(0.1)
    finally:
        # librdkafka would hold the next request back for the throttle time: nothing more is sent
        del p
    print(f"{s.label}: throttle times {throttles} ms")  # shown by pytest -s / on failure
    out["throttled"] = sorted({_magnitude(t) for t in throttles if t > 0})
    out["remove"] = _alter_quotas(s, client, {"producer_byte_rate": None, "consumer_byte_rate": None})
    out["described_removed"] = _settle(lambda: _describe_quotas(s, client), lambda d: not d["entries"])
    return out


def acls_without_authorizer(s: Side) -> dict:
    """CreateAcls, DescribeAcls and DeleteAcls v3 on a broker without an authorizer (the shared
    reference Kafka has none): the answers (SECURITY_DISABLED), for a valid ACL, an invalid one
    (resource type ANY) and filters; and what librdkafka's AdminClient reports."""
    topic = s.names["topic"]
    creation = CreateAclsRequest.AclCreation(resource_type=2, resource_name=topic, resource_pattern_type=3,
                                             principal="User:alice", host="*", operation=3, permission_type=3)
    invalid = CreateAclsRequest.AclCreation(resource_type=1, resource_name=topic, resource_pattern_type=3,
                                            principal="User:alice", host="*", operation=3, permission_type=3)
    acl_filter = {"resource_type_filter": 2, "resource_name_filter": topic, "pattern_type_filter": 1,
                  "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1}
    out = {"create": plain(s.wire.request(CreateAclsRequest(creations=[creation, invalid]), 3)),
           "describe": plain(s.wire.request(DescribeAclsRequest(**acl_filter), 3)),
           "delete": plain(s.wire.request(DeleteAclsRequest(filters=[DeleteAclsRequest.DeleteAclsFilter(
               **acl_filter)]), 3))}
    binding = AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:alice", "*",
                         AclOperation.READ, AclPermissionType.ALLOW)
    try:
        s.admin.create_acls([binding])[binding].result(30)
        out["admin_create"] = "ok"
    except KafkaException as e:
        out["admin_create"] = e.args[0].name()
    try:
        out["admin_describe"] = len(s.admin.describe_acls(AclBindingFilter(
            ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
            AclPermissionType.ANY)).result(30))
    except KafkaException as e:
        out["admin_describe"] = e.args[0].name()
    return out


def _offset_fetch(s: Side, group: str) -> dict:
    """OffsetFetch v9 of every committed offset of ``group`` (a null topic list)."""
    g = OffsetFetchRequest.OffsetFetchRequestGroup(group_id=group)
    g.topics = None  # the constructor turns None into []: no topic
    return plain(s.wire.request(OffsetFetchRequest(groups=[g]), 9))


def _offset_delete(s: Side, group: str, topic: str, partitions: list[int]) -> dict:
    req = OffsetDeleteRequest(group_id=group, topics=[OffsetDeleteRequest.OffsetDeleteRequestTopic(
        name=topic, partitions=[OffsetDeleteRequest.OffsetDeleteRequestPartition(partition_index=p)
                                for p in partitions])])
    return plain(s.wire.request(req, 0))


def offset_expiration(s: Side) -> dict:
    """KIP-211, as far as the shared reference allows: its ``offsets.retention.minutes`` (7 days) and
    ``offsets.retention.check.interval.ms`` (10 min) are static in Kafka 4.4 and the reference is not
    restarted for one test, so expiry itself is not watched here (tests/integration covers ours).
    Compared: DescribeConfigs of both settings; a classic group commits offsets for two partitions,
    OffsetDelete while its member is subscribed (GROUP_SUBSCRIBED_TO_TOPIC); the member leaves, the
    group is Empty and keeps its offsets (the retention counts from then); OffsetDelete of one
    partition; a standalone OffsetCommit v2 asking for a 1 ms retention (kept until the next expiry
    check); DeleteGroups; OffsetFetch after each step."""
    topic, group = s.names["topic"], s.names["group"]
    s.create_topic(topic, 2)
    node = s.wire.request(MetadataRequest(topics=[], allow_auto_topic_creation=False), 12).brokers[0].node_id
    keys = ["offsets.retention.minutes", "offsets.retention.check.interval.ms"]
    res = s.wire.request(DescribeConfigsRequest(resources=[DescribeConfigsRequest.DescribeConfigsResource(
        resource_type=4, resource_name=str(node), configuration_keys=keys)], include_synonyms=True), 4).results[0]
    out: dict = {"configs": {c.name: plain(c) for c in res.configs}}
    c = Consumer({"bootstrap.servers": s.bootstrap, "group.id": group, "group.protocol": "classic",
                  "enable.auto.commit": False, "heartbeat.interval.ms": 300})
    try:
        assigned: list = []
        c.subscribe([topic], on_assign=lambda _c, ps: assigned.extend(ps))
        deadline = time.monotonic() + 30
        while not assigned and time.monotonic() < deadline:
            c.poll(0.1)
        c.commit(offsets=[TopicPartition(topic, 0, 5), TopicPartition(topic, 1, 7)], asynchronous=False)
        out["fetch_member"] = _offset_fetch(s, group)
        out["delete_subscribed"] = _offset_delete(s, group, topic, [0])
    finally:
        c.close()
    out["describe_empty"] = _settle(lambda: _describe_groups(s, group), lambda g: g["group_state"] == "Empty")
    out["fetch_empty"] = _offset_fetch(s, group)
    out["delete_empty"] = _offset_delete(s, group, topic, [0])
    out["fetch_after_delete"] = _offset_fetch(s, group)
    standalone = s.names["group"] + "-standalone"
    commit = OffsetCommitRequest(group_id=standalone, generation_id_or_member_epoch=-1, member_id="",
                                 retention_time_ms=1, topics=[OffsetCommitRequest.OffsetCommitRequestTopic(
                                     name=topic, partitions=[OffsetCommitRequest.OffsetCommitRequestPartition(
                                         partition_index=1, committed_offset=3, committed_metadata="m")])])
    out["commit_v2_retention_1ms"] = plain(s.wire.request(commit, 2))
    out["fetch_standalone"] = _offset_fetch(s, standalone)
    out["describe_standalone"] = _describe_groups(s, standalone)
    deleted = plain(s.wire.request(DeleteGroupsRequest(groups_names=[group, standalone]), 2))
    deleted["results"].sort(key=lambda r: r["group_id"])  # Kafka's come in no set order
    out["delete_groups"] = deleted
    out["fetch_deleted"] = _offset_fetch(s, group)
    out["describe_deleted"] = _describe_groups(s, group)
    return out


# ACL decisions need an authorizer on both sides, which the shared reference has not: the
# ``acl_brokers`` fixture starts a Kafka 4.4 and a sharebroker with StandardAuthorizer for this one
# scenario. PLAINTEXT clients (User:ANONYMOUS) are super users; alice logs in with SCRAM-SHA-256.
AUTHORIZER = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
              "super.users": "User:ANONYMOUS"}
ALICE = "User:alice"


def _alice(s: Side) -> dict:
    return {"bootstrap.servers": s.scram, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.username": "alice", "sasl.password": "alice-secret"}


def _alice_produce(s: Side, topic: str) -> str:
    """One record from alice: 'ok' at offset N, or the delivery error's name."""
    result: list = []
    p = Producer({**_alice(s), "message.timeout.ms": 10000, "retries": 0})
    p.produce(topic, value=b"from alice", partition=0, on_delivery=lambda err, m: result.append(
        err.name() if err else f"ok at {m.offset()}"))
    p.flush(15)
    return result[0] if result else "no answer"


def _alice_consume(s: Side, topic: str, group: str) -> str:
    """alice subscribes ``group`` to ``topic``: the first record's value or the first error's name."""
    c = Consumer({**_alice(s), "group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None:
                return m.error().name() if m.error() else m.value().decode()
        return "nothing"
    finally:
        c.close()


def _alice_sees(s: Side, topic: str) -> bool:
    return topic in AdminClient(_alice(s)).list_topics(timeout=15).topics


def _acls(s: Side, **flt) -> dict:
    """DescribeAcls v3 (defaults: every ACL of alice), resources and ACLs sorted."""
    base = {"resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
            "principal_filter": ALICE, "host_filter": None, "operation": 1, "permission_type": 1}
    d = plain(s.wire.request(DescribeAclsRequest(**{**base, **flt}), 3))
    d["resources"].sort(key=lambda r: (r["resource_type"], r["resource_name"], r["pattern_type"]))
    for r in d["resources"]:
        r["acls"].sort(key=lambda a: (a["operation"], a["permission_type"]))
    return d


def _acl(s: Side, rtype, name: str, op, permission=AclPermissionType.ALLOW,
         pattern=ResourcePatternType.LITERAL) -> None:
    b = AclBinding(rtype, name, pattern, ALICE, "*", op, permission)
    s.admin.create_acls([b])[b].result(30)


def acl_decisions(s: Side) -> dict:
    """StandardAuthorizer on both brokers: alice (SCRAM) with no ACL cannot see, write or read a
    topic; ALLOW WRITE on it (literal) lets her produce and see it; ALLOW READ on it without a group
    ACL: GROUP_AUTHORIZATION_FAILED; ALLOW READ on the group's prefix: she reads; a DENY WRITE wins over
    the ALLOW; DescribeAcls of her ACLs; DeleteAcls of the topic's (the matching ACLs it answers);
    her produce refused again. Each decision is waited for (Kafka applies an ACL when the
    controller's metadata log reaches its broker) and the answer compared."""
    topic, group = s.names["topic"], s.names["group"]
    s.create_topic(topic)
    up = UserScramCredentialUpsertion("alice", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192),
                                      b"alice-secret")
    s.admin.alter_user_scram_credentials([up])["alice"].result(30)
    out: dict = {"sees_without_acl": _settle(lambda: _alice_sees(s, topic), lambda v: v is False)}
    out["produce_without_acl"] = _alice_produce(s, topic)
    _acl(s, ResourceType.TOPIC, topic, AclOperation.WRITE)
    out["produce_allowed"] = _settle(lambda: _alice_produce(s, topic), lambda r: r.startswith("ok"))
    out["sees_with_write"] = _alice_sees(s, topic)
    _acl(s, ResourceType.TOPIC, topic, AclOperation.READ)
    out["consume_without_group_acl"] = _alice_consume(s, topic, group)
    _acl(s, ResourceType.GROUP, group[:6], AclOperation.READ, pattern=ResourcePatternType.PREFIXED)
    out["consume_with_group_prefix"] = _settle(lambda: _alice_consume(s, topic, group), lambda r: r == "from alice")
    _acl(s, ResourceType.TOPIC, topic, AclOperation.WRITE, permission=AclPermissionType.DENY)
    out["produce_denied"] = _settle(lambda: _alice_produce(s, topic), lambda r: not r.startswith("ok"))
    out["describe"] = _acls(s)
    out["describe_topic_filter"] = _acls(s, resource_type_filter=2, resource_name_filter=topic, pattern_type_filter=3,
                                         principal_filter=None)
    delete = DeleteAclsRequest(filters=[DeleteAclsRequest.DeleteAclsFilter(
        resource_type_filter=2, resource_name_filter=topic, pattern_type_filter=3, principal_filter=None,
        host_filter=None, operation=1, permission_type=1)])
    deleted = plain(s.wire.request(delete, 3))
    for f in deleted["filter_results"]:
        f["matching_acls"].sort(key=lambda a: (a["operation"], a["permission_type"]))
    out["delete"] = deleted
    out["describe_after_delete"] = _acls(s)
    out["produce_after_delete"] = _settle(lambda: _alice_produce(s, topic), lambda r: not r.startswith("ok"))
    return out


def transactions(s: Side) -> dict:
    """A transactional producer commits 5 records, aborts 3, commits 2; what read_committed and
    read_uncommitted consumers read (offsets include the control records' places) and the watermarks."""
    n = s.names
    topic = n["topic"]
    s.create_topic(topic)
    p = Producer({"bootstrap.servers": s.bootstrap, "transactional.id": n["txn"], "linger.ms": 50})
    p.init_transactions(60)
    value = iter(range(100))
    for count, commit in ((5, True), (3, False), (2, True)):
        p.begin_transaction()
        for _ in range(count):
            p.produce(topic, value=b"v%d" % next(value), partition=0)
        p.flush(30)
        (p.commit_transaction if commit else p.abort_transaction)(30)
    out: dict = {}
    for isolation in ("read_committed", "read_uncommitted"):
        c = Consumer({"bootstrap.servers": s.bootstrap, "group.id": n["group"] + isolation,
                      "isolation.level": isolation, "enable.partition.eof": True, "auto.offset.reset": "earliest"})
        try:
            c.assign([TopicPartition(topic, 0, 0)])
            out[isolation] = [(m.offset(), m.value().decode()) for m in _to_end(c)]
            out[f"{isolation}_watermarks"] = c.get_watermark_offsets(TopicPartition(topic, 0), 10)
        finally:
            c.close()
    return out


def describe_configs(s: Side) -> dict:
    """DescribeConfigs v4 of a share group (two configs set) and of the broker: per name its value,
    source, read-only and sensitive flags and type; values naming this machine (listeners, log.dirs) are
    normalised (see ``_broker_names_kafka_only`` for the names only Kafka lists)."""
    n = s.names
    group = n["group"]
    s.group_configs(group, {"share.record.lock.duration.ms": "20000", "share.auto.offset.reset": "earliest"})
    node = s.wire.request(MetadataRequest(topics=[], allow_auto_topic_creation=False), 12).brokers[0].node_id

    def describe(rtype: int, rname: str) -> dict:
        r = s.wire.request(DescribeConfigsRequest(resources=[DescribeConfigsRequest.DescribeConfigsResource(
            resource_type=rtype, resource_name=rname, configuration_keys=None)], include_synonyms=False), 4)
        res = r.results[0]
        assert res.error_code == 0, res
        return {c.name: {"value": c.value, "source": c.config_source, "read_only": c.read_only,
                         "sensitive": c.is_sensitive, "type": c.config_type} for c in res.configs}

    # Kafka's broker learns a group config from the controller's metadata log a moment after the change
    out = {"group": _settle(lambda: describe(32, group),
                            lambda g: g["share.record.lock.duration.ms"]["value"] == "20000")}
    broker = describe(4, str(node))
    for name in ("listeners", "log.dirs"):
        broker[name]["value"] = "<this machine>"
    out["broker"] = broker
    return out


def streams_group(s: Side) -> dict:
    """KIP-1071 streams group driven over the wire as a Kafka Streams client would (a word count's two
    subtopologies, the second stateful): one member joins before the rest, then a second on another process
    with ``streams.num.standby.replicas`` 1, then the first leaves. After each step the members heartbeat
    (reporting what they own) until the group is Stable; compared: StreamsGroupDescribe (members by process),
    the internal topics' partition counts and cleanup policy, ListGroups."""
    from protocol.messages.find_coordinator import FindCoordinatorRequest
    from protocol.messages.list_groups import ListGroupsRequest
    from protocol.messages.streams_group_describe import StreamsGroupDescribeRequest
    from protocol.messages.streams_group_heartbeat import StreamsGroupHeartbeatRequest as H

    n = s.names
    topic, app = n["topic"], n["group"]
    rep, changelog = f"{app}-counts-repartition", f"{app}-counts-changelog"
    s.create_topic(topic, 2)
    s.group_configs(app, {"streams.num.standby.replicas": "1"})
    topology = H.Topology(epoch=1, subtopologies=[
        H.Subtopology(subtopology_id="0", source_topics=[topic], repartition_sink_topics=[rep]),
        H.Subtopology(subtopology_id="1", state_changelog_topics=[H.TopicInfo(name=changelog, topic_configs=[
            H.KeyValue(key="cleanup.policy", value="compact")])], repartition_source_topics=[H.TopicInfo(
                name=rep, topic_configs=[H.KeyValue(key="cleanup.policy", value="delete")])])])
    members: dict[str, dict] = {}  # process -> {"id", "epoch", "owned"}

    def heartbeat(process: str, join: bool = False):
        m = members[process]
        if join:
            req = H(group_id=app, member_id=m["id"], member_epoch=0, rebalance_timeout_ms=60000, topology=topology,
                    active_tasks=[], standby_tasks=[], warmup_tasks=[], process_id=process, client_tags=[],
                    user_endpoint=H.Endpoint(host=process, port=9000))
        else:
            req = H(group_id=app, member_id=m["id"], member_epoch=m["epoch"], active_tasks=m["owned"][0],
                    standby_tasks=m["owned"][1], warmup_tasks=m["owned"][2])
        r = s.wire.request(req, 1)
        assert r.error_code == 0, (s.label, r)
        m["epoch"] = r.member_epoch
        if r.active_tasks is not None:
            m["owned"] = [[H.TaskIds(subtopology_id=t.subtopology_id, partitions=list(t.partitions)) for t in kind]
                          for kind in (r.active_tasks, r.standby_tasks, r.warmup_tasks)]
        return r

    def describe():
        g = plain(s.wire.request(StreamsGroupDescribeRequest(group_ids=[app]), 1).groups[0])
        for m in g.get("members") or []:
            m["client_host"], m["client_id"] = "<client-host>", "<client-id>"
        g["members"] = sorted(g.get("members") or [], key=lambda m: m["process_id"])
        return g

    def settle():
        def step():
            for process in list(members):
                heartbeat(process)
            return describe()
        return _settle(step, lambda g: g["group_state"] == "Stable" and all(
            m["assignment"] == m["target_assignment"] for m in g["members"]), 60)

    # Kafka creates and loads __consumer_offsets on the first FindCoordinator (NOT_COORDINATOR until then)
    until(lambda: s.wire.request(FindCoordinatorRequest(key_type=0, coordinator_keys=[app]), 4)
          .coordinators[0].error_code == 0, 30, f"the coordinator on {s.label}")
    until(lambda: s.wire.request(OffsetFetchRequest(group_id=app, topics=None), 7).error_code == 0, 30,
          f"the group coordinator on {s.label} to load")
    out: dict = {}
    members["pa"] = {"id": uuid.uuid4().hex, "epoch": 0, "owned": [[], [], []]}
    first = heartbeat("pa", join=True)
    out["join_error"] = first.error_code
    out["one_member"] = settle()
    out["internal_topics"] = {
        t: [len(s.wire.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=t)],
                                               allow_auto_topic_creation=False), 12).topics[0].partitions),
            [(c.name, c.value) for c in s.wire.request(DescribeConfigsRequest(resources=[
                DescribeConfigsRequest.DescribeConfigsResource(resource_type=2, resource_name=t,
                                                               configuration_keys=["cleanup.policy"])]),
                4).results[0].configs]]
        for t in (rep, changelog)}
    members["pb"] = {"id": uuid.uuid4().hex, "epoch": 0, "owned": [[], [], []]}
    heartbeat("pb", join=True)
    out["two_members"] = settle()
    left = s.wire.request(H(group_id=app, member_id=members.pop("pa")["id"], member_epoch=-1), 1)
    out["leave"] = (left.error_code, left.member_epoch)
    out["after_leave"] = settle()
    out["listed"] = [(g.group_id == app, g.protocol_type, g.group_state, g.group_type) for g in s.wire.request(
        ListGroupsRequest(types_filter=["streams"]), 5).groups if g.group_id == app]
    return out


def _broker_names_kafka_only(results: dict) -> None:
    """Both describe every broker config Kafka defines (about 350): the names only Kafka lists become one
    list (empty on both sides unless one is missing here); the names both list are compared entry by entry."""
    kafka, ours = results["kafka"]["broker"], results["ours"]["broker"]
    results["kafka"]["broker_names_only_in_kafka"] = sorted(set(kafka) - set(ours))
    results["ours"]["broker_names_only_in_kafka"] = []
    for name in set(kafka) - set(ours):
        del kafka[name]


JAVA_SOURCE = Path(__file__).resolve().parent / "java" / "ShareStory.java"


def share_story_classes() -> tuple[str, str]:
    """(classpath, directory) to run ``java/ShareStory.java`` with Kafka 4.4's clients: compiled with
    ``javac`` once per source version into the launcher's cache, outside the work tree."""
    from tests.kafka_ref.launcher import classpath, compiled

    cp = classpath()
    return cp, compiled([JAVA_SOURCE], cp, "share-story")


def java_share_consumer(s: Side) -> dict:
    """Kafka 4.4's own ``KafkaShareConsumer`` (explicit mode; java/ShareStory.java): ten records,
    ACCEPT 0-3, RELEASE 4-5, REJECT 6-7, ACCEPT 8-9; then the redelivered 4 (RELEASE: archived at the
    limit of 2) and 5 (ACCEPT); the lag at the end. No record of this story comes back by a lock's expiry,
    so the locks last 30 s (Kafka's default): a JVM slowed by a busy machine between a poll and its commit must not see
    its acknowledgements refused (InvalidRecordStateException) for locks that ran out meanwhile."""
    topic, group = _share_story_setup(s, lock_ms=30_000)
    cp, classes = share_story_classes()
    done = subprocess.run(["java", "-Xmx128m", "-cp", f"{cp}{os.pathsep}{classes}", "ShareStory", s.bootstrap, group,
                           topic, "10:0-3=ACCEPT,4-5=RELEASE,6-7=REJECT", "2:4=RELEASE"],
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = [ln.split() for ln in done.stdout.splitlines() if ln.startswith(("record ", "commit ", "lock_ms "))]
    return {"records": [ln[1:] for ln in lines if ln[0] == "record"],
            "commits": [ln[1:] for ln in lines if ln[0] == "commit"],
            "lock_ms": [ln[1:] for ln in lines if ln[0] == "lock_ms"],
            "offsets_end": _settle(lambda: s.share_offsets(group), lambda o: _lag(o) == [(0, 10, 0)])}


SCENARIOS = {
    "share_group_life": (share_group_life, ("topic", "group")),
    "share_offsets_unacknowledged": (share_offsets_unacknowledged, ("topic", "group")),
    "consumer_group": (consumer_group, ("topic", "group")),
    "transactions": (transactions, ("topic", "group", "txn")),
    "describe_configs": (describe_configs, ("group",)),
    "java_share_consumer": (java_share_consumer, ("topic", "group")),
    "streams_group": (streams_group, ("topic", "group")),
    "classic_group": (classic_group, ("topic", "group")),
    "compacted_topic": (compacted_topic, ("topic", "group")),
    "offset_expiration": (offset_expiration, ("topic", "group")),
    "client_quotas": (client_quotas, ("topic", "client")),
    "acls_without_authorizer": (acls_without_authorizer, ("topic",)),
}


_SHARE_EPOCH = ("deliberate (issue 29, docs/differences.md): ours initializes a joining member's share state before "
                "answering it, so the first target assignment comes with the join's epoch bump (2); Kafka 4.4 answers "
                "the join at epoch 2 with nothing and bumps again to 3 when the initialized partitions reach the "
                "next heartbeat: every later share-group epoch is one lower here")
_SPSO_AT_LOAD = ("deliberate (broker/share/README.md 'Initialization'): ours persists the start offset "
                 "share.auto.offset.reset chose when the partition is first loaded, so a restart before the first "
                 "acknowledgement keeps it; Kafka 4.4 writes it with the first acknowledgement, and until then "
                 "describes it as -1 (the CLI's '-')")
_OURS_GROUP_KEYS = "our own group configs (docs/configuration.md): Kafka has no such key"
_STATIC_HERE = "not changeable at runtime here (IncrementalAlterConfigs refuses it), so read-only is true"
_LAUNCHER = "the reference Kafka's server.properties sets it (STATIC_BROKER_CONFIG, tests/kafka_ref); ours is the " \
            "value this one-node broker runs with (DEFAULT_CONFIG)"
_KAFKA_PROPERTIES = ("advertised.listeners", "controller.listener.names", "controller.quorum.bootstrap.servers",
                     "inter.broker.listener.name", "listener.security.protocol.map")
_ONE_NODE = ("broker.id", "offsets.topic.num.partitions", "offsets.topic.replication.factor", "process.roles",
             "share.coordinator.state.topic.min.isr", "share.coordinator.state.topic.num.partitions",
             "share.coordinator.state.topic.replication.factor", "transaction.state.log.min.isr",
             "transaction.state.log.num.partitions", "transaction.state.log.replication.factor")
_SEGMENTS = "ours are 4 MiB (docs/differences.md; broker/topics.py INTERNAL_SEGMENT_BYTES), Kafka's 100 MiB"
EXPECTED: dict[tuple[str, str], str] = {
    **{("share_group_life", f"{step}.{field}"): _SHARE_EPOCH
       for step in ("describe_one_member", "describe_two_members", "describe_empty")
       for field in ("group_epoch", "assignment_epoch")},
    **{("share_group_life", f"{step}.members[{i}].member_epoch"): _SHARE_EPOCH
       for step, i in (("describe_one_member", 0), ("describe_two_members", 0), ("describe_two_members", 1))},
    **{("describe_configs", f"broker.{name}.read_only"): _STATIC_HERE
       for name in (set(kafka_configs()["dynamic_broker"]) & set(kafka_configs()["broker"])) - _DYNAMIC_BROKER_KEYS},
    **{("describe_configs", f"broker.{name}.{field}"): _LAUNCHER
       for name in _KAFKA_PROPERTIES for field in ("source", "value")},
    **{("describe_configs", f"broker.{name}.source"): _LAUNCHER for name in _ONE_NODE},
    **{("describe_configs", f"broker.{name}.value"): _SEGMENTS
       for name in ("offsets.topic.segment.bytes", "share.coordinator.state.topic.segment.bytes",
                    "transaction.state.log.segment.bytes")},
    **{("share_offsets_unacknowledged", f"offsets.topics[0].partitions[1].{field}"): _SPSO_AT_LOAD
       for field in ("start_offset", "lag")},
    **{("share_offsets_unacknowledged", f"describe_empty.{field}"): _SHARE_EPOCH
       for field in ("group_epoch", "assignment_epoch")},
    ("describe_configs", "broker.min.insync.replicas.source"):
        "Kafka's formatter writes min.insync.replicas as a cluster-wide dynamic default; same value",
    ("describe_configs", "broker.node.id.source"):
        "Kafka reads node.id from server.properties (STATIC_BROKER_CONFIG); ours is the built-in default 1",
    **{("describe_configs", f"group.{key}"): _OURS_GROUP_KEYS
       for key in ("consumer.auto.offset.reset", "share.assignor.name", "share.fair.acquisition.enable",
                   "share.redelivery.backoff.ms", "share.redelivery.backoff.max.ms")},
    **{("describe_configs", f"group.streams.{key}"): "streams-group settings not implemented: one assignor "
                                                      "(sticky), no rack-aware standby placement"
       for key in ("assignor.name", "rack.aware.assignment.tags")},
}


def run_both(scenario: str, kafka_bootstrap: str, ours_bootstrap: str) -> tuple[list[str], dict]:
    fn, keys = SCENARIOS[scenario]
    names = {k: _name(k) for k in keys}
    results = run_on_both(fn, lambda label, bs: Side(label, bs, names), kafka_bootstrap, ours_bootstrap)
    if scenario == "describe_configs":
        _broker_names_kafka_only(results)
    return differences(results["ours"], results["kafka"]), results


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_same_behaviour_as_kafka(kafka_ref, ours_behaviour, scenario):
    found, _ = run_both(scenario, kafka_ref.bootstrap, ours_behaviour.bootstrap)
    assert_as_expected(scenario, found, EXPECTED)


@pytest.fixture(scope="module")
def acl_brokers(tmp_path_factory):
    """(kafka, ours) with StandardAuthorizer and a SCRAM listener each: a Kafka 4.4 of its own (the shared
    reference has no authorizer; ~13 s and ~300 MiB while this module runs) and a sharebroker."""
    skip_without_kafka()
    ours_config = {**OURS_CONFIG, **AUTHORIZER, "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
                   "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512"}
    with KafkaRef(settings=AUTHORIZER, scram_listener=True, heap="-Xmx384m") as kafka, \
            BrokerProcess(tmp_path_factory.mktemp("differential-acls"), config=ours_config) as ours:
        yield ((kafka.bootstrap, kafka.scram_bootstrap), (ours.address("PLAINTEXT"), ours.address("SASL_PLAINTEXT")))


def run_acl_decisions(kafka: tuple[str, str], ours: tuple[str, str]) -> tuple[list[str], dict]:
    names = {k: _name(k) for k in ("topic", "group")}
    scram = {kafka[0]: kafka[1], ours[0]: ours[1]}
    results = run_on_both(acl_decisions, lambda label, bs: Side(label, bs, names, scram[bs]), kafka[0], ours[0])
    return differences(results["ours"], results["kafka"]), results


def test_acl_decisions_as_kafka(acl_brokers):
    found, _ = run_acl_decisions(*acl_brokers)
    assert_as_expected("acl_decisions", found, EXPECTED)
