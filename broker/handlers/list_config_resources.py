"""ListConfigResources (74) v0-1: v0 (ListClientMetricsResources) lists client-metrics subscriptions;
v1 takes resource types (empty = all we know: TOPIC, BROKER, CLIENT_METRICS, GROUP) and lists their names.
DESCRIBE_CONFIGS on the CLUSTER or CLUSTER_AUTHORIZATION_FAILED, as KafkaApis."""
from __future__ import annotations

from broker.dispatch import handler
from broker.security.authorize import allowed_cluster
from protocol.errors import Errors
from protocol.lazy_messages import ListConfigResourcesResponse
from protocol.messages.registry import ApiKey

CLIENT_METRICS = 16


@handler(ApiKey.LIST_CONFIG_RESOURCES, versions=(0, 1))
async def list_config_resources(ctx, req):
    c = ctx.components
    if not allowed_cluster(ctx, "DESCRIBE_CONFIGS"):
        return ListConfigResourcesResponse(error_code=Errors.CLUSTER_AUTHORIZATION_FAILED, config_resources=[])
    types = [CLIENT_METRICS] if ctx.api_version == 0 else (list(req.resource_types) or c.configs.types())
    out = []
    for t in types:
        res = c.configs.get(t)
        if res is None:
            return ListConfigResourcesResponse(error_code=Errors.UNSUPPORTED_VERSION)
        out += [ListConfigResourcesResponse.ConfigResource(resource_name=n, resource_type=t) for n in res.names()]
    return ListConfigResourcesResponse(config_resources=out)
