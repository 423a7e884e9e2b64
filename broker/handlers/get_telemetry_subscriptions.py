"""GetTelemetrySubscriptions (71) v0 (KIP-714), as Kafka 4.4's KafkaApis / ClientMetricsManager.

A client sending the zero uuid is given a new client instance id; the answer carries the instance's
subscription id, the metrics it asks for (the matching CLIENT_METRICS subscriptions' prefixes; ``*`` =
all; none when no subscription matches), the push interval (300000 ms when none matches), the
compression types we can decompress (Kafka's order: zstd, lz4, gzip, snappy), ``telemetry.max.bytes``
and DeltaTemporality true.  A second request sooner than the push interval is THROTTLING_QUOTA_EXCEEDED
(unless the last push failed with UNKNOWN_SUBSCRIPTION_ID or UNSUPPORTED_COMPRESSION_TYPE).  No ACL
check, as Kafka.  The rules live in ``broker/client_metrics.py``.
"""
from __future__ import annotations

from broker.client_metrics import request_attrs
from broker.dispatch import handler
from protocol.lazy_messages import GetTelemetrySubscriptionsResponse
from protocol.messages.registry import ApiKey


@handler(ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, versions=(0, 0))
async def get_telemetry_subscriptions(ctx, req):
    m = ctx.components.client_metrics
    error, inst = m.get_subscriptions(req.client_instance_id, request_attrs(ctx))
    if error:
        return GetTelemetrySubscriptionsResponse(error_code=error)
    return GetTelemetrySubscriptionsResponse(
        client_instance_id=inst.instance_id, subscription_id=inst.subscription_id,
        accepted_compression_types=list(m.accepted_compression), push_interval_ms=inst.interval_ms,
        telemetry_max_bytes=m.max_bytes, delta_temporality=True, requested_metrics=list(inst.metrics))
