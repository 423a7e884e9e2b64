"""TxnOffsetCommit (28) v0-6: offsets committed as part of a producer's transaction.

The ``__consumer_offsets`` partition must be in the producer's ongoing transaction
(AddOffsetsToTxn; v5+, transaction.version 2, adds it implicitly as Kafka's
KIP-890 verification does): otherwise every partition gets the coordinator's code
(INVALID_PRODUCER_ID_MAPPING, INVALID_PRODUCER_EPOCH, and for a partition not in the
transaction TRANSACTION_ABORTABLE at v4, INVALID_TXN_STATE below).  The group
coordinator then validates the member / generation (ILLEGAL_GENERATION,
UNKNOWN_MEMBER_ID, ...; a producer without group metadata, generation -1, is not
checked), appends the offsets in the producer's transaction and holds them pending:
they become the group's committed offsets only when the COMMIT marker is written.
v6 addresses topics by id.  WRITE on the TRANSACTIONAL_ID and READ on the GROUP, else
their *_AUTHORIZATION_FAILED code (KafkaApis; its per-topic READ check is not done).
"""
from __future__ import annotations

from broker.dispatch import handler
from broker.security.authorize import allowed
from broker.topics import CONSUMER_OFFSETS
from broker.transactions import txn_offset_commit_operation, verify_partition
from protocol.errors import Errors
from protocol.messages.registry import ApiKey
from protocol.lazy_messages import TxnOffsetCommitResponse

_T = TxnOffsetCommitResponse.TxnOffsetCommitResponseTopic
_P = TxnOffsetCommitResponse.TxnOffsetCommitResponsePartition


def _all(req, code: int, by_id: bool) -> TxnOffsetCommitResponse:
    return TxnOffsetCommitResponse(topics=[
        _T(name="" if by_id else t.name, topic_id=t.topic_id, partitions=[
            _P(partition_index=p.partition_index, error_code=code) for p in t.partitions]) for t in req.topics])


@handler(ApiKey.TXN_OFFSET_COMMIT, versions=(0, 6))
async def txn_offset_commit(ctx, req):
    c = ctx.components
    by_id = ctx.api_version >= 6
    if not allowed(ctx, "WRITE", "TRANSACTIONAL_ID", req.transactional_id):
        return _all(req, Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, by_id)
    if not allowed(ctx, "READ", "GROUP", req.group_id):
        return _all(req, Errors.GROUP_AUTHORIZATION_FAILED, by_id)
    err = await verify_partition(c.transactions, req.transactional_id, req.producer_id, req.producer_epoch,
                                 (CONSUMER_OFFSETS, 0), txn_offset_commit_operation(ctx.api_version))
    if err:
        return _all(req, err, by_id)
    return await c.groups.txn_offset_commit(req, req.producer_id, req.producer_epoch, by_id)
