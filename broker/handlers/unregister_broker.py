"""UnregisterBroker (64) v0: removing a decommissioned broker's registration (``kafka-cluster.sh
unregister --id N``, Admin.unregisterBroker).  A Kafka broker forwards it to the controller, whose
ReplicationControlManager.unregisterBroker refuses an id with no registration: BROKER_ID_NOT_REGISTERED,
"Broker ID N is not currently registered" (UnregisterBrokerRequest.getErrorResponse: the exception's
message).  The only registered broker here is this node.  Kafka would unregister even the running
broker (it then stays fenced and out of the cluster's metadata until restarted); a single node that
did so would serve nothing, so here this node refuses its own id with INVALID_REQUEST, "Broker cannot
unregister itself while it is active." (the words Kafka's controller uses for UnregisterController
on itself): a deliberate difference (README "Kafka 4.4's client APIs").  ALTER on the CLUSTER, else
CLUSTER_AUTHORIZATION_FAILED (ControllerApis.handleUnregisterBroker).
"""
from __future__ import annotations

from broker.dispatch import handler
from broker.security.authorize import allowed_cluster
from protocol.errors import Errors
from protocol.lazy_messages import UnregisterBrokerResponse
from protocol.messages.registry import ApiKey


@handler(ApiKey.UNREGISTER_BROKER, versions=(0, 0))
async def unregister_broker(ctx, req):
    if not allowed_cluster(ctx, "ALTER"):
        code, message = Errors.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed."
    elif req.broker_id == ctx.components.node.node_id:
        code, message = Errors.INVALID_REQUEST, "Broker cannot unregister itself while it is active."
    else:
        code, message = Errors.BROKER_ID_NOT_REGISTERED, f"Broker ID {req.broker_id} is not currently registered"
    return UnregisterBrokerResponse(error_code=code, error_message=message)
