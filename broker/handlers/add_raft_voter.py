"""AddRaftVoter (80) v0-1: adding a controller to the KRaft quorum (``kafka-metadata-quorum.sh
add-controller``, Admin.addRaftVoter).  A Kafka broker forwards it to the active controller, whose
KafkaRaftClient.handleAddVoterRequest / AddVoterHandler check, in order: the cluster id, if named,
is this cluster's (INCONSISTENT_CLUSTER_ID, "The given id ... doesn't match the cluster id ...");
the voter has a directory id (INVALID_REQUEST, "Add voter request didn't include a valid voter");
the voter is not already one (DUPLICATE_VOTER, "The voter id for ReplicaKey(...) is already part of
the set of voters [...]."; the one voter here is this node, as DescribeQuorum describes it).  Those
answers are Kafka's.  A genuinely new voter is where Kafka would contact the new controller and
replicate the metadata log to it; sharebroker is one node with no metadata log to replicate, so it
refuses with UNSUPPORTED_VERSION (the code Kafka gives a quorum that cannot be reconfigured) and a
message saying why: a deliberate difference (README "Kafka 4.4's client APIs").  Kafka's check that
the voter names an endpoint for the controller listener is not made (there is no controller listener
here; a new voter is refused either way).  ALTER on the CLUSTER, else CLUSTER_AUTHORIZATION_FAILED
(ControllerApis.handleAddRaftVoter, AddRaftVoterRequest.getErrorResponse: the code's message).
"""
from __future__ import annotations

from broker.dispatch import handler
from broker.handlers.describe_quorum import replica_key_text, voter_change_refused, voter_set_text
from protocol.errors import Errors
from protocol.lazy_messages import AddRaftVoterResponse
from protocol.messages.registry import ApiKey


def _answer(code: int, message: str | None) -> AddRaftVoterResponse:
    return AddRaftVoterResponse(error_code=code, error_message=message)


@handler(ApiKey.ADD_RAFT_VOTER, versions=(0, 1))
async def add_raft_voter(ctx, req):
    refused = voter_change_refused(ctx, req, "Add")
    if refused is not None:
        return _answer(*refused)
    node = ctx.components.node.node_id
    key = replica_key_text(req.voter_id, req.voter_directory_id)
    if req.voter_id == node:
        return _answer(Errors.DUPLICATE_VOTER,
                       f"The voter id for {key} is already part of the set of voters {voter_set_text(node)}.")
    return _answer(Errors.UNSUPPORTED_VERSION,
                   f"Cluster doesn't support adding voter {key}: sharebroker is a single node whose quorum "
                   f"is {voter_set_text(node)}; it has no metadata log to replicate to another controller")
