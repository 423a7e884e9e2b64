"""AcknowledgementBatches (broker/share/acks.py): the acknowledge types and Kafka's syntactic check."""
from __future__ import annotations

import pytest

from protocol.errors import Errors

from broker.share.acks import ACK_ACCEPT, ACK_GAP, ACK_REJECT, ACK_RELEASE, ACK_RENEW, validate_ack_batches
from tests.unit.share_partition_support import AckBatch


def test_ack_types_are_the_wire_numbers():
    """Against independent sources: librdkafka's AcknowledgeType, and the AcknowledgeTypes field's
    documentation in Kafka's ShareFetchRequest.json ("0:Gap,1:Accept,2:Release,3:Reject,4:Renew")."""
    from confluent_kafka import AcknowledgeType

    assert (ACK_ACCEPT, ACK_RELEASE, ACK_REJECT) == (AcknowledgeType.ACCEPT, AcknowledgeType.RELEASE,
                                                     AcknowledgeType.REJECT)
    assert (ACK_GAP, ACK_RENEW) == (0, 4)

@pytest.mark.parametrize("batches, version, renew, code", [
    ([(0, 9, [1])], 1, False, 0),
    ([(0, 2, [1, 2, 0])], 1, False, 0),
    ([(5, 4, [1])], 1, False, Errors.INVALID_REQUEST),                 # first > last
    ([(0, 9, [1]), (5, 12, [1])], 1, False, Errors.INVALID_REQUEST),   # overlap
    ([(10, 12, [1]), (0, 9, [1])], 1, False, Errors.INVALID_REQUEST),  # unordered
    ([(0, 9, [1]), (9, 12, [1])], 1, False, 0),                        # Kafka compares with <
    ([(0, 9, [])], 1, False, Errors.INVALID_REQUEST),                  # no type
    ([(0, 9, [1, 1])], 1, False, Errors.INVALID_REQUEST),              # neither 1 nor 10 types
    ([(0, 1, [1, 5])], 1, False, Errors.INVALID_REQUEST),              # type > 4
    ([(0, 1, [-1])], 1, False, Errors.INVALID_REQUEST),
    ([(0, 1, [4])], 1, True, Errors.INVALID_REQUEST),                  # RENEW needs v2
    ([(0, 1, [4])], 2, False, Errors.INVALID_REQUEST),                 # and IsRenewAck
    ([(0, 1, [4])], 2, True, 0),
    ([], 2, False, 0),
])
def test_validate_ack_batches(batches, version, renew, code):
    assert validate_ack_batches([AckBatch(*b) for b in batches], version, renew) == code
