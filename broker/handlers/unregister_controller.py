"""UnregisterController (94) v0 (KIP-1312): removing a departed controller's registration
(``kafka-cluster.sh unregister-controller --id N``, ``kafka-metadata-quorum.sh remove-controller
--unregister``).  A Kafka broker forwards it to the controller, whose QuorumController.unregisterController
refuses its own id first (INVALID_REQUEST, "Controller cannot unregister itself while it is active."),
then, below metadata.version 4.4-IV2, every other id (ClusterControlManager.unregisterController:
UNSUPPORTED_VERSION, "The current MetadataVersion is too old to support controller unregistration.").
This node finalizes metadata.version 4.4-IV0 (``api_versions.FEATURES``), so those are the two answers,
as Kafka gives them at that level; ``kafka-cluster.sh`` prints "The target cluster does not support the
controller unregistration API." for the second.  ALTER on the CLUSTER, else CLUSTER_AUTHORIZATION_FAILED
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
        code, message = (Errors.UNSUPPORTED_VERSION,
                         "The current MetadataVersion is too old to support controller unregistration.")
    return UnregisterControllerResponse(error_code=code, error_message=message)
