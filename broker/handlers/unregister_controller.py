"""UnregisterController (94) v0 (KIP-1312): removing a departed controller's registration
(``kafka-cluster.sh unregister-controller --id N``, ``kafka-metadata-quorum.sh remove-controller
--unregister``).  A Kafka broker forwards it to the controller, whose QuorumController.unregisterController
refuses its own id first (INVALID_REQUEST, "Controller cannot unregister itself while it is active."),
then, at metadata.version 4.4-IV2 (which this node finalizes, ``api_versions.FEATURES``), an id with no
controller registration (ClusterControlManager.unregisterController: CONTROLLER_ID_NOT_REGISTERED,
"Controller ID N is not currently registered."): this one node is the only controller, so every other id.  ALTER on the CLUSTER, else CLUSTER_AUTHORIZATION_FAILED
(ControllerApis.handleUnregisterController).
"""
from __future__ import annotations

from broker.dispatch import handler
from broker.security.authorize import allowed_cluster
from protocol.errors import Errors
from protocol.lazy_messages import UnregisterControllerResponse
from protocol.messages.registry import ApiKey


@handler(ApiKey.UNREGISTER_CONTROLLER, versions=(0, 0))
async def unregister_controller(ctx, req):
    if not allowed_cluster(ctx, "ALTER"):
        code, message = Errors.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed."
    elif req.controller_id == ctx.components.node.node_id:
        code, message = Errors.INVALID_REQUEST, "Controller cannot unregister itself while it is active."
    else:
        code, message = (Errors.CONTROLLER_ID_NOT_REGISTERED,
                         f"Controller ID {req.controller_id} is not currently registered.")
    return UnregisterControllerResponse(error_code=code, error_message=message)
