"""Differential conformance of the admin and operations APIs (issue 27) with the reference Apache
Kafka 4.4.0: AlterConfigs (legacy), DescribeLogDirs, AlterReplicaLogDirs, OffsetForLeaderEpoch,
DescribeTopicPartitions, ElectLeaders, Alter/ListPartitionReassignments, DescribeQuorum,
UpdateFeatures and the quorum-membership APIs (UnregisterBroker, UnregisterController, AddRaftVoter,
RemoveRaftVoter, each only in ways that leave the shared reference node as it was), with the harness
of ``test_protocol.py`` (same requests, same names, answers compared field by field; every remaining
difference listed in ``EXPECTED`` with its reason).
"""
from __future__ import annotations

import time

import pytest

from protocol.messages.add_raft_voter import AddRaftVoterRequest as ARV
from protocol.messages.alter_configs import AlterConfigsRequest as AC
from protocol.messages.alter_partition_reassignments import AlterPartitionReassignmentsRequest as APR
from protocol.messages.alter_replica_log_dirs import AlterReplicaLogDirsRequest as ARL
from protocol.messages.describe_configs import DescribeConfigsRequest as DC
from protocol.messages.describe_log_dirs import DescribeLogDirsRequest as DLD
from protocol.messages.describe_quorum import DescribeQuorumRequest as DQ
from protocol.messages.describe_topic_partitions import DescribeTopicPartitionsRequest as DTP
from protocol.messages.elect_leaders import ElectLeadersRequest as EL
from protocol.messages.list_partition_reassignments import ListPartitionReassignmentsRequest as LPR
from protocol.messages.metadata import MetadataRequest
from protocol.messages.offset_for_leader_epoch import OffsetForLeaderEpochRequest as OLE
from protocol.messages.produce import ProduceRequest as P
from protocol.messages.remove_raft_voter import RemoveRaftVoterRequest as RRV
from protocol.messages.unregister_broker import UnregisterBrokerRequest as UB
from protocol.messages.unregister_controller import UnregisterControllerRequest as UC
from protocol.messages.update_features import UpdateFeaturesRequest as UF
from protocol.records import build_batch
from protocol.errors import Errors
from tests.differential.harness import plain
from tests.support import until
from tests.differential.test_protocol import Side, check_same


def _node(s: Side) -> int:
    return s.wire().request(MetadataRequest(topics=[]), 12).brokers[0].node_id


def _produce(s: Side, topic: str, partition: int, n: int) -> None:
    """One batch of ``n`` records, retried while Kafka's broker is not yet the new partition's leader."""
    batch = build_batch([(None, b"v%d" % i, []) for i in range(n)], timestamp=1_700_000_000_000)

    def written():
        r = s.wire().request(P(acks=-1, timeout_ms=10_000, topic_data=[P.TopicProduceData(
            name=topic, partition_data=[P.PartitionProduceData(index=partition, records=batch)])]), 9)
        code = r.responses[0].partition_responses[0].error_code
        assert code in (0, Errors.NOT_LEADER_OR_FOLLOWER), r
        return code == 0
    until(written, 30, f"a produce to {topic} on {s.label}", 0.1)


def alter_configs_legacy(s: Side) -> dict:
    n = s.names
    s.create_topic(n["topic"], **{"retention.ms": "7200000", "cleanup.policy": "compact"})
    w = s.wire()

    def alter(*resources, validate_only=False, version=2):
        res = [AC.AlterConfigsResource(resource_type=t, resource_name=name,
                                       configs=[AC.AlterableConfig(name=k, value=v) for k, v in cfgs])
               for t, name, cfgs in resources]
        return plain(w.request(AC(resources=res, validate_only=validate_only), version))

    def configs(overrides: dict | None = None):
        """The topic's three configs; with ``overrides`` (what a legacy AlterConfigs just set as the topic's
        whole set), read again until the topic's own (DYNAMIC_TOPIC_CONFIG) entries are those: Kafka's broker
        answers DescribeConfigs from its metadata image, which may not have the change yet."""
        deadline = time.monotonic() + 15
        while True:
            r = w.request(DC(resources=[DC.DescribeConfigsResource(
                resource_type=2, resource_name=n["topic"],
                configuration_keys=["retention.ms", "cleanup.policy", "segment.bytes"])]), 4)
            got = {c.name: (c.value, c.config_source) for c in r.results[0].configs}
            own = {k: v for k, (v, source) in got.items() if source == 1}
            if overrides is None or own == overrides or time.monotonic() > deadline:
                return got
            time.sleep(0.05)

    t = n["topic"]
    out = {"validate_only": alter((2, t, [("segment.bytes", "2097152")]), validate_only=True),
           "after_validate_only": configs(),
           "replace": alter((2, t, [("segment.bytes", "2097152")]), version=0),
           "after_replace": configs({"segment.bytes": "2097152"}),
           "invalid_value": alter((2, t, [("cleanup.policy", "bogus")])),
           "unknown_key": alter((2, t, [("no.such.config", "1")])),
           "after_refused": configs(),
           # a resource named twice is left out: Kafka 4.4 never answers it (AlterConfigsResponse.errors
           # throws on the duplicate key while counting errors); ours answers INVALID_REQUEST for both
           "duplicate_key": alter((2, t, [("retention.ms", "1"), ("retention.ms", "2")])),
           "null_value": alter((2, t, [("retention.ms", None)])),
           "broker_logger": alter((8, str(_node(s)), [("kafka", "DEBUG")])),
           "other_broker": alter((4, str(_node(s) + 7), [("log.retention.ms", "1000")])),
           "unknown_topic": alter((2, n["unknown"], [("retention.ms", "1000")])),
           "empty_set": alter((2, t, []), version=1), "after_empty_set": configs({})}
    for step in out.values():
        if isinstance(step, dict) and "responses" in step:
            step["responses"] = sorted(step["responses"], key=lambda r: (r["resource_type"], r["resource_name"]))
    return out


def log_dirs(s: Side) -> dict:
    n = s.names
    s.create_topic(n["topic"], partitions=2)
    _produce(s, n["topic"], 1, 7)
    w = s.wire()
    # Kafka creates a new topic's partition logs when its broker applies the metadata, which can come
    # after CreateTopics and the produce answered: wait until both are in the log directory
    until(lambda: sum(len(t.partitions) for d in w.request(DLD(topics=[DLD.DescribableLogDirTopic(
        topic=n["topic"], partitions=[0, 1])]), 4).results for t in d.topics) == 2, 30,
        "both partitions of the new topic in the log directory")
    out = {}
    for v in (1, 4):
        r = plain(w.request(DLD(topics=[DLD.DescribableLogDirTopic(topic=n["topic"], partitions=[0, 1, 5]),
                                        DLD.DescribableLogDirTopic(topic=n["unknown"], partitions=[0])]), v))
        for d in r["results"]:
            d["log_dir"] = "<dir>" if d["log_dir"] else d["log_dir"]
            for t in d["topics"]:  # Kafka lists them in hash order
                t["partitions"].sort(key=lambda p: p["partition_index"])
            d["total_bytes"], d["usable_bytes"] = d["total_bytes"] > 0, d["usable_bytes"] > 0
        out[f"describe_v{v}"] = r
    listed = w.request(DLD(topics=[DLD.DescribableLogDirTopic(topic=n["topic"], partitions=[0])]), 4)
    here = listed.results[0].log_dir
    moves = [(here, n["topic"], 0), ("/no/such/dir", n["topic"], 1), (here, n["unknown"], 0)]
    r = plain(w.request(ARL(dirs=[ARL.AlterReplicaLogDir(path=p, topics=[ARL.AlterReplicaLogDirTopic(
        name=t, partitions=[i])]) for p, t, i in moves]), 2))
    for t in r["results"]:  # grouped by topic, in hash order in Kafka
        t["partitions"].sort(key=lambda p: p["partition_index"])
    r["results"].sort(key=lambda x: x["topic_name"])
    out["alter_replica_log_dirs"] = r
    return out


def offset_for_leader_epoch(s: Side) -> dict:
    n = s.names
    s.create_topic(n["topic"], partitions=2)
    _produce(s, n["topic"], 0, 9)
    w = s.wire()
    cases = [(0, -1, 0), (0, 0, 0), (1, -1, 0), (0, -1, 1), (0, -1, -1), (0, 1, 0), (5, -1, 0)]
    out = {}
    for v in (2, 4):
        out[f"v{v}"] = plain(w.request(OLE(replica_id=-1, topics=[
            OLE.OffsetForLeaderTopic(topic=n["topic"], partitions=[
                OLE.OffsetForLeaderPartition(partition=p, current_leader_epoch=cur, leader_epoch=e)
                for p, cur, e in cases]),
            OLE.OffsetForLeaderTopic(topic=n["unknown"], partitions=[OLE.OffsetForLeaderPartition(partition=0)])]),
            v))
    return out


def describe_topic_partitions(s: Side) -> dict:
    n = s.names
    a, b = sorted([n["first"], n["second"]])
    s.create_topic(a, partitions=3)
    s.create_topic(b, partitions=2)
    w = s.wire()

    def page(names, limit=2000, cursor=None):
        return plain(w.request(DTP(topics=[DTP.TopicRequest(name=x) for x in names], response_partition_limit=limit,
                                   cursor=None if cursor is None else DTP.Cursor(topic_name=cursor[0],
                                                                                  partition_index=cursor[1])), 0))
    return {"all": page([b, a]), "limit_2": page([a, b], 2), "from_cursor": page([a, b], 2, (a, 2)),
            "full_at_topic_end": page([a, b], 3), "unknown_and_invalid": page([n["unknown"], "bad/name"]),
            "cursor_not_named": page([a], cursor=(b, 0)), "negative_cursor": page([a], cursor=(a, -1))}


def elect_and_reassign(s: Side) -> dict:
    n = s.names
    s.create_topic(n["topic"], partitions=2)
    node = _node(s)
    w = s.wire()
    out = {}
    for election in (0, 1):
        out[f"elect_{election}"] = plain(w.request(EL(election_type=election, topic_partitions=[
            EL.TopicPartitions(topic=n["topic"], partitions=[0, 1, 9]),
            EL.TopicPartitions(topic=n["unknown"], partitions=[0])]), 2))
    cases = [(0, [node]), (1, None), (0, [node + 7]), (0, []), (0, [node, node]), (9, [node])]
    out["reassign"] = plain(w.request(APR(topics=[
        APR.ReassignableTopic(name=n["topic"], partitions=[APR.ReassignablePartition(partition_index=p, replicas=r)
                                                           for p, r in cases]),
        APR.ReassignableTopic(name=n["unknown"], partitions=[APR.ReassignablePartition(partition_index=0,
                                                                                       replicas=[node])])]), 1))
    out["reassign_rf_fixed"] = plain(w.request(APR(allow_replication_factor_change=False, topics=[
        APR.ReassignableTopic(name=n["topic"], partitions=[APR.ReassignablePartition(partition_index=0,
                                                                                     replicas=[node])])]), 1))
    out["list"] = plain(w.request(LPR(topics=[LPR.ListPartitionReassignmentsTopics(name=n["topic"],
                                                                                   partition_indexes=[0, 1])]), 0))
    return out


def describe_quorum(s: Side) -> dict:
    w = s.wire()
    good = plain(w.request(DQ(topics=[DQ.TopicData(topic_name="__cluster_metadata",
                                                   partitions=[DQ.PartitionData(partition_index=0)])]), 2))
    bad = plain(w.request(DQ(topics=[DQ.TopicData(topic_name="other", partitions=[DQ.PartitionData(
        partition_index=0)])]), 2))
    return {"metadata_partition": good, "other_partition": bad}


def update_features(s: Side) -> dict:
    w = s.wire()

    def update(*updates, validate_only=True, version=2):
        return plain(w.request(UF(validate_only=validate_only, feature_updates=[
            UF.FeatureUpdateKey(feature=f, max_version_level=lvl, upgrade_type=t) for f, lvl, t in updates]), version))
    return {"same_levels": update(("share.version", 2, 1), ("group.version", 1, 1), ("transaction.version", 2, 1),
                                  validate_only=False),
            "same_levels_v1": update(("share.version", 2, 1), version=1, validate_only=False),
            "above_range": update(("share.version", 9, 1)),
            "negative": update(("group.version", -1, 1)),
            "unknown_feature": update(("no.such.feature", 1, 1)),
            "unknown_feature_level_0": update(("no.such.feature", 0, 1)),
            "downgrade_as_upgrade": update(("share.version", 1, 1)),
            "unknown_upgrade_type": update(("share.version", 2, 0)),
            "downgrade": update(("share.version", 1, 2))}


def quorum_membership(s: Side) -> dict:
    """Never this node's own broker id to UnregisterBroker (Kafka would unregister the reference node),
    and no new voter to AddRaftVoter (Kafka would try to reach it): the answers each broker gives alone."""
    w = s.wire()
    md = w.request(MetadataRequest(topics=[]), 12)
    node, cluster, directory = md.brokers[0].node_id, md.cluster_id, bytes(range(1, 17))
    listeners = [ARV.Listener(name="CONTROLLER", host="127.0.0.1", port=1)]

    def add(**kw):
        return plain(w.request(ARV(timeout_ms=5000, listeners=listeners, **{
            "cluster_id": cluster, "voter_id": node, "voter_directory_id": directory, **kw}), 1))

    def remove(**kw):
        return plain(w.request(RRV(**{"cluster_id": cluster, "voter_id": node, "voter_directory_id": directory,
                                      **kw}), 0))
    return {"unregister_unknown_broker": plain(w.request(UB(broker_id=node + 100), 0)),
            "unregister_this_controller": plain(w.request(UC(controller_id=node), 0)),
            "unregister_other_controller": plain(w.request(UC(controller_id=node + 100), 0)),
            "add_voter_other_cluster": add(cluster_id="AAAAAAAAAAAAAAAAAAAAAA"),
            "add_voter_no_directory": add(voter_directory_id=bytes(16)),
            "add_voter_already_one": add(),
            "remove_voter_other_cluster": remove(cluster_id="AAAAAAAAAAAAAAAAAAAAAA"),
            "remove_voter_no_directory": remove(voter_directory_id=bytes(16)),
            "remove_voter_other_directory": remove(),
            "remove_voter_unknown": remove(voter_id=node + 100)}


SCENARIOS = {
    "alter_configs_legacy": (alter_configs_legacy, ("topic", "unknown")),
    "log_dirs": (log_dirs, ("topic", "unknown")),
    "offset_for_leader_epoch": (offset_for_leader_epoch, ("topic", "unknown")),
    "describe_topic_partitions": (describe_topic_partitions, ("first", "second", "unknown")),
    "elect_and_reassign": (elect_and_reassign, ("topic", "unknown")),
    "describe_quorum": (describe_quorum, ()),
    "update_features": (update_features, ()),
    "quorum_membership": (quorum_membership, ()),
}

_NO_METADATA_LOG = "no KRaft metadata log here: its offsets are the finalized-features epoch (1)"
_FIXED_FEATURES = "feature levels are fixed here: only an update to the current level succeeds"

EXPECTED: dict[tuple[str, str], str] = {
    ("describe_quorum", "metadata_partition.topics[0].partitions[0].high_watermark"): _NO_METADATA_LOG,
    ("describe_quorum", "metadata_partition.topics[0].partitions[0].current_voters[0].log_end_offset"):
        _NO_METADATA_LOG,
    ("describe_quorum", "metadata_partition.topics[0].partitions[0].current_voters[0].replica_directory_id"):
        "the data directory has no directory id (Kafka's meta.properties directory.id): the zero id",
    ("describe_quorum", "metadata_partition.nodes[0].listeners[0].name"):
        "no controller listener here: the voter is reached on the listener the request came on",
    ("update_features", "downgrade.error_code"): _FIXED_FEATURES,
    ("update_features", "downgrade.error_message"): _FIXED_FEATURES,
}


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_operations_answer_as_kafka(kafka_ref, ours, scenario):
    check_same(scenario, kafka_ref.bootstrap, ours.bootstrap, SCENARIOS, EXPECTED)
