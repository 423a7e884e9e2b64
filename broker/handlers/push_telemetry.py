"""PushTelemetry (72) v0 (KIP-714), as Kafka 4.4's KafkaApis / ClientMetricsManager.

Errors in Kafka's order: INVALID_REQUEST for the zero (or another reserved) instance id or a push after
a terminating one; THROTTLING_QUOTA_EXCEEDED sooner than the push interval (not for the first push after
a get, nor a terminating push); UNKNOWN_SUBSCRIPTION_ID when the subscription id is not the instance's
current one (the subscriptions changed: the client gets them again); UNSUPPORTED_COMPRESSION_TYPE for a
codec we cannot decompress; TELEMETRY_TOO_LARGE above ``telemetry.max.bytes``; INVALID_RECORD when the
payload does not decompress or is not an OTLP MetricsData.  Accepted metrics are shown on ``/metrics``
(``broker/client_metrics.py``); no ACL check, as Kafka.
"""
from __future__ import annotations

from broker.client_metrics import request_attrs
from broker.dispatch import handler
from protocol.lazy_messages import PushTelemetryResponse
from protocol.messages.registry import ApiKey


@handler(ApiKey.PUSH_TELEMETRY, versions=(0, 0))
async def push_telemetry(ctx, req):
    error = ctx.components.client_metrics.push(req.client_instance_id, request_attrs(ctx), req.subscription_id,
                                               req.terminating, req.compression_type, req.metrics)
    return PushTelemetryResponse(error_code=error)
