"""AddOffsetsToTxn (25) v0-4: add the group's ``__consumer_offsets`` partition to the transaction.

The coordinator's checks and codes are AddPartitionsToTxn's (INVALID_PRODUCER_ID_MAPPING,
PRODUCER_FENCED, INVALID_PRODUCER_EPOCH in its place below v2, CONCURRENT_TRANSACTIONS); WRITE on the TRANSACTIONAL_ID and READ on
the GROUP, else their *_AUTHORIZATION_FAILED code (KafkaApis).
"""
from __future__ import annotations

from broker.dispatch import handler
from broker.security.authorize import allowed
from broker.topics import CONSUMER_OFFSETS
from broker.transactions import fenced_code
from protocol.errors import Errors
from protocol.lazy_messages import AddOffsetsToTxnResponse
from protocol.messages.registry import ApiKey


@handler(ApiKey.ADD_OFFSETS_TO_TXN, versions=(0, 4))
async def add_offsets_to_txn(ctx, req):
    if not allowed(ctx, "WRITE", "TRANSACTIONAL_ID", req.transactional_id):
        return AddOffsetsToTxnResponse(error_code=Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if not allowed(ctx, "READ", "GROUP", req.group_id):
        return AddOffsetsToTxnResponse(error_code=Errors.GROUP_AUTHORIZATION_FAILED)
    err = await ctx.components.transactions.add_partitions(req.transactional_id, req.producer_id,
                                                           req.producer_epoch, [(CONSUMER_OFFSETS, 0)])
    return AddOffsetsToTxnResponse(error_code=fenced_code(err, ctx.api_version, 2))
