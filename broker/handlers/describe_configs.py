"""DescribeConfigs (32) v1-4 for TOPIC (2), BROKER (4), CLIENT_METRICS (16) and GROUP (32) resources.

ConfigurationKeys filters; synonyms (most specific first) when IncludeSynonyms;
config types from v3.  Unknown resource types get INVALID_REQUEST, unknown topics
UNKNOWN_TOPIC_OR_PARTITION.  DESCRIBE_CONFIGS on the TOPIC / GROUP, or on the CLUSTER for
BROKER and CLIENT_METRICS resources, else TOPIC_ / GROUP_ / CLUSTER_AUTHORIZATION_FAILED (checked first).
"""
from __future__ import annotations

from broker.dispatch import handler
from broker.log.config import ConfigError
from broker.log.errors import LogError
from broker.security.authorize import config_resource_error
from protocol.errors import Errors, KafkaError
from protocol.lazy_messages import DescribeConfigsResponse
from protocol.messages.registry import ApiKey

_R = DescribeConfigsResponse.DescribeConfigsResult
_C = DescribeConfigsResponse.DescribeConfigsResourceResult
_S = DescribeConfigsResponse.DescribeConfigsSynonym


@handler(ApiKey.DESCRIBE_CONFIGS, versions=(1, 4))
async def describe_configs(ctx, req):
    c = ctx.components
    out = []
    for r in req.resources:
        res = c.configs.get(r.resource_type)
        denied = config_resource_error(ctx, r.resource_type, r.resource_name, "DESCRIBE_CONFIGS")
        if denied:
            out.append(_R(error_code=denied, error_message=None, resource_type=r.resource_type,
                          resource_name=r.resource_name, configs=[]))
            continue
        if res is None:
            out.append(_R(error_code=Errors.INVALID_REQUEST, error_message=f"Unsupported resource type {r.resource_type}",
                          resource_type=r.resource_type, resource_name=r.resource_name))
            continue
        try:
            entries = res.describe(r.resource_name)
        except (LogError, KafkaError) as e:
            out.append(_R(error_code=e.code, error_message=str(e), resource_type=r.resource_type,
                          resource_name=r.resource_name))
            continue
        except ConfigError as e:
            out.append(_R(error_code=Errors.INVALID_CONFIG, error_message=str(e), resource_type=r.resource_type,
                          resource_name=r.resource_name))
            continue
        keys = set(r.configuration_keys) if r.configuration_keys else None
        configs = []
        for e in entries:
            if keys is not None and e.name not in keys:
                continue
            syn = [_S(name=n, value=v, source=s) for n, v, s in e.synonyms] if req.include_synonyms else []
            configs.append(_C(name=e.name, value=e.value, read_only=e.read_only, config_source=e.source,
                              is_sensitive=e.sensitive, synonyms=syn, config_type=e.type,
                              documentation=None))  # null unless asked for (ConfigHelper); we have none
        out.append(_R(resource_type=r.resource_type, resource_name=r.resource_name, configs=configs))
    return DescribeConfigsResponse(results=out)
