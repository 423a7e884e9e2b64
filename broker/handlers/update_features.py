"""UpdateFeatures (57) v0-2: the finalized feature levels this broker runs with are fixed
(``api_versions.FEATURES``: metadata.version 33, kraft.version 1, group.version 1, share.version 2,
transaction.version 2, eligible.leader.replicas.version 1, streams.version 1): each is behaviour the code has, not a switch it honours (it would still
serve KIP-848 groups at group.version 0, share groups at share.version 0, ...).  So an update
to the current level succeeds and changes nothing, and any other level is refused.

Each update is checked in the order of Kafka's FeatureControlManager.updateFeature, with its
messages ("Invalid update version V for feature F. <reason>"), all INVALID_UPDATE_VERSION: an
unknown upgrade type (v1+ ``upgrade_type`` other than 1 upgrade, 2 safe / 3 unsafe downgrade; v0
requests carry the default, upgrade, as the controller reads them); a level below 0; a level
outside the supported range ApiVersions advertises ("Local controller N only supports versions
0-2"; "... does not support this feature." for one without a range); a lower level with upgrade
type upgrade, or a higher one with a downgrade type; a name Kafka does not know ("Feature f not
found."); then, here, any level other than the finalized one ("sharebroker cannot change the
finalized level (L)").  The first failing update fails the whole request (top-level error
"The update failed for all features since the following feature had an error: ..."); nothing is
applied either way, ``validate_only`` (v1+) or not.  On success v0-1 list each feature with NONE,
v2 lists none (QuorumController.updateFeatures).  ALTER on the CLUSTER, else
CLUSTER_AUTHORIZATION_FAILED at the top level.  On Kafka a broker forwards this to the controller.
"""
from __future__ import annotations

from broker.dispatch import handler
from broker.handlers.api_versions import FEATURES
from broker.security.authorize import allowed_cluster
from protocol.errors import Errors
from protocol.lazy_messages import UpdateFeaturesResponse
from protocol.messages.registry import ApiKey

_R = UpdateFeaturesResponse.UpdatableFeatureResult
UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE = 1, 2, 3
# Kafka 4.4's production features without a range here (supported 0-0, finalized 0)
_DISABLED = ()


def _range_text(lo: int, hi: int) -> str:
    return str(lo) if lo == hi else f"{lo}-{hi}"


def feature_error(node_id: int, name: str, level: int, upgrade_type: int) -> str | None:
    """Why ``name`` cannot be set to ``level`` (Kafka's reason), or None when it is a no-op."""
    def invalid(reason: str) -> str:
        return f"Invalid update version {level} for feature {name}. {reason}"

    if upgrade_type not in (UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE):
        return invalid("The controller does not support the given upgrade type.")
    lo, hi, current = FEATURES.get(name, (0, 0, 0))
    if level < 0:
        return invalid("A feature version cannot be less than 0.")
    if not lo <= level <= hi:
        what = f"Local controller {node_id}"
        return invalid(f"{what} does not support this feature." if hi == 0
                       else f"{what} only supports versions {_range_text(lo, hi)}")
    if level < current and upgrade_type == UPGRADE:
        return invalid("Can't downgrade the version of this feature without setting the upgrade type to "
                       "either safe or unsafe downgrade.")
    if level > current and upgrade_type != UPGRADE:
        return invalid("Can't downgrade to a newer version.")
    if name not in FEATURES and name not in _DISABLED:
        return invalid(f"Feature {name} not found.")
    if level != current:
        return invalid(f"sharebroker cannot change the finalized level ({current}).")
    return None


@handler(ApiKey.UPDATE_FEATURES, versions=(0, 2))
async def update_features(ctx, req):
    if not allowed_cluster(ctx, "ALTER"):
        return UpdateFeaturesResponse(error_code=Errors.CLUSTER_AUTHORIZATION_FAILED,
                                      error_message="Cluster authorization failed.", results=[])
    node_id = ctx.components.node.node_id
    updates = {u.feature: u for u in req.feature_updates}  # a name given twice: the last one (a map in Kafka)
    for name, u in updates.items():
        reason = feature_error(node_id, name, u.max_version_level, u.upgrade_type)
        if reason is not None:
            return UpdateFeaturesResponse(
                error_code=Errors.INVALID_UPDATE_VERSION, results=[],
                error_message=f"The update failed for all features since the following feature had an error: {reason}")
    # v0-1: each feature with NONE and, as Kafka, Errors.NONE.message(): "NONE"
    results = [_R(feature=u.feature, error_message="NONE") for u in req.feature_updates] if ctx.api_version <= 1 else []
    return UpdateFeaturesResponse(error_message=None, results=results)
