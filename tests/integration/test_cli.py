"""The operator CLI (admin/) run as subprocesses against a real broker, with live share groups
(librdkafka ShareConsumer) and consumer groups: tables, --json, messages and exit codes.

Commands that need the share-group offset APIs (90-92) are in test_cli_share_offsets.py."""
from __future__ import annotations

import shutil
import subprocess

import pytest
from confluent_kafka import Consumer, TopicPartition

from broker.testing import BrokerProcess
from tests.integration.cli_helpers import (
    BROKER_CONFIG, cli, consume, drained_group, ok, ok_json, produce, records, share_consumer, share_group, table)
from tests.support import create_topic, unique, until


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("cli"), config=BROKER_CONFIG) as b:
        yield b


@pytest.fixture(scope="module")
def live(broker):
    """A share group with one live member (client id ``cli-worker``) on a 2-partition topic, which
    consumed and acknowledged 6 of 10 records; and an empty share group that consumed all of
    another 2-partition topic, then closed."""
    bs = broker.bootstrap
    topic = create_topic(bs, 2, prefix="jobs")
    produce(bs, topic, 10, partitions=2)
    group = share_group(bs)
    member = share_consumer(bs, group, topic, client_id="cli-worker")
    consume(member, 1)

    empty_topic, empty_group = drained_group(bs, "done", 2, 6)
    yield {"topic": topic, "group": group, "member": member, "empty_topic": empty_topic, "empty_group": empty_group}
    member.close()


# ----------------------------------------------------------------------------- --list
def test_list_prints_group_ids_and_states(broker, live):
    bs = broker.bootstrap
    names = ok(cli("share_groups", bs, "--list")).split()
    assert live["group"] in names and live["empty_group"] in names

    out = ok(cli("share_groups", bs, "--list", "--state"))
    header, _ = table(out)
    assert header == ["GROUP", "STATE"]
    assert out.splitlines()[0] == "GROUP".ljust(max(15, max(len(n) for n in names))) + " STATE"
    states = {r["GROUP"]: r["STATE"] for r in records(out)}
    assert states[live["group"]] == "Stable" and states[live["empty_group"]] == "Empty"

    stable = ok_json(cli("share_groups", bs, "--list", "--state", "stable", "--json"))
    assert {"group": live["group"], "state": "Stable", "type": "share"} in stable
    assert all(g["state"] == "Stable" for g in stable)
    empty = ok(cli("share_groups", bs, "--list", "--state", "Empty"))
    assert {r["GROUP"] for r in records(empty)} >= {live["empty_group"]}
    assert live["group"] not in {r["GROUP"] for r in records(empty)}


def test_list_rejects_a_state_share_groups_do_not_have(broker):
    r = cli("share_groups", broker.bootstrap, "--list", "--state", "PreparingRebalance")
    assert r.returncode == 2
    assert "Invalid state list 'PreparingRebalance'. Valid states are: Empty, Stable, Dead" in r.stderr


# ----------------------------------------------------------------------------- --describe
def test_describe_members(broker, live):
    bs, group, topic = broker.bootstrap, live["group"], live["topic"]
    out = ok(cli("share_groups", bs, "--describe", "--group", group, "--members"))
    assert out.startswith("\n"), "Kafka prints a blank line before the table"
    header, rows = table(out)
    assert header == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"]
    assert len(rows) == 1
    row = dict(zip(header, rows[0]))
    assert row["GROUP"] == group and row["CLIENT-ID"] == "cli-worker" and row["HOST"].endswith("127.0.0.1")
    assert row["#PARTITIONS"] == "2" and row["ASSIGNMENT"] == f"{topic}:0,1"
    # columns start where Kafka's printf widths put them
    head_line = [ln for ln in out.splitlines() if ln][0]
    assert head_line.index("CONSUMER-ID") == max(16, len(group) + 1)

    verbose = records(ok(cli("share_groups", bs, "--describe", "--group", group, "--members", "--verbose")))
    assert list(verbose[0]) == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "MEMBER-EPOCH", "ASSIGNMENT"]
    assert int(verbose[0]["MEMBER-EPOCH"]) >= 1 and verbose[0]["CONSUMER-ID"] == row["CONSUMER-ID"]

    js = ok_json(cli("share_groups", bs, "--describe", "--group", group, "--members", "--json"))
    assert js == [{"group": group, "consumer_id": row["CONSUMER-ID"], "host": row["HOST"], "client_id": "cli-worker",
                   "partitions": 2, "member_epoch": int(verbose[0]["MEMBER-EPOCH"]), "assignment": {topic: [0, 1]}}]


def test_describe_state(broker, live):
    bs, group = broker.bootstrap, live["group"]
    out = ok(cli("share_groups", bs, "--describe", "--group", group, "--state"))
    rows = records(out)
    assert list(rows[0]) == ["GROUP", "COORDINATOR(ID)", "STATE", "#MEMBERS"]
    assert rows == [{"GROUP": group, "COORDINATOR(ID)": f"{broker.bootstrap}(1)", "STATE": "Stable", "#MEMBERS": "1"}]
    assert f"{broker.bootstrap}  (1)" in out

    verbose = records(ok(cli("share_groups", bs, "--describe", "--group", group, "--state", "--verbose")))
    assert list(verbose[0]) == ["GROUP", "COORDINATOR(ID)", "STATE", "GROUP-EPOCH", "ASSIGNMENT-EPOCH", "#MEMBERS"]
    assert int(verbose[0]["GROUP-EPOCH"]) >= 1 and int(verbose[0]["ASSIGNMENT-EPOCH"]) >= 1

    js = ok_json(cli("share_groups", bs, "--describe", "--group", group, "--state", "--json"))
    assert js[0]["state"] == "Stable" and js[0]["members"] == 1
    assert js[0]["coordinator"] == {"id": 1, "host": broker.host, "port": broker.port}
    assert js[0]["group_epoch"] == int(verbose[0]["GROUP-EPOCH"])


def test_describe_empty_group_says_no_active_members(broker, live):
    r = cli("share_groups", broker.bootstrap, "--describe", "--group", live["empty_group"], "--members")
    assert r.returncode == 0 and r.stdout.strip() == ""
    assert f"Share group '{live['empty_group']}' has no active members." in r.stderr
    rows = records(ok(cli("share_groups", broker.bootstrap, "--describe", "--group", live["empty_group"], "--state")))
    assert rows[0]["STATE"] == "Empty" and rows[0]["#MEMBERS"] == "0"


def test_describe_all_groups(broker, live):
    js = ok_json(cli("share_groups", broker.bootstrap, "--describe", "--all-groups", "--state", "--json"))
    by_group = {g["group"]: g["state"] for g in js}
    assert by_group[live["group"]] == "Stable" and by_group[live["empty_group"]] == "Empty"


def test_unknown_group_is_one_line_error_exit_1(broker):
    name = unique("nope")
    for extra in (["--members"], ["--state"], []):
        r = cli("share_groups", broker.bootstrap, "--describe", "--group", name, *extra)
        assert r.returncode == 1, (extra, r)
        assert r.stderr.strip() == f"Error: Share group '{name}' does not exist.", (extra, r.stderr)
    r = cli("share_groups", broker.bootstrap, "--delete", "--group", name)
    assert r.returncode == 1
    assert r.stderr.strip() == f"Error: Group '{name}' could not be deleted due to: Group '{name}' is not a share group."


# ----------------------------------------------------------------------------- --reset-offsets --dry-run
def test_reset_offsets_refused_while_members_are_live(broker, live):
    for mode in ("--dry-run", "--execute"):
        r = cli("share_groups", broker.bootstrap, "--reset-offsets", "--group", live["group"], "--topic", live["topic"],
                "--to-earliest", mode)
        assert r.returncode == 1
        assert r.stderr.strip() == f"Error: Share group '{live['group']}' is not empty."


def test_reset_offsets_dry_run_prints_new_offsets(broker, live):
    bs, group, topic = broker.bootstrap, live["empty_group"], live["empty_topic"]

    def plan(*args):
        return ok(cli("share_groups", bs, "--reset-offsets", "--group", group, *args, "--dry-run"))

    out = plan("--topic", topic, "--to-earliest")
    header, rows = table(out)
    assert header == ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]
    assert rows == [[group, topic, "0", "0"], [group, topic, "1", "0"]]
    assert [r["NEW-OFFSET"] for r in records(plan("--topic", topic, "--to-latest"))] == ["3", "3"]
    assert records(plan("--topic", f"{topic}:1", "--to-offset", "2")) == [
        {"GROUP": group, "TOPIC": topic, "PARTITION": "1", "NEW-OFFSET": "2"}]
    assert [r["NEW-OFFSET"] for r in records(plan("--topic", topic, "--by-duration", "P1D"))] == ["0", "0"]

    r = cli("share_groups", bs, "--reset-offsets", "--group", group, "--topic", topic, "--to-offset", "99", "--dry-run")
    assert [x["NEW-OFFSET"] for x in records(ok(r))] == ["3", "3"]
    assert f"Warn: New offset (99) is higher than latest offset for topic partition {topic}-0. Value will be set to 3." in r.stderr

    r = cli("share_groups", bs, "--reset-offsets", "--group", group, "--topic", topic, "--to-datetime",
            "2999-01-01T00:00:00.000Z", "--dry-run")
    assert [x["NEW-OFFSET"] for x in records(ok(r))] == ["3", "3"]
    assert f"Warn: Partition 0 from topic {topic} is empty. Falling back to latest known offset." in r.stderr
    assert [x["NEW-OFFSET"] for x in records(plan("--topic", topic, "--to-datetime", "2000-01-01T00:00:00"))] == ["0", "0"]

    js = ok_json(cli("share_groups", bs, "--reset-offsets", "--group", group, "--topic", topic, "--to-earliest",
                     "--dry-run", "--json"))
    assert js == [{"group": group, "topic": topic, "partition": p, "new_offset": 0} for p in (0, 1)]

    r = cli("share_groups", bs, "--reset-offsets", "--group", group, "--topic", f"{topic}:7", "--to-earliest", "--dry-run")
    assert r.returncode == 1 and r.stderr.strip() == f'Error: The partitions "{topic}-7" do not exist'


def test_reset_offsets_dry_run_changes_nothing(broker):
    """After a dry run to the earliest offset, the group still resumes where it stopped: a new
    member receives only the records produced since, not the ones already acknowledged."""
    bs = broker.bootstrap
    topic, group = drained_group(bs, "dry", 1, 5)
    out = ok(cli("share_groups", bs, "--reset-offsets", "--group", group, "--topic", topic, "--to-earliest", "--dry-run"))
    assert records(out) == [{"GROUP": group, "TOPIC": topic, "PARTITION": "0", "NEW-OFFSET": "0"}]
    produce(bs, topic, 2)
    c = share_consumer(bs, group, topic)
    try:
        got = consume(c, 2)
        extra = [m for _ in range(3) for m in c.poll(0.3) or [] if m.error() is None]
    finally:
        c.close()
    assert sorted(m.offset() for m in got + extra) == [5, 6], "the dry run moved the start offset"


# ----------------------------------------------------------------------------- usage errors
@pytest.mark.parametrize("args, message", [
    (["--list", "--describe"], "Command must include exactly one action"),
    (["--reset-offsets", "--group", "g", "--to-earliest"], "Option [reset-offsets] takes the option: [execute] or [dry-run]"),
    (["--describe"], "Option [describe] takes one of these options: [all-groups], [group]"),
    (["--delete-offsets", "--group", "g"], "Option [delete-offsets] takes the following options: [group], [topic]"),
])
def test_usage_errors_exit_2(broker, args, message):
    r = cli("share_groups", broker.bootstrap, *args)
    assert r.returncode == 2 and message in r.stderr and r.stdout == ""


# ----------------------------------------------------------------------------- --delete
def test_delete_group(broker, live):
    bs = broker.bootstrap
    r = cli("share_groups", bs, "--delete", "--group", live["group"])
    assert r.returncode == 1
    assert f"Share group '{live['group']}' is not EMPTY." in r.stderr

    _, group = drained_group(bs, "del", 1, 1)
    assert ok(cli("share_groups", bs, "--delete", "--group", group)) == \
        f"Deletion of requested share groups ('{group}') was successful.\n"
    assert group not in ok(cli("share_groups", bs, "--list")).split()
    r = cli("share_groups", bs, "--describe", "--group", group, "--state")
    assert r.returncode == 1 and "does not exist" in r.stderr


# ----------------------------------------------------------------------------- unreachable broker
def test_broker_unreachable_exit_3(tmp_path):
    b = BrokerProcess(tmp_path / "gone").start()
    bootstrap = b.bootstrap
    b.stop()
    r = cli("share_groups", bootstrap, "--list", "--timeout", "2000")
    assert r.returncode == 3
    assert r.stderr.startswith(f"Error: broker unreachable: cannot connect to {bootstrap}") and r.stderr.count("\n") == 1


# ----------------------------------------------------------------------------- consumer groups
def test_consumer_groups_lag_per_partition(broker):
    bs = broker.bootstrap
    topic = create_topic(bs, 2, prefix="orders")
    produce(bs, topic, 10, partitions=2)  # 5 per partition
    group = unique("cg")
    c = Consumer({"bootstrap.servers": bs, "group.id": group, "client.id": "biller", "enable.auto.commit": False})
    c.subscribe([topic])
    until(lambda: c.poll(0.2) is None and c.assignment(), 30, "an assignment")
    c.commit(offsets=[TopicPartition(topic, 0, 2), TopicPartition(topic, 1, 5)], asynchronous=False)
    try:
        out = ok(cli("consumer_groups", bs, "--describe", "--group", group))
        header, _ = table(out)
        assert header == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID",
                          "HOST", "CLIENT-ID"]
        rows = records(out)
        assert [(r["PARTITION"], r["CURRENT-OFFSET"], r["LOG-END-OFFSET"], r["LAG"], r["CLIENT-ID"]) for r in rows] == [
            ("0", "2", "5", "3", "biller"), ("1", "5", "5", "0", "biller")]
        js = ok_json(cli("consumer_groups", bs, "--describe", "--group", group, "--json"))
        assert [(r["partition"], r["current_offset"], r["log_end_offset"], r["lag"]) for r in js] == [
            (0, 2, 5, 3), (1, 5, 5, 0)]
        members = records(ok(cli("consumer_groups", bs, "--describe", "--group", group, "--members", "--verbose")))
        assert members[0]["CLIENT-ID"] == "biller" and members[0]["ASSIGNMENT"] == f"{topic}:0,1"
        state = records(ok(cli("consumer_groups", bs, "--describe", "--group", group, "--state")))
        assert state[0]["STATE"] == "Stable" and state[0]["#MEMBERS"] == "1"
        assert group in ok(cli("consumer_groups", bs, "--list")).split()
        r = cli("consumer_groups", bs, "--delete", "--group", group)
        assert r.returncode == 1 and f"Consumer group '{group}' is not empty." in r.stderr
    finally:
        c.close()
    # after the member left, the committed offsets remain: no consumer columns
    until(lambda: records(ok(cli("consumer_groups", bs, "--describe", "--group", group)))[0]["CONSUMER-ID"] == "-",
          20, "the member to leave")
    assert ok(cli("consumer_groups", bs, "--delete", "--group", group)).strip() == \
        f"Deletion of requested consumer groups ('{group}') was successful."
    r = cli("consumer_groups", bs, "--describe", "--group", group)
    assert r.returncode == 1 and r.stderr.strip() == f"Error: Consumer group '{group}' does not exist."


# ----------------------------------------------------------------------------- topics
def test_topics_create_describe_alter_delete(broker):
    bs = broker.bootstrap
    name = unique("tp")
    assert ok(cli("topics", bs, "--create", "--topic", name, "--partitions", "2", "--config", "retention.ms=60000")) \
        == f"Created topic {name}.\n"
    r = cli("topics", bs, "--create", "--topic", name)
    assert r.returncode == 1 and r.stderr.strip() == f"Error: Topic '{name}' already exists."
    assert name in ok(cli("topics", bs, "--list")).splitlines()
    assert "__consumer_offsets" not in ok(cli("topics", bs, "--list", "--exclude-internal")).splitlines()
    ok(cli("topics", bs, "--alter", "--topic", name, "--partitions", "3"))
    lines = ok(cli("topics", bs, "--describe", "--topic", name)).splitlines()
    assert lines[0].startswith(f"Topic: {name}\tTopicId: ")
    assert lines[0].endswith("\tPartitionCount: 3\tReplicationFactor: 1\tConfigs: retention.ms=60000")
    assert lines[1:] == [f"\tTopic: {name}\tPartition: {p}\tLeader: 1\tReplicas: 1\tIsr: 1" for p in range(3)]
    js = ok_json(cli("topics", bs, "--describe", "--topic", name, "--json"))
    assert js[0]["partition_count"] == 3 and js[0]["configs"] == {"retention.ms": "60000"}
    ok(cli("topics", bs, "--delete", "--topic", name))
    until(lambda: name not in ok(cli("topics", bs, "--list")).splitlines(), 10, "the topic to go")
    r = cli("topics", bs, "--describe", "--topic", name)
    assert r.returncode == 1 and r.stderr.strip() == f"Error: Topic '{name}' does not exist as expected"


# ----------------------------------------------------------------------------- console scripts
def test_console_scripts_are_installed(broker, live):
    exe = shutil.which("sharebroker-share-groups")
    assert exe, "sharebroker-share-groups is not on PATH (pip install -e .)"
    r = subprocess.run([exe, "--bootstrap-server", broker.bootstrap, "--list"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and live["group"] in r.stdout.split()
    for script in ("sharebroker-consumer-groups", "sharebroker-topics"):
        assert shutil.which(script), script
