"""DescribeClientQuotas (48) v0-1: the quota entities matching a filter, with their values.

DESCRIBE_CONFIGS on CLUSTER, else CLUSTER_AUTHORIZATION_FAILED (KafkaApis).  The filter is
Kafka's ``ClientQuotasImage.describe``: components match an entity type by exact name
(MatchType 0), its ``<default>`` entity (1, a null name) or any name (2); ``Strict`` leaves
out entities with types the filter does not name.  A bad filter is a request-level error with
Kafka's message and null entries: INVALID_REQUEST (empty or repeated type, a match string where
none belongs or missing, an unknown match type, ``ip`` combined with ``user`` / ``client-id``),
UNSUPPORTED_VERSION (an unknown entity type).  Entities come sorted by type and name.
"""
from __future__ import annotations

from broker.dispatch import handler
from broker.quotas.store import QuotaRequestError
from broker.security.authorize import allowed_cluster
from protocol.errors import Errors
from protocol.lazy_messages import DescribeClientQuotasResponse as Resp
from protocol.messages.registry import ApiKey


def _error(code: int, message: str) -> Resp:
    resp = Resp(error_code=code, error_message=message)
    resp.entries = None  # null, as Kafka's getErrorResponse (the constructor turns None into [])
    return resp


@handler(ApiKey.DESCRIBE_CLIENT_QUOTAS, versions=(0, 1))
async def describe_client_quotas(ctx, req):
    if not allowed_cluster(ctx, "DESCRIBE_CONFIGS"):
        return _error(Errors.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")
    try:
        found = ctx.components.quotas.store.describe(req.components, req.strict)
    except QuotaRequestError as e:
        return _error(e.code, e.message)
    return Resp(entries=[Resp.EntryData(entity=[Resp.EntityData(entity_type=t, entity_name=n) for t, n in entity],
                                        values=[Resp.ValueData(key=k, value=v) for k, v in values.items()])
                         for entity, values in found])
