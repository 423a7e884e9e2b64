"""The README's examples run as written (against a real broker, with its address substituted)."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"


def example(name: str) -> str:
    m = re.search(rf"<!-- readme-example: {re.escape(name)} .*?-->\s*```python\n(.*?)```", README.read_text(), re.S)
    assert m, f"README example {name!r} not found"
    return m.group(1)


def test_share_consumer_example_prints_the_ten_jobs(sharebroker):
    code = example("share-consumer").replace("127.0.0.1:9092", sharebroker.bootstrap)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert sorted(p.stdout.split("\n")[:-1]) == sorted(f"job {i}" for i in range(10))


@pytest.mark.sharebroker({"group.share.min.record.lock.duration.ms": 1000,
                          "group.share.record.lock.duration.ms": 1000, "num.partitions": 3})
def test_fixture_marker_passes_settings(sharebroker):
    from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

    admin = AdminClient({"bootstrap.servers": sharebroker.bootstrap})
    res = ConfigResource(ResourceType.BROKER, "1")
    configs = admin.describe_configs([res])[res].result(20)
    assert configs["group.share.record.lock.duration.ms"].value == "1000"
    assert configs["num.partitions"].value == "3"


def test_fixture_factory_starts_brokers_with_their_settings(sharebroker_factory):
    a = sharebroker_factory({"num.partitions": 2})
    b = sharebroker_factory()
    assert a.bootstrap != b.bootstrap and a.data_dir != b.data_dir
    assert a.config["num.partitions"] == "2" and "num.partitions" not in b.config
