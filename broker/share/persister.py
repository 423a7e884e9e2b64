"""The share partition's side of the persister (the share coordinator), as one adapter.

:class:`PersisterAdapter` builds the ReadShareGroupState / WriteShareGroupState
requests of one (group, topic id, partition), calls the persister in process with
those wire objects, checks that the answer is about this partition and maps the
persister's error codes to the ones a share partition reports (Kafka's mapping,
:func:`persister_error`). It keeps no record state: ``SharePartition`` decides what
to write and when, and commits or rolls back on the code returned.

The persister is any object with ``async read_state(ReadShareGroupStateRequest)`` and
``async write_state(WriteShareGroupStateRequest)`` returning the matching responses.
"""
from __future__ import annotations

import logging
from typing import Any

from protocol.errors import Errors
from protocol.lazy_messages import (ReadShareGroupStateRequest, WriteShareGroupStateRequest)

from broker.share.errors import ShareError

log = logging.getLogger(__name__)

# Errors after which the share partition stops serving (another leader or the state is gone).
FENCING_ERRORS = frozenset({Errors.NOT_LEADER_OR_FOLLOWER, Errors.GROUP_ID_NOT_FOUND,
                            Errors.UNKNOWN_TOPIC_OR_PARTITION})


def persister_error(code: int) -> int:
    """The error a share-partition reports for a persister error code (Kafka's mapping)."""
    if code in (Errors.NOT_COORDINATOR, Errors.COORDINATOR_NOT_AVAILABLE,
                Errors.COORDINATOR_LOAD_IN_PROGRESS):
        return Errors.COORDINATOR_NOT_AVAILABLE
    if code in (Errors.GROUP_ID_NOT_FOUND, Errors.UNKNOWN_TOPIC_OR_PARTITION):
        return code
    if code in (Errors.FENCED_LEADER_EPOCH, Errors.FENCED_STATE_EPOCH):
        return Errors.NOT_LEADER_OR_FOLLOWER
    return Errors.UNKNOWN_SERVER_ERROR


class PersisterAdapter:
    """Reads and writes the durable state of one share partition."""

    __slots__ = ("persister", "group_id", "topic_id", "partition", "leader_epoch")

    def __init__(self, persister: Any, group_id: str, topic_id: bytes, partition: int, leader_epoch: int = 0):
        self.persister = persister
        self.group_id, self.topic_id, self.partition = group_id, topic_id, partition
        self.leader_epoch = leader_epoch

    async def read(self) -> Any:
        """ReadShareGroupState: this partition's result (state_epoch, start_offset, state_batches).

        Raises ShareError with the mapped code when the persister answers an error."""
        R = ReadShareGroupStateRequest
        req = R(group_id=self.group_id, topics=[R.ReadStateData(
            topic_id=self.topic_id,
            partitions=[R.PartitionData(partition=self.partition, leader_epoch=self.leader_epoch)])])
        part = self._single_result(await self.persister.read_state(req))
        if part.error_code:
            raise ShareError(persister_error(part.error_code), part.error_message)
        return part

    def write_request(self, *, state_epoch: int, start_offset: int, delivery_complete_count: int,
                      runs: list[tuple[int, int, int, int]]) -> WriteShareGroupStateRequest:
        """The WriteShareGroupState request for (first, last, state, delivery_count) runs.

        Built when the transition starts, so StartOffset and DeliveryCompleteCount are the
        values of that moment even though the write runs later."""
        W = WriteShareGroupStateRequest
        return W(group_id=self.group_id, topics=[W.WriteStateData(topic_id=self.topic_id, partitions=[
            W.PartitionData(partition=self.partition, state_epoch=state_epoch,
                            leader_epoch=self.leader_epoch, start_offset=start_offset,
                            delivery_complete_count=delivery_complete_count,
                            state_batches=[W.StateBatch(first_offset=f, last_offset=l,
                                                        delivery_state=s, delivery_count=d)
                                           for f, l, s, d in runs])])])

    async def write(self, req: WriteShareGroupStateRequest) -> int:
        """Send a write; 0 or the mapped error code (never raises)."""
        try:
            resp = await self.persister.write_state(req)
            code = self._single_result(resp).error_code
        except ShareError as e:
            return e.code
        except Exception:
            log.exception("share state write failed for %s", self)
            return Errors.UNKNOWN_SERVER_ERROR
        return persister_error(code) if code else Errors.NONE

    def _single_result(self, resp: Any) -> Any:
        results = resp.results
        if (len(results) != 1 or results[0].topic_id != self.topic_id
                or len(results[0].partitions) != 1
                or results[0].partitions[0].partition != self.partition):
            raise ShareError(Errors.UNKNOWN_SERVER_ERROR, "unexpected share state response")
        return results[0].partitions[0]

    def __repr__(self) -> str:
        return f"PersisterAdapter({self.group_id!r}, {self.topic_id.hex()}-{self.partition})"
