"""AcknowledgementBatches of ShareFetch / ShareAcknowledge: the acknowledge types and Kafka's syntactic check.

One place for the numbers (``AcknowledgeTypes`` in the ShareFetch / ShareAcknowledge schemas) and
for the request-shaped check the handlers run before the share partition sees a batch
(``SharePartition.acknowledge`` runs it again, so a direct caller gets the same answer).
"""
from __future__ import annotations

from typing import Any, Iterable

from protocol.errors import Errors

# AcknowledgementBatch.AcknowledgeTypes (RENEW: KIP-1222, ShareFetch / ShareAcknowledge v2).
ACK_GAP, ACK_ACCEPT, ACK_RELEASE, ACK_REJECT, ACK_RENEW = 0, 1, 2, 3, 4
ACK_MAX_VERSION = 2   # the highest request version this module knows the types of


def validate_ack_batches(batches: Iterable[Any], version: int, is_renew_ack: bool = False) -> int:
    """Kafka's per-partition syntactic check of AcknowledgementBatches: 0 or INVALID_REQUEST.

    Refused: first > last; a batch starting before the previous batch's last offset
    (Kafka compares with `<`, so sharing that one offset passes); no type; several
    types but not one per offset; a type outside 0..3 (0..4 from version 2); type 4
    (RENEW) in a request without IsRenewAck.
    """
    max_type = ACK_RENEW if version >= 2 else ACK_REJECT
    prev_last = -1
    for b in batches:
        first, last, types = b.first_offset, b.last_offset, b.acknowledge_types
        if first > last or first < prev_last or not types:
            return Errors.INVALID_REQUEST
        if len(types) > 1 and len(types) != last - first + 1:
            return Errors.INVALID_REQUEST
        for t in types:
            if t < 0 or t > max_type or (t == ACK_RENEW and not is_renew_ack):
                return Errors.INVALID_REQUEST
        prev_last = last
    return Errors.NONE
