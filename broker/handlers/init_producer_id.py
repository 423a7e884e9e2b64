"""InitProducerId (22) v0-5: producer ids for idempotent and transactional producers.

Without a transactional id every call gets a fresh producer id with epoch 0 (as
Kafka's coordinator does, including the KIP-360 epoch-bump path for idempotent
producers).  With one, the transaction coordinator (``coordinator.transaction``)
answers: a new id or an epoch bump that fences the previous instance, an ongoing
transaction aborted first (CONCURRENT_TRANSACTIONS: retry), INVALID_TRANSACTION_TIMEOUT
for ``transaction.timeout.ms`` outside (0, ``transaction.max.timeout.ms``], v3+
ProducerId/ProducerEpoch checked (KIP-360, else PRODUCER_FENCED: INVALID_PRODUCER_EPOCH below v4,
as KafkaApis.handleInitProducerIdRequest), an empty id INVALID_REQUEST.
Authorization (KafkaApis, KIP-679): a transactional id needs WRITE on it; an idempotent
producer IDEMPOTENT_WRITE on CLUSTER or WRITE on some topic, else CLUSTER_AUTHORIZATION_FAILED.
"""
from __future__ import annotations

from broker.dispatch import handler
from broker.security.authorize import allowed, allowed_any, allowed_cluster
from broker.transactions import fenced_code
from protocol.errors import Errors
from protocol.lazy_messages import InitProducerIdResponse
from protocol.messages.registry import ApiKey


@handler(ApiKey.INIT_PRODUCER_ID, versions=(0, 5))
async def init_producer_id(ctx, req):
    tid = req.transactional_id
    if tid is None:
        if not (allowed_cluster(ctx, "IDEMPOTENT_WRITE") or allowed_any(ctx, "WRITE", "TOPIC")):
            return InitProducerIdResponse(error_code=Errors.CLUSTER_AUTHORIZATION_FAILED, producer_id=-1,
                                          producer_epoch=-1)
        return InitProducerIdResponse(producer_id=ctx.components.producer_ids.next_id(), producer_epoch=0)
    if not allowed(ctx, "WRITE", "TRANSACTIONAL_ID", tid):
        return InitProducerIdResponse(error_code=Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                                      producer_id=-1, producer_epoch=-1)
    expected = (req.producer_id, req.producer_epoch) if ctx.api_version >= 3 else (-1, -1)
    err, pid, epoch = await ctx.components.transactions.init_producer_id(tid, req.transaction_timeout_ms, *expected)
    return InitProducerIdResponse(error_code=fenced_code(err, ctx.api_version, 4), producer_id=pid,
                                  producer_epoch=epoch)
