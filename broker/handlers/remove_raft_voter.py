"""RemoveRaftVoter (81) v0: removing a controller from the KRaft quorum (``kafka-metadata-quorum.sh
remove-controller``, Admin.removeRaftVoter).  A Kafka broker forwards it to the active controller;
KafkaRaftClient.handleRemoveVoterRequest / RemoveVoterHandler check, in order: the cluster id, if
named, is this cluster's (INCONSISTENT_CLUSTER_ID); the voter has a directory id (INVALID_REQUEST,
"Remove voter request didn't include a valid voter"); then VoterSet.removeVoter, which removes only a
voter with the same id and directory id and never the last one.  The quorum here is one voter, this
node (as DescribeQuorum describes it), so every valid request gets Kafka's answer for a single-voter
quorum: VOTER_NOT_FOUND, "Cannot remove voter ReplicaKey(...) from the set of voters [...]".  ALTER
on the CLUSTER, else CLUSTER_AUTHORIZATION_FAILED (ControllerApis.handleRemoveRaftVoter).
"""
from __future__ import annotations

from broker.dispatch import handler
from broker.handlers.describe_quorum import replica_key_text, voter_change_refused, voter_set_text
from protocol.errors import Errors
from protocol.lazy_messages import RemoveRaftVoterResponse
from protocol.messages.registry import ApiKey


def _answer(code: int, message: str | None) -> RemoveRaftVoterResponse:
    return RemoveRaftVoterResponse(error_code=code, error_message=message)


@handler(ApiKey.REMOVE_RAFT_VOTER, versions=(0, 0))
async def remove_raft_voter(ctx, req):
    refused = voter_change_refused(ctx, req, "Remove")
    if refused is not None:
        return _answer(*refused)
    key = replica_key_text(req.voter_id, req.voter_directory_id)
    return _answer(Errors.VOTER_NOT_FOUND, f"Cannot remove voter {key} from the set of voters "
                                           f"{voter_set_text(ctx.components.node.node_id)}")
