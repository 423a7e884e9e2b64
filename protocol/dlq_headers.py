"""The headers of a share group's dead-letter record (KIP-1191), as Kafka 4.4 writes them.

Kafka's ``ShareGroupDLQRecordHelper`` adds them after the original headers: the source topic
(its name, or its id when the name cannot be looked up), partition and offset, the group, the
delivery count and a message (UTF-8 text; numbers in decimal). The broker writes them
(broker/share/dlq.py) and the redrive tool reads them (admin/redrive.py).
"""
from __future__ import annotations

PREFIX = "__dlq."
TOPIC = "__dlq.errors.topic"
PARTITION = "__dlq.errors.partition"
OFFSET = "__dlq.errors.offset"
GROUP = "__dlq.errors.group"
DELIVERY_COUNT = "__dlq.errors.delivery.count"
MESSAGE = "__dlq.errors.message"

# The MESSAGE values: Kafka's ShareGroupDLQManager.CLIENT_REJECT / DELIVERY_COUNT_EXCEEDED.
REJECTED = "Offset rejected by client."
DELIVERY_COUNT_EXCEEDED = "Offset delivery count exceeded the threshold."
