"""``sharebroker-share-groups``: list, describe, reset and delete share groups.

Options, output columns and messages mirror Apache Kafka's ``kafka-share-groups.sh``
(``ShareGroupCommand``), and the same requests are sent, so the command works against sharebroker
and an Apache Kafka 4.x cluster alike:

    --list [--state [S,...]]                 ListGroups v5 (type filter "share") on every broker
    --describe --group G | --all-groups      ShareGroupDescribe to the group coordinator, and
        [--offsets] (default)                  DescribeShareGroupOffsets (v1 gives LAG; v0: "-")
        [--members] [--state] [--verbose]
    --reset-offsets --group G --dry-run | --execute
        --to-earliest | --to-latest | --to-datetime DT | --by-duration D | --to-offset N
        [--topic T[:P,...] ... | --all-topics]  Metadata + ListOffsets, then AlterShareGroupOffsets
    --delete-offsets --group G --topic T ...  DeleteShareGroupOffsets
    --delete --group G ...                    ListGroups (checks), then DeleteGroups

``--json`` prints any result as JSON instead of a table. Exit codes: see ``admin.common``.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from datetime import timedelta

from admin.client import AdminClient, AdminError, error_text
from admin.common import (
    EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, Failed, GroupDescription, Member, add_common_options, check_group_options,
    check_partitions_exist, delete_groups, eprint,
    given as _given, list_groups, list_offsets, now_ms, one_action, parse_datetime, parse_duration, parse_states,
    parse_topic_partitions,
    print_group_list, print_json, print_table, report_deletions, run_action, state_name, tp_str, warn)
from protocol.errors import Errors
from protocol.messages.alter_share_group_offsets import AlterShareGroupOffsetsRequest as AlterReq
from protocol.messages.delete_share_group_offsets import DeleteShareGroupOffsetsRequest as DeleteOffsetsReq
from protocol.messages.describe_share_group_offsets import DescribeShareGroupOffsetsRequest as DescribeOffsetsReq
from protocol.messages.share_group_describe import ShareGroupDescribeRequest

SHARE_STATES = ("Empty", "Stable", "Dead")  # GroupState.groupStatesForType(SHARE)
ACTIONS = ("list", "describe", "delete", "reset_offsets", "delete_offsets")
SCENARIOS = ("to_datetime", "to_earliest", "to_latest", "by_duration", "to_offset")


def opt(name: str) -> str:
    """An option as Kafka's messages name it: ``[reset-offsets]``."""
    return "[" + name.replace("_", "-") + "]"


# ----------------------------------------------------------------------------- arguments
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="sharebroker-share-groups",
        description="This tool helps to list, describe, reset and delete share groups.")
    add_common_options(p)
    a = p.add_argument
    a("--list", action="store_true", help="List all share groups.")
    a("--describe", action="store_true", help="Describe share group, members and offset information.")
    a("--delete", action="store_true", help="Delete share group.")
    a("--reset-offsets", action="store_true",
      help="Reset offsets of share group. Supports one share group at the time, and instances must be inactive.")
    a("--delete-offsets", action="store_true",
      help="Delete offsets of share group. Supports one share group at the time, and multiple topics.")
    a("--group", action="append", metavar="GROUP", help="The share group we wish to act on (repeatable).")
    a("--all-groups", action="store_true", help="Apply to all share groups.")
    a("--topic", action="append", metavar="TOPIC[:P,...]",
      help="The topic whose offset information should be deleted or included in the reset offset process "
           "('topic1:0,1,2' names partitions).")
    a("--all-topics", action="store_true", help="Consider all topics of the share group in the reset.")
    a("--members", action="store_true", help="Describe members of the group (with --describe).")
    a("--offsets", action="store_true",
      help="Describe the group's topic partitions with their start offset and lag (the default of --describe).")
    a("--state", nargs="?", const="", default=None, metavar="STATES",
      help="With --describe: the state of the group. With --list: show each group's state, or list only "
           "groups in these states (comma-separated: Empty, Stable, Dead).")
    a("--verbose", action="store_true", help="Provide additional information when describing the group.")
    a("--dry-run", action="store_true", help="Only show the new offsets (reset-offsets).")
    a("--execute", action="store_true", help="Reset the offsets (reset-offsets).")
    a("--to-earliest", action="store_true", help="Reset offsets to earliest offset.")
    a("--to-latest", action="store_true", help="Reset offsets to latest offset.")
    a("--to-datetime", metavar="DATETIME", help="Reset offsets to offset from datetime. Format: 'YYYY-MM-DDThh:mm:ss.sss'")
    a("--by-duration", metavar="DURATION", help="Reset offsets to offset by duration from now. Format: 'PnDTnHnMnS'")
    a("--to-offset", type=int, metavar="OFFSET", help="Reset offsets to a specific offset.")
    return p


def validate(args) -> str | None:
    """The checks of Kafka's ``ShareGroupCommandOptions.checkArgs`` (same messages); None if fine."""
    action, problem = one_action(args, ACTIONS, "Command must include exactly one action: "
                                 "--list, --describe, --delete, --reset-offsets, --delete-offsets.")
    problem = problem or check_group_options(args, action, SHARE_STATES)
    if problem:
        return problem
    if args.topic and action not in ("reset_offsets", "delete_offsets"):
        return f'Option "{opt("topic")}" can\'t be used with option "{opt(action)}"'
    if args.all_topics and action != "reset_offsets":
        return f"Option {opt('all-topics')} may be used with the {opt('reset-offsets')} option only"
    scenarios = [s for s in SCENARIOS if _given(args, s)]
    if action != "reset_offsets":
        for name in scenarios + [n for n in ("dry_run", "execute") if _given(args, n)]:
            return f"Option {opt(name)} may be used with the {opt('reset-offsets')} option only"
    if action == "delete":
        if not args.group:
            return f"Option {opt('delete')} takes the option: {opt('group')}"
    if action == "delete_offsets":
        if not args.group or not args.topic:
            return f"Option {opt('delete-offsets')} takes the following options: {opt('group')}, {opt('topic')}"
        if len(args.group) > 1:
            return f"Option {opt('delete-offsets')} supports one share group at the time"
    if action == "reset_offsets":
        if args.dry_run and args.execute:
            return f"Option {opt('reset-offsets')} only accepts one of {opt('execute')} and {opt('dry-run')}"
        if not args.dry_run and not args.execute:
            return f"Option {opt('reset-offsets')} takes the option: {opt('execute')} or {opt('dry-run')}"
        if not args.group:
            return f"Option {opt('reset-offsets')} takes the option: {opt('group')}"
        if len(args.group) > 1:
            return f"Option {opt('reset-offsets')} supports one share group at the time"
        if args.topic and args.all_topics:
            return f'Option "{opt("topic")}" can\'t be used with option "{opt("all-topics")}"'
        if len(scenarios) > 1:
            return f'Option "{opt(scenarios[0])}" can\'t be used with option "{opt(scenarios[1])}"'
        if not scenarios:
            return (f"Option {opt('reset-offsets')} requires one of the following scenarios: "
                    + ", ".join(opt(s) for s in SCENARIOS))
        try:
            if args.to_datetime is not None:
                parse_datetime(args.to_datetime)
            if args.by_duration is not None:
                parse_duration(args.by_duration)
            for t in args.topic or []:
                parse_topic_partitions(t)
        except ValueError as e:
            return str(e)
    return None


# ----------------------------------------------------------------------------- describing
def describe_group(client: AdminClient, group: str) -> GroupDescription:
    """ShareGroupDescribe at the coordinator.  An unknown group (GROUP_ID_NOT_FOUND) is reported
    as a Dead group, as Kafka's admin client does."""
    resp, node = client.group_request(group, lambda: ShareGroupDescribeRequest(group_ids=[group]),
                                      lambda r: r.groups[0].error_code if r.groups else Errors.NONE)
    g = resp.groups[0]
    if g.error_code == Errors.GROUP_ID_NOT_FOUND:
        return GroupDescription(group, "Dead", node)
    if g.error_code != Errors.NONE:
        raise AdminError(f"describing share group '{group}' failed: {error_text(g.error_code, g.error_message)}",
                         g.error_code)
    members = []
    for m in g.members:
        assignment: dict[str, list[int]] = {}
        for tp in (m.assignment.topic_partitions if m.assignment else []) or []:
            assignment.setdefault(tp.topic_name, []).extend(tp.partitions)
        members.append(Member(m.member_id, m.client_host, m.client_id, assignment, m.member_epoch))
    members.sort(key=lambda m: m.consumer_id)
    return GroupDescription(group, state_name(g.group_state), node, g.assignor_name, g.group_epoch,
                            g.assignment_epoch, members)


@dataclass
class PartitionOffset:
    group: str
    topic: str
    partition: int
    start_offset: int | None
    leader_epoch: int | None
    lag: int | None


def describe_offsets_request(group: str) -> DescribeOffsetsReq:
    """DescribeShareGroupOffsets for all the group's topics (Topics null, as Kafka's admin client
    sends it when no partitions are named)."""
    g = DescribeOffsetsReq.DescribeShareGroupOffsetsRequestGroup(group_id=group)
    g.topics = None  # the constructor turns None into [], which would mean "no topics"
    return DescribeOffsetsReq(groups=[g])


def describe_offsets(client: AdminClient, group: str) -> list[PartitionOffset]:
    """DescribeShareGroupOffsets for all the group's topics (Topics null), v1 when the broker has
    it (Lag), else v0 (lag unknown).  Partitions answered with an error are skipped, and a
    negative start offset means "not known", as in Kafka's ``listShareGroupOffsets``."""
    resp, _ = client.group_request(group, lambda: describe_offsets_request(group),
                                   lambda r: r.groups[0].error_code if r.groups else Errors.NONE)
    return offsets_from_response(group, resp)


def offsets_from_response(group: str, resp) -> list[PartitionOffset]:
    out = []
    for g in resp.groups:
        if g.error_code == Errors.GROUP_ID_NOT_FOUND:
            raise AdminError(f"Share group '{group}' does not exist.", g.error_code)
        if g.error_code != Errors.NONE:
            raise AdminError(f"describing the offsets of share group '{group}' failed: "
                             f"{error_text(g.error_code, g.error_message)}", g.error_code)
        for t in g.topics:
            for p in t.partitions:
                if p.error_code != Errors.NONE:
                    warn(f"Skipping the offset of {tp_str(t.topic_name, p.partition_index)}: "
                         f"{error_text(p.error_code, p.error_message)}")
                    continue
                known = p.start_offset >= 0
                lag = getattr(p, "lag", -1)
                out.append(PartitionOffset(group, t.topic_name, p.partition_index,
                                           p.start_offset if known else None,
                                           p.leader_epoch if known and p.leader_epoch >= 0 else None,
                                           lag if known and lag >= 0 else None))
    out.sort(key=lambda r: (r.topic, r.partition))
    return out


def dead_group_error(group: str) -> str:
    return f"Share group '{group}' does not exist."


def cmd_list(client: AdminClient, args) -> None:
    states = parse_states(args.state, SHARE_STATES) if args.state else None
    print_group_list(list_groups(client, ["share"], states), args)


def cmd_describe(client: AdminClient, args) -> None:
    groups = sorted(set(args.group)) if args.group else [g.group_id for g in list_groups(client, ["share"])]
    failed = False
    out = []
    for group in groups:
        desc = describe_group(client, group)
        if desc.state == "Dead":
            eprint(f"Error: {dead_group_error(group)}")
            failed = True
            continue
        if args.members:
            if desc.state == "Empty" and not args.json:
                eprint(f"\nShare group '{group}' has no active members.")
            out += [m.as_json(group) for m in desc.members]
            if not args.json and desc.members:
                print_members(group, desc.members, args.verbose)
        elif args.state is not None:
            if desc.state == "Empty" and not args.json:
                eprint(f"\nShare group '{group}' has no active members.")
            out.append({"group": group, "coordinator": desc.coordinator_json(), "state": desc.state, "group_epoch": desc.group_epoch,
                        "assignment_epoch": desc.assignment_epoch, "members": len(desc.members)})
            if not args.json:
                print_state(desc, args.verbose)
        else:
            rows = describe_offsets(client, group)
            out += [{"group": r.group, "topic": r.topic, "partition": r.partition, "start_offset": r.start_offset,
                     "leader_epoch": r.leader_epoch, "lag": r.lag} for r in rows]
            if not args.json:
                print_offsets(group, rows, args.verbose)
    if args.json:
        print_json(out)
    if failed:
        raise Failed()


def print_members(group: str, members: list[Member], verbose: bool) -> None:
    if verbose:
        headers = ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "MEMBER-EPOCH", "ASSIGNMENT"]
        widths = [15, 15, 15, 15, 12, 13, 0]
        rows = [[group, m.consumer_id, m.host, m.client_id, m.partition_count, m.member_epoch, m.assignment_str()]
                for m in members]
    else:
        headers = ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"]
        widths = [15, 15, 15, 15, 12, 0]
        rows = [[group, m.consumer_id, m.host, m.client_id, m.partition_count, m.assignment_str()] for m in members]
    print_table(headers, rows, widths)


def print_state(desc: GroupDescription, verbose: bool) -> None:
    if verbose:
        headers = ["GROUP", "COORDINATOR (ID)", "STATE", "GROUP-EPOCH", "ASSIGNMENT-EPOCH", "#MEMBERS"]
        widths = [15, 25, 15, 12, 17, 0]
        row = [desc.group, desc.coordinator_str, desc.state, desc.group_epoch, desc.assignment_epoch, len(desc.members)]
    else:
        headers = ["GROUP", "COORDINATOR (ID)", "STATE", "#MEMBERS"]
        widths = [15, 25, 15, 0]
        row = [desc.group, desc.coordinator_str, desc.state, len(desc.members)]
    print_table(headers, [row], widths)


def print_offsets(group: str, rows: list[PartitionOffset], verbose: bool) -> None:
    if not rows:
        print(f"\nShare group '{group}' has no offset information.")
        return
    if verbose:
        headers = ["GROUP", "TOPIC", "PARTITION", "LEADER-EPOCH", "START-OFFSET", "LAG"]
        widths = [15, 15, 10, 13, 13, 0]
        cells = [[group, r.topic, r.partition, r.leader_epoch, r.start_offset, r.lag] for r in rows]
    else:
        headers = ["GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LAG"]
        widths = [15, 15, 10, 13, 0]
        cells = [[group, r.topic, r.partition, r.start_offset, r.lag] for r in rows]
    print_table(headers, cells, widths)


# ----------------------------------------------------------------------------- reset
def partitions_to_reset(client: AdminClient, args, group: str) -> list[tuple[str, int]]:
    """``--topic T`` (all its partitions), ``--topic T:0,1``, or (``--all-topics`` / nothing) the
    partitions the group has offsets for, as Kafka's ``getPartitionsToReset``."""
    if not args.topic:
        return [(r.topic, r.partition) for r in describe_offsets(client, group)]
    named, whole = [], []
    for arg in args.topic:
        topic, parts = parse_topic_partitions(arg)
        if parts is None:
            whole.append(topic)
        else:
            named += [(topic, p) for p in parts]
    if whole:
        existing = client.partitions(whole)
        for t in whole:
            if t not in existing:
                raise AdminError(f"Topic '{t}' does not exist", Errors.UNKNOWN_TOPIC_OR_PARTITION)
            named += [(t, p) for p in existing[t]]
    return sorted(set(named))


def plan_reset(client: AdminClient, args, tps: list[tuple[str, int]], now: int | None = None) -> dict[tuple[str, int], int]:
    """The new start offset per partition for the chosen scenario (ListOffsets as Kafka's
    ``GroupOffsetsResetter``: earliest / latest / by timestamp with a fall-back to latest for
    partitions without a record at or after it; ``--to-offset`` clamped into [earliest, latest])."""
    check_partitions_exist(client, tps)
    if args.to_earliest:
        return list_offsets(client, tps, EARLIEST_TIMESTAMP)
    if args.to_latest:
        return list_offsets(client, tps, LATEST_TIMESTAMP)
    if args.to_offset is not None:
        earliest = list_offsets(client, tps, EARLIEST_TIMESTAMP)
        latest = list_offsets(client, tps, LATEST_TIMESTAMP)
        out = {}
        for tp in tps:
            wanted = args.to_offset
            if wanted > latest[tp]:
                warn(f"New offset ({wanted}) is higher than latest offset for topic partition {tp_str(*tp)}. "
                     f"Value will be set to {latest[tp]}.")
                wanted = latest[tp]
            elif wanted < earliest[tp]:
                warn(f"New offset ({wanted}) is lower than earliest offset for topic partition {tp_str(*tp)}. "
                     f"Value will be set to {earliest[tp]}.")
                wanted = earliest[tp]
            out[tp] = wanted
        return out
    now = now_ms() if now is None else now
    if args.to_datetime is not None:
        ts = parse_datetime(args.to_datetime)
    else:
        ts = now - parse_duration(args.by_duration) // timedelta(milliseconds=1)
    found = list_offsets(client, tps, ts)
    empty = [tp for tp in tps if found[tp] < 0]
    for t, p in empty:
        warn(f"Partition {p} from topic {t} is empty. Falling back to latest known offset.")
    found.update(list_offsets(client, empty, LATEST_TIMESTAMP))
    return found


def alter_offsets_request(group: str, offsets: dict[tuple[str, int], int]) -> AlterReq:
    topics: dict[str, list] = {}
    for (t, p), off in sorted(offsets.items()):
        topics.setdefault(t, []).append(AlterReq.AlterShareGroupOffsetsRequestPartition(partition_index=p, start_offset=off))
    return AlterReq(group_id=group, topics=[
        AlterReq.AlterShareGroupOffsetsRequestTopic(topic_name=t, partitions=ps) for t, ps in topics.items()])


def not_empty(group: str) -> AdminError:
    return AdminError(f"Share group '{group}' is not empty.", Errors.NON_EMPTY_GROUP)


def check_group_error(group: str, resp, doing: str, ok=(Errors.NONE,)) -> None:
    """The top-level error of an offsets admin response as the tool reports it."""
    code = resp.error_code
    if code == Errors.GROUP_ID_NOT_FOUND:
        raise AdminError(dead_group_error(group), code)
    if code == Errors.NON_EMPTY_GROUP:
        raise not_empty(group)
    if code not in ok:
        raise AdminError(f"{doing} of share group '{group}' failed: {error_text(code, resp.error_message)}", code)


def alter_offsets(client: AdminClient, group: str, offsets: dict[tuple[str, int], int]) -> None:
    resp, _ = client.group_request(group, lambda: alter_offsets_request(group, offsets), lambda r: r.error_code)
    check_group_error(group, resp, "resetting the offsets")
    errors = [f"{tp_str(t.topic_name, p.partition_index)}: {error_text(p.error_code, p.error_message)}"
              for t in resp.responses for p in t.partitions if p.error_code != Errors.NONE]
    if errors:
        raise AdminError(f"resetting the offsets of share group '{group}' failed for " + "; ".join(errors))


def cmd_reset_offsets(client: AdminClient, args) -> None:
    group = args.group[0]
    desc = describe_group(client, group)
    if desc.state not in ("Empty", "Dead"):
        raise not_empty(group)
    tps = partitions_to_reset(client, args, group)
    plan = plan_reset(client, args, tps) if tps else {}
    if args.execute and plan:
        alter_offsets(client, group, plan)
    rows = sorted(plan.items())
    if args.json:
        print_json([{"group": group, "topic": t, "partition": p, "new_offset": off} for (t, p), off in rows])
    elif rows:
        print_table(["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"],
                    [[group, t, p, off] for (t, p), off in rows], [15, 15, 10, 0])
    else:
        print()


# ----------------------------------------------------------------------------- delete
def delete_offsets_request(group: str, topics: list[str]) -> DeleteOffsetsReq:
    return DeleteOffsetsReq(group_id=group, topics=[
        DeleteOffsetsReq.DeleteShareGroupOffsetsRequestTopic(topic_name=t) for t in topics])


def cmd_delete_offsets(client: AdminClient, args) -> None:
    group = args.group[0]
    topics = list(dict.fromkeys(args.topic))
    resp, _ = client.group_request(group, lambda: delete_offsets_request(group, topics), lambda r: r.error_code)
    check_group_error(group, resp, "deleting the offsets",
                      ok=(Errors.NONE, Errors.UNKNOWN_TOPIC_OR_PARTITION, Errors.TOPIC_AUTHORIZATION_FAILED))
    results = {t.topic_name: (t.error_code, t.error_message) for t in resp.responses}
    status = {}
    for t in topics:
        code, msg = results.get(t, (resp.error_code, resp.error_message))
        status[t] = None if code == Errors.NONE else error_text(code, msg)
    if args.json:
        print_json([{"group": group, "topic": t, "error": err} for t, err in sorted(status.items())])
    else:
        print_table(["TOPIC", "STATUS"], [[t, "Successful" if err is None else f"Error: {err}"]
                                          for t, err in sorted(status.items())], [15, 0])
    if any(err is not None for err in status.values()):
        raise Failed()


def cmd_delete(client: AdminClient, args) -> None:
    """Kafka's pre-checks (listed as a share group, state Empty), then DeleteGroups."""
    listed = {g.group_id: g for g in list_groups(client, ["share"])}
    failed: dict[str, str] = {}
    to_delete = []
    for group in dict.fromkeys(args.group):
        g = listed.get(group)
        if g is None:
            failed[group] = f"Group '{group}' is not a share group."
        elif state_name(g.group_state) == "Dead":
            failed[group] = f"Share group '{group}' group state is DEAD."
        elif state_name(g.group_state) != "Empty":
            failed[group] = f"Share group '{group}' is not EMPTY."
        else:
            to_delete.append(group)
    deleted, refused = delete_groups(client, to_delete, lambda g, code, msg: (
        f"Share group '{g}' is not EMPTY." if code == Errors.NON_EMPTY_GROUP else error_text(code, msg)))
    report_deletions("share", deleted, {**failed, **refused}, args.json)


COMMANDS = {"list": cmd_list, "describe": cmd_describe, "delete": cmd_delete,
            "reset_offsets": cmd_reset_offsets, "delete_offsets": cmd_delete_offsets}


def main(argv=None) -> int:
    return run_action(build_parser(), validate, COMMANDS, argv)


if __name__ == "__main__":
    sys.exit(main())
