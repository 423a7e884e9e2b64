"""What the operator commands share: output (Kafka-style tables, ``--json``), exit codes, the
parsing of offset specifications, and the requests several commands send (ListGroups on every
broker, ListOffsets to partition leaders, topic-partition validation).

Exit codes (all commands): 0 success; 1 the operation failed (the broker answered with an error:
unknown group, group not empty, unknown topic, unsupported API, ...); 2 bad usage; 3 no broker
reachable or no answer within ``--timeout``.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Callable, Iterable, Sequence

from admin.client import AdminClient, AdminError, BrokerUnreachable, Node, error_name, error_text
from broker.share.config import parse_iso_duration_ms
from protocol.errors import Errors
from protocol.messages.delete_groups import DeleteGroupsRequest
from protocol.messages.list_groups import ListGroupsRequest
from protocol.messages.list_offsets import ListOffsetsRequest

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3
MISSING = "-"  # Kafka's MISSING_COLUMN_VALUE
EARLIEST_TIMESTAMP, LATEST_TIMESTAMP = -2, -1

# Group states as Kafka's GroupState.toString() prints them (brokers may send any case).
_STATES = {s.lower(): s for s in (
    "Unknown", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead", "Empty",
    "Assigning", "Reconciling", "NotReady")}


def state_name(raw: str | None) -> str:
    if not raw:
        return "Unknown"
    return _STATES.get(raw.lower(), raw)


# ----------------------------------------------------------------------------- group descriptions
@dataclass
class Member:
    consumer_id: str
    host: str
    client_id: str
    assignment: dict[str, list[int]]
    member_epoch: int | None = None

    @property
    def partition_count(self) -> int:
        return sum(len(ps) for ps in self.assignment.values())

    def assignment_str(self) -> str:
        """``topic:0,1;other:2`` as Kafka's ``getAssignmentString`` (topics and partitions sorted)."""
        return ";".join(f"{t}:" + ",".join(map(str, sorted(ps))) for t, ps in sorted(self.assignment.items()))

    def as_json(self, group: str) -> dict:
        out = {"group": group, "consumer_id": self.consumer_id, "host": self.host, "client_id": self.client_id,
               "partitions": self.partition_count}
        if self.member_epoch is not None:
            out["member_epoch"] = self.member_epoch
        out["assignment"] = {t: sorted(ps) for t, ps in sorted(self.assignment.items())}
        return out


@dataclass
class GroupDescription:
    """A described share or consumer group (state "Dead" for a group that does not exist)."""
    group: str
    state: str
    coordinator: Node
    assignor: str = ""
    group_epoch: int | None = None
    assignment_epoch: int | None = None
    members: list[Member] = field(default_factory=list)

    @property
    def coordinator_str(self) -> str:
        c = self.coordinator
        return f"{c.host}:{c.port}  ({c.node_id})"

    def coordinator_json(self) -> dict:
        return {"id": self.coordinator.node_id, "host": self.coordinator.host, "port": self.coordinator.port}


# ----------------------------------------------------------------------------- output
def table_lines(headers: Sequence[str], rows: Iterable[Sequence], widths: Sequence[int]) -> list[str]:
    """Left-aligned columns as Kafka's tools print them with ``%-Ns``: column i is at least
    ``widths[i]`` wide (and as wide as its longest value), columns are separated by one space,
    the last column is not padded."""
    rows = [[MISSING if v is None else str(v) for v in r] for r in rows]
    widths = [max([w, len(h)] + [len(r[i]) for r in rows]) for i, (h, w) in enumerate(zip(headers, widths))]

    def line(cells):
        return " ".join(c.ljust(w) for c, w in zip(cells[:-1], widths)) + " " + cells[-1]

    return [line(list(headers))] + [line(r) for r in rows]


def print_table(headers: Sequence[str], rows: Iterable[Sequence], widths: Sequence[int]) -> None:
    """A blank line, then the table (Kafka prints ``"\\n" + row`` for each row)."""
    print()
    print("\n".join(table_lines(headers, rows, widths)))


def print_json(obj) -> None:
    print(json.dumps(obj, indent=2))


def warn(msg: str) -> None:
    print(f"Warn: {msg}", file=sys.stderr)


def eprint(msg: str) -> None:
    print(msg, file=sys.stderr)


class Failed(Exception):
    """The command ran but reported errors (already printed): exit code 1."""


def run(parser: argparse.ArgumentParser, validate: Callable, command: Callable, argv=None) -> int:
    """Parse and check the arguments (usage errors exit 2), run ``command(args)``, map failures
    to one line on stderr and an exit code."""
    args = parser.parse_args(argv)
    problem = validate(args)
    if problem:
        parser.print_usage(sys.stderr)
        eprint(f"{parser.prog}: error: {problem}")
        return EXIT_USAGE
    try:
        command(args)
        return EXIT_OK
    except Failed:
        return EXIT_FAILED
    except BrokerUnreachable as e:
        eprint(f"Error: {e}")
        return EXIT_UNREACHABLE
    except AdminError as e:
        eprint(f"Error: {e}")
        return EXIT_FAILED
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # e.g. piped into `head`
        return EXIT_OK


def given(args, name: str) -> bool:
    v = getattr(args, name)
    return v is not None and v is not False


def one_action(args, actions: Sequence[str], message: str) -> tuple[str | None, str | None]:
    """(the action given, None) or (None, ``message``) unless exactly one of ``actions`` is given."""
    chosen = [a for a in actions if given(args, a)]
    return (chosen[0], None) if len(chosen) == 1 else (None, message)


def parse_states(text: str, valid: Sequence[str]) -> list[str]:
    """``--list --state`` values (Kafka's ``groupStatesFromString``) in their canonical spelling."""
    states = []
    for s in text.split(","):
        name = state_name(s.strip())
        if name not in valid:
            raise ValueError(f"Invalid state list '{text}'. Valid states are: {', '.join(valid)}")
        states.append(name)
    return states


def check_group_options(args, action: str, valid_states: Sequence[str]) -> str | None:
    """The checks the share-groups and consumer-groups commands share (Kafka's messages)."""
    if args.group and args.all_groups:
        return 'Option "[group]" can\'t be used with option "[all-groups]"'
    if args.group and action == "list":
        return 'Option "[group]" can\'t be used with option "[list]"'
    for name in ("members", "offsets", "verbose"):
        if given(args, name) and action != "describe":
            return f"Option [{name}] may be used with the [describe] option only"
    if args.state is not None and action not in ("describe", "list"):
        return "Option [state] may be used with the [describe] or [list] option only"
    if action == "list" and args.state:
        try:
            parse_states(args.state, valid_states)
        except ValueError as e:
            return str(e)
    if action == "describe":
        if not args.group and not args.all_groups:
            return "Option [describe] takes one of these options: [all-groups], [group]"
        if given(args, "members") + given(args, "offsets") + (args.state is not None) > 1:
            return "Option [describe] takes at most one of these options: [members], [offsets], [state]"
        if args.state:
            return "Option [describe] does not take a value for [state]"
    return None


def run_action(parser: argparse.ArgumentParser, validate: Callable, commands: dict, argv=None) -> int:
    """``run`` for a command with exclusive actions: ``commands`` maps each action's option
    (``reset_offsets``) to ``fn(client, args)``; ``validate`` ensures exactly one is given."""
    def command(args) -> None:
        action = next(a for a in commands if given(args, a))
        with connect(args) as client:
            commands[action](client, args)

    return run(parser, validate, command, argv)


def add_common_options(parser: argparse.ArgumentParser, json_help: str = "Print the result as JSON (for scripts).") -> None:
    parser.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT",
                        help="REQUIRED: The server(s) to connect to (comma-separated).")
    parser.add_argument("--timeout", type=int, default=30000, metavar="MS",
                        help="Time allowed for the whole command, in milliseconds (default 30000).")
    parser.add_argument("--json", action="store_true", help=json_help)


def connect(args) -> AdminClient:
    return AdminClient(args.bootstrap_server, timeout_ms=args.timeout)


# ----------------------------------------------------------------------------- offset specifications
_TZ = r"(Z|[+-]\d{2}(?::?\d{2})?)"
_DATETIME = re.compile(r"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?:\.(\d{1,3}))?" + _TZ + r"?$")


def parse_datetime(text: str, local_tz=None) -> int:
    """``YYYY-MM-DDThh:mm:ss[.sss][Z|±hh[:mm]]`` (Kafka's ``Utils.getDateTime`` formats) to epoch
    milliseconds; without a zone the local time zone applies, as in Kafka."""
    m = _DATETIME.match(text.strip())
    if not m:
        raise ValueError(f"Error parsing timestamp '{text}': expected format 'YYYY-MM-DDThh:mm:ss.sss' "
                         "with an optional time zone (Z, +hh:mm)")
    base, millis, tz = m.group(1), m.group(2), m.group(3)
    dt = datetime.strptime(base, "%Y-%m-%dT%H:%M:%S")
    if millis:
        dt = dt.replace(microsecond=int(millis.ljust(3, "0")) * 1000)
    if tz is None:
        dt = dt.replace(tzinfo=local_tz) if local_tz else dt.astimezone()
    elif tz == "Z":
        dt = dt.replace(tzinfo=timezone.utc)
    else:
        sign = -1 if tz[0] == "-" else 1
        digits = tz[1:].replace(":", "")
        offset = timedelta(hours=int(digits[:2]), minutes=int(digits[2:4] or 0))
        dt = dt.replace(tzinfo=timezone(sign * offset))
    return int(dt.timestamp() * 1000)


def parse_duration(text: str) -> timedelta:
    """An ISO-8601 duration as Java's ``Duration.parse`` reads it: ``PnDTnHnMn.nS`` (e.g. ``PT1H``,
    ``P1DT2H30M``, ``PT0.5S``), optionally signed, to the millisecond (the broker's ``by_duration``
    parser, ``broker.share.config.parse_iso_duration_ms``)."""
    try:
        return timedelta(milliseconds=parse_iso_duration_ms(text.strip()))
    except ValueError:
        raise ValueError(f"Invalid duration '{text}': expected ISO-8601 'PnDTnHnMnS', e.g. PT1H or P1DT2H") from None


def parse_topic_partitions(arg: str) -> tuple[str, list[int] | None]:
    """``topic`` (all partitions: None) or ``topic:0,1,2`` as Kafka's ``--topic`` option."""
    if ":" not in arg:
        return arg, None
    parts = arg.split(":")
    if len(parts) != 2 or not parts[0]:
        raise ValueError(f"Invalid topic arg '{arg}', expected topic name and partitions")
    topic, plist = parts
    out = []
    for p in plist.split(","):
        try:
            out.append(int(p))
        except ValueError:
            raise ValueError(f"Invalid partition '{p}' specified in topic arg '{arg}'") from None
    return topic, out


def tp_str(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


# ----------------------------------------------------------------------------- shared requests
def list_groups(client: AdminClient, types: list[str], states: list[str] | None = None) -> list:
    """ListGroups (v5: type and state filters) on every broker, as Kafka's admin client does;
    returns the listed groups sorted by id."""
    seen = {}
    for node in client.all_brokers():
        def attempt(node=node):
            resp = client.request(ListGroupsRequest(states_filter=states or [], types_filter=types),
                                  node=node, min_version=5)
            if resp.error_code == Errors.COORDINATOR_LOAD_IN_PROGRESS:
                return None
            if resp.error_code != Errors.NONE:
                raise AdminError(f"ListGroups failed on {node.address}: {error_name(resp.error_code)}",
                                 resp.error_code)
            return resp

        for g in client.retry("ListGroups", attempt).groups:
            seen[g.group_id] = g
    return [seen[k] for k in sorted(seen)]


def check_partitions_exist(client: AdminClient, tps: Iterable[tuple[str, int]]) -> None:
    """Kafka's ``checkAllTopicPartitionsValid``: every partition exists and has a leader."""
    tps = list(tps)
    leaders = client.leaders(sorted({t for t, _ in tps}))
    missing = [tp for tp in tps if tp not in leaders]
    if missing:
        raise AdminError('The partitions "' + ",".join(tp_str(*tp) for tp in missing) + '" do not exist',
                         Errors.UNKNOWN_TOPIC_OR_PARTITION)
    leaderless = [tp for tp in tps if leaders[tp] is None]
    if leaderless:
        raise AdminError('The partitions "' + ",".join(tp_str(*tp) for tp in leaderless) + '" have no leader',
                         Errors.LEADER_NOT_AVAILABLE)


def list_offsets(client: AdminClient, tps: Iterable[tuple[str, int]], timestamp: int) -> dict[tuple[str, int], int]:
    """ListOffsets at ``timestamp`` (-2 earliest, -1 latest, else epoch ms) sent to each
    partition's leader; returns the offset per partition (-1: no record at or after the time)."""
    tps = sorted(set(tps))
    if not tps:
        return {}
    leaders = client.leaders(sorted({t for t, _ in tps}))
    by_leader: dict = {}
    for tp in tps:
        node = leaders.get(tp)
        if node is None:
            raise AdminError(f"partition {tp_str(*tp)} does not exist or has no leader",
                             Errors.UNKNOWN_TOPIC_OR_PARTITION)
        by_leader.setdefault(node, []).append(tp)
    out = {}
    for node, node_tps in by_leader.items():
        topics: dict[str, list] = {}
        for t, p in node_tps:
            topics.setdefault(t, []).append(ListOffsetsRequest.ListOffsetsPartition(partition_index=p, timestamp=timestamp))
        req = ListOffsetsRequest(replica_id=-1, isolation_level=0, timeout_ms=client.timeout_ms, topics=[
            ListOffsetsRequest.ListOffsetsTopic(name=t, partitions=ps) for t, ps in topics.items()])
        resp = client.request(req, node=node, min_version=1)
        for t in resp.topics:
            for p in t.partitions:
                if p.error_code != Errors.NONE:
                    raise AdminError(f"ListOffsets for {tp_str(t.name, p.partition_index)} failed: "
                                     f"{error_text(p.error_code)}", p.error_code)
                out[(t.name, p.partition_index)] = p.offset
    return out


def now_ms() -> int:
    return int(time.time() * 1000)


def print_group_list(groups: list, args) -> None:
    """``--list``: group ids; with ``--state`` a GROUP / STATE table (Kafka's ``printGroupInfo``)."""
    if args.json:
        print_json([{"group": g.group_id, "state": state_name(g.group_state), "type": g.group_type or "classic"}
                    for g in groups])
    elif args.state is not None:
        width = max([15] + [len(g.group_id) for g in groups])
        print(f"{'GROUP'.ljust(width)} STATE")
        for g in groups:
            print(f"{g.group_id.ljust(width)} {state_name(g.group_state)}")
    else:
        for g in groups:
            print(g.group_id)


def delete_groups(client: AdminClient, groups: list[str], describe_error: Callable[[str, int, str | None], str]
                  ) -> tuple[list[str], dict[str, str]]:
    """DeleteGroups for each group at its coordinator: (deleted, {group: error text})."""
    deleted, failed = [], {}
    for group in groups:
        resp, _ = client.group_request(group, lambda: DeleteGroupsRequest(groups_names=[group]),
                                       lambda r: r.results[0].error_code if r.results else Errors.NONE)
        r = resp.results[0]
        if r.error_code == Errors.NONE:
            deleted.append(group)
        else:
            failed[group] = describe_error(group, r.error_code, r.error_message)
    return deleted, failed


def report_deletions(kind: str, deleted: list[str], failed: dict[str, str], as_json: bool) -> None:
    """Kafka's deletion report (``kind``: "share" / "consumer"); raises ``Failed`` if any failed."""
    quoted = ", ".join(f"'{g}'" for g in deleted)
    if as_json:
        print_json([{"group": g, "error": None} for g in deleted] + [{"group": g, "error": e} for g, e in failed.items()])
    elif not failed:
        print(f"Deletion of requested {kind} groups ({quoted}) was successful.")
    else:
        for g, e in failed.items():
            eprint(f"Error: Group '{g}' could not be deleted due to: {e}")
        if deleted:
            print(f"These {kind} groups were deleted successfully: {quoted}")
    if failed:
        raise Failed()
