"""The broker's shape: parts built alone from narrow collaborators, one typed place that holds them,
coordinators that do not know the broker, per-broker registries."""
from __future__ import annotations

import ast
import asyncio
from pathlib import Path

import pytest

from broker.components import Components, Node, build
from broker.config import BrokerConfig
from broker.configs import BROKER, TOPIC, BrokerSettings
from broker.delayed import Watchers
from broker.log.errors import LogError
from broker.log.manager import LogManager
from broker.topics import INTERNAL_TOPICS, Topics

ROOT = Path(__file__).resolve().parents[2]


def _imports(path: Path) -> list[tuple[str, bool]]:
    """(module imported, at module level?) for every import in a file."""
    tree = ast.parse(path.read_text())
    top = set(map(id, tree.body))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, id(node) in top) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.module, id(node) in top))
    return out


def test_coordinators_do_not_import_the_broker():
    offenders = [f"{p.relative_to(ROOT)}: {m}" for p in (ROOT / "coordinator").rglob("*.py")
                 for m, _ in _imports(p) if m == "broker" or m.startswith("broker.")]
    assert not offenders


def test_topics_alone(tmp_path):
    logs = LogManager(str(tmp_path / "data"))
    try:
        watchers = Watchers()
        topics = Topics(logs, watchers)
        topics.ensure_internal()
        assert INTERNAL_TOPICS <= set(logs.topics)
        appended, deleted = [], []
        topics.on_append(lambda t, p: appended.append((t, p)))
        topics.on_delete(lambda name, tid: deleted.append((name, tid)))
        info = topics.create("a.b", 2, {})
        with pytest.raises(LogError) as e:
            topics.create("a_b", 1, {})
        assert e.value.code == 17 and "collides" in str(e.value)
        topics.appended("a.b", 1)
        assert appended == [("a.b", 1)]
        asyncio.run(topics.delete("a.b"))
        assert deleted == [("a.b", info.topic_id.bytes)]
    finally:
        logs.close()


async def test_built_components_and_per_broker_config_resources(tmp_path):
    made = []
    for name in ("one", "two"):
        config = BrokerConfig({"log.dirs": str(tmp_path / name), "node.id": "1" if name == "one" else "2"})
        settings = BrokerSettings(config, config.get_int("node.id"), str(tmp_path / name / "meta"))
        logs = LogManager(str(tmp_path / name), default_configs=settings.topic_defaults())
        settings.background = logs.start_background()
        node = Node(config.get_int("node.id"), logs.cluster_id, "127.0.0.1", 9092)
        made.append(await build(config, node, logs.data_dir, logs, settings))
    try:
        one, two = made
        assert isinstance(one, Components)
        for field in Components.__dataclass_fields__:
            assert getattr(one, field) is not None, field
        # Config resources belong to each broker, not to the process.
        assert one.configs is not two.configs
        assert one.configs.get(BROKER).names() == ["1"] and two.configs.get(BROKER).names() == ["2"]
        one.topics.create("only-in-one", 1, {})
        assert "only-in-one" in one.configs.get(TOPIC).names()
        assert "only-in-one" not in two.configs.get(TOPIC).names()
    finally:
        for c in made:
            await c.close()
