"""broker.share.isolation: which offsets a share group never receives, from batch headers only."""
from __future__ import annotations

from types import SimpleNamespace

from broker.log.producer_state import ProducerStateManager
from broker.share.isolation import unreadable_ranges


def ref(base, last, pid=-1, txn=False, control=False, count=None):
    return SimpleNamespace(base_offset=base, last_offset=last, producer_id=pid, is_transactional=txn,
                           is_control=control, records_count=last - base + 1 if count is None else count)


def plog_with(aborted):
    ps = ProducerStateManager()
    for first, marker, pid in aborted:  # as on_marker records an ABORT
        ps._aborted.append((first, marker, pid))
        ps._aborted_last.append(marker)
    return SimpleNamespace(producer_state=ps)


def test_aborted_data_and_markers_are_unreadable():
    # pid 7: data 0-2, 5-6 aborted by the marker at 7; pid 8 committed 3-4 (marker 8); plain 9-10
    batches = [ref(0, 2, 7, True), ref(3, 4, 8, True), ref(5, 6, 7, True), ref(7, 7, 7, control=True),
               ref(8, 8, 8, control=True), ref(9, 10)]
    plog = plog_with([(0, 7, 7)])
    assert unreadable_ranges(plog, batches, True) == [(0, 2), (5, 8)]
    assert unreadable_ranges(plog, batches, False) == [(7, 8)]  # markers only


def test_a_later_transaction_of_the_same_producer_is_not_aborted():
    batches = [ref(0, 1, 7, True), ref(2, 2, 7, control=True), ref(3, 4, 7, True)]
    assert unreadable_ranges(plog_with([(0, 2, 7)]), batches, True) == [(0, 2)]


def test_nothing_to_skip():
    assert unreadable_ranges(plog_with([]), [], True) == []
    assert unreadable_ranges(plog_with([(0, 3, 9)]), [ref(0, 5)], True) == []


def test_a_batch_the_cleaner_emptied_is_unreadable():
    batches = [ref(0, 3, 7, count=0), ref(4, 6, count=1), ref(7, 7, 9, count=0), ref(8, 8, control=True)]
    assert unreadable_ranges(plog_with([]), batches, False) == [(0, 3), (7, 8)]
