"""IncrementalAlterConfigs (44) v0-1: SET / DELETE / APPEND / SUBTRACT on TOPIC, BROKER, GROUP,
CLIENT_METRICS (KIP-714 subscriptions: broker/client_metrics.py).

Each resource is validated as a whole and applied only if every operation is
valid (INVALID_CONFIG otherwise, with Kafka's message); a key listed twice for one
resource is INVALID_REQUEST.  ``validateOnly`` checks without applying.  ALTER_CONFIGS on the TOPIC / GROUP, or on the
CLUSTER for BROKER and CLIENT_METRICS resources, else TOPIC_ / GROUP_ / CLUSTER_AUTHORIZATION_FAILED (checked first).
"""
from __future__ import annotations

from collections import Counter

from broker.dispatch import handler
from broker.log.config import ConfigError
from broker.log.errors import LogError
from broker.security.authorize import config_resource_error
from protocol.errors import Errors, KafkaError
from protocol.lazy_messages import IncrementalAlterConfigsResponse
from protocol.messages.registry import ApiKey

_R = IncrementalAlterConfigsResponse.AlterConfigsResourceResponse


@handler(ApiKey.INCREMENTAL_ALTER_CONFIGS, versions=(0, 1))
async def incremental_alter_configs(ctx, req):
    c = ctx.components
    out = []
    for r in req.resources:
        def result(code=0, message=None):
            return _R(error_code=code, error_message=message, resource_type=r.resource_type,
                      resource_name=r.resource_name)

        res = c.configs.get(r.resource_type)
        denied = config_resource_error(ctx, r.resource_type, r.resource_name, "ALTER_CONFIGS")
        if denied:
            out.append(result(denied))
            continue
        if res is None:
            out.append(result(Errors.INVALID_REQUEST, f"Unexpected resource type {r.resource_type}"))
            continue
        dupes = [k for k, n in Counter(c.name for c in r.configs).items() if n > 1]
        if dupes:
            out.append(result(Errors.INVALID_REQUEST, f"Error due to duplicate config keys : {','.join(dupes)}"))
            continue
        out.append(result(*await alter_outcome(res, r.resource_name, r.configs, req.validate_only)))
    return IncrementalAlterConfigsResponse(responses=out)


async def alter_outcome(res, name: str, ops, validate_only: bool) -> tuple[int, str | None]:
    """Apply ``ops`` to one config resource (AlterConfigs shares it): (0, None) or the error code and message."""
    try:
        await _maybe_await(res.alter(name, ops, validate_only))
    except (LogError, KafkaError) as e:
        return e.code, str(e)
    except ConfigError as e:
        return Errors.INVALID_CONFIG, str(e)
    return Errors.NONE, None


async def _maybe_await(x):
    if hasattr(x, "__await__"):
        return await x
    return x
