"""EndTxn (26) v0-5: commit or abort the producer's transaction.

Answered once the transaction is complete: Prepare{Commit,Abort} logged on
``__transaction_state``, markers written to every partition of the transaction,
Complete{Commit,Abort} logged (Kafka answers after the Prepare record; with the
markers local, completing first spares the client CONCURRENT_TRANSACTIONS retries).
v5+ is transaction.version 2 (KIP-890): the epoch is bumped and returned.
WRITE on the TRANSACTIONAL_ID, else TRANSACTIONAL_ID_AUTHORIZATION_FAILED. PRODUCER_FENCED is
INVALID_PRODUCER_EPOCH below v2 (KafkaApis.handleEndTxnRequest).
"""
from __future__ import annotations

from broker.dispatch import handler
from broker.security.authorize import allowed
from broker.transactions import fenced_code
from protocol.errors import Errors
from protocol.lazy_messages import EndTxnResponse
from protocol.messages.registry import ApiKey


@handler(ApiKey.END_TXN, versions=(0, 5))
async def end_txn(ctx, req):
    if not allowed(ctx, "WRITE", "TRANSACTIONAL_ID", req.transactional_id):
        return EndTxnResponse(error_code=Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    err, pid, epoch = await ctx.components.transactions.end_txn(
        req.transactional_id, req.producer_id, req.producer_epoch, req.committed, tv2=ctx.api_version >= 5)
    return EndTxnResponse(error_code=fenced_code(err, ctx.api_version, 2), producer_id=pid, producer_epoch=epoch)
