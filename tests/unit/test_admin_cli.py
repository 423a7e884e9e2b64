"""The operator CLI's pure logic: argument checks (Kafka's messages), offset specifications
(datetimes, ISO-8601 durations, ``topic:partitions``), Kafka-style tables, the exact requests the
offset commands send, and the exit codes for usage errors and unreachable brokers."""
from __future__ import annotations

import socket
import threading
from datetime import timedelta, timezone

import pytest

from admin import consumer_groups, share_groups, topics
from admin.client import AdminError, parse_bootstrap, uuid_str
from admin.common import (
    EXIT_UNREACHABLE, EXIT_USAGE, Member, parse_datetime, parse_duration, parse_topic_partitions, state_name, table_lines)
from protocol.messages.alter_share_group_offsets import AlterShareGroupOffsetsRequest
from protocol.messages.delete_share_group_offsets import DeleteShareGroupOffsetsRequest
from protocol.messages.describe_share_group_offsets import (
    DescribeShareGroupOffsetsRequest, DescribeShareGroupOffsetsResponse as DR)


def check(*argv: str, module=share_groups) -> str | None:
    return module.validate(module.build_parser().parse_args(["--bootstrap-server", "h:1", *argv]))


# ----------------------------------------------------------------------------- argument checks
@pytest.mark.parametrize("argv", [
    ["--list"], ["--list", "--state"], ["--list", "--state", "stable,Empty"],
    ["--describe", "--group", "g"], ["--describe", "--group", "g", "--members", "--verbose"],
    ["--describe", "--all-groups", "--state"], ["--describe", "--group", "a", "--group", "b", "--offsets"],
    ["--reset-offsets", "--group", "g", "--to-earliest", "--dry-run"],
    ["--reset-offsets", "--group", "g", "--topic", "t:0,1", "--topic", "u", "--to-offset", "5", "--execute"],
    ["--reset-offsets", "--group", "g", "--all-topics", "--by-duration", "PT1H", "--dry-run"],
    ["--reset-offsets", "--group", "g", "--to-datetime", "2024-01-02T03:04:05.678Z", "--execute"],
    ["--delete-offsets", "--group", "g", "--topic", "t"], ["--delete", "--group", "g", "--group", "h"],
])
def test_valid_share_group_commands(argv):
    assert check(*argv) is None


@pytest.mark.parametrize("argv, message", [
    ([], "Command must include exactly one action: --list, --describe, --delete, --reset-offsets, --delete-offsets."),
    (["--list", "--delete"], "Command must include exactly one action"),
    (["--describe"], "Option [describe] takes one of these options: [all-groups], [group]"),
    (["--describe", "--group", "g", "--members", "--state"],
     "Option [describe] takes at most one of these options: [members], [offsets], [state]"),
    (["--describe", "--group", "g", "--members", "--offsets"], "takes at most one of these options"),
    (["--describe", "--group", "g", "--state", "Stable"], "Option [describe] does not take a value for [state]"),
    (["--describe", "--group", "g", "--all-groups"], 'Option "[group]" can\'t be used with option "[all-groups]"'),
    (["--list", "--group", "g"], 'Option "[group]" can\'t be used with option "[list]"'),
    (["--list", "--state", "Stable,Rebalancing"], "Invalid state list 'Stable,Rebalancing'. Valid states are: Empty, Stable, Dead"),
    (["--list", "--members"], "Option [members] may be used with the [describe] option only"),
    (["--describe", "--group", "g", "--topic", "t"], 'Option "[topic]" can\'t be used with option "[describe]"'),
    (["--delete"], "Option [delete] takes the option: [group]"),
    (["--delete-offsets", "--group", "g"], "Option [delete-offsets] takes the following options: [group], [topic]"),
    (["--reset-offsets", "--group", "g", "--to-earliest"], "Option [reset-offsets] takes the option: [execute] or [dry-run]"),
    (["--reset-offsets", "--group", "g", "--to-earliest", "--dry-run", "--execute"],
     "Option [reset-offsets] only accepts one of [execute] and [dry-run]"),
    (["--reset-offsets", "--to-earliest", "--dry-run"], "Option [reset-offsets] takes the option: [group]"),
    (["--reset-offsets", "--group", "g", "--dry-run"],
     "Option [reset-offsets] requires one of the following scenarios: [to-datetime], [to-earliest], [to-latest], "
     "[by-duration], [to-offset]"),
    (["--reset-offsets", "--group", "g", "--to-earliest", "--to-latest", "--dry-run"],
     'Option "[to-earliest]" can\'t be used with option "[to-latest]"'),
    (["--reset-offsets", "--group", "g", "--to-datetime", "yesterday", "--dry-run"], "Error parsing timestamp 'yesterday'"),
    (["--reset-offsets", "--group", "g", "--by-duration", "1h", "--dry-run"], "Invalid duration '1h'"),
    (["--reset-offsets", "--group", "g", "--topic", "t:x", "--to-earliest", "--dry-run"],
     "Invalid partition 'x' specified in topic arg 't:x'"),
    (["--reset-offsets", "--group", "g", "--group", "h", "--to-earliest", "--dry-run"], "one share group at the time"),
    (["--describe", "--group", "g", "--to-earliest"], "Option [to-earliest] may be used with the [reset-offsets] option only"),
    (["--list", "--execute"], "Option [execute] may be used with the [reset-offsets] option only"),
])
def test_invalid_share_group_commands(argv, message):
    problem = check(*argv)
    assert problem is not None and message in problem, problem


def test_consumer_group_and_topic_argument_checks():
    assert check("--describe", "--group", "g", "--members", "--verbose", module=consumer_groups) is None
    assert "exactly one action" in check(module=consumer_groups)
    assert "Valid states are" in check("--list", "--state", "Bogus", module=consumer_groups)
    assert check("--list", "--state", "PreparingRebalance", module=consumer_groups) is None
    assert check("--create", "--topic", "t", "--partitions", "3", "--config", "retention.ms=1", module=topics) is None
    assert "Missing required argument \"[topic]\"" in check("--delete", module=topics)
    assert "[partitions]" in check("--alter", "--topic", "t", module=topics)
    assert "key=val" in check("--create", "--topic", "t", "--config", "retention.ms", module=topics)
    assert "greater than 0" in check("--create", "--topic", "t", "--partitions", "0", module=topics)


# ----------------------------------------------------------------------------- offset specifications
def test_parse_datetime_formats():
    assert parse_datetime("2024-01-02T03:04:05Z") == 1704164645000
    assert parse_datetime("2024-01-02T03:04:05.678Z") == 1704164645678
    assert parse_datetime("2024-01-02T03:04:05.6Z") == 1704164645600
    assert parse_datetime("2024-01-02T05:04:05+02:00") == 1704164645000
    assert parse_datetime("2024-01-02T01:34:05-0130") == 1704164645000
    assert parse_datetime("2024-01-02T03:04:05", local_tz=timezone(timedelta(hours=1))) == 1704164645000 - 3600_000
    for bad in ("2024-01-02", "2024-01-02 03:04:05", "2024-01-02T03:04", "now", "2024-01-02T03:04:05.1234Z"):
        with pytest.raises(ValueError, match="Error parsing timestamp"):
            parse_datetime(bad)


def test_parse_duration_iso8601():
    assert parse_duration("PT1H") == timedelta(hours=1)
    assert parse_duration("P1DT2H30M") == timedelta(days=1, hours=2, minutes=30)
    assert parse_duration("pt15m") == timedelta(minutes=15)
    assert parse_duration("PT0.5S") == timedelta(milliseconds=500)
    assert parse_duration("P2D") == timedelta(days=2)
    assert parse_duration("-PT5M") == timedelta(minutes=-5)
    for bad in ("P", "PT", "P1DT", "1H", "PT1X", "", "P1H"):
        with pytest.raises(ValueError, match="Invalid duration"):
            parse_duration(bad)


def test_parse_topic_partitions():
    assert parse_topic_partitions("orders") == ("orders", None)
    assert parse_topic_partitions("orders:0,2,5") == ("orders", [0, 2, 5])
    with pytest.raises(ValueError, match="Invalid partition 'x'"):
        parse_topic_partitions("orders:1,x")
    with pytest.raises(ValueError, match="expected topic name and partitions"):
        parse_topic_partitions("a:1:2")


# ----------------------------------------------------------------------------- output
def test_table_lines_as_kafka_printf():
    lines = table_lines(["GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LAG"],
                        [["g", "orders", 0, 5, 2], ["g", "orders", 1, None, None]], [15, 15, 10, 13, 0])
    assert lines == [
        "GROUP           TOPIC           PARTITION  START-OFFSET  LAG",
        "g               orders          0          5             2",
        "g               orders          1          -             -",
    ]
    wide = table_lines(["GROUP", "X"], [["a-very-long-group-name", "1"]], [15, 0])
    assert wide == ["GROUP                  X", "a-very-long-group-name 1"]


def test_member_assignment_string_sorted_like_kafka():
    m = Member("m", "/h", "c", {"b": [2, 0], "a": [1]}, 3)
    assert m.assignment_str() == "a:1;b:0,2"


def test_state_names_and_bootstrap_and_uuid():
    assert [state_name(s) for s in ("stable", "EMPTY", "Dead", "", "weird")] == ["Stable", "Empty", "Dead", "Unknown", "weird"]
    assert parse_bootstrap("a:1, b:2,[::1]:3") == [("a", 1), ("b", 2), ("::1", 3)]
    with pytest.raises(AdminError):
        parse_bootstrap("nohostport")
    assert uuid_str(bytes(16)) == "AAAAAAAAAAAAAAAAAAAAAA"


# ----------------------------------------------------------------------------- the requests sent
def test_describe_offsets_request_asks_for_all_topics():
    req = share_groups.describe_offsets_request("g")
    for v in (0, 1):
        back = DescribeShareGroupOffsetsRequest.decode(req.encode(v), v)
        assert back.groups[0].group_id == "g" and back.groups[0].topics is None


def test_alter_and_delete_offsets_requests():
    req = share_groups.alter_offsets_request("g", {("b", 1): 7, ("a", 0): 3, ("b", 0): 5})
    back = AlterShareGroupOffsetsRequest.decode(req.encode(0), 0)
    assert back.group_id == "g"
    assert [(t.topic_name, [(p.partition_index, p.start_offset) for p in t.partitions]) for t in back.topics] == [
        ("a", [(0, 3)]), ("b", [(0, 5), (1, 7)])]
    back = DeleteShareGroupOffsetsRequest.decode(share_groups.delete_offsets_request("g", ["x", "y"]).encode(0), 0)
    assert back.group_id == "g" and [t.topic_name for t in back.topics] == ["x", "y"]


def test_offsets_from_response_v0_and_v1():
    def resp(lag):
        return DR(groups=[DR.DescribeShareGroupOffsetsResponseGroup(group_id="g", topics=[
            DR.DescribeShareGroupOffsetsResponseTopic(topic_name="t", partitions=[
                DR.DescribeShareGroupOffsetsResponsePartition(partition_index=1, start_offset=4, leader_epoch=0, lag=lag),
                DR.DescribeShareGroupOffsetsResponsePartition(partition_index=0, start_offset=-1, leader_epoch=-1, lag=-1),
                DR.DescribeShareGroupOffsetsResponsePartition(partition_index=2, error_code=3)])])])

    for version, lag in ((1, 6), (0, None)):
        r = DR.decode(resp(6).encode(version), version)
        rows = share_groups.offsets_from_response("g", r)
        assert [(x.partition, x.start_offset, x.leader_epoch, x.lag) for x in rows] == [
            (0, None, None, None), (1, 4, 0, lag)]
    missing = DR(groups=[DR.DescribeShareGroupOffsetsResponseGroup(group_id="g", error_code=69)])
    with pytest.raises(AdminError, match="Share group 'g' does not exist."):
        share_groups.offsets_from_response("g", missing)


# ----------------------------------------------------------------------------- exit codes
def test_usage_error_exit_code(capsys):
    assert share_groups.main(["--bootstrap-server", "h:1", "--describe"]) == EXIT_USAGE
    assert "Option [describe] takes one of these options" in capsys.readouterr().err


def test_refused_connection_exit_code(capsys):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    assert share_groups.main(["--bootstrap-server", f"127.0.0.1:{port}", "--list"]) == EXIT_UNREACHABLE
    err = capsys.readouterr().err
    assert err.startswith(f"Error: broker unreachable: cannot connect to 127.0.0.1:{port}") and err.count("\n") == 1


def test_silent_broker_times_out(capsys):
    """A listener that accepts but never answers: the command gives up after --timeout."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    held = []
    t = threading.Thread(target=lambda: held.append(srv.accept()), daemon=True)
    t.start()
    try:
        rc = topics.main(["--bootstrap-server", f"127.0.0.1:{srv.getsockname()[1]}", "--list", "--timeout", "300"])
    finally:
        srv.close()
        for conn, _ in held:
            conn.close()
    assert rc == EXIT_UNREACHABLE
    assert "no answer from 127.0.0.1:" in capsys.readouterr().err
