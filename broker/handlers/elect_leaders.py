"""ElectLeaders (43) v0-2: this node is the only replica of every partition, so it is already the
preferred leader and a partition always has a leader: as Kafka's
ReplicationControlManager.electLeaders answers for such a partition, both PREFERRED (0) and
UNCLEAN (1) elections are ELECTION_NOT_NEEDED, and nothing changes (leader epochs stay 0).

Named partitions: each answered, UNKNOWN_TOPIC_OR_PARTITION ("No such topic as t" / "No such
partition as t-p") when it does not exist.  A null list means every partition: every topic is
listed, with no partition (Kafka leaves out partitions whose election was not needed).  Another
election type is UNKNOWN_SERVER_ERROR for the whole request, as the controller's failure to read it.
ALTER on the CLUSTER, else CLUSTER_AUTHORIZATION_FAILED, top level (v1+) and on every named
partition (ElectLeadersRequest.getErrorResponse).  On Kafka a broker forwards this to the controller.
"""
from __future__ import annotations

from broker.dispatch import handler
from broker.security.authorize import allowed_cluster
from protocol.errors import Errors
from protocol.lazy_messages import ElectLeadersResponse
from protocol.messages.registry import ApiKey

_R = ElectLeadersResponse.ReplicaElectionResult
_P = ElectLeadersResponse.PartitionResult
PREFERRED, UNCLEAN = 0, 1
_NOT_NEEDED = "Leader election not needed for topic partition."  # Errors.ELECTION_NOT_NEEDED's message


def _error_response(req, code: int, message: str | None):
    results = [_R(topic=t.topic, partition_result=[_P(partition_id=p, error_code=code, error_message=message)
                                                   for p in t.partitions])
               for t in req.topic_partitions or ()]
    return ElectLeadersResponse(error_code=code, replica_election_results=results)


@handler(ApiKey.ELECT_LEADERS, versions=(0, 2))
async def elect_leaders(ctx, req):
    if not allowed_cluster(ctx, "ALTER"):
        return _error_response(req, Errors.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")
    if req.election_type not in (PREFERRED, UNCLEAN):
        return _error_response(req, Errors.UNKNOWN_SERVER_ERROR, None)  # no message (ApiError.fromThrowable)
    logs = ctx.components.logs
    if req.topic_partitions is None:
        return ElectLeadersResponse(replica_election_results=[_R(topic=n, partition_result=[])
                                                              for n in sorted(logs.topics)])
    results = []
    for t in req.topic_partitions:
        parts = []
        info = logs.topic(t.topic)
        for p in t.partitions:
            if info is None:
                parts.append(_P(partition_id=p, error_code=Errors.UNKNOWN_TOPIC_OR_PARTITION,
                                error_message=f"No such topic as {t.topic}"))
            elif not 0 <= p < info.partitions:
                parts.append(_P(partition_id=p, error_code=Errors.UNKNOWN_TOPIC_OR_PARTITION,
                                error_message=f"No such partition as {t.topic}-{p}"))
            else:
                parts.append(_P(partition_id=p, error_code=Errors.ELECTION_NOT_NEEDED, error_message=_NOT_NEEDED))
        results.append(_R(topic=t.topic, partition_result=parts))
    return ElectLeadersResponse(replica_election_results=results)
