"""DescribeQuorum (55) v0-2: the KRaft metadata quorum as a single-node Kafka in combined mode
describes it: one voter, this node, leader of ``__cluster_metadata``-0 (KafkaRaftClient /
RaftUtil.singletonDescribeQuorumResponse), no observers.

There is no metadata log here (topics and configs live in ``meta/``): the leader epoch is 1 (the
first election of a new quorum) and the high watermark and the voter's log end offset are the
finalized-features epoch ApiVersions reports (``api_versions.FEATURES_EPOCH``: in Kafka that epoch
is the metadata offset of the last feature change, which nothing here changes), so the quorum
never lags.  The voter's last fetch and caught-up times are now (the leader's own, as Kafka); v2
adds its directory id (none: the zero id) and the node with the listener the request came on.
A request for anything but that one partition: UNKNOWN_TOPIC_OR_PARTITION on each requested
partition.  DESCRIBE on the CLUSTER, else CLUSTER_AUTHORIZATION_FAILED at the top level.  Kafka
brokers forward this to the controller; ApiVersions advertises it the same way.  AddRaftVoter and
RemoveRaftVoter (``add_raft_voter``, ``remove_raft_voter``) answer against this same voter set
(``voter_set_text``, ``voter_change_refused``).
"""
from __future__ import annotations

import time

from broker.dispatch import handler
from broker.handlers.api_versions import FEATURES_EPOCH
from broker.security.authorize import allowed_cluster
from protocol.errors import Errors
from protocol.lazy_messages import DescribeQuorumResponse
from protocol.messages.registry import ApiKey
from protocol.primitives import ZERO_UUID

METADATA_TOPIC = "__cluster_metadata"
LEADER_EPOCH = 1
_T = DescribeQuorumResponse.TopicData
_P = DescribeQuorumResponse.PartitionData
_V = DescribeQuorumResponse.ReplicaState
_N = DescribeQuorumResponse.Node
_L = DescribeQuorumResponse.Listener
_UNKNOWN = "This server does not host this topic-partition."  # Errors.UNKNOWN_TOPIC_OR_PARTITION's message


def replica_key_text(replica_id: int, directory_id: bytes) -> str:
    """ReplicaKey.toString: a zero directory id is undefined."""
    from broker.client_metrics import uuid_str
    d = "<undefined>" if directory_id == ZERO_UUID else uuid_str(directory_id)
    return f"ReplicaKey(id={replica_id}, directoryId={d})"


def voter_set_text(node_id: int) -> str:
    """The voter set's keys as KafkaRaftClient's messages print them: this node, with no directory id
    (what DescribeQuorum v2 reports for it)."""
    return f"[{replica_key_text(node_id, ZERO_UUID)}]"


def voter_change_refused(ctx, req, verb: str) -> tuple[int, str] | None:
    """What AddRaftVoter and RemoveRaftVoter (``verb`` "Add" / "Remove") check first, in Kafka's order:
    ALTER on the CLUSTER (ControllerApis; the code's own message), the cluster id if the request names
    one (KafkaRaftClient.hasValidClusterId), and a voter directory id.  (code, message), or None."""
    if not allowed_cluster(ctx, "ALTER"):
        return Errors.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed."
    ours = ctx.components.node.cluster_id
    if req.cluster_id is not None and req.cluster_id != ours:
        return Errors.INCONSISTENT_CLUSTER_ID, f'The given id "{req.cluster_id}" doesn\'t match the cluster id "{ours}"'
    if req.voter_directory_id == ZERO_UUID:
        return Errors.INVALID_REQUEST, f"{verb} voter request didn't include a valid voter"
    return None


def _valid(req) -> bool:
    """RaftUtil.hasValidTopicPartition: exactly one topic, the metadata topic, with exactly partition 0."""
    return (len(req.topics) == 1 and req.topics[0].topic_name == METADATA_TOPIC
            and len(req.topics[0].partitions) == 1 and req.topics[0].partitions[0].partition_index == 0)


@handler(ApiKey.DESCRIBE_QUORUM, versions=(0, 2))
async def describe_quorum(ctx, req):
    if not allowed_cluster(ctx, "DESCRIBE"):
        return DescribeQuorumResponse(error_code=Errors.CLUSTER_AUTHORIZATION_FAILED,
                                      error_message="Cluster authorization failed.")
    if not _valid(req):
        return DescribeQuorumResponse(error_message="", topics=[
            _T(topic_name=t.topic_name, partitions=[
                _P(partition_index=p.partition_index, error_code=Errors.UNKNOWN_TOPIC_OR_PARTITION,
                   error_message=_UNKNOWN)
                for p in t.partitions]) for t in req.topics])
    node = ctx.components.node.node_id
    now = int(time.time() * 1000)
    voter = _V(replica_id=node, log_end_offset=FEATURES_EPOCH, last_fetch_timestamp=now, last_caught_up_timestamp=now)
    part = _P(partition_index=0, error_message="", leader_id=node, leader_epoch=LEADER_EPOCH,
              high_watermark=FEATURES_EPOCH, current_voters=[voter], observers=[])
    nodes = []
    if ctx.api_version >= 2:
        host, port = ctx.endpoint()
        name = ctx.listener.name if ctx.listener is not None else "PLAINTEXT"
        nodes = [_N(node_id=node, listeners=[_L(name=name, host=host, port=port)])]
    return DescribeQuorumResponse(error_message="", topics=[_T(topic_name=METADATA_TOPIC, partitions=[part])],
                                  nodes=nodes)
