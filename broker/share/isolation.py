"""What a share group must never receive: control batches, batches the log cleaner emptied (kept, as
Kafka keeps them, for their producer state: offsets without records), and under ``share.isolation.level=read_committed``
the data batches of aborted transactions (KIP-932; Kafka's
``SharePartition.maybeFilterAbortedTransactionalAcquiredRecords``).

A ShareFetch response has no aborted-transactions list, so the share consumer
cannot drop aborted data itself: the share-partition leader archives those offsets
when it acquires them.  Everything is decided from batch headers (producer id,
transactional and control flags) and the partition log's aborted-transaction
ranges (first offset .. ABORT marker per producer); records are never decoded.
Reads stop at the last stable offset for read_committed (``broker.share.manager``),
so an open transaction is neither delivered nor archived until it ends.
"""
from __future__ import annotations

from typing import Any, Sequence


def unreadable_ranges(plog, batches: Sequence[Any], read_committed: bool) -> list[tuple[int, int]]:
    """(first, last) offset ranges of ``batches`` (log batch refs, ascending) to archive, not deliver."""
    if not batches:
        return []
    aborted: dict[int, list[tuple[int, int]]] = {}
    if read_committed and hasattr(plog, "producer_state"):
        for first, marker, pid in plog.producer_state.aborted_ranges(batches[0].base_offset,
                                                                      batches[-1].last_offset + 1):
            aborted.setdefault(pid, []).append((first, marker))
    out: list[tuple[int, int]] = []
    for b in batches:
        # a control batch, or one the log cleaner emptied (kept for its producer state, as Kafka's
        # cleaner does): offsets without a record are a gap, never acquired (test doubles of log refs
        # may lack the header fields)
        drop = getattr(b, "is_control", False) or getattr(b, "records_count", 1) == 0
        if not drop and aborted and b.is_transactional:
            spans = aborted.get(b.producer_id)
            drop = spans is not None and any(first <= b.base_offset <= marker for first, marker in spans)
        if drop:
            if out and out[-1][1] + 1 == b.base_offset:
                out[-1] = (out[-1][0], b.last_offset)
            else:
                out.append((b.base_offset, b.last_offset))
    return out
