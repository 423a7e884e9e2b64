"""Transaction bookkeeping of one cleaning pass (Kafka's ``CleanedTransactionMetadata``).

Batches are fed in offset order.  A data batch of an aborted transaction may be
discarded; an ABORT marker is kept while any batch of its transaction was seen
in this pass (they are removed first); a COMMIT marker may go once no batch of its
transaction was seen; an empty (already cleaned) marker may always go.  Markers
are then removed only after their KIP-534 delete horizon (the caller's rule).
"""
from __future__ import annotations

import heapq

CONTROL_ABORT, CONTROL_COMMIT = 0, 1


class CleanedTransactionMetadata:
    __slots__ = ("_aborted", "_ongoing_committed", "_ongoing_aborted")

    def __init__(self, aborted: list[tuple[int, int]] = ()):
        # (first offset, producer id) of aborted transactions not yet reached: a min-heap
        self._aborted: list[tuple[int, int]] = list(aborted)
        heapq.heapify(self._aborted)
        self._ongoing_committed: set[int] = set()
        # producer id -> [last offset of a batch of the aborted transaction seen in this pass, or None]
        self._ongoing_aborted: dict[int, list] = {}

    def add_aborted(self, aborted: list[tuple[int, int]]) -> None:
        for item in aborted:
            heapq.heappush(self._aborted, item)

    def _consume_up_to(self, offset: int) -> None:
        heap = self._aborted
        while heap and heap[0][0] <= offset:
            _first, pid = heapq.heappop(heap)
            self._ongoing_aborted.setdefault(pid, [None])

    def on_control_batch_read(self, producer_id: int, last_offset: int, control_type: int | None) -> bool:
        """A marker was read; True if it may be discarded (``control_type`` None: it has no record)."""
        self._consume_up_to(last_offset)
        if control_type is None:
            return True  # an empty control batch was already cleaned
        if control_type == CONTROL_ABORT:
            meta = self._ongoing_aborted.pop(producer_id, None)
            return not (meta is not None and meta[0] is not None)
        if control_type == CONTROL_COMMIT:
            if producer_id in self._ongoing_committed:
                self._ongoing_committed.discard(producer_id)
                return False
            return True
        return False

    def on_batch_read(self, producer_id: int, transactional: bool, last_offset: int) -> bool:
        """A data batch was read; True if it belongs to an aborted transaction (may be discarded)."""
        self._consume_up_to(last_offset)
        if not transactional:
            return False
        meta = self._ongoing_aborted.get(producer_id)
        if meta is not None:
            meta[0] = last_offset
            return True
        self._ongoing_committed.add(producer_id)
        return False
