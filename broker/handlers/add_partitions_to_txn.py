"""AddPartitionsToTxn (24) v0-5: add partitions to a producer's transaction.

v0-3 (clients): one transaction; every partition gets the transaction's error
code, except that unknown topic partitions get UNKNOWN_TOPIC_OR_PARTITION and the
others OPERATION_NOT_ATTEMPTED (KafkaApis).  v4-5 (Kafka's broker-to-broker batch,
KIP-890 part 1): several transactions; ``VerifyOnly`` answers whether the
partitions are already in the ongoing transaction (INVALID_TXN_STATE if not)
without adding them.  WRITE on the TRANSACTIONAL_ID (v0-3; v4+ CLUSTER_ACTION on
the cluster, as Kafka) and WRITE on each TOPIC, else the *_AUTHORIZATION_FAILED codes.
PRODUCER_FENCED is INVALID_PRODUCER_EPOCH below v2 (KafkaApis.handleAddPartitionsToTxnRequest).
"""
from __future__ import annotations

from broker.dispatch import handler
from broker.security.authorize import allowed, allowed_cluster
from broker.transactions import fenced_code
from protocol.errors import Errors
from protocol.lazy_messages import AddPartitionsToTxnResponse
from protocol.messages.registry import ApiKey

_R = AddPartitionsToTxnResponse
_Topic = _R.AddPartitionsToTxnTopicResult
_Part = _R.AddPartitionsToTxnPartitionResult


async def _one(ctx, tid: str, pid: int, epoch: int, topics, verify_only: bool = False) -> list:
    c = ctx.components
    wanted = [(t.name, p) for t in topics for p in t.partitions]
    codes: dict[tuple[str, int], int] = {}
    if not allowed(ctx, "WRITE", "TRANSACTIONAL_ID", tid):
        codes = {tp: Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED for tp in wanted}
    else:
        for t, p in wanted:
            if not allowed(ctx, "WRITE", "TOPIC", t):
                codes[(t, p)] = Errors.TOPIC_AUTHORIZATION_FAILED
            elif not c.transactions.partition_exists(t, p):
                codes[(t, p)] = Errors.UNKNOWN_TOPIC_OR_PARTITION
        if codes:
            codes = {tp: codes.get(tp, Errors.OPERATION_NOT_ATTEMPTED) for tp in wanted}
        elif verify_only:
            codes = {tp: c.transactions.verify(tid, pid, epoch, tp) for tp in wanted}
        else:
            err = fenced_code(await c.transactions.add_partitions(tid, pid, epoch, wanted), ctx.api_version, 2)
            codes = {tp: err for tp in wanted}
    out: dict[str, list] = {}
    for (t, p), code in codes.items():
        out.setdefault(t, []).append(_Part(partition_index=p, partition_error_code=code))
    return [_Topic(name=t, results_by_partition=parts) for t, parts in out.items()]


@handler(ApiKey.ADD_PARTITIONS_TO_TXN, versions=(0, 5))
async def add_partitions_to_txn(ctx, req):
    if ctx.api_version <= 3:
        return _R(results_by_topic_v3_and_below=await _one(
            ctx, req.v3_and_below_transactional_id, req.v3_and_below_producer_id,
            req.v3_and_below_producer_epoch, req.v3_and_below_topics))
    if not allowed_cluster(ctx, "CLUSTER_ACTION"):
        return _R(error_code=Errors.CLUSTER_AUTHORIZATION_FAILED, results_by_transaction=[])
    results = []
    for txn in req.transactions:
        topics = await _one(ctx, txn.transactional_id, txn.producer_id, txn.producer_epoch, txn.topics,
                            txn.verify_only)
        results.append(_R.AddPartitionsToTxnResult(transactional_id=txn.transactional_id, topic_results=topics))
    return _R(results_by_transaction=results)
