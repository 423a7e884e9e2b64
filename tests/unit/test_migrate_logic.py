"""``admin.migrate``'s pure parts: the live records of a compacted range, the offset map's record,
translation shortcuts that need no reads, and the command line."""
from __future__ import annotations

import json

import pytest

from admin.migrate import PartitionMap, build_parser, live_only, map_key, translate


class Msg:
    def __init__(self, offset, key, value):
        self._o, self._k, self._v = offset, key, value

    def offset(self):
        return self._o

    def key(self):
        return self._k

    def value(self):
        return self._v


def test_live_only_keeps_the_last_record_of_each_key_in_order():
    recs = [Msg(0, b"a", b"1"), Msg(1, b"b", b"1"), Msg(2, b"a", b"2"), Msg(3, b"c", b"1"), Msg(4, b"b", None)]
    assert [m.offset() for m in live_only(recs, target_has_records=False)] == [2, 3]  # b's tombstone: nothing to delete
    assert [m.offset() for m in live_only(recs, target_has_records=True)] == [2, 3, 4]  # it deletes b on the target


def test_map_record_round_trips_and_keys_cannot_collide():
    pm = PartitionMap([[0, 0], [17, 15]], 25, 22)
    assert json.loads(pm.to_json()) == {"boundaries": [[0, 0], [17, 15]], "source_next": 25, "target_next": 22}
    assert map_key("orders.v1", 3) == "orders.v1:3"  # ':' is not allowed in topic names


def test_translate_without_reads():
    pm = PartitionMap([[5, 0], [40, 30]], 60, 45)
    # no target reads are needed for these (target=None would fail if it were used)
    assert translate(None, None, ("t", 0), 7, 45) == 45       # never copied: the end
    assert translate(None, pm, ("t", 0), 60, 45) == 45        # at or past what the copy has read: the end
    assert translate(None, pm, ("t", 0), 3, 45) == 0          # before the first copied record: its target offset
    assert translate(None, pm, ("t", 0), 5, 45) == 0


@pytest.mark.parametrize("argv", [["plan"], ["sync", "--source", "a:1"], ["bogus", "--source", "a:1", "--target", "b:1"]])
def test_command_line_needs_a_command_and_both_sides(argv):
    with pytest.raises(SystemExit):
        build_parser().parse_args(argv)


def test_sync_options():
    a = build_parser().parse_args(["sync", "--source", "a:1", "--target", "b:1", "--replication-factor", "3",
                                   "--chunk", "500"])
    assert (a.replication_factor, a.chunk, a.max_records_per_second) == (3, 500, 0)
