"""The two brokers the differential suite compares: the reference Apache Kafka 4.4.0 (``kafka_ref``,
started once per test run, tests/reference.py) and one sharebroker with its defaults (``ours``)."""
from __future__ import annotations

import pytest

from broker.testing import BrokerProcess


@pytest.fixture(scope="session")
def ours(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("differential")) as b:
        yield b
