"""Durable across upgrades: a data directory written by an earlier release opens, an unknown one is refused.

``tests/data/upgrade-5cd9cc4-{clean,kill9}.tar.gz`` hold data directories written by the release
at commit 5cd9cc4, before ``meta.properties`` existed (``tools/make_upgrade_fixture.py`` writes them,
stopped cleanly and killed with SIGKILL), with ``expected.json``: what that broker served. The current
broker must adopt them (format 1) and serve exactly the same records, transaction outcomes, group
offsets and share-group state. A directory whose format version, node id or cluster id this broker
must not use is refused at start-up with one line naming the file, the key and the values, exit code
1, and nothing in the directory changes.
"""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, ShareConsumer
from confluent_kafka.admin import AdminClient

from broker.log import meta_properties
from broker.testing import BrokerProcess
from tests.support import until

ROOT = Path(__file__).resolve().parent.parent.parent
DATA = ROOT / "tests" / "data"
# The generator's own reader and names (``tools`` is not a package: ``tests/tools`` takes the name).
_spec = importlib.util.spec_from_file_location("make_upgrade_fixture", ROOT / "tools" / "make_upgrade_fixture.py")
fixture = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fixture)
GROUP, SHARE_GROUP, read_all = fixture.GROUP, fixture.SHARE_GROUP, fixture.read_all
# Committed offsets of an empty group expire offsets.retention.minutes after their commit: the
# archive's commits are as old as the archive.
CONFIG = {"offsets.retention.minutes": str(100 * 365 * 24 * 60)}


def unpack(variant: str, dest: Path) -> tuple[Path, dict]:
    with tarfile.open(DATA / f"upgrade-5cd9cc4-{variant}.tar.gz") as tar:
        tar.extractall(dest, filter="data")
        expected = json.load(tar.extractfile("expected.json"))
    return dest / "data", expected


@pytest.mark.parametrize("variant", ["clean", "kill9"])
def test_directory_of_earlier_release_opens_with_the_same_contents(tmp_path, variant):
    data_dir, expected = unpack(variant, tmp_path)
    assert not (data_dir / meta_properties.FILE).exists()
    cluster_id = (data_dir / "meta" / "cluster_id").read_text().strip()
    with BrokerProcess(data_dir, config=CONFIG) as b:
        assert any("adopted as format 1" in line for line in b.log_lines)
        props = meta_properties.parse((data_dir / meta_properties.FILE).read_text())
        assert (props["version"], props["node.id"], props["cluster.id"], props[meta_properties.FORMAT_KEY]) == (
            "1", "1", cluster_id, "1")
        check_contents(b.bootstrap, expected)
        b.restart()  # the adopted directory, now with its meta.properties, opens again
        assert sum("adopted as format 1" in line for line in b.log_lines) == 1
        assert meta_properties.parse((data_dir / meta_properties.FILE).read_text()) == props
        check_contents(b.bootstrap, expected)
        check_share_group(b.bootstrap, expected["share_group"][SHARE_GROUP])


def check_contents(bs: str, expected: dict) -> None:
    assert read_all(bs, "plain", 3) == expected["plain"]
    assert [r[3] for r in expected["plain"] if r[0] == 0][:3] == ["plain-0", "plain-3", "plain-6"]
    compacted = read_all(bs, "compacted", 1)
    assert compacted == expected["compacted"]
    assert compacted[0][1] > 0, "the cleaned segment lost its overwritten keys"
    latest = {r[2]: r[3] for r in compacted}
    assert latest == {f"key-{k}": f"round-2-{k}" for k in range(7)}
    committed = read_all(bs, "txn", 1, "read_committed")
    assert committed == expected["txn_committed"]
    assert [r[3] for r in committed] == [f"txn-{t}-{i}" for t in "ac" for i in range(3)]
    assert read_all(bs, "txn", 1) == expected["txn_all"]  # read_uncommitted: the aborted records too
    assert "txn-b-0" in [r[3] for r in expected["txn_all"]]
    assert read_all(bs, "shared", 1) == expected["shared"]
    admin = AdminClient({"bootstrap.servers": bs})
    got = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(GROUP)])[GROUP].result(15)
    assert {tp.partition: tp.offset for tp in got.topic_partitions if tp.topic == "plain"} == {
        int(p): o for p, o in expected["group"][GROUP].items()}


def check_share_group(bs: str, share: dict) -> None:
    """Accepted and rejected records are never delivered again; held (in flight when the old broker
    stopped) and never-delivered ones are, each once."""
    done = set(share["accepted"]) | set(share["rejected"])
    want = set(range(share["end"])) - done
    assert set(share["held"]) <= want
    c = ShareConsumer({"bootstrap.servers": bs, "group.id": SHARE_GROUP})
    got: list[int] = []
    try:
        c.subscribe(["shared"])

        def poll() -> bool:
            for m in c.poll(0.5) or []:
                assert m.error() is None, m.error()
                got.append(m.offset())
            return len(set(got)) >= len(want) or bool(set(got) & done)

        until(poll, 60, "the records not acknowledged before the upgrade")
    finally:
        c.close()
    assert not set(got) & done, "acknowledged records were delivered again"
    assert sorted(got) == sorted(want)


# ---------------------------------------------------------------------------------------- refusals
@pytest.fixture(scope="module")
def written(tmp_path_factory) -> Path:
    """A data directory written by this release (its meta.properties included), broker stopped."""
    d = tmp_path_factory.mktemp("written") / "data"
    with BrokerProcess(d):
        pass
    return d


def tree(d: Path) -> dict:
    """Every file's content and modification time, and every directory, under ``d``."""
    out = {}
    for root, dirs, files in os.walk(d):
        for name in dirs + files:
            p = Path(root, name)
            out[str(p.relative_to(d))] = (p.stat().st_mtime_ns, p.read_bytes() if p.is_file() else None)
    return out


def edit_props(d: Path, **changes: str) -> None:
    path = d / meta_properties.FILE
    lines = [ln for ln in path.read_text().splitlines() if ln.split("=", 1)[0] not in changes]
    path.write_text("\n".join(lines + [f"{k}={v}" for k, v in changes.items()]) + "\n")


def start_refused(d: Path, *args: str) -> str:
    """Start the broker on ``d``; it must exit with 1 and one error line (returned), no traceback."""
    proc = subprocess.run([sys.executable, "-m", "broker", "--data-dir", str(d), "--listen", "127.0.0.1:0", *args],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("sharebroker: ")]
    assert len(errors) == 1, proc.stderr
    return errors[0]


def refused(d: Path, *args: str) -> str:
    """``start_refused``, and nothing in ``d`` changed."""
    before = tree(d)
    line = start_refused(d, *args)
    assert tree(d) == before
    return line


@pytest.mark.parametrize("case", ["format", "kafka", "version", "node", "cluster", "topic"])
def test_unknown_or_foreign_directory_is_refused_and_left_unchanged(written, tmp_path, case):
    d = tmp_path / "data"
    shutil.copytree(written, d)
    props_path = d / meta_properties.FILE
    props = meta_properties.parse(props_path.read_text())
    args: list[str] = []
    if case == "format":
        edit_props(d, **{meta_properties.FORMAT_KEY: "2"})
        want = [str(props_path), "sharebroker.format.version=2", "sharebroker.format.version=1 and earlier"]
    elif case == "kafka":  # a directory Kafka formatted: no sharebroker.format.version
        edit_props(d, **{meta_properties.FORMAT_KEY: ""})
        want = [str(props_path), "sharebroker.format.version is missing"]
    elif case == "version":
        edit_props(d, version="0")
        want = [str(props_path), "version=0", "version=1"]
    elif case == "node":
        args = ["--set", "node.id=7"]
        want = [str(props_path), "node.id=1", "node.id=7"]
    elif case == "cluster":
        edit_props(d, **{"cluster.id": "AAAAAAAAAAAAAAAAAAAAAQ"})
        want = [str(props_path), "cluster.id=AAAAAAAAAAAAAAAAAAAAAQ", f"meta/cluster_id={props['cluster.id']}"]
    else:
        topic = next((d / "meta" / "topics").iterdir())
        meta = json.loads(topic.read_text())
        topic.write_text(json.dumps({**meta, "version": 2}))
        want = [str(topic), "version=2", "version=1"]
    line = refused(d, *args)
    for part in want:
        assert part in line, line


def test_checkpoint_of_unknown_format_is_refused(written, tmp_path):
    d = tmp_path / "data"
    shutil.copytree(written, d)
    ckpt = d / "__consumer_offsets-0" / "checkpoint"
    ckpt.write_text("v2 0 0\n")
    assert f"{ckpt}: v2 is a checkpoint format" in start_refused(d)
    assert ckpt.read_text() == "v2 0 0\n"
