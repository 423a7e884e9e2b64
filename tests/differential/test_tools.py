"""Differential conformance, Kafka's operator tools: Kafka 4.4's own ``kafka-share-groups``
(``ShareGroupCommand``; java/ShareGroupTool.java runs it several times in one JVM) describing a share
group after the same steps on the reference Apache Kafka 4.4.0 and on sharebroker, its tables compared
cell by cell.

What differs between any two brokers is normalised as ``harness.plain`` does (the coordinator's address
and id, member ids). Of what docs/differences.md declares, only the two differences these tables show
are turned to Kafka's on our side, each by name in ``DECLARED``: the share group's epochs (one lower
here) and the start offset of a partition nothing was acknowledged on (Kafka's ``-``). Any other
difference fails, and so does a declared one that is not there.
"""
from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from broker.testing import BrokerProcess
from tests.differential.harness import differences
from tests.differential.test_behaviour import (_SHARE_EPOCH, _SPSO_AT_LOAD, ACCEPT, OURS_CONFIG, Side, _commit, _lag,
                                               _name, _poll_until, _settle, _share_consumer)

JAVA_SOURCE = Path(__file__).resolve().parent / "java" / "ShareGroupTool.java"
WITH_MEMBER = ("--describe --members --verbose", "--describe --members", "--describe --state --verbose",
               "--describe --offsets --verbose")
EMPTY = ("--describe --state --verbose", "--describe --state", "--describe --offsets", "--describe --members")


@pytest.fixture(scope="module")
def ours_tools(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("differential-tools"), config=OURS_CONFIG) as b:
        yield b


@pytest.fixture(scope="module")
def share_group_tool(kafka_ref):
    """(classpath, directory) to run java/ShareGroupTool.java: compiled with ``javac`` against the
    reference Kafka's classpath, once per source version, into the launcher's cache."""
    from tests.kafka_ref.launcher import classpath, compiled

    cp = classpath()
    return cp, compiled([JAVA_SOURCE], cp, "share-group-tool")


def _tables(stdout: str) -> dict[str, list[list[str]]]:
    """{options: rows} from ShareGroupTool's output: each non-blank line split into its cells (a table's
    header is its first row; ``COORDINATOR (ID)`` and the ``host:port  (id)`` under it are one cell each)."""
    out: dict[str, list[list[str]]] = {}
    rows: list[list[str]] = []
    for line in stdout.splitlines():
        if line.startswith("=== "):
            rows = out.setdefault(line[4:], [])
        elif line.strip():
            rows.append(re.sub(r"\s+\(", "(", line).split())
    return out


def _run_tool(s: Side, tool: tuple[str, str], group: str, options: tuple[str, ...]) -> dict[str, list[dict]]:
    """Each of ``options`` run by ShareGroupTool against ``s``: {options: [{column: cell}, ...] or the text
    lines}, with what differs between any two brokers normalised."""
    cp, classes = tool
    done = subprocess.run(["java", "-Xmx128m", "-cp", f"{cp}{os.pathsep}{classes}", "ShareGroupTool", s.bootstrap,
                           group, *options], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0 and "Error:" not in done.stdout, done.stdout[-3000:] + done.stderr[-3000:]
    out = {}
    for opts, rows in _tables(done.stdout).items():
        if rows and rows[0][0] == "GROUP":
            header = rows[0]
            out[opts] = [_normalise(dict(zip(header, r))) for r in rows[1:]]
        else:
            out[opts] = [" ".join(r) for r in rows]
    return out


def _normalise(row: dict[str, str]) -> dict[str, str]:
    if "COORDINATOR(ID)" in row:
        row["COORDINATOR(ID)"] = "<host>:<port>(<node>)"
    if "CONSUMER-ID" in row:
        row["CONSUMER-ID"] = "<member-id>"
    return row


def share_group_described(s: Side, tool: tuple[str, str]) -> dict:
    """A two-partition topic, five records on partition 0 only; a ShareConsumer (explicit mode) accepts
    them all and commits: the tool's ``--members``, ``--state`` and ``--offsets`` (verbose) while it is a
    member (and ``--members`` plain); then, once it left, ``--state``, ``--offsets`` and ``--members`` again."""
    topic, group = s.names["topic"], s.names["group"]
    s.create_topic(topic, partitions=2)
    s.group_configs(group, {"share.auto.offset.reset": "earliest"})
    s.produce(topic, 5)
    c = _share_consumer(s, group, topic)
    try:
        _poll_until(c, 5, 60, lambda m: c.acknowledge(m, ACCEPT))
        out: dict = {"commit": _commit(c)}
        _settle(lambda: s.share_offsets(group), lambda o: (0, 5, 0) in _lag(o))
        out["with_member"] = _run_tool(s, tool, group, WITH_MEMBER)
    finally:
        c.close()
    _settle(lambda: s.share_describe(group), lambda g: g["group_state"] == "Empty")
    out["empty"] = _run_tool(s, tool, group, EMPTY)
    return out


# docs/differences.md's differences the tables show: (step, options, column) -> (how ours is turned to
# Kafka's, the reason). The start offset's only on a partition never acknowledged (partition 1 here), where
# Kafka's admin client has no offset information at all, so its leader epoch is '-' too.
DECLARED = {
    **{(step, opts, column): ("+1", _SHARE_EPOCH)
       for step, opts, column in (("with_member", "--describe --members --verbose", "MEMBER-EPOCH"),
                                  ("with_member", "--describe --state --verbose", "GROUP-EPOCH"),
                                  ("with_member", "--describe --state --verbose", "ASSIGNMENT-EPOCH"),
                                  ("empty", "--describe --state --verbose", "GROUP-EPOCH"),
                                  ("empty", "--describe --state --verbose", "ASSIGNMENT-EPOCH"))},
    **{(step, opts, column): ("never acknowledged: -", _SPSO_AT_LOAD)
       for step, opts, columns in (("with_member", "--describe --offsets --verbose", ("LEADER-EPOCH", "START-OFFSET",
                                                                                      "LAG")),
                                   ("empty", "--describe --offsets", ("START-OFFSET", "LAG")))
       for column in columns},
}


def _as_kafka(ours: dict) -> list[str]:
    """Turn ``ours`` to Kafka's by ``DECLARED``, in place; a declared difference not found is listed."""
    missing = []
    for (step, opts, column), (how, _) in DECLARED.items():
        rows = ours[step][opts]
        if how == "+1":
            cells = [r for r in rows if column in r]
            for r in cells:
                r[column] = str(int(r[column]) + 1)
        else:  # the partition nothing was acknowledged on: ours shows the offset chosen at load, lag 0
            cells = [r for r in rows if r.get("PARTITION") == "1" and r.get(column) == "0"]
            for r in cells:
                r[column] = "-"
        if not cells:
            missing.append(f"{step}.{opts}.{column}: declared ({how}) but not in ours")
    return missing


def test_kafka_share_groups_describe(kafka_ref, ours_tools, share_group_tool):
    names = {k: _name(k) for k in ("topic", "group")}
    results = {}
    for label, bootstrap in (("kafka", kafka_ref.bootstrap), ("ours", ours_tools.bootstrap)):
        side = Side(label, bootstrap, names)
        try:
            results[label] = share_group_described(side, share_group_tool)
        finally:
            side.close()
    found = _as_kafka(results["ours"]) + differences(results["ours"], results["kafka"])
    assert not found, "kafka-share-groups shows undeclared differences from Kafka 4.4:\n  " + "\n  ".join(found) \
        + f"\nkafka: {results['kafka']}\nours: {results['ours']}"
