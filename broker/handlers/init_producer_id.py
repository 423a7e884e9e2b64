"""InitProducerId (22) v0-5: producer ids for idempotent producers.

Without a transactional id every call gets a fresh producer id with epoch 0 (as
Kafka's coordinator does, including the KIP-360 epoch-bump path for idempotent
producers).  Not implemented yet: transactions - a transactional id is refused
with TRANSACTIONAL_ID_AUTHORIZATION_FAILED, a fatal error that tells the client
plainly, instead of a retriable one that would spin.
Authorization (KafkaApis, KIP-679): a transactional id needs WRITE on it; an idempotent
producer IDEMPOTENT_WRITE on CLUSTER or WRITE on some topic, else CLUSTER_AUTHORIZATION_FAILED.
"""
from __future__ import annotations

from broker.dispatch import handler
from broker.security.authorize import allowed_any, allowed_cluster
from protocol.errors import Errors
from protocol.messages.init_producer_id import InitProducerIdResponse
from protocol.messages.registry import ApiKey


@handler(ApiKey.INIT_PRODUCER_ID, versions=(0, 5))
async def init_producer_id(ctx, req):
    if req.transactional_id is None and not (allowed_cluster(ctx, "IDEMPOTENT_WRITE")
                                             or allowed_any(ctx, "WRITE", "TOPIC")):
        return InitProducerIdResponse(error_code=Errors.CLUSTER_AUTHORIZATION_FAILED, producer_id=-1, producer_epoch=-1)
    if req.transactional_id is not None:
        return InitProducerIdResponse(error_code=Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                                      producer_id=-1, producer_epoch=-1)
    return InitProducerIdResponse(producer_id=ctx.components.producer_ids.next_id(), producer_epoch=0)
