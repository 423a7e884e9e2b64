"""Differential conformance, protocol level: the same requests, sent with our generated codec to the
reference Apache Kafka 4.4.0 and to sharebroker, answer the same, field by field.

Each scenario runs its steps against both brokers (same topic and group names) and compares the
responses after ``harness.plain`` normalised what must differ (ids, hosts, ports, epochs of leaders,
timestamps, throttle times). Every remaining difference must be listed in ``EXPECTED`` with its
reason: a new difference fails the scenario, and so does an expected one that went away (the table
stays true). docs/testing.md gives the counts.
"""
from __future__ import annotations

import struct
import time
import uuid

import pytest

from protocol.errors import Errors
from protocol.messages.api_versions import ApiVersionsRequest, ApiVersionsResponse
from protocol.messages.create_topics import CreateTopicsRequest
from protocol.messages.describe_configs import DescribeConfigsRequest
from protocol.messages.metadata import MetadataRequest
from protocol.messages.registry import ApiKey
from protocol.primitives import ZERO_UUID
from protocol.messages.share_acknowledge import ShareAcknowledgeRequest as AckReq
from protocol.messages.share_fetch import ShareFetchRequest as FetchReq
from protocol.messages.share_group_heartbeat import ShareGroupHeartbeatRequest as HbReq
from tests import kafka_apis
from tests.differential.harness import assert_as_expected, differences, plain, run_on_both
from tests.support import until
from tests.wire import WireClient

ACCEPT, RELEASE, REJECT, RENEW = 1, 2, 3, 4
_CT = CreateTopicsRequest.CreatableTopic
_CFG = CreateTopicsRequest.CreatableTopicConfig


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


class Side:
    """One broker under comparison; ``names`` are shared by both sides of a scenario."""

    def __init__(self, label: str, bootstrap: str, names: dict):
        self.label, self.bootstrap, self.names = label, bootstrap, names
        self.wires: dict[str, WireClient] = {}

    def wire(self, key: str = "main") -> WireClient:
        if key not in self.wires:
            self.wires[key] = WireClient(self.bootstrap, client_id="differential")
        return self.wires[key]

    def close(self) -> None:
        for w in self.wires.values():
            w.close()

    def create_topic(self, name: str, partitions: int = 1, **configs) -> None:
        r = self.wire().request(CreateTopicsRequest(timeout_ms=30000, topics=[_CT(
            name=name, num_partitions=partitions, replication_factor=-1,
            configs=[_CFG(name=k, value=v) for k, v in configs.items()])]), 7)
        assert r.topics[0].error_code == 0, r
        self.topic_id(name)  # Kafka's broker learns the topic from the controller a moment later

    def coordinator_ready(self, group: str, key_type: int = 0) -> None:
        """FindCoordinator until the group's (``key_type`` 1: the transactional id's) coordinator answers
        (Kafka creates ``__consumer_offsets`` / ``__transaction_state`` on the first look-up and loads it:
        NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE until then)."""
        from protocol.messages.find_coordinator import FindCoordinatorRequest
        from protocol.messages.offset_fetch import OffsetFetchRequest
        until(lambda: self.wire().request(FindCoordinatorRequest(key_type=key_type, coordinator_keys=[group]), 4)
              .coordinators[0].error_code == 0, 30, f"the coordinator on {self.label}")
        if key_type != 0:
            return
        # and until it has loaded its partition (COORDINATOR_LOAD_IN_PROGRESS before)
        until(lambda: self.wire().request(OffsetFetchRequest(group_id=group, topics=None), 7).error_code == 0,
              30, f"the group coordinator on {self.label} to load")

    def topic_id(self, name: str) -> bytes:
        def found():
            md = self.wire().request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=name)],
                                                     allow_auto_topic_creation=False), 12)
            t = md.topics[0]
            return t.topic_id if t.error_code == 0 and t.partitions and t.partitions[0].leader_id >= 0 else None
        return until(found, 30, f"topic {name} on {self.label}")


_RETRIABLE = {Errors.COORDINATOR_LOAD_IN_PROGRESS, Errors.COORDINATOR_NOT_AVAILABLE, Errors.NOT_COORDINATOR}


def _join(w: WireClient, group: str, member: str, topic: str):
    """The first ShareGroupHeartbeat of a member, retried as clients retry while the coordinator loads."""
    def answered():
        r = w.request(HbReq(group_id=group, member_id=member, member_epoch=0, subscribed_topic_names=[topic]), 1)
        return None if r.error_code in _RETRIABLE else r
    return until(answered, 30, f"group {group}'s coordinator", 0.1)


# ---------------------------------------------------------------------------------- scenarios
# A scenario takes a Side and returns {step: plain response}; it must be deterministic on both brokers.

def api_versions(s: Side) -> dict:
    r = s.wire().request(ApiVersionsRequest(client_software_name="differential", client_software_version="1.0"), 3)
    out = plain(r)
    out["api_keys"] = {_api_name(k["api_key"]): [k["min_version"], k["max_version"]] for k in out["api_keys"]}
    for f in ("supported_features", "finalized_features"):
        out[f] = {x["name"]: [x.get("min_version", x.get("min_version_level")),
                              x.get("max_version", x.get("max_version_level"))] for x in out[f]}
    return {"v3": out}


def _api_name(key: int) -> str:
    try:
        return ApiKey(key).name
    except ValueError:  # one we do not serve
        return f"api-{key}"


def api_versions_invalid(s: Side) -> dict:
    """Requests ApiVersions refuses: a bad client software name (v3), v5 naming another cluster (KIP-1242)
    or only a node id; and v5 naming this very broker (its cluster id from Metadata)."""
    w = s.wire()
    md = w.request(MetadataRequest(topics=[], allow_auto_topic_creation=False), 12)
    req = ApiVersionsRequest
    out = {
        "bad_software_name": w.request(req(client_software_name="bad name!", client_software_version="1"), 3),
        "v5_other_cluster": w.request(req(client_software_name="d", client_software_version="1",
                                          cluster_id="AAAAAAAAAAAAAAAAAAAAAA", node_id=md.controller_id), 5),
        "v5_other_node": w.request(req(client_software_name="d", client_software_version="1",
                                       cluster_id=md.cluster_id, node_id=md.controller_id + 1), 5),
        "v5_node_id_only": w.request(req(client_software_name="d", client_software_version="1", node_id=1), 5),
    }
    out = {k: plain(v) for k, v in out.items()}
    right = w.request(req(client_software_name="d", client_software_version="1", cluster_id=md.cluster_id,
                          node_id=md.controller_id), 5)
    out["v5_this_broker"] = {"error_code": right.error_code, "api_keys": bool(right.api_keys)}
    return out


def api_versions_unsupported_version(s: Side) -> dict:
    """ApiVersions at a version no broker knows: a v0 answer with UNSUPPORTED_VERSION (KIP-511)."""
    w = s.wire()
    header = struct.pack(">hhih", ApiKey.API_VERSIONS, 127, 7, len(b"differential")) + b"differential" + b"\0"
    w.send_raw(struct.pack(">i", len(header) + 2) + header + b"\0\0")
    frame = memoryview(w.recv_frame())
    r = ApiVersionsResponse.decode_from(frame, 4, 0)[0]
    return {"v127": {"correlation_id": struct.unpack(">i", frame[:4])[0], "error_code": r.error_code,
                     "api_keys": [[k.api_key, k.min_version, k.max_version] for k in r.api_keys]}}


def metadata_unknown_topic(s: Side) -> dict:
    w = s.wire()
    T = MetadataRequest.MetadataRequestTopic
    unknown = s.names["unknown"]
    by_name = w.request(MetadataRequest(topics=[T(name=unknown)], allow_auto_topic_creation=False), 12)
    by_id = w.request(MetadataRequest(topics=[T(topic_id=b"\x01" * 16, name=None)], allow_auto_topic_creation=False),
                      12)
    invalid = w.request(MetadataRequest(topics=[T(name="bad name!")], allow_auto_topic_creation=True), 12)
    return {"by_name": plain(by_name), "by_id": plain(by_id), "invalid_name_autocreate": plain(invalid)}


def create_topics_invalid(s: Side) -> dict:
    n = s.names
    topics = [
        _CT(name=n["rf3"], num_partitions=1, replication_factor=3),
        _CT(name=n["rf0"], num_partitions=1, replication_factor=0),
        _CT(name=n["p0"], num_partitions=0, replication_factor=1),
        _CT(name="bad name!", num_partitions=1, replication_factor=1),
        _CT(name="..", num_partitions=1, replication_factor=1),
        _CT(name="__cluster_metadata", num_partitions=1, replication_factor=1),
        _CT(name="x" * 250, num_partitions=1, replication_factor=1),
        _CT(name=n["unknown_key"], num_partitions=1, replication_factor=1, configs=[_CFG(name="no.such.config",
                                                                                           value="1")]),
        _CT(name=n["bad_policy"], num_partitions=1, replication_factor=1, configs=[_CFG(name="cleanup.policy",
                                                                                          value="bogus")]),
        _CT(name=n["bad_number"], num_partitions=1, replication_factor=1, configs=[_CFG(name="retention.ms",
                                                                                          value="abc")]),
        _CT(name=n["null_value"], num_partitions=1, replication_factor=1, configs=[_CFG(name="retention.ms",
                                                                                          value=None)]),
    ]
    w = s.wire()
    s.coordinator_ready(n["dup"])  # __consumer_offsets exists on both
    invalid = w.request(CreateTopicsRequest(timeout_ms=30000, topics=topics), 7)
    dup = w.request(CreateTopicsRequest(timeout_ms=30000, topics=[_CT(name=n["dup"], num_partitions=1,
                                                                      replication_factor=1)] * 2), 7)
    internal = w.request(CreateTopicsRequest(timeout_ms=30000, topics=[_CT(name="__consumer_offsets",
                                                                           num_partitions=1, replication_factor=1)]), 7)
    out = {"invalid": plain(invalid), "duplicate_in_request": plain(dup), "internal": plain(internal)}
    for step in out.values():
        step["topics"] = sorted(step["topics"], key=lambda t: t["name"])
    return out


def create_topics_valid(s: Side) -> dict:
    w = s.wire()
    n = s.names
    validate = w.request(CreateTopicsRequest(timeout_ms=30000, validate_only=True, topics=[
        _CT(name=n["validate"], num_partitions=-1, replication_factor=-1)]), 7)
    created = w.request(CreateTopicsRequest(timeout_ms=30000, topics=[
        _CT(name=n["created"], num_partitions=2, replication_factor=1,
            configs=[_CFG(name="retention.ms", value="123456")])]), 7)
    again = w.request(CreateTopicsRequest(timeout_ms=30000, topics=[
        _CT(name=n["created"], num_partitions=2, replication_factor=1)]), 7)
    out = {"validate_only": plain(validate), "created": plain(created), "already_exists": plain(again)}
    for step in out.values():
        for t in step["topics"]:
            t["configs"] = {c.pop("name"): c for c in t["configs"] or []}
    return out


def describe_configs_topic(s: Side) -> dict:
    n = s.names
    s.create_topic(n["topic"], **{"retention.ms": "7200000", "cleanup.policy": "compact"})
    R = DescribeConfigsRequest.DescribeConfigsResource
    w = s.wire()
    full = w.request(DescribeConfigsRequest(include_synonyms=True, resources=[
        R(resource_type=2, resource_name=n["topic"], configuration_keys=None)]), 4)
    some = w.request(DescribeConfigsRequest(include_synonyms=True, resources=[
        R(resource_type=2, resource_name=n["topic"], configuration_keys=["retention.ms", "segment.bytes",
                                                                         "no.such.key"])]), 4)
    unknown = w.request(DescribeConfigsRequest(resources=[R(resource_type=2, resource_name=n["unknown"],
                                                            configuration_keys=None)]), 4)
    out = {"all": plain(full), "keys_with_synonyms": plain(some), "unknown_topic": plain(unknown)}
    for step in out.values():
        for res in step["results"]:
            res["configs"] = {c.pop("name"): c for c in res["configs"]}
    return out


def share_group_heartbeat_errors(s: Side) -> dict:
    n = s.names
    s.create_topic(n["topic"])
    s.coordinator_ready(n["group"])
    w = s.wire()
    empty_group = w.request(HbReq(group_id="", member_id=n["member"], member_epoch=0,
                                  subscribed_topic_names=[n["topic"]]), 1)
    empty_member = w.request(HbReq(group_id=n["group"], member_id="", member_epoch=0,
                                   subscribed_topic_names=[n["topic"]]), 1)
    no_topics = w.request(HbReq(group_id=n["group"], member_id=n["member"], member_epoch=0,
                                subscribed_topic_names=None), 1)
    unknown_member = w.request(HbReq(group_id=n["group"], member_id=n["member"], member_epoch=3), 1)
    joined = _join(w, n["group"], n["member"], n["topic"])
    wrong_epoch = w.request(HbReq(group_id=n["group"], member_id=n["member"], member_epoch=joined.member_epoch + 5), 1)
    bad_leave = w.request(HbReq(group_id=n["group"], member_id=n["other"], member_epoch=-1), 1)
    leave = w.request(HbReq(group_id=n["group"], member_id=n["member"], member_epoch=-1), 1)
    out = {"empty_group_id": plain(empty_group), "empty_member_id": plain(empty_member),
           "join_without_topics": plain(no_topics), "unknown_member": plain(unknown_member), "join": plain(joined),
           "wrong_member_epoch": plain(wrong_epoch), "leave_unknown_member": plain(bad_leave),
           "leave": plain(leave)}
    for step in out.values():
        step.pop("heartbeat_interval_ms", None)  # a setting with another default is compared by DescribeConfigs
    return out


class _Share:
    """A topic with 5 records (one batch) and a share group reading from the earliest offset."""

    def __init__(self, s: Side):
        from protocol.messages.incremental_alter_configs import IncrementalAlterConfigsRequest as IAC
        from protocol.messages.produce import ProduceRequest as P
        from protocol.records import build_batch

        self.s, n = s, s.names
        self.group, self.topic = n["group"], n["topic"]
        s.create_topic(self.topic)
        s.coordinator_ready(self.group)
        self.tid = s.topic_id(self.topic)
        w = s.wire()
        r = w.request(IAC(resources=[IAC.AlterConfigsResource(resource_type=32, resource_name=self.group, configs=[
            IAC.AlterableConfig(name="share.auto.offset.reset", config_operation=0, value="earliest")])]), 1)
        assert r.responses[0].error_code == 0, r
        batch = build_batch([(None, b"v%d" % i, []) for i in range(5)], timestamp=1_700_000_000_000)
        r = w.request(P(acks=-1, timeout_ms=10_000, topic_data=[P.TopicProduceData(name=self.topic, partition_data=[
            P.PartitionProduceData(index=0, records=batch)])]), 9)
        assert r.responses[0].partition_responses[0].error_code == 0, r

    def heartbeat_until_assigned(self, member: str) -> int:
        w = self.s.wire(member)
        state = {"epoch": 0}

        def assigned():
            if state["epoch"] == 0:
                r = _join(w, self.group, member, self.topic)
            else:
                r = w.request(HbReq(group_id=self.group, member_id=member, member_epoch=state["epoch"]), 1)
            assert r.error_code == 0, r
            state["epoch"] = r.member_epoch
            return r.assignment is not None and any(t.topic_id == self.tid for t in r.assignment.topic_partitions)
        until(assigned, 30, f"assignment of {member} on {self.s.label}", 0.1)
        return state["epoch"]

    def fetch(self, member: str, epoch: int, acks=(), max_wait_ms: int = 0, version: int = 1):
        req = FetchReq(group_id=self.group, member_id=member, share_session_epoch=epoch, max_wait_ms=max_wait_ms,
                       min_bytes=1, max_bytes=1 << 20, max_records=500, batch_size=500, topics=[
                           FetchReq.FetchTopic(topic_id=self.tid, partitions=[FetchReq.FetchPartition(
                               partition_index=0, partition_max_bytes=1 << 20, acknowledgement_batches=[
                                   FetchReq.AcknowledgementBatch(first_offset=f, last_offset=last, acknowledge_types=t)
                                   for f, last, t in acks])])])
        return self.s.wire(member).request(req, version)

    def fetch_until_acquired(self, member: str) -> tuple[int, object]:
        """Open the session and fetch until the 5 records are acquired (the reference Kafka initialises the
        share partition asynchronously); returns the next session epoch and the acquiring response."""
        r = self.fetch(member, 0, max_wait_ms=500)
        epoch = 1
        deadline = time.monotonic() + 30
        while not any(p.acquired_records for t in r.responses for p in t.partitions):
            assert time.monotonic() < deadline, f"no records acquired on {self.s.label}: {r}"
            r = self.fetch(member, epoch, max_wait_ms=500)
            epoch += 1
        return epoch, r

    def ack(self, member: str, epoch: int, acks, version: int = 1, renew: bool = False):
        req = AckReq(group_id=self.group, member_id=member, share_session_epoch=epoch, is_renew_ack=renew,
                     topics=[AckReq.AcknowledgeTopic(topic_id=self.tid, partitions=[AckReq.AcknowledgePartition(
                         partition_index=0, acknowledgement_batches=[
                             AckReq.AcknowledgementBatch(first_offset=f, last_offset=last, acknowledge_types=t)
                             for f, last, t in acks])])])
        return self.s.wire(member).request(req, version)


def _fetch_view(r) -> dict:
    out = plain(r)
    for t in out["responses"]:
        for p in t["partitions"]:
            p["records"] = None if p["records"] is None else f"<{len(p['records'])} bytes>"
    return out


def share_fetch_session_epochs(s: Side) -> dict:
    sh = _Share(s)
    member = str(uuid.UUID(int=1))
    sh.heartbeat_until_assigned(member)
    out = {"unknown_session": _fetch_view(sh.fetch(member, 5))}
    epoch, acquiring = sh.fetch_until_acquired(member)
    out["acquired"] = _fetch_view(acquiring)
    out["next_fetch"] = _fetch_view(sh.fetch(member, epoch))  # nothing left to acquire; the epoch moves on
    out["stale_epoch"] = _fetch_view(sh.fetch(member, epoch))  # the previous epoch again
    out["future_epoch"] = _fetch_view(sh.fetch(member, epoch + 4))
    out["ack_stale_epoch"] = plain(sh.ack(member, epoch, [(0, 4, [ACCEPT])]))
    out["ack_right_epoch"] = plain(sh.ack(member, epoch + 1, [(0, 4, [ACCEPT])]))
    out["acks_on_opening_fetch"] = _fetch_view(sh.fetch(str(uuid.UUID(int=2)), 0, acks=[(0, 0, [ACCEPT])]))
    out["ack_opens_no_session"] = plain(sh.ack(str(uuid.UUID(int=3)), 0, [(0, 0, [ACCEPT])]))
    return out


BAD_BATCHES = {
    "first_after_last": [(4, 3, [ACCEPT])],
    "overlapping": [(0, 3, [ACCEPT]), (2, 4, [ACCEPT])],
    "unordered": [(3, 4, [ACCEPT]), (0, 1, [ACCEPT])],
    "no_types": [(0, 4, [])],
    "types_count_mismatch": [(0, 4, [ACCEPT, ACCEPT])],
    "type_out_of_range": [(0, 4, [7])],
    "renew_on_v1": [(0, 4, [RENEW])],
    "not_acquired_offsets": [(100, 104, [ACCEPT])],
}


def share_acknowledge_bad_batches(s: Side) -> dict:
    sh = _Share(s)
    member = str(uuid.UUID(int=1))
    sh.heartbeat_until_assigned(member)
    epoch, _ = sh.fetch_until_acquired(member)
    out = {}
    for label, batches in BAD_BATCHES.items():
        out[label] = plain(sh.ack(member, epoch, batches))
        epoch += 1
    out["still_acquired_then_accepted"] = plain(sh.ack(member, epoch, [(0, 4, [ACCEPT])]))
    return out


def fenced_producer_codes(s: Side) -> dict:
    """A producer fenced by a second InitProducerId, at each version boundary of PRODUCER_FENCED: older
    versions get INVALID_PRODUCER_EPOCH in its place (KafkaApis)."""
    from protocol.messages.add_offsets_to_txn import AddOffsetsToTxnRequest
    from protocol.messages.add_partitions_to_txn import AddPartitionsToTxnRequest as APT
    from protocol.messages.end_txn import EndTxnRequest
    from protocol.messages.init_producer_id import InitProducerIdRequest as IPI

    n = s.names
    s.create_topic(n["topic"])
    s.coordinator_ready(n["txn"], key_type=1)
    w = s.wire()

    def init(version: int = 4, pid: int = -1, epoch: int = -1):
        def answered():
            r = w.request(IPI(transactional_id=n["txn"], transaction_timeout_ms=60000, producer_id=pid,
                              producer_epoch=epoch), version)
            return None if r.error_code in _RETRIABLE | {Errors.CONCURRENT_TRANSACTIONS} else r
        return until(answered, 30, f"InitProducerId on {s.label}", 0.1)

    first = init()
    second = init()  # bumps the epoch: the first is fenced
    pid, stale = first.producer_id, first.producer_epoch
    out = {"init": plain(first), "init_again": plain(second)}
    for v in range(4):
        out[f"add_partitions_v{v}"] = plain(w.request(APT(
            v3_and_below_transactional_id=n["txn"], v3_and_below_producer_id=pid, v3_and_below_producer_epoch=stale,
            v3_and_below_topics=[APT.AddPartitionsToTxnTopic(name=n["topic"], partitions=[0])]), v))
        out[f"add_offsets_v{v}"] = plain(w.request(AddOffsetsToTxnRequest(
            transactional_id=n["txn"], producer_id=pid, producer_epoch=stale, group_id=n["group"]), v))
        out[f"end_txn_v{v}"] = plain(w.request(EndTxnRequest(
            transactional_id=n["txn"], producer_id=pid, producer_epoch=stale, committed=False), v))
    for v in (3, 4, 5):
        out[f"init_stale_v{v}"] = plain(init(v, pid, stale))
    return out


def telemetry_no_subscription(s: Side) -> dict:
    """KIP-714 with no client-metrics subscription: a new client instance gets the empty subscription at the
    default push interval; a second get sooner than it is throttled; pushes with the zero id or a wrong
    subscription id are refused (Kafka serves 71/72 even when it does not advertise them)."""
    from protocol.messages.get_telemetry_subscriptions import GetTelemetrySubscriptionsRequest as GetReq
    from protocol.messages.push_telemetry import PushTelemetryRequest as PushReq

    w = s.wire()
    first = w.request(GetReq(client_instance_id=ZERO_UUID), 0)
    iid, sid = first.client_instance_id, first.subscription_id
    out = {"first": plain(first), "again": plain(w.request(GetReq(client_instance_id=iid), 0)),
           "push_zero_id": plain(w.request(PushReq(client_instance_id=ZERO_UUID, subscription_id=sid), 0)),
           "push_wrong_subscription": plain(w.request(PushReq(client_instance_id=iid, subscription_id=sid ^ 1), 0))}
    out["first"]["client_instance_id"] = "<zero>" if iid == ZERO_UUID else "<assigned>"
    out["first"]["subscription_id"] = "<id>"
    return out


def client_metrics_configs(s: Side) -> dict:
    """KIP-714 subscriptions as CLIENT_METRICS (16) config resources: IncrementalAlterConfigs refusing bad
    ones, then setting, describing, listing and deleting one.  Its ``match`` names only this scenario's own
    client id, so it changes no other client's subscription (the reference Kafka is shared)."""
    from protocol.messages.incremental_alter_configs import IncrementalAlterConfigsRequest as Alter
    from protocol.messages.list_config_resources import ListConfigResourcesRequest as ListReq

    n, w = s.names, s.wire()

    def alter(name: str, **configs) -> dict:
        ops = [Alter.AlterableConfig(name=k.replace("_", "."), config_operation=1 if v is None else 0, value=v)
               for k, v in configs.items()]
        return plain(w.request(Alter(resources=[Alter.AlterConfigsResource(
            resource_type=16, resource_name=name, configs=ops)]), 1))

    def listed(version: int) -> list:
        r = plain(w.request(ListReq(resource_types=[16] if version else []), version))
        r["config_resources"] = [c for c in r["config_resources"] if c["resource_name"] == n["sub"]]
        return r

    def describe(name: str) -> dict:
        r = plain(w.request(DescribeConfigsRequest(include_synonyms=True, resources=[
            DescribeConfigsRequest.DescribeConfigsResource(resource_type=16, resource_name=name,
                                                           configuration_keys=None)]), 4))
        for res in r["results"]:
            res["configs"] = {c.pop("name"): c for c in res["configs"]}
        return r

    match = f"client_id={n['client']}"
    out = {"empty_name": alter("", metrics="*"), "unknown_key": alter(n["sub"], bogus="1"),
           "interval_too_small": alter(n["sub"], interval_ms="99"),
           "interval_too_large": alter(n["sub"], interval_ms="3600001"),
           "interval_not_a_number": alter(n["sub"], interval_ms="abc"),
           "bad_match": alter(n["sub"], match="client_id"), "unknown_match_key": alter(n["sub"], match="nope=x"),
           "duplicate_metric": alter(n["sub"], metrics="a,a", match=match),
           "set": alter(n["sub"], metrics="org.apache.kafka.producer.,org.apache.kafka.consumer.",
                        interval_ms="1000", match=match)}
    # Kafka answers DescribeConfigs from its metadata image, which may not have the last alter yet: wait for it
    out["described"] = until(lambda: (d := describe(n["sub"]))["results"][0]["configs"]["interval.ms"]["value"]
                             == "1000" and d, 15, "the subscription described as set")
    out["described_unset"] = describe(n["unset"])
    out["listed_v1"] = listed(1)
    out["listed_v0"] = listed(0)
    out["deleted"] = alter(n["sub"], metrics=None, interval_ms=None, match=None)
    out["listed_after_delete"] = until(lambda: not (r := listed(1))["config_resources"] and r, 15,
                                       "the subscription gone")
    return out


SCENARIOS = {
    "api_versions": (api_versions, ()),
    "api_versions_invalid": (api_versions_invalid, ()),
    "api_versions_unsupported_version": (api_versions_unsupported_version, ()),
    "metadata_unknown_topic": (metadata_unknown_topic, ("unknown",)),
    "create_topics_invalid": (create_topics_invalid, ("rf3", "rf0", "p0", "unknown_key", "bad_policy", "bad_number",
                                                      "null_value", "dup")),
    "create_topics_valid": (create_topics_valid, ("validate", "created")),
    "describe_configs_topic": (describe_configs_topic, ("topic", "unknown")),
    "share_group_heartbeat_errors": (share_group_heartbeat_errors, ("topic", "group", "member", "other")),
    "share_fetch_session_epochs": (share_fetch_session_epochs, ("topic", "group")),
    "share_acknowledge_bad_batches": (share_acknowledge_bad_batches, ("topic", "group")),
    "fenced_producer_codes": (fenced_producer_codes, ("topic", "txn", "group")),
    "telemetry_no_subscription": (telemetry_no_subscription, ()),
    "client_metrics_configs": (client_metrics_configs, ("sub", "unset", "client")),
}

# Kafka 4.4 broker APIs this broker does not serve (ApiKey only names ours), with the reason (tests/kafka_apis.py)
_NOT_SERVED = dict(kafka_apis.NOT_SERVED_BROKER_APIS)
_MIN_ISR = "Kafka's storage formatter writes min.insync.replicas as a cluster-wide dynamic default " \
           "(DYNAMIC_DEFAULT_BROKER_CONFIG, source 3) next to its default; ours has only the default: same value"
_MESSAGE = "ours says what is wrong where Kafka sends no message (clients show it; the code is the same)"

# (scenario, path) -> why the difference is expected.  A path is "step.field.sub[i].field".
EXPECTED: dict[tuple[str, str], str] = {
    **{("api_versions", f"v3.api_keys.api-{key}"): f"{name}: {why}" for key, (name, why) in _NOT_SERVED.items()},
    **{("api_versions", f"v3.api_keys.{name}"): "Kafka advertises GetTelemetrySubscriptions / PushTelemetry only "
       "with a ClientTelemetryExporterPlugin configured (and serves them either way); sharebroker is its own "
       "exporter (/metrics), so always" for name in ("GET_TELEMETRY_SUBSCRIPTIONS", "PUSH_TELEMETRY")},
    ("create_topics_valid", "created.topics[0].configs.min.insync.replicas.config_source"): _MIN_ISR,
    ("create_topics_valid", "validate_only.topics[0].configs.min.insync.replicas.config_source"): _MIN_ISR,
    ("describe_configs_topic", "all.results[0].configs.min.insync.replicas.config_source"): _MIN_ISR,
    ("describe_configs_topic", "all.results[0].configs.min.insync.replicas.synonyms"): _MIN_ISR,
    ("describe_configs_topic", "unknown_topic.results[0].error_message"): _MESSAGE,
    ("share_group_heartbeat_errors", "empty_member_id.error_message"): _MESSAGE,
    ("share_group_heartbeat_errors", "join.assignment.topic_partitions"):
        "deliberate (issue 29, docs/differences.md): ours initializes the share state before answering the first "
        "heartbeat, so its answer carries the assignment (first records ~0.1 s after subscribe()); Kafka 4.4 "
        "answers an empty assignment and assigns at the next heartbeat, 5 s later",
    **{("share_fetch_session_epochs", f"{step}.error_message"): _MESSAGE
       for step in ("unknown_session", "stale_epoch", "future_epoch", "ack_stale_epoch", "acks_on_opening_fetch",
                    "ack_opens_no_session")},
    ("share_acknowledge_bad_batches", "not_acquired_offsets.responses[0].partitions[0].error_message"):
        "Kafka explains INVALID_RECORD_STATE ('Batch record not found...'); ours sends the code alone",
}


def run_both(scenario: str, kafka_bootstrap: str, ours_bootstrap: str, scenarios: dict = SCENARIOS) -> list[str]:
    fn, keys = scenarios[scenario]
    names = {k: _name(k.replace("_", "-")) for k in keys}
    if "member" in names:
        names["member"], names["other"] = str(uuid.uuid4()), str(uuid.uuid4())
    results = run_on_both(fn, lambda label, bs: Side(label, bs, names), kafka_bootstrap, ours_bootstrap)
    return differences(results["ours"], results["kafka"])


def check_same(scenario: str, kafka_bootstrap: str, ours_bootstrap: str, scenarios: dict = SCENARIOS,
               expected_table: dict = EXPECTED) -> None:
    """Fail on a difference ``expected_table`` does not list, and on a listed one that went away."""
    assert_as_expected(scenario, run_both(scenario, kafka_bootstrap, ours_bootstrap, scenarios), expected_table)


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_same_answers_as_kafka(kafka_ref, ours, scenario):
    check_same(scenario, kafka_ref.bootstrap, ours.bootstrap)
