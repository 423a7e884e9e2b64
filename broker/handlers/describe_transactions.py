"""DescribeTransactions (65) v0: state, timeout, start time, producer and partitions per transactional id.

An id the coordinator does not know gets TRANSACTIONAL_ID_NOT_FOUND; DESCRIBE on the
TRANSACTIONAL_ID, else TRANSACTIONAL_ID_AUTHORIZATION_FAILED (KafkaApis). While the
coordinator loads ``__transaction_state`` each id gets COORDINATOR_LOAD_IN_PROGRESS.
"""
from __future__ import annotations

from broker.dispatch import handler
from broker.security.authorize import allowed
from protocol.errors import Errors
from protocol.lazy_messages import DescribeTransactionsResponse
from protocol.messages.registry import ApiKey

_S = DescribeTransactionsResponse.TransactionState
_Topic = DescribeTransactionsResponse.TopicData


@handler(ApiKey.DESCRIBE_TRANSACTIONS, versions=(0, 0))
async def describe_transactions(ctx, req):
    txns = ctx.components.transactions
    out = []
    for tid in req.transactional_ids:
        if not allowed(ctx, "DESCRIBE", "TRANSACTIONAL_ID", tid):
            out.append(_S(error_code=Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, transactional_id=tid,
                          topics=[]))
            continue
        if code := txns.unavailable_code():  # COORDINATOR_LOAD_IN_PROGRESS while __transaction_state loads
            out.append(_S(error_code=code, transactional_id=tid, topics=[]))
            continue
        m = txns.describe(tid)
        if m is None:
            out.append(_S(error_code=Errors.TRANSACTIONAL_ID_NOT_FOUND, transactional_id=tid, topics=[]))
            continue
        by_topic: dict[str, list[int]] = {}
        for t, p in sorted(m.partitions):
            by_topic.setdefault(t, []).append(p)
        out.append(_S(transactional_id=tid, transaction_state=m.state_name, transaction_timeout_ms=m.timeout_ms,
                      transaction_start_time_ms=m.start_ms, producer_id=m.producer_id, producer_epoch=m.epoch,
                      topics=[_Topic(topic=t, partitions=ps) for t, ps in by_topic.items()]))
    return DescribeTransactionsResponse(transaction_states=out)
