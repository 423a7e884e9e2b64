"""AlterConfigs (33) v0-2, the legacy whole-set form, for TOPIC (2), BROKER (4) and GROUP (32).

The configs given become the resource's whole set of overrides: every override left out is
deleted (Kafka's ConfigurationControlManager.legacyAlterConfigResource), applied only if the
resulting set is valid, as IncrementalAlterConfigs validates (INVALID_CONFIG for a topic or
group, INVALID_REQUEST for the broker).  Checked first, as Kafka's ConfigAdminManager.preprocess:
a resource named twice (both get INVALID_REQUEST), a key given twice, a null value, another
resource type (BROKER_LOGGER cannot be set this way), a broker name other than ours or "".  Then
ALTER_CONFIGS on the TOPIC / GROUP, or on the CLUSTER for BROKER resources, else TOPIC_ / GROUP_ /
CLUSTER_AUTHORIZATION_FAILED (ControllerApis.authorizeAlterResource).  ``validate_only``
checks without applying.  (Kafka 4.4 itself never answers a request naming a resource twice: its
AlterConfigsResponse.errors throws on the duplicate while counting errors.)  BROKER: the one node and the cluster default ("") are one set of
dynamic configs here.  CLIENT_METRICS resources are not served (INVALID_REQUEST).
"""
from __future__ import annotations

from collections import Counter

from broker.configs import replace_ops
from broker.dispatch import handler
from broker.handlers.incremental_alter_configs import alter_outcome
from broker.security.authorize import config_resource_error
from protocol.errors import Errors
from protocol.lazy_messages import AlterConfigsResponse
from protocol.messages.registry import ApiKey

_R = AlterConfigsResponse.AlterConfigsResourceResponse


def _precheck(resource, node_id: int) -> str | None:
    """ConfigAdminManager.preprocess's checks of one resource: the INVALID_REQUEST message or None."""
    names = [c.name for c in resource.configs]
    if any(n > 1 for n in Counter(names).values()):
        return "Error due to duplicate config keys"
    nulls = [c.name for c in resource.configs if c.value is None]
    if nulls:
        return "Null value not supported for : " + ", ".join(nulls)
    if resource.resource_type not in (2, 4, 32):
        return f"Unknown resource type {resource.resource_type}"
    if resource.resource_type == 4 and resource.resource_name not in ("", str(node_id)):
        return f"Unexpected broker id, expected {node_id}, but received {resource.resource_name}"
    return None


@handler(ApiKey.ALTER_CONFIGS, versions=(0, 2))
async def alter_configs(ctx, req):
    c = ctx.components
    seen = Counter((r.resource_type, r.resource_name) for r in req.resources)
    out = []
    for r in req.resources:
        def result(code=0, message=None):
            return _R(error_code=code, error_message=message, resource_type=r.resource_type,
                      resource_name=r.resource_name)

        if seen[(r.resource_type, r.resource_name)] > 1:
            out.append(result(Errors.INVALID_REQUEST, "Each resource must appear at most once."))
            continue
        message = _precheck(r, c.node.node_id)
        res = c.configs.get(r.resource_type)
        if message is None and res is None:
            message = f"Unknown resource type {r.resource_type}"
        if message is not None:
            out.append(result(Errors.INVALID_REQUEST, message))
            continue
        denied = config_resource_error(ctx, r.resource_type, r.resource_name, "ALTER_CONFIGS")
        if denied:
            out.append(result(denied))
            continue
        ops = replace_ops(res.overrides(r.resource_name), {x.name: x.value for x in r.configs})
        out.append(result(*await alter_outcome(res, r.resource_name, ops, req.validate_only)))
    return AlterConfigsResponse(responses=out)
