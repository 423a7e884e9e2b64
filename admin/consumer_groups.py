"""``sharebroker-consumer-groups``: list, describe and delete consumer groups, in the style of
Apache Kafka's ``kafka-consumer-groups.sh`` (``ConsumerGroupCommand``):

    --list [--state [S,...]]                ListGroups v5 (types consumer + classic) on every broker
    --describe --group G | --all-groups     ConsumerGroupDescribe (KIP-848 groups), falling back to
        [--offsets] (default)                 DescribeGroups for classic groups, as Kafka's admin does;
        [--members] [--state] [--verbose]     --offsets adds OffsetFetch + ListOffsets (latest):
                                              LAG = LOG-END-OFFSET - CURRENT-OFFSET per partition
    --delete --group G ...                  DeleteGroups

``--json`` prints any result as JSON. Exit codes: see ``admin.common``.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

from admin.client import AdminClient, AdminError, Node, error_text
from admin.common import (
    LATEST_TIMESTAMP, Failed, GroupDescription, Member, add_common_options, check_group_options, delete_groups, eprint, list_groups, list_offsets, one_action,
    parse_states, print_group_list, print_json, print_table, report_deletions, run_action, state_name)
from protocol.errors import Errors
from protocol.messages.consumer_group_describe import ConsumerGroupDescribeRequest
from protocol.messages.consumer_protocol_assignment import ConsumerProtocolAssignment
from protocol.messages.describe_groups import DescribeGroupsRequest
from protocol.messages.offset_fetch import OffsetFetchRequest

ACTIONS = ("list", "describe", "delete")
CONSUMER_STATES = ("PreparingRebalance", "CompletingRebalance", "Stable", "Dead", "Empty",
                   "Assigning", "Reconciling")
CONSUMER_GROUP_DESCRIBE = 69


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sharebroker-consumer-groups",
                                description="List, describe and delete consumer groups.")
    add_common_options(p)
    a = p.add_argument
    a("--list", action="store_true", help="List all consumer groups.")
    a("--describe", action="store_true", help="Describe consumer group and list offset lag (number of "
                                             "messages not yet processed) related to given group.")
    a("--delete", action="store_true", help="Pass in groups to delete topic partition offsets and ownership "
                                           "information over the entire consumer group.")
    a("--group", action="append", metavar="GROUP", help="The consumer group we wish to act on (repeatable).")
    a("--all-groups", action="store_true", help="Apply to all consumer groups.")
    a("--members", action="store_true", help="Describe members of the group (with --describe).")
    a("--offsets", action="store_true", help="Describe the group's partitions with their committed offset, "
                                            "log-end offset and lag (the default of --describe).")
    a("--state", nargs="?", const="", default=None, metavar="STATES",
      help="With --describe: the state of the group. With --list: show each group's state, or list only "
           "groups in these states (comma-separated).")
    a("--verbose", action="store_true", help="Provide additional information when describing the group.")
    return p


def validate(args) -> str | None:
    action, problem = one_action(args, ACTIONS, "Command must include exactly one action: --list, --describe, --delete.")
    problem = problem or check_group_options(args, action, CONSUMER_STATES)
    if problem:
        return problem
    if action == "delete" and not args.group and not args.all_groups:
        return "Option [delete] takes one of these options: [all-groups], [group]"
    return None


def consumer_groups(client: AdminClient, states: list[str] | None = None) -> list:
    """Kafka's ``ListGroupsOptions.forConsumerGroups()``: types consumer and classic, protocol
    type "consumer" or empty."""
    return [g for g in list_groups(client, ["consumer", "classic"], states) if g.protocol_type in ("consumer", "")]


# ----------------------------------------------------------------------------- describing
def _decode_assignment(raw) -> dict[str, list[int]]:
    """A classic member's assignment bytes (ConsumerProtocolAssignment, version in the first two bytes)."""
    raw = bytes(raw or b"")
    if len(raw) < 2:
        return {}
    version = min(int.from_bytes(raw[:2], "big", signed=True), ConsumerProtocolAssignment.MAX_VERSION)
    a = ConsumerProtocolAssignment.decode(raw[2:], version)
    out: dict[str, list[int]] = {}
    for tp in a.assigned_partitions:
        out.setdefault(tp.topic, []).extend(tp.partitions)
    return out


def describe_group(client: AdminClient, group: str) -> GroupDescription:
    """ConsumerGroupDescribe when the coordinator serves it; GROUP_ID_NOT_FOUND (or no such API)
    falls back to DescribeGroups, which answers Dead for a group that does not exist."""
    node = client.coordinator(group)
    if client.supports(CONSUMER_GROUP_DESCRIBE, node):
        resp, node = client.group_request(group, lambda: ConsumerGroupDescribeRequest(group_ids=[group]),
                                          lambda r: r.groups[0].error_code)
        g = resp.groups[0]
        if g.error_code == Errors.NONE:
            members = [Member(m.member_id, m.client_host, m.client_id,
                              {tp.topic_name: list(tp.partitions) for tp in (m.assignment.topic_partitions if m.assignment else [])})
                       for m in g.members]
            return GroupDescription(group, state_name(g.group_state), node, g.assignor_name, g.group_epoch,
                                 g.assignment_epoch, sorted(members, key=lambda m: m.consumer_id))
        if g.error_code != Errors.GROUP_ID_NOT_FOUND:
            raise AdminError(f"describing consumer group '{group}' failed: {error_text(g.error_code, g.error_message)}",
                             g.error_code)
    resp, node = client.group_request(group, lambda: DescribeGroupsRequest(groups=[group]),
                                      lambda r: r.groups[0].error_code)
    g = resp.groups[0]
    if g.error_code == Errors.GROUP_ID_NOT_FOUND:  # DescribeGroups v6+ (KIP-1043); earlier: state Dead
        return GroupDescription(group, "Dead", node)
    if g.error_code != Errors.NONE:
        raise AdminError(f"describing consumer group '{group}' failed: {error_text(g.error_code, g.error_message)}",
                         g.error_code)
    if g.protocol_type not in ("consumer", ""):
        raise AdminError(f"Group '{group}' is not a consumer group (protocol type '{g.protocol_type}').")
    members = [Member(m.member_id, m.client_host, m.client_id, _decode_assignment(m.member_assignment))
               for m in g.members]
    return GroupDescription(group, state_name(g.group_state), node, g.protocol_data,
                         members=sorted(members, key=lambda m: m.consumer_id))


def committed_offsets(client: AdminClient, group: str, node: Node) -> dict[tuple[str, int], int]:
    """OffsetFetch for all topics (Topics null), by topic name (v2-9); -1 offsets are left out."""
    version = client.connection(node).version_for(OffsetFetchRequest, 2, 9)
    def req():  # null Topics: all topics (the codec's constructors turn None into [], so set it after)
        if version >= 8:
            g = OffsetFetchRequest.OffsetFetchRequestGroup(group_id=group)
            g.topics = None
            return OffsetFetchRequest(groups=[g])
        r = OffsetFetchRequest(group_id=group)
        r.topics = None
        return r

    err = (lambda r: r.groups[0].error_code) if version >= 8 else (lambda r: r.error_code)
    resp, _ = client.group_request(group, req, err, version=version)
    code = err(resp)
    if code != Errors.NONE:
        raise AdminError(f"fetching the offsets of consumer group '{group}' failed: {error_text(code)}", code)
    topics = resp.groups[0].topics if version >= 8 else resp.topics
    return {(t.name, p.partition_index): p.committed_offset
            for t in topics for p in t.partitions if p.error_code == Errors.NONE and p.committed_offset >= 0}


@dataclass
class OffsetRow:
    group: str
    topic: str
    partition: int
    current_offset: int | None
    log_end_offset: int | None
    lag: int | None
    consumer_id: str | None
    host: str | None
    client_id: str | None


def offset_rows(client: AdminClient, desc: GroupDescription) -> list[OffsetRow]:
    """One row per partition that is assigned or has a committed offset (Kafka's describe)."""
    committed = committed_offsets(client, desc.group, desc.coordinator)
    owner = {(t, p): m for m in desc.members for t, ps in m.assignment.items() for p in ps}
    tps = sorted(set(committed) | set(owner))
    ends = list_offsets(client, tps, LATEST_TIMESTAMP) if tps else {}
    rows = []
    for tp in tps:
        cur, end, m = committed.get(tp), ends.get(tp), owner.get(tp)
        lag = end - cur if cur is not None and end is not None and end >= 0 else None
        rows.append(OffsetRow(desc.group, tp[0], tp[1], cur, end if end is not None and end >= 0 else None, lag,
                              m.consumer_id if m else None, m.host if m else None, m.client_id if m else None))
    return rows


def cmd_list(client: AdminClient, args) -> None:
    states = parse_states(args.state, CONSUMER_STATES) if args.state else None
    print_group_list(consumer_groups(client, states), args)


def cmd_describe(client: AdminClient, args) -> None:
    groups = sorted(set(args.group)) if args.group else [g.group_id for g in consumer_groups(client)]
    failed = False
    out = []
    for group in groups:
        desc = describe_group(client, group)
        if desc.state == "Dead":
            eprint(f"Error: Consumer group '{group}' does not exist.")
            failed = True
            continue
        if desc.state == "Empty" and not args.json:
            eprint(f"\nConsumer group '{group}' has no active members.")
        if args.members:
            out += [m.as_json(group) for m in desc.members]
            if not args.json and desc.members:
                headers = ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"] + (["ASSIGNMENT"] if args.verbose else [])
                rows = [[group, m.consumer_id, m.host, m.client_id, m.partition_count]
                        + ([m.assignment_str()] if args.verbose else []) for m in desc.members]
                print_table(headers, rows, [15, 15, 15, 15, 12, 0][:len(headers)])
        elif args.state is not None:
            out.append({"group": group, "coordinator": desc.coordinator_json(),
                        "assignment_strategy": desc.assignor, "state": desc.state, "group_epoch": desc.group_epoch,
                        "target_assignment_epoch": desc.assignment_epoch, "members": len(desc.members)})
            if not args.json:
                if args.verbose:
                    print_table(["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "GROUP-EPOCH",
                                 "TARGET-ASSIGNMENT-EPOCH", "#MEMBERS"],
                                [[group, desc.coordinator_str, desc.assignor, desc.state, desc.group_epoch,
                                  desc.assignment_epoch, len(desc.members)]], [15, 25, 20, 20, 12, 23, 0])
                else:
                    print_table(["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"],
                                [[group, desc.coordinator_str, desc.assignor, desc.state, len(desc.members)]],
                                [15, 25, 20, 20, 0])
        else:
            rows = offset_rows(client, desc)
            out += [r.__dict__ for r in rows]
            if not args.json:
                if rows:
                    print_table(["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                                 "CONSUMER-ID", "HOST", "CLIENT-ID"],
                                [[r.group, r.topic, r.partition, r.current_offset, r.log_end_offset, r.lag,
                                  r.consumer_id, r.host, r.client_id] for r in rows],
                                [15, 15, 10, 15, 15, 15, 15, 15, 0])
                else:
                    print(f"\nConsumer group '{group}' has no offset information.")
    if args.json:
        print_json(out)
    if failed:
        raise Failed()


def cmd_delete(client: AdminClient, args) -> None:
    groups = list(dict.fromkeys(args.group)) if args.group else [g.group_id for g in consumer_groups(client)]
    def describe_error(group: str, code: int, message: str | None) -> str:
        if code == Errors.GROUP_ID_NOT_FOUND:
            return f"Consumer group '{group}' does not exist."
        if code == Errors.NON_EMPTY_GROUP:
            return f"Consumer group '{group}' is not empty."
        return error_text(code, message)

    report_deletions("consumer", *delete_groups(client, groups, describe_error), args.json)


COMMANDS = {"list": cmd_list, "describe": cmd_describe, "delete": cmd_delete}


def main(argv=None) -> int:
    return run_action(build_parser(), validate, COMMANDS, argv)


if __name__ == "__main__":
    sys.exit(main())
