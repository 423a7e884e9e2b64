"""ListPartitionReassignments (46) v0: no reassignment is ever in progress here (every partition
has its one replica on this node; AlterPartitionReassignments completes at once), so the answer
lists no topic, whether topics are named or not (ReplicationControlManager.listPartitionReassignments
lists only partitions with one in progress).  DESCRIBE on the CLUSTER, else
CLUSTER_AUTHORIZATION_FAILED at the top level with each named partition listed bare
(ListPartitionReassignmentsRequest.getErrorResponse).  On Kafka a broker forwards this to the controller.
"""
from __future__ import annotations

from broker.dispatch import handler
from broker.security.authorize import allowed_cluster
from protocol.errors import Errors
from protocol.lazy_messages import ListPartitionReassignmentsResponse
from protocol.messages.registry import ApiKey

_T = ListPartitionReassignmentsResponse.OngoingTopicReassignment
_P = ListPartitionReassignmentsResponse.OngoingPartitionReassignment


@handler(ApiKey.LIST_PARTITION_REASSIGNMENTS, versions=(0, 0))
async def list_partition_reassignments(ctx, req):
    if not allowed_cluster(ctx, "DESCRIBE"):
        return ListPartitionReassignmentsResponse(
            error_code=Errors.CLUSTER_AUTHORIZATION_FAILED, error_message="Cluster authorization failed.",
            topics=[_T(name=t.name, partitions=[_P(partition_index=i) for i in t.partition_indexes])
                    for t in req.topics or ()])
    return ListPartitionReassignmentsResponse(error_message=None, topics=[])
