"""The share-group CLI commands that need the share-group offset admin APIs
(DescribeShareGroupOffsets 90, AlterShareGroupOffsets 91, DeleteShareGroupOffsets 92):
``--describe --offsets``, ``--reset-offsets --execute`` and ``--delete-offsets``, run as
subprocesses against a real broker with share groups driven by librdkafka's ShareConsumer.

Each test starts from a group that consumed and acknowledged everything produced so far on a
2-partition topic (5 records per partition), closed its member, and then got 2 more records per
partition: lag 2 on each partition.

START-OFFSET is the share-partition start offset the share coordinator holds. As in Kafka, the
share-partition leader writes its start offset as it was before the acknowledgements it is
writing, and KIP-1226's DeliveryCompleteCount counts the acknowledged records above it, so after a
drain START-OFFSET may still be below the first unacknowledged record while LAG is exact. After
AlterShareGroupOffsets it is exactly the offset set."""
from __future__ import annotations

import pytest

from broker.testing import BrokerProcess
from tests.integration.cli_helpers import (
    BROKER_CONFIG, cli, consume, drained_group, ok, ok_json, produce, records, share_consumer, table, wait_state)
from tests.support import unique

@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("cli-offsets"), config=BROKER_CONFIG) as b:
        yield b


@pytest.fixture
def idle(broker):
    """An empty share group: start offset 5, lag 2 on both partitions of its topic."""
    bs = broker.bootstrap
    topic, group = drained_group(bs, "work", 2, 10)
    produce(bs, topic, 4, partitions=2)
    return {"bs": bs, "topic": topic, "group": group}


def drained(actual: dict, lags: dict[int, int], first_unacked: int) -> bool:
    """Each partition shows ``lags[p]`` and a start offset no later than the first unacknowledged record."""
    return {p: lag for p, (_, lag) in actual.items()} == {p: str(lag) for p, lag in lags.items()} and \
        all(0 <= int(start) <= first_unacked for start, _ in actual.values())


def offsets(bs: str, group: str) -> dict[int, tuple[str, str]]:
    """partition -> (START-OFFSET, LAG) from ``--describe --offsets``."""
    return {int(r["PARTITION"]): (r["START-OFFSET"], r["LAG"])
            for r in records(ok(cli("share_groups", bs, "--describe", "--group", group, "--offsets")))}


def test_describe_offsets_start_offset_and_lag(idle):
    bs, group, topic = idle["bs"], idle["group"], idle["topic"]
    out = ok(cli("share_groups", bs, "--describe", "--group", group))  # --offsets is the default
    assert out.startswith("\n")
    header, rows = table(out)
    assert header == ["GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LAG"]
    assert [(r[0], r[1], r[2], r[4]) for r in rows] == [(group, topic, "0", "2"), (group, topic, "1", "2")]
    assert all(0 <= int(r[3]) <= 5 for r in rows)
    assert out == ok(cli("share_groups", bs, "--describe", "--group", group, "--offsets"))

    verbose = records(ok(cli("share_groups", bs, "--describe", "--group", group, "--offsets", "--verbose")))
    assert list(verbose[0]) == ["GROUP", "TOPIC", "PARTITION", "LEADER-EPOCH", "START-OFFSET", "LAG"]
    assert all(r["LEADER-EPOCH"] == "-" or int(r["LEADER-EPOCH"]) >= 0 for r in verbose)

    js = ok_json(cli("share_groups", bs, "--describe", "--group", group, "--json"))
    assert [(r["group"], r["topic"], r["partition"], r["start_offset"], r["lag"]) for r in js] == [
        (group, topic, 0, int(rows[0][3]), 2), (group, topic, 1, int(rows[1][3]), 2)]


def test_reset_dry_run_leaves_start_offsets_alone(idle):
    bs, group, topic = idle["bs"], idle["group"], idle["topic"]
    out = ok(cli("share_groups", bs, "--reset-offsets", "--group", group, "--topic", topic, "--to-earliest", "--dry-run"))
    assert [r["NEW-OFFSET"] for r in records(out)] == ["0", "0"]
    before = offsets(bs, group)
    assert drained(before, {0: 2, 1: 2}, 5)
    assert offsets(bs, group) == before


def test_reset_execute_then_consumption_starts_there(idle):
    bs, group, topic = idle["bs"], idle["group"], idle["topic"]
    out = ok(cli("share_groups", bs, "--reset-offsets", "--group", group, "--topic", f"{topic}:0", "--to-offset", "3",
                 "--execute"))
    assert records(out) == [{"GROUP": group, "TOPIC": topic, "PARTITION": "0", "NEW-OFFSET": "3"}]
    after = offsets(bs, group)
    assert after[0] == ("3", "4") and drained({1: after[1]}, {1: 2}, 5)
    c = share_consumer(bs, group, topic)
    try:
        got = consume(c, 6)
    finally:
        c.close()
    assert sorted((m.partition(), m.offset()) for m in got) == [(0, 3), (0, 4), (0, 5), (0, 6), (1, 5), (1, 6)]


def test_reset_without_topic_covers_the_groups_partitions(idle):
    bs, group, topic = idle["bs"], idle["group"], idle["topic"]
    js = ok_json(cli("share_groups", bs, "--reset-offsets", "--group", group, "--to-earliest", "--execute", "--json"))
    assert js == [{"group": group, "topic": topic, "partition": p, "new_offset": 0} for p in (0, 1)]
    assert offsets(bs, group) == {0: ("0", "7"), 1: ("0", "7")}
    ok(cli("share_groups", bs, "--reset-offsets", "--group", group, "--all-topics", "--to-latest", "--execute"))
    assert offsets(bs, group) == {0: ("7", "0"), 1: ("7", "0")}


def test_delete_offsets(idle):
    bs, group, topic = idle["bs"], idle["group"], idle["topic"]
    missing = unique("missing")
    r = cli("share_groups", bs, "--delete-offsets", "--group", group, "--topic", missing)
    assert r.returncode == 1
    assert records(r.stdout)[0]["TOPIC"] == missing and records(r.stdout)[0]["STATUS"] == "Error:"

    out = ok(cli("share_groups", bs, "--delete-offsets", "--group", group, "--topic", topic))
    assert table(out) == (["TOPIC", "STATUS"], [[topic, "Successful"]])
    assert ok(cli("share_groups", bs, "--describe", "--group", group)).strip() == \
        f"Share group '{group}' has no offset information."
    assert ok_json(cli("share_groups", bs, "--describe", "--group", group, "--json")) == []


def test_offset_commands_refused_while_members_are_live(idle):
    bs, group, topic = idle["bs"], idle["group"], idle["topic"]
    c = share_consumer(bs, group, topic)
    try:
        consume(c, 4)
        wait_state(bs, group, "Stable")
        r = cli("share_groups", bs, "--delete-offsets", "--group", group, "--topic", topic)
        assert r.returncode == 1 and r.stderr.strip() == f"Error: Share group '{group}' is not empty."
        # describing offsets works while the group is live
        assert drained(offsets(bs, group), {0: 0, 1: 0}, 7)
    finally:
        c.close()


def test_unknown_group(broker):
    name = unique("nope")
    r = cli("share_groups", broker.bootstrap, "--delete-offsets", "--group", name, "--topic", "t")
    assert r.returncode == 1 and r.stderr.strip() == f"Error: Share group '{name}' does not exist."
