"""``sharebroker-topics``: create, list, describe, alter (partitions) and delete topics, in the
style of Apache Kafka's ``kafka-topics.sh`` (``TopicCommand``):

    --list [--topic T ...] [--exclude-internal]       Metadata
    --describe [--topic T ...] [--exclude-internal]   Metadata + DescribeConfigs (non-default configs)
    --create --topic T [--partitions N] [--replication-factor R] [--config k=v ...]   CreateTopics
    --alter --topic T --partitions N                  CreatePartitions
    --delete --topic T ...                            DeleteTopics

``--json`` prints list / describe results as JSON. Exit codes: see ``admin.common``.
"""
from __future__ import annotations

import argparse
import sys

from admin.client import AdminClient, AdminError, error_text, uuid_str
from admin.common import add_common_options, one_action, print_json, run_action
from protocol.errors import Errors
from protocol.messages.create_partitions import CreatePartitionsRequest
from protocol.messages.create_topics import CreateTopicsRequest
from protocol.messages.delete_topics import DeleteTopicsRequest
from protocol.messages.describe_configs import DescribeConfigsRequest

ACTIONS = ("list", "describe", "create", "alter", "delete")
TOPIC_RESOURCE = 2
DEFAULT_CONFIG_SOURCE = 5  # ConfigSource.DEFAULT_CONFIG: not shown by --describe, as in Kafka


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sharebroker-topics",
                                description="Create, delete, describe, or change a topic.")
    add_common_options(p, json_help="Print --list / --describe results as JSON (for scripts).")
    a = p.add_argument
    for name, doc in (("list", "List all available topics."), ("describe", "List details for the given topics."),
                      ("create", "Create a new topic."), ("alter", "Alter the number of partitions of a topic."),
                      ("delete", "Delete a topic.")):
        a(f"--{name}", action="store_true", help=doc)
    a("--topic", action="append", metavar="TOPIC", help="The topic to create, alter, describe or delete (repeatable).")
    a("--partitions", type=int, metavar="N", help="The number of partitions (create: broker default if absent).")
    a("--replication-factor", type=int, metavar="N", help="The replication factor (create: broker default if absent).")
    a("--config", action="append", metavar="NAME=VALUE", help="A topic configuration override (create; repeatable).")
    a("--exclude-internal", action="store_true", help="Exclude internal topics when listing or describing.")
    return p


def parse_configs(items: list[str] | None) -> dict[str, str]:
    out = {}
    for item in items or []:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"Invalid topic config: all configs to be added must be in the format \"key=val\" ('{item}').")
        out[name.strip()] = value.strip()
    return out


def validate(args) -> str | None:
    action, problem = one_action(args, ACTIONS, "Command must include exactly one action: "
                                 "--list, --describe, --create, --alter or --delete")
    if problem:
        return problem
    if action in ("create", "alter", "delete") and not args.topic:
        return f"Missing required argument \"[topic]\" for --{action}"
    if action in ("create", "alter") and len(args.topic) > 1:
        return f"--{action} takes exactly one --topic"
    if action == "alter" and args.partitions is None:
        return "Missing required argument \"[partitions]\" for --alter"
    if action != "create" and (args.replication_factor is not None or args.config):
        return "Option \"[replication-factor]\" and \"[config]\" can only be used with --create"
    if action not in ("create", "alter") and args.partitions is not None:
        return "Option \"[partitions]\" can only be used with --create or --alter"
    if args.partitions is not None and args.partitions < 1:
        return "The partitions must be greater than 0"
    if args.replication_factor is not None and args.replication_factor < 1:
        return "The replication factor must be greater than 0"
    try:
        parse_configs(args.config)
    except ValueError as e:
        return str(e)
    return None


def selected_topics(client: AdminClient, args) -> list:
    md = client.metadata(args.topic)
    topics = []
    for t in md.topics:
        if t.error_code == Errors.UNKNOWN_TOPIC_OR_PARTITION:
            raise AdminError(f"Topic '{t.name}' does not exist as expected", t.error_code)
        if t.error_code != Errors.NONE:
            raise AdminError(f"describing topic '{t.name}' failed: {error_text(t.error_code)}", t.error_code)
        if args.exclude_internal and t.is_internal:
            continue
        topics.append(t)
    return sorted(topics, key=lambda t: t.name)


def non_default_configs(client: AdminClient, names: list[str]) -> dict[str, dict[str, str]]:
    if not names:
        return {}
    resources = [DescribeConfigsRequest.DescribeConfigsResource(resource_type=TOPIC_RESOURCE, resource_name=n)
                 for n in names]
    for r in resources:
        r.configuration_keys = None  # null: all configs
    resp = client.request(DescribeConfigsRequest(resources=resources))
    out = {}
    for r in resp.results:
        if r.error_code != Errors.NONE:
            raise AdminError(f"describing the configs of topic '{r.resource_name}' failed: "
                             f"{error_text(r.error_code, r.error_message)}", r.error_code)
        out[r.resource_name] = {c.name: c.value for c in sorted(r.configs, key=lambda c: c.name)
                                if c.config_source != DEFAULT_CONFIG_SOURCE and not c.is_sensitive and c.value is not None}
    return out


def cmd_list(client: AdminClient, args) -> None:
    names = [t.name for t in selected_topics(client, args)]
    if args.json:
        print_json(names)
    else:
        for n in names:
            print(n)


def cmd_describe(client: AdminClient, args) -> None:
    topics = selected_topics(client, args)
    configs = non_default_configs(client, [t.name for t in topics])
    out = []
    for t in topics:
        parts = sorted(t.partitions, key=lambda p: p.partition_index)
        rf = len(parts[0].replica_nodes) if parts else 0
        out.append({"topic": t.name, "topic_id": uuid_str(t.topic_id), "partition_count": len(parts),
                    "replication_factor": rf, "configs": configs.get(t.name, {}), "internal": t.is_internal,
                    "partitions": [{"partition": p.partition_index, "leader": p.leader_id if p.leader_id >= 0 else None,
                                    "replicas": list(p.replica_nodes), "isr": list(p.isr_nodes)} for p in parts]})
    if args.json:
        print_json(out)
        return
    for t in out:
        cfg = ",".join(f"{k}={v}" for k, v in t["configs"].items())
        print(f"Topic: {t['topic']}\tTopicId: {t['topic_id']}\tPartitionCount: {t['partition_count']}\t"
              f"ReplicationFactor: {t['replication_factor']}\tConfigs: {cfg}")
        for p in t["partitions"]:
            leader = "none" if p["leader"] is None else p["leader"]
            print(f"\tTopic: {t['topic']}\tPartition: {p['partition']}\tLeader: {leader}\t"
                  f"Replicas: {','.join(map(str, p['replicas']))}\tIsr: {','.join(map(str, p['isr']))}")


def cmd_create(client: AdminClient, args) -> None:
    name = args.topic[0]
    topic = CreateTopicsRequest.CreatableTopic(
        name=name, num_partitions=-1 if args.partitions is None else args.partitions,
        replication_factor=-1 if args.replication_factor is None else args.replication_factor,
        configs=[CreateTopicsRequest.CreatableTopicConfig(name=k, value=v) for k, v in parse_configs(args.config).items()])
    resp = client.request(CreateTopicsRequest(topics=[topic], timeout_ms=client.timeout_ms), min_version=4)
    r = resp.topics[0]
    if r.error_code == Errors.TOPIC_ALREADY_EXISTS:
        raise AdminError(f"Topic '{name}' already exists.", r.error_code)
    if r.error_code != Errors.NONE:
        raise AdminError(f"creating topic '{name}' failed: {error_text(r.error_code, r.error_message)}", r.error_code)
    print(f"Created topic {name}.")


def cmd_alter(client: AdminClient, args) -> None:
    name = args.topic[0]
    topic = CreatePartitionsRequest.CreatePartitionsTopic(name=name, count=args.partitions)
    topic.assignments = None  # null: the broker places the new partitions
    resp = client.request(CreatePartitionsRequest(timeout_ms=client.timeout_ms, topics=[topic]))
    r = resp.results[0]
    if r.error_code != Errors.NONE:
        raise AdminError(f"altering topic '{name}' failed: {error_text(r.error_code, r.error_message)}", r.error_code)


def cmd_delete(client: AdminClient, args) -> None:
    names = list(dict.fromkeys(args.topic))
    existing = client.partitions(names)
    missing = [n for n in names if n not in existing]
    if missing:
        raise AdminError("Topic " + ", ".join(f"'{n}'" for n in missing) + " does not exist as expected",
                         Errors.UNKNOWN_TOPIC_OR_PARTITION)
    version = client.bootstrap.version_for(DeleteTopicsRequest)
    if version >= 6:
        req = DeleteTopicsRequest(topics=[DeleteTopicsRequest.DeleteTopicState(name=n) for n in names],
                                  timeout_ms=client.timeout_ms)
    else:
        req = DeleteTopicsRequest(topic_names=names, timeout_ms=client.timeout_ms)
    resp = client.request(req, version)
    errors = [f"{r.name}: {error_text(r.error_code, r.error_message)}" for r in resp.responses if r.error_code != Errors.NONE]
    if errors:
        raise AdminError("deleting topics failed: " + "; ".join(errors))


COMMANDS = {"list": cmd_list, "describe": cmd_describe, "create": cmd_create, "alter": cmd_alter, "delete": cmd_delete}


def main(argv=None) -> int:
    return run_action(build_parser(), validate, COMMANDS, argv)


if __name__ == "__main__":
    sys.exit(main())
