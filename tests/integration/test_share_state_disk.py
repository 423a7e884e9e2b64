"""``__share_group_state`` stays bounded on disk while its share coordinator prunes it.

The share coordinator prunes the topic behind the latest snapshot of every share-partition
(DeleteRecords), which frees whole segments only; its segments are 4 MiB by default
(``share.coordinator.state.topic.segment.bytes``; Kafka's 100 MiB kept everything a busy share
group wrote for hours). The workload is a share group's persister traffic, WriteShareGroupState
with large state batches sent over the socket (what share-partition leaders send), pipelined so
that tens of MB of state are written in seconds; a snapshot every 10 updates lets the coordinator
prune often. A second share group wrote once and went quiet: its only snapshot must not hold the log
back (the coordinator re-snapshots it once it lies far behind; Kafka waits for the 5-minute cold
snapshot). Disk use is sampled throughout, and the live state must survive the pruning and a restart.
"""
from __future__ import annotations

import os
import time

from broker.testing import BrokerProcess
from protocol.errors import Errors
from protocol.messages.write_share_group_state import WriteShareGroupStateRequest as Write
from tests.integration.test_share_state_rpcs import ACKNOWLEDGED, AVAILABLE, State, batches, make_topic
from tests.support import unique
from tests.wire import WireClient

MiB = 1 << 20
SEGMENT = 4 * MiB        # the default under test
WRITTEN = 32 * MiB       # state written in total: eight segments' worth
BOUND = 3 * SEGMENT + 2 * MiB  # active segment, the one holding the log start, a preallocated spare, indexes
BATCHES = 400            # state batches per write: a ~8 KB record
PIPELINE = 64


def state_dir(broker: BrokerProcess) -> str:
    return os.path.join(broker.data_dir, "__share_group_state-0")


def disk_use(path: str) -> int:
    total = 0
    for f in os.listdir(path):
        try:
            total += os.stat(os.path.join(path, f)).st_blocks * 512
        except FileNotFoundError:  # a checkpoint's tmp file renamed, a pruned segment removed meanwhile
            pass
    return total


def write_request(group: str, tid: bytes, partition: int, round_: int) -> Write:
    state = [Write.StateBatch(first_offset=10 * i, last_offset=10 * i + 4,
                              delivery_state=ACKNOWLEDGED if (i + round_) % 2 else AVAILABLE, delivery_count=1)
             for i in range(BATCHES)]
    return Write(group_id=group, topics=[Write.WriteStateData(topic_id=tid, partitions=[
        Write.PartitionData(partition=partition, state_epoch=1, leader_epoch=0, start_offset=0,
                            delivery_complete_count=-1, state_batches=state)])])


def expected(round_: int) -> list[tuple[int, int, int, int]]:
    return [(10 * i, 10 * i + 4, ACKNOWLEDGED if (i + round_) % 2 else AVAILABLE, 1) for i in range(BATCHES)]


def test_share_state_topic_disk_use_stays_bounded_while_pruned(tmp_path):
    config = {"share.coordinator.snapshot.update.records.per.snapshot": "10"}
    with BrokerProcess(tmp_path / "data", config=config) as broker:
        tid, group = make_topic(broker.bootstrap), unique("g")
        written, samples, rounds = 0, [], 0
        with WireClient(broker.bootstrap) as w:
            st = State(w, group)
            assert st.init(tid, 0, 1, 0).error_code == 0 and st.init(tid, 1, 1, 0).error_code == 0
            quiet = State(w, unique("quiet"))  # a share group that went away: written once, then never
            assert quiet.init(tid, 0, 1, 0).error_code == 0
            assert quiet.write(tid, 0, 1, 0, 0, batches=[(0, 4, ACKNOWLEDGED, 1)]).error_code == 0
            while written < WRITTEN:
                sent = []
                for _ in range(PIPELINE):
                    rounds += 1
                    req = write_request(group, tid, rounds % 2, rounds)
                    corr, frame = w.frame(req, 1)
                    w.send_raw(frame)
                    sent.append(corr)
                    written += len(frame)
                for corr in sent:
                    got, resp = w.receive(Write.API_KEY, 1)
                    assert got == corr and resp.results[0].partitions[0].error_code == 0, resp
                samples.append(disk_use(state_dir(broker)))
            assert max(samples) <= BOUND, (
                f"__share_group_state held {max(samples) / MiB:.1f} MiB on disk after {written / MiB:.1f} MiB written"
                f" (bound {BOUND / MiB:.0f} MiB); samples {[round(s / MiB, 1) for s in samples]}")
            logs = sorted(f for f in os.listdir(state_dir(broker)) if f.endswith(".log"))
            assert int(logs[0].split(".")[0]) > 0, f"nothing pruned: {logs}"
            last = {rounds % 2: rounds, (rounds - 1) % 2: rounds - 1}
            for p in (0, 1):
                assert batches(st.read(tid, p, 0)) == expected(last[p]), "the live state after pruning"
            assert batches(quiet.read(tid, 0, 0)) == [(0, 4, ACKNOWLEDGED, 1)], "the quiet one's state"
        broker.restart()
        with WireClient(broker.bootstrap) as w:
            st, quiet = State(w, group), State(w, quiet.group)
            deadline = time.monotonic() + 30
            while (r := quiet.read(tid, 0, 0)).error_code == Errors.COORDINATOR_LOAD_IN_PROGRESS:
                assert time.monotonic() < deadline, "the share coordinator did not load"
                time.sleep(0.05)
            assert (r.error_code, batches(r)) == (0, [(0, 4, ACKNOWLEDGED, 1)]), r
            for p in (0, 1):
                r = st.read(tid, p, 0)
                assert (r.error_code, r.start_offset, batches(r)) == (0, 0, expected(last[p])), \
                    "the live state after a restart"
